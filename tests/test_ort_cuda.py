"""ONNX Runtime's CUDA EP, PyTorch and a plain cuBLAS program on an H100, in their own terms
(issue 47): real captures of tests/data/ort/cuda (nsightlab capture, nsys 2025.3, onnxruntime-gpu
1.31.1; truth beside them from the runner and from CUDA events). Each capture is copied to a
temporary store first: opening a capture writes its cache inside it."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

import nsightlab
from nsightlab.analysis import runtime
from nsightlab.cli import cli
from nsightlab.comparison import ort_placement, ort_timeline
from nsightlab.run import remedies, report as run_report
from nsightlab.comparison.diff import diff
from nsightlab.formats import ort_profile

DATA = Path(__file__).parent / "data" / "ort" / "cuda"
TRUTH = DATA / "truth"
NAMES = ("bert4-ort", "bert4-ort-iob", "bert4-ort-plain", "bert4-eager", "bert4-compile",
         "resnet18-ort", "resnet18-ort-graph", "cublas")


pytestmark = pytest.mark.usefixtures("module_cache")  # every cache under a temporary folder


@pytest.fixture(scope="module")
def store(module_cache, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("captures")
    for n in NAMES:
        shutil.copytree(DATA / n, out / n)
    return out


@pytest.fixture(scope="module")
def reports(store) -> dict:
    return {n: run_report.build(store / n) for n in NAMES}


def test_the_runtime_of_each_run(store):
    said = {n: runtime.identify(nsightlab.open(store / n)).iloc[0] for n in NAMES}
    for n in ("bert4-ort", "bert4-ort-iob", "bert4-ort-plain", "resnet18-ort"):
        assert said[n]["runtime"] == "ONNX Runtime" and "onnxruntime::" in said[n]["evidence"]
    assert said["bert4-eager"]["runtime"] == "PyTorch"
    assert said["bert4-compile"]["runtime"] == "PyTorch (torch.compile)"
    # a plain program calling cuBLAS through ctypes: its SGEMM kernel is cutlass_80_simt_sgemm
    # (named for CUTLASS); nsys traced its cuBLAS calls: libraries, and no runtime
    c = said["cublas"]
    assert c["runtime"] == "unknown" and "cuBLAS" in c["libraries"] and "CUTLASS" in c["libraries"]


def test_the_profile_joins_the_timeline_by_its_start_time(store):
    r = nsightlab.open(store / "bert4-ort")
    rec = remedies.ort_record(store / "bert4-ort")
    t = ort_timeline.join(r, store / "bert4-ort" / "ort_profile.json.xz", rec)
    a = t.alignment
    assert a["method"].startswith("the profiler's start time") and a["runs"] == rec["iterations"]
    assert a["calls_in_nodes_pct"] == 100.0
    # ORT's own placement (the runner's record of its verbose log) against the joined profile
    cpu = t.by_provider.set_index("provider").loc["CPUExecutionProvider"]
    assert cpu["nodes"] == rec["node_placements"]["CPUExecutionProvider"]["nodes"] == 34
    assert cpu["launch_calls"] == 0 and cpu["kernel_ns"] == 0
    # every kernel of a run is launched inside a node: the report's kernels per iteration
    rr = run_report.build(store / "bert4-ort")
    assert t.by_provider["kernels"].sum() == pytest.approx(rr.profile.kernels)
    mm = t.by_op.set_index(["op_type", "provider"]).loc[("MatMul", "CUDAExecutionProvider")]
    assert mm["kernels"] == mm["executions"] and mm["kernel_ns"] > 0
    # numpy inputs: the session's own copies come before and after the nodes
    assert (t.runs["copies_outside_nodes"] == 5).all()


def test_the_runs_nvtx_ranges_align_it_without_the_start_time(store):
    r = nsightlab.open(store / "bert4-ort")
    rec = remedies.ort_record(store / "bert4-ort")
    clock = ort_timeline.join(r, store / "bert4-ort" / "ort_profile.json.xz", rec).alignment
    rec.pop("profiling_start_ns")
    nv = ort_timeline.join(r, store / "bert4-ort" / "ort_profile.json.xz", rec).alignment
    assert nv["method"].startswith("the runs' NVTX") and nv["calls_in_nodes_pct"] >= 95
    assert abs(nv["offset_ns"] - clock["offset_ns"]) < 20_000  # within the profile's µs


def test_a_profile_of_another_run_is_refused_in_one_line(store):
    res = CliRunner().invoke(cli, ["ort", str(store / "bert4-ort" / "ort_profile.json.xz"),
                                   "--report", str(store / "resnet18-ort")])
    assert res.exit_code == 1
    line = res.output.strip()
    assert "\n" not in line and "not of the same run" in line and "Traceback" not in res.output


def test_a_cuda_graph_run_says_why_nothing_joins(store):
    p = ort_placement.placement(store / "resnet18-ort-graph")
    assert p.timeline is None and "replayed a CUDA graph" in p.timeline_note


def test_nsightlab_ort_takes_a_capture_name(store, monkeypatch):
    monkeypatch.setenv("NSIGHTLAB_STORE", str(store))
    res = CliRunner().invoke(cli, ["ort", "bert4-ort"])
    assert res.exit_code == 0, res.output
    assert "on the timeline" in res.output and "CPU EP nodes: 34" in res.output
    assert "outside every node: 5 copies per run" in res.output


def test_ort_remedies_follow_the_evidence(reports):
    text = {n: "\n".join(reports[n].findings) for n in reports}
    ort = text["bert4-ort"]
    assert "torch.cuda.graphs" not in ort and "trtexec" not in ort
    assert "enable_cuda_graph" in ort and "34 do here" in ort and "Gather x11" in ort
    assert "io_binding (session.io_binding()" in ort          # numpy feeds: copies each run
    assert "profiler was on" in ort and "TF32 (the CUDA EP's default" in ort
    iob = text["bert4-ort-iob"]
    assert "io_binding (session.io_binding()" not in iob       # already bound
    assert "every node here runs on the CUDA EP" in text["resnet18-ort"]
    plain = text["bert4-ort-plain"]                            # no runner record: a hedge
    assert "see nsightlab ort for the placement" in plain and "profiler was on" not in plain


def test_pytorch_fp32_math_gets_pytorch_remedies_and_a_plain_program_none(reports):
    eager = "\n".join(reports["bert4-eager"].findings)
    assert "set_float32_matmul_precision('high')" in eager and "FP32 math left over" not in eager
    plain = "\n".join(reports["cublas"].findings)
    assert "torch" not in plain and "FP32 math left over" in plain


def test_diff_across_runtimes_names_the_runtime_level_causes(store):
    d = diff(store / "bert4-eager", store / "bert4-ort-plain").headline
    assert d["runtime_change"] == "PyTorch -> ONNX Runtime"
    assert not any("math kernels differ" in w for w in d["workload_warnings"])
    causes = "\n".join(d["runtime_causes"])
    assert "launches per iteration 58 -> 127" in causes and "FP32" in causes and "-> TF32" in causes
    # each side's iteration against the workloads' own timing (CUDA events / the runner)
    wall = sorted(json.loads(l)["wall_ms"] for l in (TRUTH / "bert4-eager.jsonl").open())
    assert d["a_median_ns"] / 1e6 == pytest.approx(wall[len(wall) // 2], rel=0.05)
    runner = json.loads((TRUTH / "bert4-ort-plain.json").read_text())["latency_median_ms"]
    assert d["b_median_ns"] / 1e6 == pytest.approx(runner, rel=0.05)


def test_diff_of_io_binding_says_the_copies_went(store):
    d = diff(store / "bert4-ort", store / "bert4-ort-iob").headline
    assert d["runtime_change"] == ""
    causes = d["runtime_causes"]
    assert causes[0] == "io_binding: on in B, off in A"
    assert any(c.startswith("copies per iteration: device-to-host to pageable") and c.endswith("-> none")
               for c in causes)
    # ...and a pair where only the profiler differs says that first
    d = diff(store / "bert4-ort-plain", store / "bert4-ort-iob").headline
    assert any(c.startswith("ONNX Runtime's profiler") for c in d["runtime_causes"])


def test_orts_own_layout_reads_as_json_does(store):
    path = store / "bert4-ort" / "ort_profile.json.xz"
    import lzma
    fast = ort_profile.events(path)
    slow = ort_profile._frame(ort_profile._parsed(lzma.open(path).read(), path))
    assert len(fast) == len(slow) > 4000
    for col in ("cat", "name", "start_ns", "duration_ns", "provider", "op_name"):
        assert fast[col].astype(str).tolist() == slow[col].astype(str).tolist()


def test_compare_lines_runtimes_and_runner_settings_up(store):
    from nsightlab.comparison.lineup import compare

    l = compare([store / "bert4-eager", store / "bert4-ort-plain", store / "bert4-ort-iob"])
    s = l.summary.set_index("run")
    assert list(s["runtime"]) == ["PyTorch", "ONNX Runtime", "ONNX Runtime"]
    assert s.loc["bert4-ort-plain", "ort_settings"] == ""       # the runner as a command, plain
    assert "io_binding" in s.loc["bert4-ort-iob", "ort_settings"]
    assert "profiler on" in s.loc["bert4-ort-iob", "ort_settings"]
    p = l.pairs.set_index("run")
    assert (p["runtime_change"] == "PyTorch -> ONNX Runtime").all()
    assert "ONNX Runtime's profiler" in p.loc["bert4-ort-iob", "runtime_causes"]
    assert "ONNX Runtime's profiler" not in p.loc["bert4-ort-plain", "runtime_causes"]
