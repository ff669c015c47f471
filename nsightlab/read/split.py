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
    """``src`` with only the rows of process ``pid`` (and of no process), written atomically
    to ``out``: each table created as the export has it and filled with its rows of that
    process (one pass over the export, writing only what the process keeps; a copy of the
    whole file then deleting the other processes' rows wrote it twice and read it again)."""
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)
    try:
        db = sqlite3.connect(tmp)
        try:
            db.execute("PRAGMA journal_mode = OFF")
            db.execute("PRAGMA synchronous = OFF")
            db.execute("ATTACH DATABASE ? AS src", (f"file:{src}?mode=ro",))
            made = db.execute("SELECT type, name, sql FROM src.sqlite_master WHERE sql IS NOT "
                              "NULL AND name NOT LIKE 'sqlite_%' ORDER BY type = 'index'").fetchall()
            for kind, name, sql in made:
                db.execute(sql)
                if kind != "table":
                    continue
                cols = {r[1] for r in db.execute(f'PRAGMA src.table_info("{name}")')}
                col = next((c for c in ("globalPid", "globalTid") if c in cols), None)
                if col is not None:
                    p = PID_SQL.format(col=col)
                    where, args = f" WHERE {col} IS NULL OR {p} = 0 OR {p} = ?", (pid,)
                elif "processId" in cols:  # TARGET_INFO_CUDA_STREAM and friends
                    where, args = " WHERE processId = ?", (pid,)
                else:
                    where, args = "", ()
                db.execute(f'INSERT INTO main."{name}" SELECT * FROM src."{name}"{where}', args)
            db.commit()
            db.execute("DETACH DATABASE src")
        finally:
            db.close()
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
