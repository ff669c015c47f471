"""Shared by the benchmarks: the scaled report, and measuring code in a fresh process."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SHARED = HERE.parent.parent / "shared"
DEFAULT_WORK = Path(os.environ.get("TMPDIR", "/tmp")) / "nsightlab-bench"
DEFAULT_SOURCE = SHARED / "fixtures/nsys/h200-launchbound.sqlite.xz"


def scaled_report(work: Path, copies: int, source: Path = DEFAULT_SOURCE) -> Path:
    """``source`` tiled ``copies`` times in time (built once, with make_scaled_report.py)."""
    work.mkdir(parents=True, exist_ok=True)
    report = work / f"launchbound-x{copies}.sqlite"
    if not report.exists():
        print(f"building {report} ({copies} copies of {source.name}) ...", file=sys.stderr)
        subprocess.run([sys.executable, str(SHARED / "bench/make_scaled_report.py"),
                        str(source), str(report), str(copies)], check=True)
    return report


def in_fresh_process(code: str, *args: str) -> dict:
    """Run ``code`` (which prints one JSON line last) in a new interpreter; return that JSON.
    Timing and peak RSS are measured inside the child, so each case starts cold in memory."""
    p = subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True,
                       text=True)
    if p.returncode:
        raise SystemExit(f"benchmark child failed (exit {p.returncode}):\n{p.stderr[-2000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])




#: Python source for a child process: ``tree_peak()`` -> (peak RSS, peak PSS) in MB of this
#: process plus all its descendants (the reader worker processes), sampled every 50 ms by a
#: thread started on import. RSS counts shared library pages once per process; PSS splits
#: them among the processes sharing them (the memory the machine really gives up).
TREE_SAMPLER = r"""
import os, threading, time
_peak = [0.0, 0.0]
def _tree(pid):
    out = [pid]
    for t in os.listdir(f"/proc/{pid}/task"):
        try:
            kids = open(f"/proc/{pid}/task/{t}/children").read().split()
        except OSError:
            kids = []
        for k in kids:
            out += _tree(int(k))
    return out
def _field(path, name):
    try:
        for line in open(path):
            if line.startswith(name):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0
def _sample():
    while True:
        pids = _tree(os.getpid())
        rss = sum(_field(f"/proc/{p}/status", "VmRSS:") for p in pids)
        pss = sum(_field(f"/proc/{p}/smaps_rollup", "Pss:") for p in pids)
        _peak[0], _peak[1] = max(_peak[0], rss), max(_peak[1], pss)
        time.sleep(0.05)
threading.Thread(target=_sample, daemon=True).start()
def tree_peak():
    return round(_peak[0]), round(_peak[1])
"""
