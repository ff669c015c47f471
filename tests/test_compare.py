"""nsightlab compare (several runs against a baseline) and the --fail-if CI gate, on the real
ViT fixtures (H200) and the model fixtures (tests/data/models, H100)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

import nsightlab
from conftest import xz_fixtures
from nsightlab.comparison import gate
from nsightlab.cli import cli
from nsightlab.errors import UsageError

GOLDEN = Path(__file__).parent / "data" / "golden"


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return xz_fixtures(tmp_path_factory, Path(__file__).parent / "data" / "models")


def test_three_vit_runs_side_by_side(sqlite_of, cache_dir):
    """FP16 (baseline), FP8 and the CUDA-graph replay: latency statistics over the 20
    wall-clock iterations, speedups, the FP8 run's conversion work, one verdict per pair."""
    runs = [sqlite_of(n) for n in ("h200-vit-fp16", "h200-vit-fp8", "h200-vit-fp16-cudagraph")]
    lineup = nsightlab.compare(runs, labels=["fp16", "fp8", "graph"])
    s = lineup.summary.set_index("run")
    assert list(s.index) == ["fp16", "fp8", "graph"]
    lat = s[[f"latency_{k}_ns" for k in ("min", "p50", "p95", "p99", "max")]]
    assert (lat.diff(axis=1).iloc[:, 1:] >= 0).all().all()  # min <= p50 <= p95 <= p99 <= max
    assert (lineup.latency.groupby("run").size() == 20).all()
    fp8 = s.loc["fp8"]
    assert fp8["speedup"] == pytest.approx(6.40 / 13.86, abs=0.01)
    assert fp8["conversion_ns"] == pytest.approx(7.71e6, rel=0.01)
    assert s.loc["graph", "speedup"] == pytest.approx(1.0, abs=0.03)
    assert s.loc["fp16", "conversion_ns"] == 0
    assert lineup.pairs["verdict"].iloc[0].startswith("B is 2.16x slower")
    assert pd.isna(s["items_per_s"]).all()  # no batch known
    means = lineup.latency.groupby("run")["wall_ns"].mean()
    assert means["fp8"] == pytest.approx(fp8["latency_mean_ns"])


def test_exact_compare_text(model, cache_dir, monkeypatch):
    """The whole terminal output of a three-precision compare, character for character. After
    an intended change regenerate it in a folder of the decompressed model fixtures:
    ``nsightlab compare h100-resnet50-{fp32,fp16,bf16}.sqlite > tests/data/golden/...``."""
    names = [model(f"h100-resnet50-{p}").name for p in ("fp32", "fp16", "bf16")]
    monkeypatch.chdir(model("h100-resnet50-fp32").parent)
    res = CliRunner().invoke(cli, ["compare", *names])
    assert res.exit_code == 0, res.output
    assert res.stdout == (GOLDEN / "compare-h100-resnet50-fp32-fp16-bf16.txt").read_text()


def test_compare_outputs_and_batch_from_the_capture_manifest(sqlite_of, cache_dir, tmp_path):
    """-o DIR writes one Parquet file per table and a manifest; --json is plain JSON; --html a
    page with the charts; a capture whose manifest names its input shapes gives items/s."""
    cap = tmp_path / "fp16"
    cap.mkdir()
    shutil.copy(sqlite_of("h200-vit-fp16"), cap / "report.sqlite")
    (cap / "manifest.json").write_text(json.dumps({
        "sqlite": "report.sqlite", "status": "ok",
        "preset": {"name": "trtexec", "shapes": "input:64x3x224x224", "batch": None}}))
    b = str(sqlite_of("h200-vit-fp8"))
    out = tmp_path / "out"
    res = CliRunner().invoke(cli, ["compare", str(cap), b, "-o", str(out),
                                   "--html", str(tmp_path / "c.html")])
    assert res.exit_code == 0, res.output
    assert sorted(p.name for p in out.iterdir()) == [
        "by_class.parquet", "by_precision.parquet", "latency.parquet", "manifest.json",
        "pairs.parquet", "summary.parquet"]
    s = pd.read_parquet(out / "summary.parquet")
    assert s["batch"].iloc[0] == 64 and pd.isna(s["batch"].iloc[1])
    assert s["items_per_s"].iloc[0] == pytest.approx(64 * s["iterations_per_s"].iloc[0])
    assert "items/s" in res.stdout
    html = (tmp_path / "c.html").read_text()
    assert html.index("Verdict") < html.index("Charts") < html.index("By kernel class")
    j = json.loads(CliRunner().invoke(cli, ["compare", str(cap), b, "--json", "--batch", "32"]).stdout)
    assert [r["batch"] for r in j["summary"]] == [32, 32]
    assert j["diffs"][0]["b"] == "h200-vit-fp8" and j["diffs"][0]["b_path"] == b


@pytest.mark.parametrize("text,metric,op,value,relative", [
    ("latency_p50 > +5%", "latency_p50", ">", 5.0, True),
    ("class:quantize>0.5ms", "class:quantize", ">", 5e5, False),
    ("throughput < -5%", "throughput", "<", -5.0, True),
    ("layer:block 3 >= 200us", "layer:block 3", ">=", 2e5, False),
    ("conversion > 1e6ns", "conversion", ">", 1e6, False),
])
def test_gate_grammar(text, metric, op, value, relative):
    r = gate.parse(text)
    assert (r.metric, r.op, r.value, r.relative) == (metric, op, value, relative)


