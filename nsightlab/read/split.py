"""One process of a report as a report of its own.

A trace of several CUDA processes (a server and its workers, ``torchrun`` ranks, two jobs
sharing a GPU) holds one timeline per process. Every analysis of a run (iterations, kinds,
budget, verdict) is about one process's loop, so each process is read as its own export: the
same SQLite file, opened with TEMP views that shadow every table keyed by process
(``globalPid``/``globalTid``, or ``processId``) with the rows of that process and of no
process (``ExportDB(process=...)``; the session's, GPUs' and strings' tables whole), and a
cache of its own inside the report's, whose entries are cut from the report's own (its rows
of that process: the export is read once, by the report's reader processes, for every
process). Nothing is copied into SQLite and the user's file is never written. The process is one more dimension of the same run model, not a second path through
it.
"""
from __future__ import annotations

from nsightlab.read.report import Report


def of_process(report: Report, pid: int) -> Report:
    """The report of process ``pid`` alone (see the module docstring)."""
    cache_root = report.cache.root / "_processes" / f"pid-{pid}" \
        if report.cache is not None else None
    return Report(report.path, cache_root=cache_root, source=report.source, process=int(pid),
                  parent=report)
