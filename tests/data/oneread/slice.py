"""Cut a slice out of a capture's SQLite export, the way a viewer or another tool exports a
window of a longer trace:

    python slice.py IN.sqlite OUT.sqlite START_S LENGTH_S

Every activity row (kernels, copies, memsets, syncs, CUDA API calls, CUDA events, NVTX ranges)
that starts outside [START_S, START_S + LENGTH_S) seconds after the session's start is dropped;
the rows kept stay as nsys wrote them (a row that starts inside and ends after the window is
kept whole). The OS runtime tables are dropped. Used to make the short multi-GPU slices of
issue 62 from whole captures."""
import shutil
import sqlite3
import sys

src, out, start, length = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
shutil.copyfile(src, out)
db = sqlite3.connect(out)
have = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
for t in ("OSRT_API", "OSRT_CALLCHAINS", "SCHED_EVENTS", "COMPOSITE_EVENTS",
          "SAMPLING_CALLCHAINS", "PROFILER_OVERHEAD", "CUDA_CALLCHAINS"):
    db.execute(f"DROP TABLE IF EXISTS {t}")
lo, hi = int(start * 1e9), int((start + length) * 1e9)
for t in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY",
          "CUPTI_ACTIVITY_KIND_MEMSET", "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
          "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_CUDA_EVENT", "NVTX_EVENTS",
          "CUPTI_ACTIVITY_KIND_GRAPH_TRACE", "GPU_METRICS"):
    cols = {r[1] for r in db.execute(f"PRAGMA table_info({t})")} if t in have else set()
    col = next((c for c in ("start", "timestamp") if c in cols), None)
    if col:
        db.execute(f"DELETE FROM {t} WHERE {col} < ? OR {col} >= ?", (lo, hi))
db.commit()
db.execute("VACUUM")
db.close()
