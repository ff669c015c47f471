"""`nsightlab capture --ncu --ncu-mode auto`: ncu profiles the kernels that make up the loop's
time in the nsys trace, each launch configuration once. nsys and ncu cannot run here: stand-in
(faked) executables record their arguments, the faked nsys "exports" a real H200 trace."""
from __future__ import annotations

import json
import re
import sys

import pytest

import nsightlab
from nsightlab.capture import record as cap
from nsightlab.kernels import join

from test_capture import fake_tool, invoke

TRACE = "h200-vit-fp8"

#: a faked tool's start: answers --version with VERSION, logs every other call to $FAKE_LOG
LOGGED = r"""
import json, os, shutil, sys
args = sys.argv[1:]
if args[:1] == ["--version"]:
    print("VERSION")
    sys.exit(0)
with open(os.environ["FAKE_LOG"], "a") as f:
    f.write(json.dumps(["TOOL", *args]) + "\n")
"""
#: a faked nsys: `profile --output=X ...` writes X.nsys-rep, `export ... --output OUT REP`
#: copies the real trace $FAKE_NSYS_SQLITE to OUT
FAKE_NSYS = LOGGED.replace("VERSION", "NVIDIA Nsight Systems version 2025.1.1.1-faked").replace(
    "TOOL", "nsys") + r"""
if args[0] == "profile":
    out = next(a.split("=", 1)[1] for a in args if a.startswith("--output="))
    open(out + ".nsys-rep", "w").write("faked report")
elif args[0] == "export":
    shutil.copyfile(os.environ["FAKE_NSYS_SQLITE"], args[args.index("--output") + 1])
"""
#: a faked ncu: logs its arguments, writes no report
FAKE_NCU = LOGGED.replace(
    "VERSION", "NVIDIA (R) Nsight Compute Command Line Profiler Version 2025.1.1.0 (faked)"
).replace("TOOL", "ncu") + r"""
print("==PROF== faked ncu")
"""


def expected_top(sqlite):
    """The top functions of the trace's loop, as in_loop says, in its order; iterations."""
    with nsightlab.open(sqlite) as r:
        g, _wall, n = join.in_loop(r)
    return list(dict.fromkeys(g.loc[g["top"], "function"])), n


def test_auto_selection_on_the_real_vit_fp8_trace(sqlite_of, cache_dir):
    sqlite = sqlite_of(TRACE)
    functions, n = expected_top(sqlite)
    args, chosen = cap.auto_selection(sqlite)
    assert chosen["kernels"] == functions and chosen["iterations"] == n == 20
    assert 80 <= chosen["share_pct"] < 100
    assert args == ["--kernel-name-base", "function",
                    "--kernel-name", "regex:^(" + "|".join(map(re.escape, functions)) + ")$",
                    "--filter-mode", "per-launch-config", "--launch-count", "1",
                    "--launch-skip", "1"]
    pattern = re.compile(args[3].removeprefix("regex:"))
    assert all(pattern.fullmatch(f) for f in functions)
    assert not pattern.fullmatch("elementwise_kernel_x") and not pattern.fullmatch("kernel")


@pytest.fixture
def fakes(tmp_path, sqlite_of, monkeypatch):
    """Faked nsys and ncu on PATH, the faked export being the real vit-fp8 trace."""
    bin_ = tmp_path / "bin"
    fake_tool(bin_, "nsys", FAKE_NSYS)
    fake_tool(bin_, "ncu", FAKE_NCU)
    log = tmp_path / "calls.jsonl"
    monkeypatch.setenv("FAKE_LOG", str(log))
    monkeypatch.setenv("FAKE_NSYS_SQLITE", str(sqlite_of(TRACE)))
    monkeypatch.setenv("PATH", f"{bin_}:{__import__('os').environ['PATH']}")
    for var in ("NSIGHTLAB_NSYS", "NSIGHTLAB_NCU"):
        monkeypatch.delenv(var, raising=False)
    return lambda: [json.loads(line) for line in log.read_text().splitlines()]


