"""Benchmark: where the time budget's out-of-core steps spend their time, on tables cached.

On the scaled report (as ``benchmarks/cli.py``; its tables are read into the cache first),
in this process: the join of the GPU operations to their launch calls (``StreamedOps``), each
pass's sorted stream drained alone, and each pass whole (the launch-order pass; the
start-order pass with nothing beside it). The difference between a pass and its stream is
the NumPy work of the pass.

usage: python benchmarks/budget_passes.py [--copies N] [--work DIR]
"""
from __future__ import annotations

import argparse
import os
import sys
import time

from common import DEFAULT_WORK, scaled_report


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--copies", type=int, default=100)
    ap.add_argument("--work", type=type(DEFAULT_WORK), default=DEFAULT_WORK)
    args = ap.parse_args()
    report = scaled_report(args.work, args.copies)
    os.environ.setdefault("NSIGHTLAB_CACHE_DIR", str(args.work / "passes-cache"))
    import nsightlab
    from nsightlab.analysis import budget, budget_stream, engine

    r = nsightlab.open(report)
    r.prefetch(["kernels", "cuda_api", "nvtx"])

    def timed(label: str, f):
        t0 = time.perf_counter()
        out = f()
        print(f"{label:<34} {time.perf_counter() - t0:6.3f} s", flush=True)
        return out

    def drain(db, sql: str) -> int:
        n = 0
        for b in db.stream(sql, 1 << 20):
            n += len(b.column(0).to_numpy())
        return n

    print(f"report: {report}, {len(os.sched_getaffinity(0))} cores")
    with engine.Engine(r) as db:
        db.want_launches(("start_ns", "end_ns", "device_id", "name"),
                         ("start_ns", "end_ns", "tid", "name"))  # as launch_compute asks
        ops = timed("join", lambda: budget_stream.StreamedOps(r, db))
        iters = budget.ranges(r)[0]
        timed("launch-order stream alone", lambda: drain(
            db, "SELECT device_id, api_start, api_row, end_ns, tbl FROM bops "
                "WHERE api_start IS NOT NULL ORDER BY api_start"))
        timed("launch-order pass", lambda: ops._launch_pass(iters))
        start, end = budget.windows(iters, ops.gpu_end(iters))
        timed("start-order stream alone", lambda: drain(
            db, "SELECT device_id, start_ns, end_ns, part, api_start, coalesce(api_row, -1), "
                "tbl, row, pid FROM bops ORDER BY start_ns"))
        db.beside_start_pass(lambda side: None)  # nothing beside it
        timed("start-order pass", lambda: ops.budgets(start, end, ops.syncs()))


if __name__ == "__main__":
    sys.exit(main())
