"""Benchmark: the floor under the three cold recipes, the work no analysis can avoid.

On the scaled report (as ``benchmarks/cli.py``), each case a fresh process on a fresh cache:

  start          ``python -c "import numpy, pandas, pyarrow, duckdb"``: a command's interpreter
                 and the imports every cold analysis needs
  read kernels   ``nsightlab.open`` + reading the kernel table into the cache (the reader
                 processes started before the imports, as the CLI does), nothing computed
  read cuda_api  the same for the API table (the kernel table already cached)
  served         ``nsightlab recipe run kernel_sum`` answered from the cache: a command's
                 fixed cost (start, look-up, output, exit)

and the same reads with half the readers (``NSIGHTLAB_READERS``), to show whether the readers
are bound by cores or by something they share (memory bandwidth, SMT siblings).

The three recipes cold can be no faster than ``read kernels + read cuda_api + 2 x served``:
kernel_sum must read the kernels and launch_compute the calls (each paying its own start,
which overlaps the reads at best), and sync_gaps pays at least a command's fixed cost. Dividing
NVIDIA's time by that floor bounds the ratio any design built on these reads can reach.

usage: python benchmarks/floor.py [--copies N] [--work DIR] [--no-nsys]
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

from cli import byte_compiled, command
from common import DEFAULT_WORK, in_fresh_process, scaled_report
from recipes import run_nsys

#: reads ``argv[2]``'s tables named in ``argv[3:]`` into the cache at ``argv[1]``, the readers
#: started first; one JSON line: seconds from interpreter start, peak RSS
READ = r"""
import json, os, resource, sys, time
t0 = time.perf_counter()
cache, path, tables = sys.argv[1], sys.argv[2], tuple(sys.argv[3:])
os.environ["NSIGHTLAB_CACHE_DIR"] = cache
from nsightlab.read.opener import start_reading
start_reading(path, tables)
import nsightlab
r = nsightlab.open(path)
r.prefetch(list(tables))
print(json.dumps({"seconds": time.perf_counter() - t0,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""

IMPORTS = r"""
import json, resource, time
t0 = time.perf_counter()
import numpy, pandas, pyarrow, duckdb
print(json.dumps({"seconds": time.perf_counter() - t0,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--copies", type=int, default=100)
    ap.add_argument("--work", type=Path, default=DEFAULT_WORK)
    ap.add_argument("--no-nsys", action="store_true")
    args = ap.parse_args()
    report = scaled_report(args.work, args.copies)
    byte_compiled()
    cores = len(os.sched_getaffinity(0))
    print(f"report: {report} ({report.stat().st_size / 2**30:.2f} GiB), {cores} cores")
    print(f"{'case':<34} {'time_s':>7} {'main_rss_mb':>12} {'tree_pss_mb':>12}", flush=True)

    def show(label: str, m: dict) -> float:
        print(f"{label:<34} {m['seconds']:7.2f} {m['peak_rss_mb']:12.0f} "
              f"{m.get('tree_pss_mb', 0):12.0f}", flush=True)
        return m["seconds"]

    start = show("start (imports)", in_fresh_process(IMPORTS))
    reads = {}
    for n in (None, max(1, cores // 2)):
        if n is not None:
            os.environ["NSIGHTLAB_READERS"] = str(n)
        cache = args.work / "floor-cache"
        shutil.rmtree(cache, ignore_errors=True)
        label = "" if n is None else f" ({n} readers)"
        k = show(f"read kernels{label}", in_fresh_process(READ, cache, report, "kernels"))
        a = show(f"read cuda_api{label}", in_fresh_process(READ, cache, report, "cuda_api"))
        reads[n] = (k, a)
        os.environ.pop("NSIGHTLAB_READERS", None)
    cache = args.work / "floor-served"
    shutil.rmtree(cache, ignore_errors=True)
    out = args.work / "floor-out.txt"
    command(["recipe", "run", "kernel_sum", str(report)], out, cache)
    served = show("served kernel_sum", command(["recipe", "run", "kernel_sum", str(report)],
                                               out, cache))
    k, a = reads[None]
    floor = k + a + 2 * served
    print(f"\nfloor of the three cold recipes: {k:.2f} + {a:.2f} + 2 x {served:.2f} = "
          f"{floor:.2f} s (imports alone: {start:.2f} s a command)")
    total = run_nsys(report, args.work, args.no_nsys)
    if total:
        print(f"\nnsys / floor: {total / floor:.1f}x at most, for any design on these reads "
              f"(the issue asks for 20x on 16 cores)")


if __name__ == "__main__":
    sys.exit(main())
