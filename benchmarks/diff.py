"""Benchmark: `nsightlab diff` of the 8M-kernel report against itself.

Each case in a fresh process (time from opening both reports to the finished diff; peak RSS):
  cold         no cache: tables read from SQLite and cached, the run profiled
  tables warm  table cache present, run profile not: the cost of the analysis itself
  warm         everything cached (a repeated diff)

usage: python benchmarks/diff.py [--copies N] [--work DIR]
Targets (issue #5, 2-core machine): <= 30 s cold, <= 5 s warm, <= 1.5 GB peak RSS.
"""
from __future__ import annotations

import argparse
import shutil
from pathlib import Path

from common import DEFAULT_WORK, in_fresh_process, scaled_report

CHILD = r"""
import json, resource, sys, time
import nsightlab
import nsightlab.comparison.diff  # imports outside the timing: `import nsightlab` alone is lazy
path, cache = sys.argv[1], sys.argv[2]
t = time.perf_counter()
d = nsightlab.diff(nsightlab.open(path, cache_dir=cache), nsightlab.open(path, cache_dir=cache))
print(json.dumps({"seconds": time.perf_counter() - t, "iterations": d.headline["a_iterations"],
                  "kernels_per_iteration": d.headline["a_kernels"],
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--copies", type=int, default=100)
    ap.add_argument("--work", type=Path, default=DEFAULT_WORK)
    args = ap.parse_args()
    report = scaled_report(args.work, args.copies)
    cache = args.work / "diff-cache"
    shutil.rmtree(cache, ignore_errors=True)
    rows = [("cold (no cache)", in_fresh_process(CHILD, report, cache))]
    for d in cache.glob("*/results"):  # derived results, not the tables
        shutil.rmtree(d)
    rows.append(("tables warm", in_fresh_process(CHILD, report, cache)))
    rows.append(("warm", in_fresh_process(CHILD, report, cache)))
    print(f"\nreport: {report} ({report.stat().st_size / 2**30:.2f} GiB), diffed against itself")
    print(f"{'case':<16} {'time_s':>7} {'peak_rss_mb':>12} {'tree_pss_mb':>12}  iterations  "
          "kernels/iteration")
    for label, m in rows:
        print(f"{label:<16} {m['seconds']:7.2f} {m['peak_rss_mb']:12.0f} {m['tree_pss_mb']:12.0f}  "
              f"{m['iterations']:>10}  "
              f"{m['kernels_per_iteration']:>17.0f}")


if __name__ == "__main__":
    main()
