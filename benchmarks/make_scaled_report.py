#!/usr/bin/env python3
"""Make a large Nsight Systems SQLite export by tiling a real one in time.

The activity of the source report (kernels, CUDA API calls, memcpys, memsets, syncs, NVTX
ranges, OS runtime calls) is copied COPIES times; copy k is shifted by k * (span of the
source) in time and its correlation ids by k * (max id + 1), so launch->kernel links stay
consistent inside each copy. Everything else (StringIds, TARGET_INFO_*, ENUM_*, META_DATA_*)
is copied once.

With ``--processes P`` the copies are shared among P processes (COPIES / P each): process p
runs its copies at the same times as process 0 (on the same GPUs: they share them) but p ns
later (two processes' records never start at the same nanosecond in a real trace; identical
starts made every kernel a duplicate candidate for the reader's check), its rows under pid +
p * 5,000,000 (above any Linux pid; globalPid/globalTid and processId shifted; PROCESSES,
ThreadNames and the CUDA stream and context tables get its rows too), its correlation ids
apart from every other copy's, and each copy's rows of all processes written in time order
(as nsys before 2025.6 exports them). The issue-48 benchmark: two processes of 4M kernels
against one of 8M.

The result is a real report's shape at a larger scale: use it for speed and memory
benchmarks, never as evidence of what a GPU did.

usage: make_scaled_report.py SOURCE.sqlite[.xz] OUT.sqlite COPIES [--processes P]
"""
import argparse
import lzma
import os
import shutil
import sqlite3
import sys
import tempfile

SCALED = [
    "CUPTI_ACTIVITY_KIND_KERNEL",
    "CUPTI_ACTIVITY_KIND_RUNTIME",
    "CUPTI_ACTIVITY_KIND_MEMCPY",
    "CUPTI_ACTIVITY_KIND_MEMSET",
    "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
    "NVTX_EVENTS",
    "OSRT_API",
]
TIME_COLS = ("start", "end", "timestamp")
CORR_COLS = ("correlationId",)
#: columns that carry the process: nsys's global ids (PID in bits 24..47) and plain pids
GLOBAL_COLS = ("globalPid", "globalTid")
PID_COLS = ("processId", "pid")
#: the tables that say which processes there are (copied once per process)
PID_STEP = 5_000_000
PER_PROCESS = ("PROCESSES", "ThreadNames", "TARGET_INFO_CUDA_STREAM",
               "TARGET_INFO_CUDA_CONTEXT_INFO")


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("src")
    ap.add_argument("out")
    ap.add_argument("copies", type=int)
    ap.add_argument("--processes", type=int, default=1)
    a = ap.parse_args()
    src, out, copies, procs = a.src, a.out, a.copies, a.processes
    if os.path.exists(out):
        sys.exit(f"refusing to overwrite {out}")
    if copies % procs:
        sys.exit(f"{copies} copies do not split into {procs} processes evenly")
    if src.endswith(".xz"):
        tmp = tempfile.NamedTemporaryFile(suffix=".sqlite", delete=False)
        with lzma.open(src) as f, tmp:
            shutil.copyfileobj(f, tmp)
        src = tmp.name
    db = sqlite3.connect(out)
    db.execute("ATTACH DATABASE ? AS src", (f"file:{src}?mode=ro",))
    tables = [r[0] for r in db.execute(
        "SELECT name FROM src.sqlite_master WHERE type='table'")]
    # span and id range of the source, over every scaled table present
    lo, hi, maxcorr = None, None, 0
    for t in SCALED:
        if t not in tables:
            continue
        cols = [c[1] for c in db.execute(f"PRAGMA src.table_info({t})")]
        tcol = "start" if "start" in cols else "timestamp"
        ecol = "end" if "end" in cols else tcol
        lo_t, hi_t = db.execute(f"SELECT min({tcol}), max(coalesce({ecol},{tcol})) FROM src.{t}").fetchone()
        if lo_t is not None:
            lo = lo_t if lo is None else min(lo, lo_t)
            hi = hi_t if hi is None else max(hi, hi_t)
        if "correlationId" in cols:
            m = db.execute(f"SELECT max(correlationId) FROM src.{t}").fetchone()[0]
            maxcorr = max(maxcorr, m or 0)
    span = (hi - lo) + 1000 if lo is not None else 0
    per = copies // procs
    for t in tables:
        sql = db.execute("SELECT sql FROM src.sqlite_master WHERE name=?", (t,)).fetchone()[0]
        db.execute(sql)
        cols = [c[1] for c in db.execute(f"PRAGMA src.table_info({t})")]
        qcols = ",".join(f'"{c}"' for c in cols)
        if t not in SCALED and not (procs > 1 and t in PER_PROCESS):
            db.execute(f"INSERT INTO main.{t} SELECT * FROM src.{t}")
            continue
        def select(p: int, k: int) -> str:
            exprs = []
            for c in cols:
                if c in TIME_COLS and t in SCALED:
                    exprs.append(f'"{c}" + {k * span + p} AS "{c}"')
                elif c in CORR_COLS and t in SCALED:
                    exprs.append(f'"{c}" + {(p * per + k) * (maxcorr + 1)} AS "{c}"')
                elif c in GLOBAL_COLS and p:
                    exprs.append(f'"{c}" + {(p * PID_STEP) << 24} AS "{c}"')
                elif c in PID_COLS and p:
                    exprs.append(f'"{c}" + {p * PID_STEP} AS "{c}"')
                else:
                    exprs.append(f'"{c}"')
            return f"SELECT {','.join(exprs)} FROM src.{t}"

        if t in SCALED:  # copy by copy, every process's rows of it in time order
            at = next((c for c in ("start", "timestamp") if c in cols), None)
            for k in range(per):
                union = " UNION ALL ".join(select(p, k) for p in range(procs))
                order = f' ORDER BY "{at}"' if at and procs > 1 else ""
                db.execute(f"INSERT INTO main.{t} ({qcols}) {union}{order}")
        else:
            for p in range(procs):
                db.execute(f"INSERT INTO main.{t} ({qcols}) {select(p, 0)}")
        db.commit()
        if t in SCALED:
            print(f"{t}: x{copies}" + (f" ({procs} processes)" if procs > 1 else ""),
                  file=sys.stderr)
    for (sql,) in db.execute("SELECT sql FROM src.sqlite_master WHERE type='index' AND sql IS NOT NULL").fetchall():
        db.execute(sql)
    db.commit()
    db.execute("DETACH DATABASE src")
    db.close()


if __name__ == "__main__":
    main()
