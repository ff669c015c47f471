"""``nsightlab.open``, kept free of pandas and pyarrow: on a big report not cached yet it
starts the reader processes (``store.ReadStore.start``) before the modules that need those
libraries are imported, so the two start-ups overlap."""
from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nsightlab.read.locate import Location
    from nsightlab.read.report import Report
    from nsightlab.read.store import ReadStore

#: the read store ``start_reading`` began, until ``open`` of its export and cache folder takes
#: it (``_store``): commands reach ``open`` through layers that take a path, not a store
#: (``as_report``, recipes, ``run.report.build``). One at a time, taken once.
_early: "ReadStore | None" = None


def open(path: str | os.PathLike, *, cache: bool | None = None,
         cache_dir: str | os.PathLike | None = None,
         nsys: str | os.PathLike | None = None,
         progress: Callable[[str], None] | None = None,
         prefetch: tuple[str, ...] = ("kernels",), process: int | None = None,
         by_process: bool = False) -> "Report":
    """Open an nsys report: a ``.sqlite`` export, a ``.nsys-rep``/``.qdrep``, a capture
    directory, or the name of a capture in the store (``NSIGHTLAB_STORE`` or ``./captures``).
    (``nsightlab.open`` is ``open_any``: an Nsight Compute report too.)

    Args:
        path: what to open.
        cache: keep materialized tables and results as Parquet (default: on, unless
            ``NSIGHTLAB_NO_CACHE``).
        cache_dir: cache root for files outside a capture (default ``NSIGHTLAB_CACHE_DIR`` or
            ``~/.cache/nsightlab``).
        nsys: nsys executable for exporting ``.nsys-rep`` (default ``NSIGHTLAB_NSYS`` or PATH).
        progress: called with a one-line message before slow steps (exports, first reads of
            tables over a million rows); the CLI prints these to stderr.
        prefetch: the big tables the caller will read (``kernels``, ``cuda_api``): on a big
            report not cached yet, reader processes start reading them at once, while the
            rest of nsightlab is imported. Others are read when asked for.
        process: the pid of one CUDA process of a report of several: that process alone, as
            a report of its own (``nsightlab.read.split``; by name or rank:
            ``nsightlab report --process/--rank``).
        by_process: the caller reads each CUDA process of the report on its own (``nsightlab
            report`` of several): the reader processes that start at once also write each
            process's share of what they read, for that process's own cache.

    Raises:
        NsightlabError: the input cannot be read; the message names the file and the fix.
    """
    from nsightlab.read import trace
    from nsightlab.read.locate import locate

    if cache is None:
        cache = not os.environ.get("NSIGHTLAB_NO_CACHE")
    loc = locate(path, cache=cache, cache_dir=cache_dir, nsys=nsys, progress=progress)
    # reader processes start while pandas and pyarrow are imported below (big, uncached)
    trace.mark("open")
    store = _store(loc)
    store.start(tuple(prefetch), by_process)
    trace.mark("readers started")
    from nsightlab.errors import NsightlabError
    from nsightlab.read.report import Report

    trace.mark("pandas and pyarrow imported")

    try:
        r = Report(loc.sqlite, store=store, source=loc.source, progress=progress)
        if process is None:
            return r
        from nsightlab.read.split import of_process

        pids = set(r.processes["pid"]) if len(r.processes) else set()
        if int(process) not in pids:
            raise NsightlabError(f"{loc.source}: no process {process}; its processes that used "
                                 f"CUDA: {sorted(r.processes.loc[r.processes['uses_cuda'], 'pid'])}")
        return of_process(r, int(process))
    except NsightlabError as e:
        if Path(loc.sqlite) == Path(loc.source) or str(loc.sqlite) not in str(e):
            raise
        # a .sqlite.xz decompressed into the cache: the message names the user's file
        raise type(e)(str(e).replace(str(loc.sqlite), str(loc.source))) from None


def start_reading(path: str | os.PathLike, prefetch: tuple[str, ...] = ("kernels", "cuda_api"),
                  *, cache: bool | None = None, cache_dir: str | os.PathLike | None = None,
                  nsys: str | os.PathLike | None = None,
                  progress: Callable[[str], None] | None = None,
                  by_process: bool = False) -> None:
    """``open``'s first step alone: start the reader processes on ``path``'s big tables now,
    for a command that imports pyarrow or pandas before it opens the report (``recipe run``,
    ``report``, ``diff``): the open then takes the reads over. Nothing without a cache; a
    path that cannot be opened is left for the open to explain."""
    global _early
    from nsightlab.errors import NsightlabError
    from nsightlab.read import trace
    from nsightlab.read.locate import locate

    if cache is False or (cache is None and os.environ.get("NSIGHTLAB_NO_CACHE")):
        return
    try:
        loc = locate(path, cache=True, cache_dir=cache_dir, nsys=nsys, progress=progress)
    except NsightlabError:
        return
    store = _store(loc)
    if store.start(tuple(prefetch), by_process):
        _early = store
        trace.mark("readers started, before the imports")


def _store(loc: "Location") -> "ReadStore":
    """The read store of ``loc``: the one ``start_reading`` began (taken), else a new one."""
    global _early
    from nsightlab.read.store import ReadStore

    if _early is not None and (_early.sqlite, _early.root) == (loc.sqlite, loc.cache_root):
        store, _early = _early, None
        return store
    return ReadStore(loc.sqlite, loc.cache_root)


def as_report(x: "Report | str | os.PathLike", **open_options) -> "Report":
    """``x`` if it is a Report, else ``open(x, **open_options)`` (for functions that take
    either). A path is opened before Report is imported: ``open`` starts the reader
    processes before pandas loads."""
    if isinstance(x, (str, os.PathLike)):
        return open(x, **open_options)
    from nsightlab.read.report import Report

    return x if isinstance(x, Report) else open(x, **open_options)


def open_any(path: str | os.PathLike, **kwargs):
    """``nsightlab.open``: an nsys report as ``open`` opens it (a ``Report``), or an Nsight
    Compute report (``.ncu-rep``, ``.ncu-rep.xz``, or any file that starts as one): its
    ``read.ncu_store.NcuStore`` (``kernels()``, ``metrics()``, ``rules()``), parsed once into
    the cache. Keyword arguments as ``open``'s (``cache``, ``cache_dir``, ``progress`` apply
    to an Nsight Compute report)."""
    from nsightlab.formats.ncu_file import is_ncu

    if is_ncu(path):
        from nsightlab.read.locate import scratch
        from nsightlab.read.ncu_store import NcuStore

        cache = kwargs.get("cache")
        if cache is None:
            cache = not os.environ.get("NSIGHTLAB_NO_CACHE")
        return NcuStore(path, cache_dir=kwargs.get("cache_dir") if cache else scratch(),
                        progress=kwargs.get("progress"))
    return open(path, **kwargs)
