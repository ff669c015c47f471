"""TensorRT layers matched by the graph, on public engine pairs of one network at two precisions
(TREx examples of NVIDIA/TensorRT, Apache-2.0; tests/data/trtexec/README.md): every FP16/INT8
pair has >= 95% of both engines' compute time in matched layers, and every standalone quantize
and dequantize layer is counted as Q/DQ."""
from __future__ import annotations

import lzma
import tempfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from nsightlab.cli import cli
from nsightlab.comparison import trt_layers

PACKED = Path(__file__).parent / "data" / "trtexec"
#: the JSON exports unpacked (they are kept xz'd: the repository's size)
DATA = Path(tempfile.mkdtemp(prefix="nsightlab-trex-"))
for _f in PACKED.glob("*.json.xz"):
    (DATA / _f.name.removesuffix(".xz")).write_bytes(lzma.decompress(_f.read_bytes()))
#: (A, B, B's standalone Q/DQ layers): FP16 vs INT8 QAT engines
PAIRS = {
    "a100-qat": ("resnet18-a100-fp16", "resnet18-a100-qat", 10),
    "a100-qat-residual": ("resnet18-a100-fp16", "resnet18-a100-qat-residual", 3),
    "a100-qat-residual-qgap": ("resnet18-a100-fp16", "resnet18-a100-qat-residual-qgap", 1),
    "rtx3090-resnet50-qat": ("resnet50-rtx3090-fp16", "resnet50-rtx3090-qat", 1),
}


def engine(stem: str):
    return trt_layers.engine_layers(DATA / f"pub-trex-{stem}.profile.json")


def matched(pair: str) -> trt_layers.LayerMatch:
    a, b, _ = PAIRS[pair]
    return trt_layers.match(engine(a), engine(b))


@pytest.mark.parametrize("pair", PAIRS)
def test_fp16_int8_pairs_match_95_pct_of_compute_and_count_every_qdq(pair):
    m = matched(pair)
    s = m.summary.set_index("run")
    assert (s["matched_pct"] >= 95).all(), s
    qdq = m.conversion[m.conversion["role"] == "qdq"]
    assert (qdq["run"] == "b").sum() == PAIRS[pair][2] and (qdq["run"] == "a").sum() == 0
    assert s.loc["b", "qdq_ms"] == pytest.approx(qdq["ms"].sum()) and s.loc["b", "qdq_ms"] > 0


def test_a100_pair_pairs_all_23_layers_through_the_qdq_layers():
    """Every layer of the FP16 engine pairs with its QAT layer by its producers: the walk goes
    through the QuantizeLinear and reformat layers that stand between the QAT engine's convs."""
    m = matched("a100-qat")
    assert len(m.layers) == 23 and (m.layers["how"] == "graph").all()
    assert m.summary.set_index("run").loc["b", "qdq_ms"] == pytest.approx(0.232448, rel=1e-4)


def test_resnet50_pair_follows_the_residual_add_and_the_stem_padding():
    """The RTX 3090 ResNet-50 engines fuse each block's residual add into different convs (the
    shortcut conv in FP16, the block's last conv in INT8) and the INT8 one pads the stem apart
    and quantizes the input with a QDQ reformat (FP32 -> Int8, 0.034 ms)."""
    m = matched("rtx3090-resnet50-qat")
    pairs = m.layers.set_index("a_layer")
    assert pairs.loc["resnet50/conv2_block1_3_conv/Conv2D", "b_layer"].startswith(
        "resnet50/quant_conv2_block1_3_conv/")
    shortcut = ("resnet50/conv2_block1_0_conv/Conv2D + resnet50/conv2_block1_add/add"
                " + resnet50/conv2_block1_out/Relu")
    assert pairs.loc[shortcut, "b_layer"].startswith("resnet50/quant_conv2_block1_0_conv/")
    stem = pairs.loc["Conv__435 + resnet50/conv1_relu/Relu"]
    assert stem["how"] == "region" and stem["b_layer"].startswith("resnet50/conv1_pad/Pad | ")
    qdq = m.conversion[m.conversion["role"] == "qdq"].iloc[0]
    assert qdq["layer"] == "QuantLinearNode__838" and qdq["ms"] == pytest.approx(0.033792)


def test_conv_and_maxpool_fused_into_one_layer_match_as_a_region():
    """The QAT-residual engine runs the stem's Conv+MaxPool as one ConvActPool layer."""
    row = matched("a100-qat-residual").layers.iloc[0]
    assert row["how"] == "region" and row["a_layer"] == "Conv_0 + Relu_1 | MaxPool_2"
    assert row["b_layer"] == "conv1.weight + QuantizeLinear_7 + Conv_9 + MaxPool_12"


def test_names_are_not_needed():
    """Every layer of B renamed to nothing alike: the graph alone still matches them, and the
    layer info alone still tells the Q/DQ layer apart."""
    a, b, _ = PAIRS["rtx3090-resnet50-qat"]
    eb = engine(b)
    eb["name"] = [f"layer{i}" for i in range(len(eb))]
    m = trt_layers.match(engine(a), eb)
    s = m.summary.set_index("run")
    assert (s["matched_pct"] >= 95).all(), s
    assert s.loc["b", "qdq_ms"] == pytest.approx(0.033792)


@pytest.mark.parametrize("layer,expected", [
    ({"name": "QuantLinearNode__838", "layer_type": "Reformat", "origin": "QDQ",
      "in_precision": "fp32", "out_precision": "int8"}, "qdq"),
    ({"name": "Reformatting CopyNode for Input Tensor 0 to conv1", "layer_type": "Reformat",
      "in_precision": "fp32", "out_precision": "int8"}, "qdq"),
    ({"name": "Reformatting CopyNode for Output Tensor 0 to fc", "layer_type": "NoOp",
      "in_precision": "int8", "out_precision": "fp16"}, "qdq"),
    ({"name": "Reformatting CopyNode for Input Tensor 0 to conv1", "layer_type": "Reformat",
      "in_precision": "fp32", "out_precision": "fp16"}, "reformat"),
    ({"name": "input_scale", "layer_type": "Scale", "in_precision": "fp16",
      "out_precision": "fp8"}, "qdq"),
    ({"name": "bn1", "layer_type": "Scale", "in_precision": "fp16", "out_precision": "fp16"},
     "compute"),
    ({"name": "/model/q", "layer_type": "Quantize"}, "qdq"),
    ({"name": "/model/dq", "layer_type": "kgen", "parameter_type": "Dequantize"}, "qdq"),
    ({"name": "resnet50/quant_conv1_conv/BiasAdd__1121", "layer_type": "Shuffle",
      "in_precision": "int8", "out_precision": "int8"}, "reformat"),
])
def test_qdq_role_from_the_layer_info(layer, expected):
    name = layer.pop("name")
    assert trt_layers.role(name, layer.pop("layer_type"), **layer) == expected


def test_cli_layers_on_the_resnet50_pair():
    res = CliRunner().invoke(cli, ["layers", str(DATA / "pub-trex-resnet50-rtx3090-fp16.profile.json"),
                                   str(DATA / "pub-trex-resnet50-rtx3090-qat.profile.json")])
    assert res.exit_code == 0, res.output
    head = res.stdout.splitlines()[:2]
    assert head == ["A: 58 compute layers, 4.138 ms; 100% of it in matched layers; Q/DQ 0.000 ms, "
                    "reformats 0.134 ms",
                    "B: 59 compute layers, 2.266 ms; 100% of it in matched layers; Q/DQ 0.034 ms, "
                    "reformats 0.081 ms"]
