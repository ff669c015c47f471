"""Trim a capture's SQLite export to the tables nsightlab's iteration tests read, then xz it:

    python trim.py IN.sqlite OUT.sqlite.xz [LAST]

The OS runtime trace (OSRT_API, OSRT_CALLCHAINS: half of these files) and other tables no
test reads are dropped. With LAST (an NVTX range name, e.g. iter23), the activity after that
range's end (kernels, copies, memsets, syncs, API calls, NVTX ranges) is dropped too: a few
iterations instead of all; LAST api:NAME:K cuts at the end of the K-th call of CUDA API NAME
(from 0; negative K counts from the end), for loops without NVTX ranges. Every row kept stays as nsys wrote it."""
import lzma
import shutil
import sqlite3
import sys
import tempfile
from pathlib import Path

DROP = ("OSRT_API", "OSRT_CALLCHAINS", "SCHED_EVENTS", "COMPOSITE_EVENTS", "SAMPLING_CALLCHAINS",
        "PROFILER_OVERHEAD", "CUDA_CALLCHAINS")

src, out = Path(sys.argv[1]), Path(sys.argv[2])
with tempfile.TemporaryDirectory() as tmp:
    work = Path(tmp) / src.name
    shutil.copyfile(src, work)
    db = sqlite3.connect(work)
    for t in DROP:
        db.execute(f"DROP TABLE IF EXISTS {t}")
    if len(sys.argv) > 3 and sys.argv[3].startswith("api:"):  # api:NAME:K, K-th call (from 0;
        _, api, k = sys.argv[3].split(":")  # negative: from the end) of CUDA API NAME
        end = [r[0] for r in db.execute(
            "SELECT r.end FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON r.nameId = s.id"
            " WHERE s.value LIKE ? ORDER BY r.start", (api + "%",))][int(k)]
    elif len(sys.argv) > 3:
        end = db.execute("SELECT n.end FROM NVTX_EVENTS n LEFT JOIN StringIds s ON "
                         "n.textId = s.id WHERE coalesce(n.text, s.value) = ?",
                         (sys.argv[3],)).fetchone()[0]
    if len(sys.argv) > 3:
        have = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        for t in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY",
                  "CUPTI_ACTIVITY_KIND_MEMSET", "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
                  "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_CUDA_EVENT", "NVTX_EVENTS"):
            cols = {r[1] for r in db.execute(f"PRAGMA table_info({t})")} if t in have else ()
            at = "start" if "start" in cols else "timestamp" if "timestamp" in cols else None
            if at:
                db.execute(f"DELETE FROM {t} WHERE {at} > ?", (end,))
    db.commit()
    db.execute("VACUUM")
    db.close()
    out.write_bytes(lzma.compress(work.read_bytes(), preset=9 | lzma.PRESET_EXTREME))
print(out, out.stat().st_size)
