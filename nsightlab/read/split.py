"""One process of a report as a report of its own.

A trace of several CUDA processes (a server and its workers, ``torchrun`` ranks, two jobs
sharing a GPU) holds one timeline per process. Every analysis of a run (iterations, kinds,
budget, verdict) is about one process's loop, so each process is read as its own export: a
copy of the SQLite file holding only the rows of that process (tables keyed by ``globalPid``
or ``globalTid``, or ``processId``; the session's, GPUs' and strings' tables whole), kept in
the report's cache beside its tables, and opened as a ``Report`` with its own cache. The
process is one more dimension of the same run model, not a second path through it.

The two big tables (kernels and API calls: ``CUT``) are not copied into SQLite when the whole
report's cache holds them: the copy keeps their schema, empty, and the process's Report takes
their cache entries cut from the whole report's (its rows of that process, part by part: the
export is read once, by the report's reader processes, for every process; copying 8M kernels
and 16M calls into two processes' files took 12.8 s of a 27 s report). What such a Report asks
of those tables in SQL (whether a row holds, counts) goes to the whole report's export with
the process's filter (its store, ``ReadStore.for_pid``, keeps the whole report's). A table
with rows every read leaves out (impossible timestamps) or exact duplicates is copied
instead: those counts are the whole table's, not a process's.
"""
from __future__ import annotations

import re

import os
import sqlite3
import tempfile
from pathlib import Path

from nsightlab.read.report import Report
from nsightlab.read.table_cache import process_root

#: nsightlab tables whose cache entries a process's Report cuts from the whole report's
CUT = ("kernels", "cuda_api")


def of_process(report: Report, pid: int, cut: tuple[str, ...] | None = None) -> Report:
    """The report of process ``pid`` alone (see the module docstring); ``cut``: the tables it
    takes from the whole report's cache (``cuttable``, asked once for several processes)."""
    if report.cache is not None:
        base = process_root(report.cache.root, pid).parent
    else:  # no cache: a private folder for this session
        base = Path(tempfile.mkdtemp(prefix="nsightlab-process-"))
    base.mkdir(parents=True, exist_ok=True)
    cut = cuttable(report) if cut is None else cut
    out = base / (f"pid-{pid}-cut.sqlite" if cut else f"pid-{pid}.sqlite")
    if not out.is_file():
        _write(report, int(pid), out, {report.spec(t).source for t in cut})
    return Report(out, source=report.source, store=report.store.for_pid(int(pid), out, cut))


def cut_tables(report: Report) -> tuple[str, ...]:
    """The tables of ``CUT`` that hold rows, which a process's Report would cut from
    ``report``'s cache (``cuttable`` says whether it can); none without a cache."""
    return () if report.cache is None else tuple(t for t in CUT if report.has_rows(t))


def cuttable(report: Report) -> tuple[str, ...]:
    """The tables of ``CUT`` a process's Report takes from ``report``'s cache (building its
    entries now: the processes' reports read them anyway); none without a cache, or when one
    of them left rows out or held duplicates (then every table is copied)."""
    have = cut_tables(report)
    report.prefetch(list(have))
    if any(m is None or m.dropped or m.duplicates for m in map(report.cache_meta, have)):
        return ()
    return have


def _write(report: Report, pid: int, out: Path, empty: set[str] = frozenset()) -> None:
    """The export of ``report`` with only the rows of process ``pid`` (and of no process),
    written atomically to ``out``: each table created as the export has it and filled with
    its rows of that process (one pass over the export, writing only what the process keeps;
    a copy of the whole file then deleting the other processes' rows wrote it twice and read
    it again); the tables in ``empty`` (source names) created without rows."""
    src = report.path
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
                if kind != "table" or name in empty:
                    continue
                keep = report.db.process_filter(name, pid)
                where = f" WHERE {keep}" if keep else ""
                db.execute(f'INSERT INTO main."{name}" SELECT * FROM src."{name}"{where}')
            db.commit()
            db.execute("DETACH DATABASE src")
        finally:
            db.close()
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)


def of_one_process(report: Report) -> bool:
    """Whether ``report`` is one process's report cut out of a report of several
    (``of_process``'s exports, pid-N.sqlite / pid-N-cut.sqlite): the other processes' GPU
    work is then in the trace, only not in this report."""
    return re.fullmatch(r"pid-\d+(-cut)?\.sqlite", Path(report.path).name) is not None
