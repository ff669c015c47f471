"""`nsightlab capture` / `captures` / `export`: argv plans, the capture store, real captures."""
from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

import nsightlab
from nsightlab.capture import record as cap
from nsightlab.cli import cli

from conftest import SHARED, make_tiny_onnx

HAS_NSYS = shutil.which("nsys") is not None


def invoke(*args, env=None):
    return CliRunner().invoke(cli, list(args), env=env)


def fake_tool(folder: Path, name: str, body: str) -> Path:
    """A stand-in executable (tools that cannot be installed here), written as a script."""
    folder.mkdir(parents=True, exist_ok=True)
    exe = folder / name
    exe.write_text(f"#!{sys.executable}\n{body}")
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    return exe


@pytest.fixture
def tiny_onnx(tmp_path) -> Path:
    return make_tiny_onnx(tmp_path / "tiny.onnx")


RECORDING_TRTEXEC = r"""
import json, os, sys
with open(os.environ["TRTEXEC_LOG"], "a") as f:
    f.write(json.dumps(sys.argv[1:]) + "\n")
for a in sys.argv[1:]:
    if a.startswith("--saveEngine="):
        open(a.split("=", 1)[1], "w").write("engine")
print("&&&& PASSED TensorRT.trtexec (stand-in)")
"""


