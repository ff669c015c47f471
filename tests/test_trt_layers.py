"""TensorRT layers matched across precisions, on the TREx ResNet A100 FP16 and INT8-QAT
engines (NVIDIA/TensorRT trt-engine-explorer examples, Apache-2.0; ../shared/fixtures)."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

import nsightlab
from nsightlab.comparison import trt_layers
from nsightlab.cli import cli
from nsightlab.comparison.diff import of_profiles as compare
from nsightlab.run.model import profile

TRT = Path(__file__).parent.parent.parent / "shared" / "fixtures" / "trtexec"
needs_trex = pytest.mark.skipif(not (TRT / "pub-trex-resnet-a100-qat.profile.json").is_file(),
                                reason="../shared/fixtures/trtexec not present")


@pytest.mark.parametrize("name,toks,role", [
    ("Conv_3 + Relu_4", ["Conv_3", "Relu_4"], "compute"),
    ("layer1.0.conv1.weight + QuantizeLinear_20 + Conv_22", ["Conv_22"], "compute"),
    ("QuantizeLinear_15", [], "qdq"),
    # a reformat is never matched; its name's first part (the copy) is not a layer token
    ("Reformatting CopyNode for Input Tensor 0 to Conv_5 + Add_6 + Relu_7", ["Add_6", "Relu_7"],
     "reformat"),
    ("{ForeignNode[/blocks.0/attn/MatMul.../blocks.0/Add_1]}", ["/blocks.0/attn/MatMul", "/blocks.0/Add_1"],
     "compute"),
    ("__myl_MulAdd_myl0_12", ["__myl_MulAdd"], "compute"),
])
def test_layer_name_tokens_and_roles(name, toks, role):
    assert trt_layers.tokens(name) == toks
    assert trt_layers.role(name) == role


@needs_trex
def test_fp16_and_qat_engines_match(tmp_path):
    """Every compute layer pairs up (the QAT engine renumbers every ONNX node and adds weight and
    Q/DQ tokens, so it is the graph, each layer's producers, that matches them), in order;
    precisions come from the layer info's data types; standalone Q/DQ layers are conversion
    work of B."""
    a = trt_layers.engine_layers(TRT / "pub-trex-resnet-a100-fp16.profile.json")
    b = trt_layers.engine_layers(TRT / "pub-trex-resnet-a100-qat.profile.json")
    m = trt_layers.match(a, b)
    s = m.summary.set_index("run")
    assert (s["matched_pct"] >= 90).all(), s
    assert s.loc["b", "qdq_ms"] == pytest.approx(0.232448, rel=1e-4) and s.loc["a", "qdq_ms"] == 0
    pairs = m.layers.set_index("a_layer")
    assert pairs.loc["Conv_3 + Relu_4", "b_layer"] == "layer1.0.conv1.weight + QuantizeLinear_20 + Conv_22"
    assert pairs.loc["MaxPool_2", "b_layer"] == "MaxPool_12"
    assert pairs.loc["Gemm_48", "b_layer"].startswith("fc.weight + QuantizeLinear_255 + Gemm_257")
    convs = m.layers[m.layers["a_layer"].str.startswith("Conv")]
    assert (convs["a_precision"] == "fp16").all() and (convs["b_precision"] == "int8").all()
    assert set(m.conversion.loc[m.conversion["run"] == "b", "role"]) == {"qdq", "reformat"}
    res = CliRunner().invoke(cli, ["layers", str(TRT / "pub-trex-resnet-a100-fp16.profile.json"),
                                   str(TRT / "pub-trex-resnet-a100-qat.profile.json"),
                                   "-o", str(tmp_path / "out")])
    assert res.exit_code == 0, res.output
    assert "100% of it in matched layers" in res.stdout
    assert pd.read_parquet(tmp_path / "out" / "layers.parquet").shape[0] == len(m.layers)


def test_diff_lines_up_renamed_layers(sqlite_of, cache_dir):
    """The NVTX layers of B renamed the way a Myelin engine of another precision names them
    (``block3`` -> ``block3 + QuantizeLinear_7``, ``_myl0_N`` suffixes): diff still matches
    every layer, keeps B's name in b_layer and warns that the names differ."""
    pa = profile(nsightlab.open(sqlite_of("h200-vit-fp16")))
    pb = profile(nsightlab.open(sqlite_of("h200-vit-fp8")))
    names = [n for n in pb.by_layer["layer"] if n.startswith("block")]
    rename = {n: f"{n} + QuantizeLinear_{i}_myl0_{i}" for i, n in enumerate(names)}
    pb = replace(pb, by_layer=pb.by_layer.assign(layer=pb.by_layer["layer"].replace(rename)),
                 slots=pb.slots.assign(layer=pb.slots["layer"].replace(rename)))
    d = compare(pa, pb)
    matched = d.by_layer[d.by_layer["layer"].str.startswith("block")]
    assert len(matched) == 12 and (matched["status"] == "matched").all()
    assert (matched["b_layer"] == matched["layer"].map(rename)).all()
    assert any("different NVTX layers" in w for w in d.headline["workload_warnings"])
    assert d.headline["conversion_overhead_ns"] == pytest.approx(7.71e6, rel=0.01)
