"""Trim a capture's SQLite export for the test set, then xz it:

    python trim.py IN.sqlite OUT.sqlite.xz --last-nvtx step9     # activity after the last
                                                               # end of a range of that name
    python trim.py IN.sqlite OUT.sqlite.xz --truth A.jsonl --keep 20   # after the 20th timed
                                                               # pass of the workload A's truth
    python trim.py IN.sqlite OUT.sqlite.xz --truth A.jsonl --truth B.jsonl --round 0
                                        # workloads.py shared: after round 0's passes together

The OS runtime trace and other tables no test reads are dropped; kernels, copies, memsets,
syncs, API calls and NVTX ranges that start after the cut are deleted. Every row kept stays as
nsys wrote it. Truth times are epoch ns: placed on the trace by TARGET_INFO_SESSION_START_TIME."""
import argparse
import json
import lzma
import shutil
import sqlite3
import tempfile
from pathlib import Path

DROP = ("OSRT_API", "OSRT_CALLCHAINS", "SCHED_EVENTS", "COMPOSITE_EVENTS", "SAMPLING_CALLCHAINS",
        "PROFILER_OVERHEAD", "CUDA_CALLCHAINS")
ACTIVITY = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET",
            "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "CUPTI_ACTIVITY_KIND_RUNTIME",
            "CUPTI_ACTIVITY_KIND_CUDA_EVENT", "CUPTI_ACTIVITY_KIND_GRAPH_TRACE", "NVTX_EVENTS")

ap = argparse.ArgumentParser()
ap.add_argument("src")
ap.add_argument("out")
ap.add_argument("--last-nvtx")
ap.add_argument("--truth", action="append", default=[])
ap.add_argument("--keep", type=int, default=20)
ap.add_argument("--round", type=int, help="with --truth of workloads.py shared: cut where the "
                "last process ended that round's passes together")
a = ap.parse_args()
with tempfile.TemporaryDirectory() as tmp:
    work = Path(tmp) / "x.sqlite"
    shutil.copyfile(a.src, work)
    db = sqlite3.connect(work)
    for t in DROP:
        db.execute(f"DROP TABLE IF EXISTS {t}")
    cut = None
    if a.last_nvtx:
        cut = db.execute("SELECT max(n.end) FROM NVTX_EVENTS n LEFT JOIN StringIds s ON "
                         "n.textId = s.id WHERE coalesce(n.text, s.value) = ?",
                         (a.last_nvtx,)).fetchone()[0]
    if a.truth:
        zero = db.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME").fetchone()[0]
        if a.round is not None:
            ends = [json.loads(l)["end_ns"] for t in a.truth for l in open(t)
                    if '"phase_end"' in l and json.loads(l)["round"] == a.round]
        else:
            ends = [[json.loads(l)["end_ns"] for l in open(t)][a.keep - 1] for t in a.truth]
        cut = max(ends) - zero
    if cut is not None:
        have = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        for t in ACTIVITY:
            cols = {r[1] for r in db.execute(f"PRAGMA table_info({t})")} if t in have else ()
            at = "start" if "start" in cols else "timestamp" if "timestamp" in cols else None
            if at:
                db.execute(f"DELETE FROM {t} WHERE {at} > ?", (cut,))
    db.commit()
    db.execute("VACUUM")
    db.close()
    Path(a.out).write_bytes(lzma.compress(work.read_bytes(), preset=9 | lzma.PRESET_EXTREME))
print(a.out, Path(a.out).stat().st_size // 1024, "KB", "cut at", cut)