@pytest.mark.parametrize("bad", ["latency_p50 > 5", "latency_p50 >> 5%", "speed > +5%",
                                 "class: > 1ms", ""])
def test_gate_rejects_what_is_not_a_rule(bad):
    with pytest.raises(UsageError, match="METRIC OP CHANGE"):
        gate.parse(bad)


def test_fail_if_exit_codes(sqlite_of, cache_dir):
    """FP16 -> FP8 ViT: p50 latency +117% and 7.7 ms of conversion break the gates (exit 3,
    one line each on stderr); a gate the run keeps exits 0; a malformed rule exits 2 before
    any report is read."""
    a, b = str(sqlite_of("h200-vit-fp16")), str(sqlite_of("h200-vit-fp8"))
    res = CliRunner().invoke(cli, ["diff", a, b, "--fail-if", "latency_p50 > +5%",
                                   "--fail-if", "conversion > 1ms", "--fail-if", "class:gemm > +0%"])
    assert res.exit_code == 3, res.output
    fails = [line for line in res.stderr.splitlines() if line.startswith("FAIL")]
    assert len(fails) == 2
    assert "latency_p50 changed +11" in fails[0] and "rule 'latency_p50 > +5%'" in fails[0]
    assert "conversion changed +7.7" in fails[1]
    assert "2.16x slower" in res.stdout  # the report is still printed
    ok = CliRunner().invoke(cli, ["diff", a, b, "--fail-if", "class:gemm > +0%",
                                  "--fail-if", "layer:block3 > +200%"])
    assert ok.exit_code == 0, ok.output
    bad = CliRunner().invoke(cli, ["diff", "/nonexistent.sqlite", b, "--fail-if", "p50 > 5%"])
    assert bad.exit_code == 2 and "METRIC OP CHANGE" in bad.output
    res = CliRunner().invoke(cli, ["compare", a, b, str(sqlite_of("h200-vit-fp16-cudagraph")),
                                   "--fail-if", "latency_mean > +10%"])
    assert res.exit_code == 3 and res.stderr.count("FAIL") == 1 and "h200-vit-fp8" in res.stderr


def test_five_precisions_of_one_model(model, cache_dir):
    """A GPT-2-shaped decoder in FP32, TF32, BF16, FP16 and FP8 (H100): each run's math reads
    its precision, the speedups order as Tensor Cores predict, FP32 has no Tensor Core work,
    and only the FP8 run adds conversion work (amax, scale, casts: several ms)."""
    runs = [model(f"h100-gpt-{p}") for p in ("fp32", "tf32", "bf16", "fp16", "fp8")]
    lineup = nsightlab.compare(runs, labels=["fp32", "tf32", "bf16", "fp16", "fp8"])
    s = lineup.summary.set_index("run")
    assert s.loc["fp32", "tensor_kernel_time_pct"] == 0
    assert 2.5 < s.loc["tf32", "speedup"] < s.loc["fp16", "speedup"] < s.loc["bf16", "speedup"]
    assert (s.loc[["fp32", "tf32", "bf16", "fp16"], "conversion_ns"] == 0).all()
    assert s.loc["fp8", "conversion_ns"] > 3e6
    prec = lineup.wide_ms("by_precision").set_index("precision")
    for run, p in (("tf32", "tf32"), ("bf16", "bf16"), ("fp16", "fp16"), ("fp8", "fp8")):
        assert prec.loc[p, run] > 2.0, (run, prec)
    assert prec.loc["fp8", ["fp32", "tf32", "bf16", "fp16"]].sum() == 0
    verdicts = dict(zip(lineup.pairs["run"], lineup.pairs["verdict"]))
    assert "kernel time: gemm 42.79 ms -> 8.79 ms" in verdicts["tf32"]
    assert "precision-conversion kernels only in B" in verdicts["fp8"]


def test_eager_against_torch_compile(model, cache_dir):
    """The same BF16 decoder eager and under torch.compile (Triton templates, no NVTX blocks):
    1.6x faster, the Triton GEMM template of the fused LM head named as the change."""
    d = nsightlab.diff(model("h100-gpt-bf16"), model("h100-gpt-compile-bf16"))
    v = d.headline["verdict"]
    assert 1.5 < d.headline["speedup"] < 1.8
    assert "triton_tem_fused_add_mm_native_layer_norm_t_view_14" in v
    assert d.headline["workload_warnings"] == []


def test_different_batches_in_the_capture_manifests_are_said(sqlite_of, cache_dir, tmp_path):
    """Two captures whose manifests give different batches: times per iteration are not
    comparable per item, and the diff says so first."""
    import shutil as sh

    runs = []
    for name, batch in (("b32", 32), ("b64", 64)):
        cap = tmp_path / name
        cap.mkdir()
        sh.copyfile(sqlite_of("h200-vit-fp16"), cap / "report.sqlite")
        (cap / "manifest.json").write_text(json.dumps({
            "name": name, "sqlite": "report.sqlite", "status": "ok",
            "preset": {"name": "trtexec", "batch": batch}}))
        runs.append(cap)
    d = nsightlab.diff(*runs)
    assert any("different batches (A 32, B 64)" in w for w in d.headline["workload_warnings"])
