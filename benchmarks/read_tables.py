"""Benchmark: reading kernels() and cuda_api() of a large report, cold and warm.

Builds (once) the 8M-kernel / 16M-API-call report by tiling the launch-bound fixture 100x with
../shared/bench/make_scaled_report.py, then measures each case in a fresh Python process
(time and peak RSS of that process, read from getrusage):

  cold, cached    first read: SQLite -> Parquet cache -> DataFrame (what a first `open` does)
  cold, no cache  SQLite -> DataFrame, nothing written
  warm            from the Parquet cache

usage: python benchmarks/read_tables.py [--copies N] [--work DIR] [--source FILE]
Prints a table; targets (issue #2, 2-core machine): cold <= 10 s and <= 1 GB peak RSS for both
tables, warm <= 0.5 s for (start_ns, end_ns, name) of all kernels.
"""
from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from common import DEFAULT_SOURCE, DEFAULT_WORK, in_fresh_process, scaled_report

CHILD = r"""
import json, resource, sys, time
import nsightlab
path, cache_dir, no_cache, what = sys.argv[1], sys.argv[2], sys.argv[3] == "1", sys.argv[4]
t0 = time.perf_counter()
r = nsightlab.open(path, cache=not no_cache, cache_dir=cache_dir)
rows = {}
if what == "both":
    rows["kernels"] = len(r.kernels())
    rows["cuda_api"] = len(r.cuda_api())
elif what == "both_kept":
    k = r.kernels(); a = r.cuda_api(); rows = {"kernels": len(k), "cuda_api": len(a)}
elif what == "kernel_cols":
    rows["kernels"] = len(r.kernels(["start_ns", "end_ns", "name"]))
else:
    rows[what] = len(r.table(what))
dt = time.perf_counter() - t0
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"seconds": dt, "peak_rss_mb": peak, "rows": rows}))
"""


def measure(path: Path, cache_dir: Path, no_cache: bool, what: str) -> dict:
    return in_fresh_process(CHILD, path, cache_dir, "1" if no_cache else "0", what)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--copies", type=int, default=100)
    ap.add_argument("--work", type=Path, default=DEFAULT_WORK)
    ap.add_argument("--source", type=Path, default=DEFAULT_SOURCE)
    args = ap.parse_args()
    report = scaled_report(args.work, args.copies, args.source)
    cache = args.work / "cache"
    rows = []

    def case(label: str, no_cache: bool, what: str, fresh: bool) -> None:
        if fresh:
            shutil.rmtree(cache, ignore_errors=True)
        m = measure(report, cache, no_cache, what)
        rows.append((label, what, m["seconds"], m["peak_rss_mb"], m["rows"]))
        print(f"  {label:<16} {what:<12} {m['seconds']:7.2f} s {m['peak_rss_mb']:8.0f} MB", file=sys.stderr)

    case("cold, cached", False, "kernels", True)
    case("cold, cached", False, "cuda_api", True)
    case("cold, cached", False, "both", True)
    case("cold, no cache", True, "kernels", False)
    case("cold, no cache", True, "cuda_api", False)
    case("warm", False, "kernels", False)
    case("warm", False, "cuda_api", False)
    case("warm", False, "both_kept", False)
    case("warm", False, "kernel_cols", False)

    size = report.stat().st_size / 2**30
    print(f"\nreport: {report} ({size:.2f} GiB)")
    print(f"{'case':<16} {'read':<34} {'time_s':>7} {'peak_rss_mb':>12}  rows")
    names = {"both": "kernels() then cuda_api()", "both_kept": "kernels() + cuda_api(), both kept",
             "kernel_cols": "kernels([start_ns, end_ns, name])"}
    for label, what, s, mb, n in rows:
        print(f"{label:<16} {names.get(what, what + '()'):<34} {s:7.2f} {mb:12.0f}  "
              + ", ".join(f"{k}={v:,}" for k, v in n.items()))


if __name__ == "__main__":
    main()
