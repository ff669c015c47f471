"""Real Nsight Systems end to end: profile a small Python program with NVTX ranges, then open
the .nsys-rep (nsightlab exports it with the local nsys). Skips where nsys is absent."""
from __future__ import annotations

import shutil
import subprocess
import sys

import pytest
from click.testing import CliRunner

import nsightlab
from nsightlab.cli import cli

pytestmark = pytest.mark.skipif(shutil.which("nsys") is None, reason="nsys is not installed")

WORKLOAD = """
import time, nvtx
for i in range(4):
    with nvtx.annotate(f"iter{i}", domain="demo"):
        for j in range(2):
            with nvtx.annotate("step"):
                time.sleep(0.005)
"""


@pytest.fixture(scope="module")
def profiled(tmp_path_factory):
    pytest.importorskip("nvtx")
    d = tmp_path_factory.mktemp("nsys")
    (d / "w.py").write_text(WORKLOAD)
    proc = subprocess.run(["nsys", "profile", "-t", "nvtx,osrt", "--sample=none",
                           "--cpuctxsw=none", "-o", str(d / "run"), sys.executable, str(d / "w.py")],
                          capture_output=True, text=True, timeout=300)
    rep = d / "run.nsys-rep"
    assert rep.is_file(), proc.stdout + proc.stderr
    return rep


def test_open_a_real_nsys_rep_exports_it_into_the_cache(profiled, cache_dir):
    r = nsightlab.open(profiled)
    assert r.nsys_version and r.schema_version
    n = r.nvtx()
    iters = n[n["name"].astype(str).str.startswith("demo:iter")]
    assert sorted(iters["name"].astype(str)) == [f"demo:iter{i}" for i in range(4)]
    assert (iters["depth"] == 0).all()
    steps = n[n["name"] == "step"]
    assert len(steps) == 8 and (steps["depth"] == 1).all()
    assert (steps["duration_ns"] >= 5_000_000).all()
    # exported into the cache, nothing written beside the user's report
    assert sorted(p.name for p in profiled.parent.iterdir()) == ["run.nsys-rep", "w.py"]
    assert list(cache_dir.rglob("run.sqlite"))


def test_an_up_to_date_sibling_sqlite_is_used(profiled, cache_dir, tmp_path):
    rep = tmp_path / "run.nsys-rep"
    shutil.copyfile(profiled, rep)
    subprocess.run(["nsys", "export", "--type", "sqlite", "-o", str(tmp_path / "run.sqlite"),
                    str(rep)], check=True, capture_output=True, timeout=300)
    assert nsightlab.open(rep).path == tmp_path / "run.sqlite"


def test_cli_table_on_a_nsys_rep(profiled, cache_dir):
    res = CliRunner().invoke(cli, ["table", "nvtx", str(profiled), "--columns", "name,depth",
                                   "--format", "csv"])
    assert res.exit_code == 0, res.output
    assert res.stdout.splitlines()[0] == "name,depth"  # progress notes go to stderr
    assert "demo:iter0,0" in res.output and "step,1" in res.output