def test_trtexec_preset_argv_with_a_recording_stand_in_trtexec(tmp_path, tiny_onnx, monkeypatch):
    """Stand-in trtexec (TensorRT cannot be installed here) that records its arguments;
    nsys is skipped (--no-nsys) so only the trtexec steps run."""
    log = tmp_path / "argv.jsonl"
    fake_tool(tmp_path / "bin", "trtexec", RECORDING_TRTEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("TRTEXEC_LOG", str(log))
    store = tmp_path / "store"
    args = ["capture", "q", "--store", str(store), "--no-nsys", "--trtexec", str(tiny_onnx),
            "--precision", "nvfp4", "--shapes", "x:8x64", "--iterations", "50", "--quiet"]
    res = invoke(*args)
    assert res.exit_code == 0, res.output
    build, infer = [json.loads(line) for line in log.read_text().splitlines()]
    assert f"--onnx={tiny_onnx}" in build and "--stronglyTyped" in build
    assert "--skipInference" in build and any(a.startswith("--timingCacheFile=") for a in build)
    engine = next(a for a in build if a.startswith("--saveEngine=")).split("=", 1)[1]
    assert f"--loadEngine={engine}" in infer and "--profilingVerbosity=detailed" in infer
    assert "--separateProfileRun" in infer and "--iterations=50" in infer
    for flag in ("--exportProfile=", "--exportLayerInfo=", "--exportTimes="):
        path = next(a for a in infer if a.startswith(flag)).split("=", 1)[1]
        assert Path(path).parent.name.startswith(".q.tmp-")  # into the capture being built
    assert "--useCudaGraph" not in infer
    manifest = json.loads((store / "q" / "manifest.json").read_text())
    assert manifest["status"] == "ok" and manifest["preset"]["precision"] == "nvfp4"
    # a second capture reuses the engine: no build step
    res = invoke("capture", "q2", *args[2:])
    assert res.exit_code == 0 and len(log.read_text().splitlines()) == 3


@pytest.mark.parametrize("precision,flag", [("fp16", "--fp16"), ("int8", "--int8"),
                                            ("fp8", "--stronglyTyped"), ("best", "--best")])
def test_dry_run_prints_the_plan_and_writes_nothing(tmp_path, precision, flag):
    store = tmp_path / "store"
    res = invoke("capture", "x", "--store", str(store), "--dry-run", "--trtexec", "m.onnx",
                 "--precision", precision, "--cuda-graph", "--gpu-metrics",
                 "--nsys-args", "--delay=2 --duration=30", "--ncu", "--ncu-kernels", "gemm",
                 "--ncu-args", "--replay-mode application")
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert lines[0].startswith("[build-engine] ") and flag in lines[0]
    assert lines[1].startswith("[nsys] ") and "--cuda-graph-trace=node" in lines[1]
    assert "--useCudaGraph" in lines[1] and "gpu-metrics-device" in lines[1]
    assert "--trace=cuda,nvtx,osrt,cublas,cudnn" in lines[1] and "--sample=none" in lines[1]
    assert "--delay=2 --duration=30 trtexec" in lines[1]  # pass-through flags before the workload
    assert lines[2].startswith("[ncu] ") and "--kernel-name regex:gemm" in lines[2]
    assert "--replay-mode application trtexec" in lines[2]
    assert lines[3].startswith("[export] ") and "export --type sqlite" in lines[3]
    assert len(lines) == 4 and (not store.exists() or not any(store.iterdir()))


def test_usage_and_tool_errors(tmp_path, monkeypatch):
    res = invoke("capture", "x", "--store", str(tmp_path))
    assert res.exit_code == 2 and "exactly one workload" in res.output
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("NSIGHTLAB_NSYS", raising=False)
    res = invoke("capture", "x", "--store", str(tmp_path / "s"), "--", "true")
    assert res.exit_code == 1 and "nsys was found" not in res.output
    assert "nsys was not found" in res.output and "NSIGHTLAB_NSYS" in res.output
    res = invoke("capture", "x", "--store", str(tmp_path / "s"), "--no-nsys", "--ncu", "--", "true")
    assert res.exit_code == 1 and "ncu was not found" in res.output
    res = invoke("capture", "bad/name", "--store", str(tmp_path / "s"), "--no-nsys", "--", "true")
    assert res.exit_code == 1 and "capture name" in res.output


def test_store_refuses_existing_names_keeps_failures_and_cleans_up_interrupts(tmp_path, monkeypatch):
    store = tmp_path / "store"
    ok = ["capture", "a", "--store", str(store), "--no-nsys", "--quiet", "--",
          sys.executable, "-c", "print('hi')"]
    assert invoke(*ok).exit_code == 0
    res = invoke(*ok)
    assert res.exit_code == 1 and "--force" in res.output
    assert invoke(*ok[:2], *ok[2:4], "--force", *ok[4:]).exit_code == 0
    # a failing workload: kept, status failed, exit code and log recorded
    res = invoke("capture", "b", "--store", str(store), "--no-nsys", "--quiet", "--",
                 sys.executable, "-c", "import sys; print('boom'); sys.exit(3)")
    assert res.exit_code == 1 and "failed" in res.output
    m = json.loads((store / "b" / "manifest.json").read_text())
    assert m["status"] == "failed" and m["exit_code"] == 3
    assert "boom" in (store / "b" / "logs" / "run.log").read_text()
    # Ctrl-C in the middle: nothing half-written stays in the store

    def interrupted(step, logs, echo):
        raise KeyboardInterrupt

    monkeypatch.setattr(cap, "_run", interrupted)
    with pytest.raises(KeyboardInterrupt):
        cap.capture(cap.Options(name="c", store=store, use_nsys=False, command=["true"]))
    assert sorted(p.name for p in store.iterdir()) == ["a", "b"]
    res = invoke("captures", "--store", str(store))
    assert res.exit_code == 0
    lines = res.output.splitlines()
    assert lines[0].split() == ["name", "created", "preset", "gpu", "status", "size_mib"]
    assert [line.split()[0] for line in lines[2:]] == ["a", "b"] and "failed" in lines[3]


def test_nsys_that_leaves_only_a_qdstrm_stand_in(tmp_path):
    """Stand-in nsys that behaves like one whose importer is missing: it writes only .qdstrm."""
    body = r"""
import sys
out = next(a.split("=", 1)[1] for a in sys.argv if a.startswith("--output="))
if sys.argv[1] == "--version":
    print("NVIDIA Nsight Systems version 2022.4.2.1-stand-in")
else:
    open(out + ".qdstrm", "w").write("raw")
"""
    body = body.replace('out = next', 'out = None if sys.argv[1] == "--version" else next')
    nsys = fake_tool(tmp_path / "bin", "nsys", body)
    with pytest.raises(nsightlab.NsightlabError, match="QdstrmImporter -i report.qdstrm"):
        cap.capture(cap.Options(name="q", store=tmp_path / "s", nsys_path=str(nsys),
                                command=["true"]))
    m = json.loads((tmp_path / "s" / "q" / "manifest.json").read_text())
    assert m["status"] == "failed"


@pytest.mark.skipif(not HAS_NSYS, reason="nsys is not installed")
def test_real_capture_of_the_ort_runner(tmp_path, tiny_onnx, cache_dir, monkeypatch):
    """Real: nsys profiles nsightlab's ONNX Runtime runner (CPU EP) on a model built here."""
    pytest.importorskip("onnxruntime")
    pytest.importorskip("nvtx")
    store = tmp_path / "store"
    res = invoke("capture", "ort", "--store", str(store), "--ort", str(tiny_onnx), "--ep", "cuda",
                 "--iterations", "6", "--warmup", "2", "--shape", "x=4x64", "--quiet")
    assert res.exit_code == 0, res.output
    manifest = json.loads((store / "ort" / "manifest.json").read_text())
    assert manifest["status"] == "ok" and manifest["tools"]["nsys"]["version"]
    assert manifest["ort"]["fallback"] and manifest["ort"]["providers_used"] == ["CPUExecutionProvider"]
    assert any("not available" in m for m in manifest["messages"])
    assert {a["path"] for a in manifest["artifacts"]} >= {"report.nsys-rep", "report.sqlite",
                                                          "ort_profile.json", "ort_run.json"}
    monkeypatch.setenv("NSIGHTLAB_STORE", str(store))
    n = nsightlab.open("ort").nvtx(["name", "depth"])  # opened by capture name
    iters = n[n["name"].astype(str).str.fullmatch(r"nsightlab:iter\d+")]
    assert len(iters) == 6 and (iters["depth"] == 1).all()
    assert {"nsightlab:session_create", "nsightlab:warmup", "nsightlab:timed"} <= set(n["name"].astype(str))
    nodes = pd.read_parquet(store / "ort" / "ort_profile.ort_nodes.parquet")
    assert set(nodes["op_type"]) == {"MatMul", "Relu"} and len(nodes) == 2 * (6 + 2)
    assert (nodes["provider"] == "CPUExecutionProvider").all()
    assert (store / "ort" / "cache" / "nvtx" / "meta.json").is_file()


def test_export_trtexec_fixtures_layer_times_add_up(tmp_path):
    folder = SHARED / "trtexec"
    if not folder.is_dir():
        pytest.skip("../shared/fixtures/trtexec is not present")
    res = invoke("export", *map(str, sorted(folder.glob("*.json"))), "-o", str(tmp_path))
    assert res.exit_code == 0, res.output
    for stem in ("pub-fuzzylabs-resnet18_fp16", "pub-trex-resnet-a100-fp16", "pub-trex-resnet-a100-qat"):
        layers = pd.read_parquet(tmp_path / f"{stem}.trt_layers.parquet")
        assert abs(layers["time_pct"].sum() - 100) < 0.01
        total = layers["total_ms"].sum()
        count = layers["iterations"].iloc[0]
        assert abs(layers["avg_ms"].sum() * count - total) <= 0.001 * total + 0.01
        assert layers["layer_type"].notna().mean() > 0.9 and layers["precision"].notna().mean() > 0.9
        times = pd.read_parquet(tmp_path / f"{stem}.timing.trt_times.parquet")
        assert len(times) > 100 and (times["compute_ms"] > 0).all() and "enqueue_ms" in times
    qat = pd.read_parquet(tmp_path / "pub-trex-resnet-a100-qat.trt_layers.parquet")
    assert (qat["precision"] == "int8").sum() > 10


def test_export_every_ncu_fixture(tmp_path):
    folder = SHARED / "ncu"
    if not folder.is_dir():
        pytest.skip("../shared/fixtures/ncu is not present")
    pytest.importorskip("ncu_report")
    res = invoke("export", *map(str, sorted(folder.glob("*.ncu-rep*"))), "-o", str(tmp_path))
    assert res.exit_code == 0, res.output
    counts = {p.name.split(".")[0]: len(pd.read_parquet(p)) for p in tmp_path.glob("*.ncu_kernels.parquet")}
    assert counts == {"h200-gemm-fp16": 1, "h200-gemm-fp8": 1, "h200-vit-fp16-block3": 40,
                      "h200-vit-fp8-block3": 40, "pub-esmm-a10g": 4}
    gemm = pd.read_parquet(tmp_path / "h200-gemm-fp16.ncu_kernels.parquet").iloc[0]
    assert 93 < gemm["tensor_active_pct"] < 98
    long = pd.read_parquet(tmp_path / "h200-gemm-fp16.ncu_metrics.parquet")
    assert len(long) > 2000 and {"metric", "value", "unit"} <= set(long.columns)
    k = nsightlab.open_ncu(folder / "h200-vit-fp16-block3.ncu-rep.xz").kernels()
    assert len(k) == 40


def test_export_errors(tmp_path):
    (tmp_path / "x.txt").write_text("hello")
    res = invoke("export", str(tmp_path / "x.txt"), "-o", str(tmp_path / "o"))
    assert res.exit_code == 1 and "does not export this kind of file" in res.output
    res = invoke("export", str(tmp_path / "missing.ncu-rep"))
    assert res.exit_code == 1 and "no such file" in res.output


def test_bundled_example_captures(tmp_path, monkeypatch):
    """captures/examples: real nsightlab captures from the H200 (compressed for the repository)."""
    examples = Path(__file__).parent.parent / "captures" / "examples"
    rows = {r["name"]: r for r in cap.list_captures(examples)}
    assert set(rows) == {"vit-fp16", "vit-fp8"} and all(r["status"] == "ok" for r in rows.values())
    for name, kernels in (("vit-fp16", 3120), ("vit-fp8", 12288)):
        copy = tmp_path / name
        shutil.copytree(examples / name, copy, ignore=shutil.ignore_patterns("cache"))
        r = nsightlab.open(copy)
        assert len(r.kernels(["name"])) == kernels and r.gpus.loc[0, "name"] == "NVIDIA H200"
        assert r.has("gpu_metrics")
        manifest = json.loads((copy / "manifest.json").read_text())
        assert manifest["tools"]["nsys"]["version"].startswith("2025.3")
        assert [s["name"] for s in manifest["steps"]] == ["nsys", "ncu"]
        ncu_kernels = pd.read_parquet(copy / "report.ncu_kernels.parquet")
        assert len(ncu_kernels) == 40 and ncu_kernels["nvtx"].str.endswith("block3").all()


def test_options_validate_in_the_library(tmp_path):
    from nsightlab.errors import UsageError

    with pytest.raises(UsageError, match="exactly one workload.*-- COMMAND and --trtexec"):
        cap.Options(name="x", command=["true"], trtexec="m.onnx").validate(check_files=False)
    with pytest.raises(UsageError, match="none given"):
        cap.Options(name="x").validate()
    with pytest.raises(nsightlab.NsightlabError, match="no such model file"):
        cap.Options(name="x", ort=str(tmp_path / "none.onnx")).validate()
    # what a command line hands over is taken as it comes
    o = cap.Options(name="x", command=("python", "w.py"), nsys_args="--delay 2 --x 'a b'",
                    store=str(tmp_path), ort_shapes=("in=1x3",))
    assert o.command == ["python", "w.py"] and o.nsys_args == ["--delay", "2", "--x", "a b"]
    assert o.store == tmp_path and o.ort_shapes == ["in=1x3"]


def test_plan_ends_with_the_export_step(tmp_path):
    from nsightlab.read import nsys_export as nsys_cli

    steps = cap.plan(cap.Options(name="x", command=["true"]), tmp_path, {"nsys": "/opt/nsys"})
    assert [s.kind for s in steps] == ["workload", "export"]
    assert steps[-1].argv == nsys_cli.export_argv("/opt/nsys", tmp_path / "report.nsys-rep",
                                                  tmp_path / "report.sqlite")
    assert [s.kind for s in cap.plan(cap.Options(name="x", command=["true"], use_nsys=False),
                                     tmp_path, {})] == ["workload"]


def test_capture_flags_are_the_options_fields():
    """The CLI hands its flags to Options by name, and shows the library's defaults."""
    import dataclasses

    from nsightlab.cli import capture as cli_capture, table as cli_table
    from nsightlab.read.tables import TABLES

    fields = {f.name: f.default for f in dataclasses.fields(cap.Options)}
    params = {p.name: p for p in cli_capture.capture.params if p.name not in ("dry_run", "quiet")}
    assert set(params) <= set(fields)
    for name, p in params.items():  # valued options show the library's default
        if isinstance(p.default, (str, int, float)) and not getattr(p, "is_flag", False) \
                and name not in ("nsys_args", "ncu_args"):
            assert p.default == fields[name], name
    assert {"trace", "precision", "iterations", "ep", "ncu_set"} <= {
        n for n, p in params.items() if isinstance(p.default, (str, int))}
    assert cli_capture.DEFAULT_TRACE == cap.DEFAULT_TRACE
    assert set(cli_capture.PRECISIONS) == set(cap.PRECISION_FLAGS)
    assert set(cli_table.TABLE_NAMES) == set(TABLES)


def _start_capture(store, name, pidfile):
    """A real `nsightlab capture NAME --no-nsys -- python ...` whose workload writes its pid
    and sleeps, started as a separate process the way a shell starts a background job (and
    README's test command under a loaded CI): with SIGINT ignored."""
    code = (f"import os, time; open({str(pidfile)!r}, 'w').write(str(os.getpid())); "
            "time.sleep(60)")
    proc = subprocess.Popen([sys.executable, "-m", "nsightlab.cli", "capture", name, "--store",
                             str(store), "--no-nsys", "--quiet", "--", sys.executable, "-c", code],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    deadline = time.monotonic() + 120  # a start on a loaded 2-core machine; polled, not slept
    while time.monotonic() < deadline and proc.poll() is None:
        if pidfile.exists() and pidfile.read_text():
            return proc, int(pidfile.read_text())
        time.sleep(0.05)
    proc.kill()
    raise AssertionError(proc.communicate())


def _gone(pid: int) -> bool:
    for _ in range(100):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_one_capture_per_name_and_signals_leave_nothing(tmp_path, sig):
    """While a capture runs, a second one of the same name is refused in one line; a signal
    stops the workload (its whole process group) and leaves nothing in the store."""
    store = tmp_path / "store"
    proc, workload = _start_capture(store, "x", tmp_path / "pid")
    second = subprocess.run([sys.executable, "-m", "nsightlab.cli", "capture", "x", "--store",
                             str(store), "--no-nsys", "--quiet", "--", "true"],
                            capture_output=True, text=True, timeout=60)
    assert second.returncode == 1
    assert "is being made right now by nsightlab pid" in second.stderr, second.stderr
    assert len(second.stderr.strip().splitlines()) == 1
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode != 0 and "Traceback" not in err, err
    assert _gone(workload), "the workload outlived the capture"
    assert list(store.iterdir()) == [], list(store.iterdir())


@pytest.mark.skipif(not HAS_NSYS, reason="nsys is not installed")
def test_repeat_makes_each_run_its_own_report_with_the_machine_around_it(tmp_path, cache_dir):
    """Real nsys, a CPU program run 3 times: three reports (runs/2, runs/3 after the first),
    the machine's state before and after each in the manifest; where neither NVML nor
    nvidia-smi exists (this machine) that is said once, not per run."""
    store = tmp_path / "store"
    res = invoke("capture", "r", "--store", str(store), "--repeat", "3", "--trace", "osrt",
                 "--quiet", "--", sys.executable, "-c", "print(sum(range(10**5)))")
    assert res.exit_code == 0, res.output
    m = json.loads((store / "r" / "manifest.json").read_text())
    assert [r["run"] for r in m["runs"]] == [1, 2, 3]
    for r in m["runs"]:
        assert (store / "r" / r["sqlite"]).is_file()
        assert {"time", "host_load", "gpus"} <= set(r["machine_before"])
    assert [s["name"] for s in m["steps"]] == ["nsys", "nsys-2", "nsys-3"]
    if not any(r["machine_before"]["gpus"] for r in m["runs"]):
        assert sum("were not recorded" in x for x in m["messages"]) == 1
    assert nsightlab.diff.__module__  # the capture's runs are what a diff takes as one side
    from nsightlab.comparison.diff import runs_of
    assert [Path(str(x)).name for x in runs_of(str(store / "r"))] == ["r", "report.sqlite",
                                                                       "report.sqlite"]


@pytest.mark.skipif(not HAS_NSYS, reason="nsys is not installed")
def test_several_configurations_interleave_their_runs(tmp_path):
    """Real nsys: NAME,NAME with {name} in the command makes one capture per name, their runs
    interleaved (the workloads write the order they ran in: a b a b); a name's command is
    its own."""
    store, order = tmp_path / "store", tmp_path / "order"
    code = f"open({str(order)!r}, 'a').write('{{name}} ')"
    res = invoke("capture", "a,b", "--store", str(store), "--repeat", "2", "--trace", "osrt",
                 "--quiet", "--", sys.executable, "-c", code)
    assert res.exit_code == 0, res.output
    assert order.read_text().split() == ["a", "b", "a", "b"]
    for name in "ab":
        m = json.loads((store / name / "manifest.json").read_text())
        assert [r["run"] for r in m["runs"]] == [1, 2] and m["command"][-1].endswith(f"'{name} ')")
    dry = invoke("capture", "x,y", "--dry-run", "--trtexec", "m_{name}.onnx", "--precision",
                 "{name}")
    assert dry.exit_code == 2 and "--precision x: give one of" in dry.output, dry.output
    assert invoke("capture", "a,a", "--no-nsys", "--", "true").exit_code == 2


def test_machine_state_from_a_stand_in_nvidia_smi(tmp_path, monkeypatch):
    """nvidia-smi cannot exist here: a stand-in prints what the real one prints for these
    queries (two GPUs, one process on GPU 1), with NVML made unavailable."""
    from nsightlab.capture import machine

    body = r'''
import sys
q = " ".join(sys.argv[1:])
if "--query-gpu=index,uuid" in q:
    print("0, GPU-aaa\n1, GPU-bbb")
elif "--query-gpu=" in q:
    print("0, NVIDIA H200, 1980, 3201, 121.50, 35\n1, NVIDIA H200, 1410, 3201, 690.10, 71")
elif "--query-compute-apps" in q:
    print("GPU-bbb, 4242")
'''
    fake_tool(tmp_path / "bin", "nvidia-smi", body)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setitem(sys.modules, "pynvml", None)  # NVML absent: nvidia-smi is read
    monkeypatch.setattr(machine.os, "getloadavg", lambda: (0.5, 0.5, 0.5))  # an idle host
    s = machine.state()
    assert s["source"] == "nvidia-smi" and len(s["gpus"]) == 2
    assert s["gpus"][0]["sm_mhz"] == 1980 and s["gpus"][1]["power_w"] == 690.1
    assert s["gpus"][1]["processes"] == [4242] and s["gpus"][0]["processes"] == []
    words = machine.words(s, s)
    assert len(words) == 1 and "GPU 1 ran 1 other process" in words[0]
    assert machine.summary([s, s])["sm_mhz"] == 1980
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    none = machine.state()
    assert none["source"] is None and none["gpus"] == [] and "nvidia-smi" in none["why"]
