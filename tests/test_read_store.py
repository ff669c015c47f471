"""One read store per export and cache folder (``nsightlab.read.store``): the reads under way
live on it, not in the read layer's modules, and a process's view shares it."""
import sys
from pathlib import Path

import nsightlab
from nsightlab.read import split
from nsightlab.read.report import Report
from nsightlab.read.store import ReadStore, Started
from nsightlab.read.reader import TableReader


def _held(value, depth=0):
    """Everything a module global holds, one container deep (keys and values)."""
    yield value
    if depth < 2 and isinstance(value, dict):
        for k, v in value.items():
            yield from _held(k, depth + 1)
            yield from _held(v, depth + 1)
    elif depth < 2 and isinstance(value, (list, tuple, set, frozenset)):
        for v in value:
            yield from _held(v, depth + 1)


def test_no_read_under_way_is_kept_in_a_module(sqlite_of, tmp_path, by_processes):
    """After two reports are opened (their reads started at open, one early), no module of the
    read layer holds a read under way, a store, a reader or a report, nor any of their
    exports' or cache folders' paths: each report's store holds its own."""
    from nsightlab.read.opener import start_reading

    paths = [sqlite_of("h200-launchbound"), sqlite_of("h200-vit-fp16")]
    start_reading(paths[0], ("kernels",), cache_dir=tmp_path)
    reports = [nsightlab.open(p, cache_dir=tmp_path, prefetch=("kernels",)) for p in paths]
    assert reports[0].store.started  # the early start's reads, taken over by the open
    for r in reports:
        assert r.store.reader is r._reader and r._reader.store is r.store
        r.kernels(["start_ns"])
    named = {str(p) for r in reports for p in (r.path, r.path.resolve(), r.store.root)}
    for name, module in list(sys.modules.items()):
        if not name.startswith("nsightlab.read"):
            continue
        for key, value in vars(module).items():
            if isinstance(value, type) or callable(value) or key.startswith("__"):
                continue
            for held in _held(value):
                assert not isinstance(held, (Started, ReadStore, TableReader, Report)), \
                    f"{name}.{key} holds {held!r}"
                assert not (isinstance(held, (str, Path)) and str(held) in named), \
                    f"{name}.{key} holds {held!r}"
    for r in reports:
        r.close()


def test_a_process_view_shares_the_store_and_holds_no_other_reader(tmp_path):
    """A process's view (``split.of_process``) reads through a store of its own that keeps
    the whole report's store (``ReadStore.for_pid``); neither the view nor its reader holds
    the whole report or its reader."""
    path = Path(__file__).parent / "data" / "procs" / "nsys" / "st-mix3.sqlite.xz"
    whole = nsightlab.open(path, cache_dir=tmp_path)
    pid = int(whole.processes.loc[whole.processes["uses_cuda"], "pid"].iloc[0])
    view = split.of_process(whole, pid)
    assert view.store.whole is whole.store and view.store.pid == pid
    assert view.store.cut == ("kernels", "cuda_api")
    for holder in (view, view._reader, view.store):
        for value in vars(holder).values():
            assert value is not whole and value is not whole._reader
    assert len(view.kernels(["start_ns"])) == int((whole.kernels(["pid"])["pid"] == pid).sum())
