"""Where ONNX Runtime ran each node (nsightlab.comparison.ort_placement, `nsightlab ort`), on profiles the
runner makes here with the real onnxruntime (CPU EP, and CUDA EP requested where this build has
none) and on the CUDA EP sample ORT profile of tests/data/ort."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import make_tiny_onnx
from nsightlab.comparison import ort_placement
from nsightlab.cli import cli

DATA = Path(__file__).parent / "data" / "ort"


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    pytest.importorskip("onnxruntime")
    return make_tiny_onnx(tmp_path_factory.mktemp("ort") / "tiny.onnx")


def _run(model: Path, ep: str, out: Path) -> Path:
    out.mkdir()
    subprocess.run([sys.executable, "-m", "nsightlab.runners.ort", str(model), "--ep", ep,
                    "--iterations", "8", "--warmup", "2", "--profile", str(out / "ort_profile.json"),
                    "--report", str(out / "ort_run.json")], check=True, capture_output=True)
    return out


def test_cpu_ep_run(tiny_model, tmp_path):
    p = ort_placement.placement(_run(tiny_model, "cpu", tmp_path / "cpu"))
    assert p.run["requested"] == "CPUExecutionProvider" and not p.run["session_fallback"]
    bp = p.by_provider.set_index("provider")
    assert list(bp.index) == ["CPUExecutionProvider"] and bp.loc["CPUExecutionProvider", "nodes"] == 2
    assert bp.loc["CPUExecutionProvider", "executions"] == 2 * (8 + 2)
    assert p.fallbacks.empty and p.memcpy.empty and p.trt_subgraphs.empty
    phases = p.phases.set_index("phase")
    assert {"model loading", "session initialization", "first run", "steady run (median)"} <= set(phases.index)
    assert phases.loc["steady run (median)", "runs"] == 8 + 2 - 1


def test_cuda_requested_without_it_is_a_recorded_fallback(tiny_model, tmp_path):
    """This onnxruntime build has no CUDA EP: the runner falls back to the CPU and records it;
    every node is a fallback, and the text says the whole session ran on the CPU."""
    folder = _run(tiny_model, "cuda", tmp_path / "cuda")
    assert "CUDAExecutionProvider" not in json.loads((folder / "ort_run.json").read_text())["providers_used"]
    p = ort_placement.placement(folder)
    assert p.run["requested"] == "CUDAExecutionProvider" and p.run["session_fallback"]
    assert set(p.fallbacks["op_type"]) == {"MatMul", "Relu"}
    assert p.run["fallback_time_pct"] == pytest.approx(100.0)
    # ORT's own verbose placement log, recorded by the runner at session creation
    assert p.assignment.to_dict("records") == [
        {"provider": "CPUExecutionProvider", "nodes": 2, "names": ""}]
    res = CliRunner().invoke(cli, ["ort", str(folder)])
    assert res.exit_code == 0
    assert "the whole session ran on the CPU" in res.stdout and "fallbacks: 2 node(s)" in res.stdout
    out = tmp_path / "o"
    assert CliRunner().invoke(cli, ["ort", str(folder), "-o", str(out)]).exit_code == 0
    assert {"run.parquet", "by_provider.parquet", "fallbacks.parquet", "manifest.json"} <= \
        {f.name for f in out.iterdir()}


def test_documented_cuda_ep_profile():
    p = ort_placement.placement(DATA / "mql5-docs-cuda-profile.json")
    assert p.run["requested"] == "CUDAExecutionProvider" and p.fallbacks.empty
    bp = p.by_provider.set_index("provider")
    assert bp.loc["CUDAExecutionProvider", "nodes"] == 8
    assert bp.loc["CUDAExecutionProvider", "executions"] == 16
    phases = p.phases.set_index("phase")
    assert phases.loc["session initialization", "time_ns"] == 15_496_000
    assert phases.loc["first run", "time_ns"] == 109_600_000


def test_memcpy_and_tensorrt_nodes_stand_in_events(tmp_path):
    """Stand-in events (no GPU EP can run here) named the way ORT names them: MemcpyToHost /
    MemcpyFromHost nodes and a TensorRT EP fused node, with a CPU fallback node."""
    ev = lambda name, op, prov, dur, ts: {"cat": "Node", "name": f"{name}_kernel_time", "ph": "X",  # noqa: E731
                                          "pid": 1, "tid": 1, "ts": ts, "dur": dur,
                                          "args": {"op_name": op, "provider": prov}}
    events = [ev("TensorrtExecutionProvider_TRTKernel_graph_main_graph_1_0", "TRTKernel_graph_main_graph_1",
                 "TensorrtExecutionProvider", 900, 0),
              ev("Memcpy_token_1", "MemcpyToHost", "CUDAExecutionProvider", 50, 900),
              ev("NonMaxSuppression_3", "NonMaxSuppression", "CPUExecutionProvider", 40, 950),
              ev("Memcpy_token_2", "MemcpyFromHost", "CUDAExecutionProvider", 10, 990)]
    f = tmp_path / "trt.json"
    f.write_text(json.dumps(events))
    p = ort_placement.placement(f, "tensorrt")
    assert p.run["requested"] == "TensorrtExecutionProvider"
    assert list(p.memcpy["op_type"]) == ["MemcpyToHost", "MemcpyFromHost"]
    assert p.memcpy["time_pct"].sum() == pytest.approx(6.0)
    assert list(p.fallbacks["node"]) == ["NonMaxSuppression_3"]
    assert len(p.trt_subgraphs) == 1 and p.trt_subgraphs["time_pct"].iloc[0] == pytest.approx(90.0)


def test_bad_inputs(tmp_path):
    res = CliRunner().invoke(cli, ["ort", str(tmp_path / "nope.json")])
    assert res.exit_code == 1 and "no such file" in res.output
    (tmp_path / "cap").mkdir()
    res = CliRunner().invoke(cli, ["ort", str(tmp_path / "cap")])
    assert res.exit_code == 1 and "no ort_profile.json" in res.output
    (tmp_path / "bad.json").write_text("{not json")
    res = CliRunner().invoke(cli, ["ort", str(tmp_path / "bad.json")])
    assert res.exit_code == 1 and "not a readable ONNX Runtime profile" in res.output


def test_compare_an_ort_cpu_run_with_pytorch_eager(tmp_path, cache_dir):
    """The same ResNet-18 (batch 8) run by ONNX Runtime's CPU EP and by PyTorch eagerly on an
    H200 (tests/data/ort/captures, made with capture_pair.sh): the CPU run is timed by its NVTX
    iterations and lined up by latency, with its placement line; no kernel-level detail."""
    import shutil

    import nsightlab

    shutil.copytree(DATA / "captures", tmp_path / "c")  # captures write their cache inside
    eager, ort = tmp_path / "c" / "torch-eager", tmp_path / "c" / "ort-cpu"
    lineup = nsightlab.compare([eager, ort], labels=["eager", "ort-cpu"])
    s = lineup.summary.set_index("run")
    assert s.loc["ort-cpu", "kernel_ns"] == 0 and s.loc["ort-cpu", "iterations"] == 20
    assert s.loc["ort-cpu", "verdict"] == "CPU only (no GPU kernels)"
    assert s.loc["ort-cpu", "execution_providers"] == "CPUExecutionProvider 100%"
    assert s.loc["eager", "execution_providers"] == "" and s.loc["eager", "kernel_ns"] > 0
    run = json.loads((ort / "ort_run.json").read_text())
    assert s.loc["ort-cpu", "latency_mean_ns"] / 1e6 == pytest.approx(
        sum(run["latency_ms"]) / len(run["latency_ms"]), rel=0.05)  # NVTX vs the runner's clock
    assert lineup.diffs == [] and "ran no GPU kernels" in lineup.pairs["verdict"].iloc[0]
    text = CliRunner().invoke(cli, ["compare", str(eager), str(ort)]).stdout
    assert "ONNX Runtime placement" in text and "CPU only (no GPU kernels)" in text


def test_node_placement_log_of_several_providers():
    """ORT's verbose placement block when several EPs take nodes, verbatim from a public
    onnxruntime-web log (found with the project's code search): per-EP counts and node lines."""
    from nsightlab.runners.ort import parse_placements

    log = "\n".join([
        "[I:onnxruntime:, transformer_memcpy.cc:393 AddCopyNode] Add MemcpyToHost before /0/Conv for CPUExecutionProvider",
        "[V:onnxruntime:, session_state.cc:1345 VerifyEachNodeIsAssignedToAnEp]  Node(s) placed on [JsExecutionProvider]. Number of nodes: 6",
        "[V:onnxruntime:, session_state.cc:1347 VerifyEachNodeIsAssignedToAnEp]   MemcpyFromHost (Memcpy)",
        "[V:onnxruntime:, session_state.cc:1345 VerifyEachNodeIsAssignedToAnEp]  Node(s) placed on [CPUExecutionProvider]. Number of nodes: 1",
        "[W:onnxruntime:, session_state.cc:1359 VerifyEachNodeIsAssignedToAnEp] Some nodes were not assigned to the preferred execution providers"])
    got = parse_placements(log)
    assert got == {"JsExecutionProvider": {"nodes": 6, "names": ["MemcpyFromHost (Memcpy)"]},
                   "CPUExecutionProvider": {"nodes": 1, "names": []}}


def test_a_run_whose_kernels_were_lost_is_not_taken_for_a_cpu_run(sqlite_of, cache_dir, tmp_path):
    """CUDA launch calls recorded but no kernel (a crash, a lost trace): compare refuses it with
    the completeness message, instead of timing it as a CPU-only run."""
    import lzma

    import nsightlab
    from nsightlab.errors import NsightlabError

    crash = tmp_path / "crash.sqlite"
    crash.write_bytes(lzma.open(Path(__file__).parent / "data" / "scenarios" / "nsys" /
                                "h100-crash.sqlite.xz").read())
    with pytest.raises(NsightlabError, match="before nsys flushed its CUDA trace"):
        nsightlab.compare([sqlite_of("h200-vit-fp16"), crash])


def test_ort_takes_a_capture_name(tmp_path, monkeypatch):
    """`nsightlab ort NAME` finds the capture by name in the store, as every command does."""
    import shutil

    shutil.copytree(DATA / "captures" / "ort-cpu", tmp_path / "store" / "ort-cpu")
    monkeypatch.setenv("NSIGHTLAB_STORE", str(tmp_path / "store"))
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(cli, ["ort", "ort-cpu"])
    assert res.exit_code == 0, res.output
    assert "CPUExecutionProvider" in res.stdout


def test_io_binding_run_records_how_it_ran(tiny_model, tmp_path):
    """--io-binding binds inputs and outputs once (run_with_iobinding); the record says so,
    and that ORT's profiler was on, with its start time (epoch ns: the clock evidence that
    aligns the profile with a trace's session start)."""
    out = tmp_path / "bound"
    out.mkdir()
    res = subprocess.run([sys.executable, "-m", "nsightlab.runners.ort", str(tiny_model),
                          "--io-binding", "--iterations", "4", "--warmup", "1",
                          "--profile", str(out / "ort_profile.json"),
                          "--report", str(out / "ort_run.json")], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    run = json.loads((out / "ort_run.json").read_text())
    assert run["io_binding"] and not run["cuda_graph"] and run["profiler_on"]
    assert run["profiling_start_ns"] > 1.7e18 and len(run["latency_ms"]) == 4
    assert "with io_binding" in res.stderr and "ORT profiler on" in res.stderr


def test_cuda_graph_needs_the_cuda_ep(tiny_model, tmp_path):
    res = subprocess.run([sys.executable, "-m", "nsightlab.runners.ort", str(tiny_model),
                          "--cuda-graph"], capture_output=True, text=True)
    assert res.returncode == 2 and "give --ep cuda" in res.stderr
    for args, said in ((["--ort", str(tiny_model), "--cuda-graph"], "give --ep cuda"),
                       (["--io-binding", "--", "python", "x.py"], "--io-binding is an ONNX")):
        r = CliRunner().invoke(cli, ["capture", "x", "--store", str(tmp_path), "--dry-run", *args])
        assert r.exit_code != 0 and said in r.output, r.output
