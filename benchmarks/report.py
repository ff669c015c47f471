"""Benchmark: `nsightlab report` cold on the 8M-kernel report, with its NVTX table and without it
(NVTX_EVENTS dropped from a copy: the iterations are then found in the trace).

Each case is the CLI as users run it: `python -m nsightlab report REPORT`, a fresh process with
a fresh cache, imports and output included; the time is the command's wall clock, the memory
the peak RSS of the main process and of its largest reader process. ``--code``
runs other checkouts of the package too (e.g. the commit before a change: ``git archive REV
nsightlab recipes | tar -x -C DIR``), each first on sys.path, side by side in one run.

usage: python benchmarks/report.py [--copies N] [--work DIR] [--code NAME=DIR ...]
Target (issue #25): iteration finding adds at most 10% to `report` cold.
"""
from __future__ import annotations

import argparse
import os
import resource
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from common import DEFAULT_WORK, scaled_report

HERE = Path(__file__).resolve().parent


def without_nvtx(report: Path) -> Path:
    """A copy of ``report`` without its NVTX_EVENTS table (built once)."""
    out = report.with_name(report.stem + "-nonvtx.sqlite")
    if not out.exists():
        tmp = out.with_suffix(".tmp")
        shutil.copyfile(report, tmp)
        with sqlite3.connect(tmp) as c:
            c.execute("DROP TABLE IF EXISTS NVTX_EVENTS")
        tmp.rename(out)
    return out


#: ``python -m nsightlab ARGS`` with the peak RSS of the process and of its reader processes
#: written to stderr's last line on the way out (what the user runs, imports and output
#: included; the wrapper adds one import of runpy)
WRAPPER = r"""
import resource, runpy, sys
sys.path.insert(0, sys.argv.pop(1))  # the checkout to run, before any installed nsightlab
sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in repr(f).lower()]
sys.argv = ["nsightlab", *sys.argv[1:]]
try:
    runpy.run_module("nsightlab", run_name="__main__", alter_sys=True)
finally:
    me = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    print(f"PEAK {me} {kids}", file=sys.stderr)
"""


def run_cli(code: Path, report: Path, cache: Path) -> tuple[float, float, float]:
    """(seconds, peak RSS MB of the main process, of its largest reader process) of one cold
    `nsightlab report`."""
    shutil.rmtree(cache, ignore_errors=True)
    env = {**os.environ, "NSIGHTLAB_CACHE_DIR": str(cache)}
    t = time.perf_counter()
    p = subprocess.run([sys.executable, "-c", WRAPPER, str(code), "report", str(report)], env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seconds = time.perf_counter() - t
    if p.returncode:
        raise SystemExit(f"nsightlab report failed ({code}):\n{p.stderr[-2000:]}")
    peak = next(x for x in reversed(p.stderr.replace("\r", "\n").splitlines())
                if x.startswith("PEAK "))  # progress notes may end the stream
    me, kids = (int(x) / 1024 for x in peak.split()[1:])
    print(f"  {code.name}: {p.stdout.splitlines()[0][:160]}", file=sys.stderr)
    return seconds, me, kids


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--copies", type=int, default=100)
    ap.add_argument("--work", type=Path, default=DEFAULT_WORK)
    ap.add_argument("--source", type=Path, default=None,
                    help="report to tile (default: the shared launch-bound fixture)")
    ap.add_argument("--code", action="append", default=[], metavar="NAME=DIR",
                    help="another checkout to time beside this one")
    args = ap.parse_args()
    report = scaled_report(args.work, args.copies, *([args.source] if args.source else []))
    flat = without_nvtx(report)
    codes = [("this checkout", HERE.parent)] + [
        (c.split("=", 1)[0], Path(c.split("=", 1)[1]).resolve()) for c in args.code]
    rows = []
    for name, code in codes:
        for label, path in (("with NVTX", report), ("without NVTX", flat)):
            rows.append((name, label, *run_cli(code, path, args.work / "report-cache")))
    print(f"\n`nsightlab report` cold, {args.copies} copies of the launch-bound fixture")
    print(f"{'code':<16} {'report':<14} {'seconds':>8} {'main RSS MB':>12} {'reader RSS MB':>14}")
    for name, label, s, me, kids in rows:
        print(f"{name:<16} {label:<14} {s:8.2f} {me:12.0f} {kids:14.0f}")


if __name__ == "__main__":
    main()
