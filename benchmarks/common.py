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
#: the launch-bound fixture and the tiling script: from ../shared, or (on the GPU machine,
#: where only the checkout travels) the repository's copy and .device-kit
DEFAULT_SOURCE = next((p for p in (SHARED / "fixtures/nsys/h200-launchbound.sqlite.xz",
                                   HERE.parent / "tests/data/nsys/h200-launchbound.sqlite.xz")
                       if p.exists()), SHARED / "fixtures/nsys/h200-launchbound.sqlite.xz")
#: the tiler: this folder's copy (it tiles several processes too)
TILER = HERE / "make_scaled_report.py"


def scaled_report(work: Path, copies: int, source: Path = DEFAULT_SOURCE,
                  processes: int = 1) -> Path:
    """``source`` tiled ``copies`` times in time (built once, with make_scaled_report.py);
    with ``processes``, the copies shared among that many processes running at once."""
    work.mkdir(parents=True, exist_ok=True)
    tail = f"-p{processes}" if processes > 1 else ""
    report = work / f"launchbound-x{copies}{tail}.sqlite"
    if not report.exists():
        print(f"building {report} ({copies} copies of {source.name}"
              f"{f', {processes} processes' if processes > 1 else ''}) ...", file=sys.stderr)
        subprocess.run([sys.executable, str(TILER), str(source), str(report), str(copies),
                        "--processes", str(processes)], check=True)
    return report


def in_fresh_process(code: str, *args: str) -> dict:
    """Run ``code`` (which prints one JSON line last) in a new interpreter; return that JSON,
    with ``tree_rss_mb`` and ``tree_pss_mb`` added: the peak RSS and PSS of the child and all
    its descendants (the reader worker processes), sampled from this process (RSS every 50 ms,
    PSS every 250 ms).
    Timing and the child's own peak RSS are measured inside the child, so each case starts
    cold in memory. (The sampler once ran in the child, as a thread that took the GIL from
    the work it measured: the three recipes at 8M kernels, tables cached, on the 2-core
    development machine took 10.66, 9.25 and 12.57 s with it, 8.64, 8.86 and 11.43 s
    without.)"""
    import threading

    p = subprocess.Popen([sys.executable, "-c", code, *map(str, args)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    peak = [0.0, 0.0]
    done = threading.Event()

    def sample() -> None:
        tick = 0
        while not done.wait(0.05):
            pids = _tree(p.pid)
            peak[0] = max(peak[0], sum(_field(f"/proc/{q}/status", "VmRSS:") for q in pids))
            if tick % 5 == 0:  # PSS walks the page tables of every process: 4 times a second
                peak[1] = max(peak[1], sum(_field(f"/proc/{q}/smaps_rollup", "Pss:")
                                           for q in pids))
            tick += 1

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out, err = p.communicate()
    done.set()
    sampler.join()
    if p.returncode:
        raise SystemExit(f"benchmark child failed (exit {p.returncode}):\n{err[-2000:]}")
    return {**json.loads(out.strip().splitlines()[-1]),
            "tree_rss_mb": round(peak[0]), "tree_pss_mb": round(peak[1])}


def _tree(pid: int) -> list[int]:
    """``pid`` and its descendants (gone processes are skipped)."""
    out = [pid]
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for t in tasks:
        try:
            kids = open(f"/proc/{pid}/task/{t}/children").read().split()
        except OSError:
            kids = []
        for k in kids:
            out += _tree(int(k))
    return out


def _field(path: str, name: str) -> float:
    """Field ``name`` of a /proc status-like file, in MB (0 when the process is gone)."""
    try:
        for line in open(path):
            if line.startswith(name):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0
