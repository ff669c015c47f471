"""One process of a report as a report of its own.

A trace of several CUDA processes (a server and its workers, ``torchrun`` ranks, two jobs
sharing a GPU) holds one timeline per process. Every analysis of a run (iterations, kinds,
budget, verdict) is about one process's loop, so each process is read as its own export: a
copy of the SQLite file holding only the rows of that process (tables keyed by ``globalPid``
or ``globalTid``; the session's, GPUs' and strings' tables whole), kept in the report's cache
beside its tables, and opened as a ``Report`` with its own cache. The process is one more
dimension of the same run model, not a second path through it.
"""
from __future__ import annotations

import os
import sqlite3
import tempfile
from pathlib import Path

from nsightlab.read.report import Report

#: the pid bits of nsys's globalPid/globalTid (HW:8 VM:8 PID:24 TID:24)
PID_SQL = "(({col} >> 24) & 16777215)"


def of_process(report: Report, pid: int) -> Report:
    """The report of process ``pid`` alone (see the module docstring)."""
    if report.cache is not None:
        base = report.cache.root / "_processes"
        cache_root = base / f"pid-{pid}"
    else:  # no cache: a private folder for this session
        base = Path(tempfile.mkdtemp(prefix="nsightlab-process-"))
        cache_root = None
    base.mkdir(parents=True, exist_ok=True)
    out = base / f"pid-{pid}.sqlite"
    if not out.is_file():
        _write(report.path, int(pid), out)
    return Report(out, cache_root=cache_root, source=report.source)


def _write(src: Path, pid: int, out: Path) -> None:
    """``src`` with the rows of other processes deleted, written atomically to ``out``."""
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    try:
        with sqlite3.connect(f"file:{src}?mode=ro", uri=True) as a, sqlite3.connect(tmp) as b:
            a.backup(b)
        db = sqlite3.connect(tmp)
        try:
            tables = [r[0] for r in db.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'")]
            for t in tables:
                cols = {r[1] for r in db.execute(f'PRAGMA table_info("{t}")')}
                col = next((c for c in ("globalPid", "globalTid") if c in cols), None)
                if col is not None:
                    p = PID_SQL.format(col=col)
                    db.execute(f'DELETE FROM "{t}" WHERE {col} IS NOT NULL AND {p} <> 0 '
                               f"AND {p} <> ?", (pid,))
                elif "processId" in cols:  # TARGET_INFO_CUDA_STREAM and friends
                    db.execute(f'DELETE FROM "{t}" WHERE processId <> ?', (pid,))
            db.commit()
        finally:
            db.close()
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
