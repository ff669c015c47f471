"""The fault suite: damaged and unusual inputs made from a real fixture (tests/faults.py) through
every command, and the numbers nsightlab gives where the damage still allows an answer."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from nsightlab.analysis import completeness
import nsightlab
import nsightlab.recipe_runner as R
from faults import cases, run_all, summary_line
from nsightlab.cli import cli


@pytest.fixture(scope="module")
def fault_cases(sqlite_of, tmp_path_factory):
    src = sqlite_of("h200-vit-fp16")
    return src, {name: (path, kind) for name, path, kind in cases(src, tmp_path_factory.mktemp("faults"))}


def test_every_command_on_every_case(sqlite_of, tmp_path, cache_dir):
    """A clean one-line error naming the file (exit 1) or a result; never a traceback, a
    hang, an unnamed file or a result from an input that cannot give one."""
    tally, problems, n = run_all(sqlite_of("h200-vit-fp16"), tmp_path / "cases")
    print(summary_line(tally, n))
    assert not problems, "\n".join(problems)
    assert n >= 30 and tally.get("error", 0) >= 100 and tally.get("warning", 0) >= 6


@pytest.mark.parametrize("name,left_out", [
    ("null-starts", 10), ("null-ends", 10), ("end-before-start", 10), ("end-at-2^63", 1),
    ("longer-than-trace", 1), ("text-in-start", 1)])
def test_impossible_timestamps_are_left_out_everywhere(name, left_out, fault_cases, cache_dir,
                                                       tmp_path):
    """Rows with a NULL, reversed, out-of-session or non-integer start/end are left out of every
    table read (the same 3110 kernels for every recipe, no negative or absurd durations) and
    counted in the completeness warning of info, JSON and recipe manifests."""
    path, _ = fault_cases[1][name]
    k = nsightlab.open(path).kernels(["start_ns", "end_ns", "duration_ns"])
    assert len(k) == 3120 - left_out
    assert (k["duration_ns"] >= 0).all() and k["duration_ns"].max() < 1e8
    ks = R.run("kernel_sum", path)["kernel_sum"]
    assert ks["instances"].sum() == 3120 - left_out and ks["min_ns"].min() >= 0
    budget = R.run("budget", path)["summary"]
    assert budget["kernels_ns"].iloc[0] < budget["wall_ns"].iloc[0]
    warning = f"{left_out:,} kernels with a start/end that cannot be"
    assert any(warning in w["message"] for w in completeness.check(nsightlab.open(path)))
    info = json.loads(CliRunner().invoke(cli, ["info", str(path), "--json"]).stdout)
    assert any(warning in w["message"] for w in info["warnings"])
    out = tmp_path / "ks"
    assert CliRunner().invoke(cli, ["recipe", "run", "kernel_sum", str(path), "-o", str(out)]).exit_code == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert warning in json.dumps(manifest)


def test_a_kernel_table_that_is_a_view_reads_every_row(fault_cases, cache_dir):
    path, _ = fault_cases[1]["kernel-table-is-view"]
    assert R.run("kernel_sum", path)["kernel_sum"]["instances"].sum() == 3120


def test_all_null_starts_leave_no_kernels_and_say_why(fault_cases, cache_dir):
    path, _ = fault_cases[1]["all-null-starts"]
    res = CliRunner().invoke(cli, ["diff", str(fault_cases[0]), str(path)])
    assert res.exit_code == 1 and "no kernel launches to compare" in res.output
    assert "3,120 kernels with a start/end that cannot be" in CliRunner().invoke(
        cli, ["info", str(path)]).stderr  # once, on stderr


@pytest.mark.parametrize("args,out_name", [
    (["table", "kernels", "{good}", "--format", "csv", "-o", "{out}"], "k.csv"),
    (["table", "kernels", "{good}", "--format", "parquet", "-o", "{out}"], "k.parquet"),
    (["report", "{good}", "--html", "{out}"], "r.html"),
    (["diff", "{good}", "{good}", "--html", "{out}"], "d.html"),
])
def test_a_full_disk_leaves_no_partial_file(args, out_name, sqlite_of, cache_dir, tmp_path,
                                            monkeypatch):
    """ENOSPC injected after the first bytes of an output: exit 1 with the user's file named,
    and neither the output nor a temporary file left in the folder."""
    import builtins
    import errno

    real_open = builtins.open
    outdir = tmp_path / "out"
    outdir.mkdir()
    target = outdir / out_name

    class Full:
        def __init__(self, f):
            self.f, self.n = f, 0

        def write(self, data):
            self.n += len(data)
            if self.n > 100:
                raise OSError(errno.ENOSPC, "No space left on device")
            return self.f.write(data)

        def __getattr__(self, name):
            return getattr(self.f, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

    def fake_open(file, mode="r", *a, **kw):
        f = real_open(file, mode, *a, **kw)
        if "w" in mode and str(file).startswith(str(outdir)):
            return Full(f)
        return f

    good = str(sqlite_of("h200-vit-fp16"))
    CliRunner().invoke(cli, ["info", good])  # caches built before the disk "fills"
    monkeypatch.setattr(builtins, "open", fake_open)
    res = CliRunner().invoke(cli, [a.format(good=good, out=target) for a in args])
    assert res.exit_code == 1, res.output
    assert res.exception is None or isinstance(res.exception, SystemExit)
    assert f"{target}: No space left on device" in res.output
    assert list(outdir.iterdir()) == [], list(outdir.iterdir())


def test_no_cache_leaves_nothing_behind(tmp_path):
    """--no-cache on a compressed export: the decompressed SQLite goes to a private temporary
    folder removed at exit; no cache folder, no temporary file is left anywhere."""
    import os
    import subprocess
    import sys

    src = Path(__file__).parent / "data" / "scenarios" / "nsys" / "h100-compute.sqlite.xz"
    env = {**os.environ, "NSIGHTLAB_CACHE_DIR": str(tmp_path / "cache"),
           "TMPDIR": str(tmp_path / "tmp")}
    (tmp_path / "tmp").mkdir()
    proc = subprocess.run([sys.executable, "-m", "nsightlab.cli", "recipe", "run", "kernel_sum",
                           str(src), "--no-cache"], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "ampere" in proc.stdout or "nvjet" in proc.stdout or "gemm" in proc.stdout
    assert not (tmp_path / "cache").exists()
    assert list((tmp_path / "tmp").iterdir()) == []


def test_a_read_only_capture_keeps_its_cache_elsewhere(tmp_path, cache_dir, monkeypatch):
    """A capture folder the user cannot write (a read-only checkout; simulated, as the tests
    may run as root, for whom every folder is writable): its compressed export is unpacked and
    its tables cached under the cache root, and nothing is written inside the capture."""
    import os
    import shutil as sh

    from nsightlab.read.locate import locate

    cap = tmp_path / "vit-fp16"
    sh.copytree(Path(__file__).parent.parent / "captures" / "examples" / "vit-fp16", cap)
    before = sorted(p.relative_to(cap) for p in cap.rglob("*"))
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: False if str(p).startswith(str(cap))
                        else real_access(p, mode))
    loc = locate(cap, cache_dir=cache_dir)
    assert not str(loc.sqlite).startswith(str(cap)) and not str(loc.cache_root).startswith(str(cap))
    assert str(loc.cache_root).startswith(str(cache_dir))
    r = nsightlab.open(cap, cache_dir=cache_dir)
    assert len(r.kernels(["start_ns"])) > 1000
    assert sorted(p.relative_to(cap) for p in cap.rglob("*")) == before


def test_kernels_without_an_api_trace_are_no_traceback(sqlite_of, tmp_path, cache_dir):
    """An export with kernels but no CUPTI_ACTIVITY_KIND_RUNTIME (issue 27's IndexError):
    report works and warns why its windows are the NVTX ranges alone; diff says, in one line,
    that there are no launches to compare and why."""
    import sqlite3

    path = tmp_path / "noapi.sqlite"
    path.write_bytes(sqlite_of("h200-vit-fp16").read_bytes())
    with sqlite3.connect(path) as c:
        c.execute("DROP TABLE CUPTI_ACTIVITY_KIND_RUNTIME")
    res = CliRunner().invoke(cli, ["report", str(path)])
    assert res.exit_code == 0, res.output
    assert "no CUDA API call is recorded" in res.output
    res = CliRunner().invoke(cli, ["diff", str(path), str(sqlite_of("h200-vit-fp16"))])
    assert res.exit_code == 1 and res.output.count("\n") == 1
    assert "no CUPTI_ACTIVITY_KIND_RUNTIME table" in res.output


@pytest.mark.parametrize("engine", ["numpy", "duckdb"])
def test_sync_gaps_does_not_depend_on_row_order(engine, sqlite_of, tmp_path, monkeypatch):
    """nsys 2025.6 exports rows out of time order: the API table of a real export shuffled
    gives the same gaps, each following the same call (the previous call on its thread by
    time, not by row)."""
    import sqlite3

    monkeypatch.setenv("NSIGHTLAB_ENGINE", engine)
    monkeypatch.setenv("NSIGHTLAB_CACHE_DIR", str(tmp_path / "cache"))
    src = sqlite_of("h200-vit-fp16-syncy")
    shuffled = tmp_path / "shuffled.sqlite"
    shuffled.write_bytes(src.read_bytes())
    with sqlite3.connect(shuffled) as c:
        t = "CUPTI_ACTIVITY_KIND_RUNTIME"
        c.execute(f"CREATE TABLE s AS SELECT * FROM {t} ORDER BY (rowid * 7919) % 10007")
        c.execute(f"DROP TABLE {t}")
        c.execute(f"ALTER TABLE s RENAME TO {t}")
    a = R.run("sync_gaps", src)["gaps"]
    b = R.run("sync_gaps", shuffled)["gaps"]
    key = ["start_ns", "end_ns"]
    a, b = a.sort_values(key).reset_index(drop=True), b.sort_values(key).reset_index(drop=True)
    assert len(a) and len(a) == len(b)
    for col in ("follows", "follows_end_ns", "cause", "next_api"):
        assert (a[col].astype(str) == b[col].astype(str)).all(), col


def test_gpu_metrics_are_read_in_their_units_and_impossible_samples_left_out(sqlite_of,
                                                                            tmp_path, cache_dir):
    """nsys 2025.3 records clocks labelled [MHz] in Hz: they are read in MHz. The H200 fixture
    holds 44 samples stamped 0.09-0.19 ms before the session's zero (nsys starts sampling just
    before it): real samples, kept, and no warning. A share above 100% put into a copy is left
    out and said."""
    import sqlite3

    from nsightlab.analysis import completeness

    src = sqlite_of("h200-vit-fp16-gpumetrics")
    g = nsightlab.open(src).gpu_metrics()
    clocks = g[g["metric"].astype(str).str.contains(r"\[MHz\]")]["value"]
    assert clocks.between(300, 3000).all()
    early = g[g["timestamp_ns"] < 0]["timestamp_ns"]
    assert len(early) == 44 and early.between(-200_000, -90_000).all()
    assert not [w for w in completeness.check(nsightlab.open(src))
                if w["check"] == "gpu_metrics_impossible"]
    bad = tmp_path / "bad.sqlite"
    bad.write_bytes(src.read_bytes())
    with sqlite3.connect(bad) as c:
        c.execute("UPDATE GPU_METRICS SET value = 250 WHERE rowid IN (SELECT g.rowid FROM "
                  "GPU_METRICS g JOIN TARGET_INFO_GPU_METRICS m ON g.typeId = m.typeId AND "
                  "g.metricId = m.metricId WHERE m.metricName LIKE 'SMs Active%' "
                  "AND g.timestamp > 0 LIMIT 10)")
    r = nsightlab.open(bad)
    assert len(r.gpu_metrics()) == len(g) - 10
    assert any("10 GPU-metrics samples" in w["message"] for w in completeness.check(r))
