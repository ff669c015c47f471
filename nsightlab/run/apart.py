"""One process's run report, built in an interpreter of its own (``run.report._start_apart``).

Started as ``python -m nsightlab.run.apart OUT`` while the whole report's big tables
are read, with its arguments pickled on stdin (the whole report's export, cache folder and
source, the pid, the label): it imports what the report needs, then waits for a second
message, the tables cut from the whole report's cache (``run.report._go``; stdin closed
instead: it ends). It then reopens that process's Report from the files the parent wrote
(its export, its cache entries) and writes the pickled ``RunReport``, or the error, to OUT,
which the parent reads once this interpreter has ended.
A fresh interpreter, not multiprocessing's spawn: spawn re-runs the user's main script in the
child (a script or notebook without an ``if __name__ == "__main__"`` guard would fail), as the
reader processes (``read.workers``) avoid too.
"""
from __future__ import annotations

import pickle
import sys
from pathlib import Path


def build(path: str, cache_root: str, source: str, pid: int, label: str, cut: tuple):
    from nsightlab.run.report import _one
    from nsightlab.read import split
    from nsightlab.read.report import Report

    whole = Report(Path(path), cache_root=Path(cache_root), source=Path(source))
    return _one(split.of_process(whole, pid, cut), label, True)


def main() -> None:
    out = Path(sys.argv[1])
    try:
        args = pickle.load(sys.stdin.buffer)
        import nsightlab.run.report  # noqa: F401  (while the parent reads)

        cut = pickle.load(sys.stdin.buffer)
    except (EOFError, KeyboardInterrupt):  # not wanted (no GPU work), or the parent stopped
        return
    from nsightlab.read import trace

    trace.mark(f"apart: the report of pid {args[3]}")
    try:
        result = ("ok", build(*args, cut))
    except BaseException as e:  # handed to the parent, which raises it
        result = ("error", e)
    out.write_bytes(pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL))  # read once
    # this interpreter has ended


if __name__ == "__main__":
    main()