def test_ncu_mode_auto_profiles_the_top_kernels_with_faked_nsys_and_ncu(
        tmp_path, fakes, sqlite_of, cache_dir):
    store = tmp_path / "store"
    res = invoke("capture", "vit", "--store", str(store), "--ncu", "--ncu-mode", "auto",
                 "--ncu-set", "detailed", "--quiet", "--", sys.executable, "-c", "pass")
    assert res.exit_code == 0, res.output
    calls = fakes()
    assert [c[:2] for c in calls] == [["nsys", "profile"], ["nsys", "export"],
                                      ["ncu", "--set"]]  # ncu after the export
    ncu = calls[-1][1:]
    functions, n = expected_top(sqlite_of(TRACE))
    regex = "regex:^(" + "|".join(map(re.escape, functions)) + ")$"
    assert ncu[:2] == ["--set", "detailed"]
    assert ncu[ncu.index("--kernel-name") + 1] == regex
    assert ncu[ncu.index("--kernel-name-base") + 1] == "function"
    assert " --filter-mode per-launch-config --launch-count 1 --launch-skip 1 " in \
        f" {' '.join(ncu)} "
    assert ncu[-3:] == [sys.executable, "-c", "pass"]
    m = json.loads((store / "vit" / "manifest.json").read_text())
    assert m["status"] == "ok"
    assert m["ncu_auto"]["kernels"] == functions and m["ncu_auto"]["iterations"] == n
    assert [s["name"] for s in m["steps"]] == ["nsys", "ncu"]
    line = (f"ncu: profiling {len(functions)} kernels that make up "
            f"{m['ncu_auto']['share_pct']:g}% of the loop's kernel time, one launch per "
            "configuration")
    assert line in res.stderr, res.stderr


def test_ncu_mode_auto_without_a_loop_profiles_every_kernel_with_faked_tools(
        tmp_path, fakes, monkeypatch, cache_dir):
    def no_loop(*a, **k):
        raise ValueError("no iterations")

    monkeypatch.setattr(cap, "auto_selection", no_loop)
    store = tmp_path / "store"
    res = invoke("capture", "v", "--store", str(store), "--ncu", "--ncu-mode", "auto",
                 "--quiet", "--", sys.executable, "-c", "pass")
    assert res.exit_code == 0, res.output
    ncu = fakes()[-1]
    assert ncu[0] == "ncu" and "--kernel-name" not in ncu and "--filter-mode" not in ncu
    notes = [x for x in res.stderr.splitlines() if "no loop" in x]
    assert len(notes) == 1 and "no iterations" in notes[0] and "every kernel" in notes[0]
    m = json.loads((store / "v" / "manifest.json").read_text())
    assert m["ncu_auto"]["kernels"] is None and m["status"] == "ok"


def test_ncu_mode_auto_dry_run_puts_ncu_after_the_export():
    res = invoke("capture", "vit", "--dry-run", "--ncu", "--ncu-mode", "auto", "--", "python",
                 "infer.py")
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert [x.split()[0] for x in lines] == ["[nsys]", "[export]", "[ncu]"]
    assert cap.NCU_AUTO_PLACEHOLDER in lines[2]
    # the default (all) keeps today's plan: ncu right after nsys, no auto selection
    res = invoke("capture", "vit", "--dry-run", "--ncu", "--", "python", "infer.py")
    assert [x.split()[0] for x in res.output.splitlines()] == ["[nsys]", "[ncu]", "[export]"]
    assert "auto" not in res.output


@pytest.mark.parametrize("extra, named", [
    (["--ncu-kernels", "gemm"], "--ncu-kernels"),
    (["--ncu-nvtx", "block3/", "--ncu-count", "5"], "--ncu-nvtx and --ncu-count"),
])
def test_ncu_mode_auto_with_selection_flags_is_a_one_line_usage_error(tmp_path, extra, named):
    res = invoke("capture", "x", "--store", str(tmp_path / "s"), "--ncu", "--ncu-mode", "auto",
                 *extra, "--", "true")
    assert res.exit_code == 1, res.output
    assert len(res.output.strip().splitlines()) == 1 and named in res.output, res.output
    assert not (tmp_path / "s").exists()


def test_ncu_mode_auto_needs_ncu_and_nsys(tmp_path):
    res = invoke("capture", "x", "--store", str(tmp_path / "s"), "--ncu-mode", "auto", "--",
                 "true")
    assert res.exit_code == 1 and "with --ncu" in res.output
    res = invoke("capture", "x", "--store", str(tmp_path / "s"), "--no-nsys", "--ncu",
                 "--ncu-mode", "auto", "--", "true")
    assert res.exit_code == 1 and "--no-nsys" in res.output
