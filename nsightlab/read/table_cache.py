"""Parquet cache of materialized tables.

The first read of a table streams it from SQLite into Parquet files (one per parallel reader);
later reads load only the requested columns. An entry is a folder ``<root>/<table>/`` holding
``part-N.parquet`` and a ``meta.json`` written last; it is trusted only when meta.json names the
same table version and the same source file identity (path, size, mtime), when its parts are
exactly the files it lists with the sizes and row counts it recorded, and when every part's own
footer names the same source (a part copied from another report's cache is not). Every page
carries a CRC that readers verify (``READ``): a flipped byte fails the read, and the reader
drops and rebuilds the entry. A stale or damaged entry is deleted and rebuilt. Entries are built
in a temporary folder and renamed into place, so an interrupted build leaves nothing
half-written behind; temporary folders of builds that were killed are removed by later runs.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import NamedTuple, TypeVar

#: version of the table contract (``nsightlab.read.tables``): bump it whenever a contract or a
#: conversion there changes. It is part of every cache key. Kept here, not in tables.py, so
#: that cached answers are found without importing pandas or pyarrow.
TABLE_VERSION = 12  # 12: a GPU row without a globalPid is of the process that launched it

META = "meta.json"
T = TypeVar("T")
#: keyword arguments for every read of a cache part: page CRCs verified
READ = {"page_checksum_verification": True}
#: a temporary build folder older than this belongs to a run that was killed
STALE_TMP_S = 3600


@functools.cache
def code_fingerprint() -> str:
    """Changes whenever nsightlab's code (or its table version) changes: derived results
    cached under it (recipe outputs, run profiles) are recomputed after an upgrade or edit.
    Once per process."""
    h = hashlib.sha1(str(TABLE_VERSION).encode())
    for f in code_files():
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


def code_files() -> list[Path]:
    """Every module of the nsightlab package (all its layers, not only this one's)."""
    return sorted(Path(__file__).resolve().parent.parent.rglob("*.py"))


#: cache entries whose part footers were checked in this process: (folder, meta.json mtime)
_VERIFIED: set[tuple[str, int]] = set()


def default_root() -> Path:
    """``NSIGHTLAB_CACHE_DIR``, else ``$XDG_CACHE_HOME/nsightlab``, else ``~/.cache/nsightlab``."""
    env = os.environ.get("NSIGHTLAB_CACHE_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "nsightlab"


_PID_TMP = re.compile(r"^\..+\.(\d+)\.tmp(\.sqlite)?$")
#: temporary build folders: ``.<name>-<pid>-<random>`` (``build_dir``)
_PID_DIR = re.compile(r"^\..+-(\d+)-[^-]+$")


def build_dir(parent: Path, name: str) -> Path:
    """A new hidden temporary folder in ``parent`` for building entry ``name``; it carries
    this process's id, so that a later run removes it at once if this one is killed."""
    return Path(tempfile.mkdtemp(prefix=f".{name}-{os.getpid()}-", dir=parent))


def remove_stale(folder: Path) -> None:
    """Remove what killed runs left in ``folder``: ``.NAME.PID.tmp`` files and build folders
    (``build_dir``: table builds, DuckDB's spill folders) of processes that are gone, and
    other hidden folders older than ``STALE_TMP_S``. Never fails."""
    try:
        entries = list(folder.glob(".*"))
    except OSError:
        return
    now = time.time()
    for e in entries:
        try:
            m = _PID_TMP.match(e.name)
            d = _PID_DIR.match(e.name)
            if m and e.is_file() and not alive(int(m.group(1))):
                e.unlink()
            elif e.is_dir() and (not alive(int(d.group(1))) if d  # a live run's: kept
                                 else now - e.stat().st_mtime > STALE_TMP_S):
                shutil.rmtree(e, ignore_errors=True)
        except OSError:
            pass


def alive(pid: int) -> bool:
    """Whether process ``pid`` exists (someone else's counts; a zombie too)."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # someone else's process: leave its file alone
    return True


def identity(path: Path) -> dict:
    st = path.stat()
    return {"path": str(path.resolve()), "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def keyed_dir(root: Path, source: Path) -> Path:
    """Cache folder for ``source``: a hash of its identity and the table version."""
    ident = identity(source)
    key = hashlib.sha1(json.dumps([ident, TABLE_VERSION]).encode()).hexdigest()[:16]
    return root / f"{source.stem[:40]}-{key}"


def process_root(root: Path, pid: int) -> Path:
    """Where the report cached under ``root`` keeps process ``pid``'s own export and cache
    (``read.split``)."""
    return root / "_processes" / f"pid-{pid}"


class TableCache:
    """Parquet entries for one source file, under ``root``. ``cut``: entries whose rows were
    read from another export, ``whole`` (a process's tables cut from its whole report's: their
    parts and meta.json name that export, which they are checked against)."""

    def __init__(self, root: Path, source: Path, cut: tuple[str, ...] = (),
                 whole: Path | None = None):
        self.root = root
        self.source = source
        self.ident = identity(source)
        self._cut = {t: identity(whole) for t in cut} if whole is not None else {}

    def ident_of(self, table: str) -> dict:
        """The identity of the export entry ``table``'s rows come from (a table's later
        columns, ``<table>+``, come from the same one)."""
        return self._cut.get(table.rstrip("+"), self.ident)

    def files(self, table: str) -> list[Path] | None:
        """Part files of a valid entry, or None (missing, stale or damaged: then removed)."""
        meta = self.meta(table)
        return None if meta is None else [self.root / table / p.file for p in meta.parts]

    def meta(self, table: str) -> "EntryMeta | None":
        """meta.json of a valid entry of ``table``, or None (missing, stale or damaged: then
        removed)."""
        import pyarrow as pa  # here, not at the top: cached answers are served without it

        d = self.root / table
        try:
            meta = EntryMeta.load(d / META)
            files = [d / p.file for p in meta.parts]
            ok = (meta.table_version == TABLE_VERSION and meta.source == self.ident_of(table)
                  and {f.name for f in d.glob("part-*.parquet")} == {f.name for f in files}
                  and all(f.stat().st_size == p.size for f, p in zip(files, meta.parts))
                  and self._footers_agree(d, files, meta.parts, self.ident_of(table)))
        except (OSError, ValueError, KeyError, TypeError, pa.ArrowException):
            ok = False
        if not ok:
            if d.exists():
                self.drop(table)
            return None
        return meta

    def _footers_agree(self, d: Path, files: list[Path], parts: tuple["Part", ...],
                       ident: dict) -> bool:
        """Each part's footer: the rows meta.json recorded, and this report as its source
        (checked once per entry and process: footers are small, but not free)."""
        import pyarrow.parquet as pq

        key = (str(d), (d / META).stat().st_mtime_ns)
        if key in _VERIFIED:
            return True
        for f, p in zip(files, parts):
            md = pq.ParquetFile(f, **READ).metadata
            source = (md.metadata or {}).get(b"nsightlab_source")
            if md.num_rows != p.rows or source is None or json.loads(source) != ident:
                return False
        _VERIFIED.add(key)
        return True

    def drop(self, table: str) -> None:
        shutil.rmtree(self.root / table, ignore_errors=True)

    def build(self, table: str, fill: Callable[["Parts"], tuple[int, T]],
              schema: "pa.Schema", extra: Callable[[], "EntryMeta"] | None = None) -> T:
        """Create the entry: ``fill(parts)`` writes the parts (``parts(i)`` opens part ``i``
        here; other processes write ``parts.path(i)`` with ``part_writer``) and returns (row
        count, payload); the payload (e.g. the table just read) is handed back to the caller.
        ``extra()`` adds facts learnt while filling to meta.json (rows left out)."""
        self.root.mkdir(parents=True, exist_ok=True)
        tmp = build_dir(self.root, table)
        parts_ = Parts(tmp, schema, self.ident_of(table))
        try:
            rows, payload = fill(parts_)
            parts_.close()
            self.commit(table, tmp, rows, extra() if extra else EntryMeta())
        except BaseException:
            parts_.close(quiet=True)
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return payload

    def commit(self, table: str, folder: Path, rows: int, facts: "EntryMeta") -> None:
        """Make ``folder`` (a ``build_dir`` holding the finished parts) the entry of
        ``table``, with what its read learnt (``facts``): meta.json written last, then the
        folder renamed into place."""
        import pyarrow.parquet as pq

        files = sorted(folder.glob("part-*.parquet"), key=lambda f: int(f.stem[5:]))
        parts = tuple(Part(f.name, f.stat().st_size, pq.ParquetFile(f).metadata.num_rows)
                      for f in files)
        meta = replace(facts, table_version=TABLE_VERSION, source=self.ident_of(table),
                       rows=rows, parts=parts)
        (folder / META).write_text(meta.dump(table))
        self.drop(table)
        os.replace(folder, self.root / table)


class Part(NamedTuple):
    """One part file of a cache entry: its name, bytes and rows."""
    file: str
    size: int
    rows: int


@dataclass(frozen=True)
class EntryMeta:
    """A cache entry's meta.json, read and written here alone: what the entry holds (its
    export's identity, table version, rows, parts) and what its read learnt (rows left out as
    impossible, the duration limit they were checked against, the positions of the exact
    duplicates left out, whether the rows are in start order; None: not known)."""
    source: dict | None = None
    table_version: int | None = None
    rows: int = 0
    parts: tuple[Part, ...] = ()
    dropped: int | None = None
    limit: int | None = None
    duplicate_rows: tuple[int, ...] = ()
    in_start_order: bool | None = None

    @property
    def duplicates(self) -> int:
        return len(self.duplicate_rows)

    @classmethod
    def load(cls, path: Path) -> "EntryMeta":
        m = json.loads(path.read_text())
        return cls(m["source"], m["table_version"], m["rows"],
                   tuple(Part(p["file"], p["size"], p["rows"]) for p in m["parts"]),
                   m.get("dropped"), m.get("limit"), tuple(m.get("duplicate_rows", ())),
                   m.get("in_start_order"))

    def dump(self, table: str) -> str:
        m = {"table": table, **asdict(self), "parts": [p._asdict() for p in self.parts],
             "duplicates": self.duplicates}
        if self.in_start_order is None:
            del m["in_start_order"]
        return json.dumps(m, indent=1)


class Parts:
    """The parts of an entry being built in ``folder``: ``parts(i)`` opens part ``i`` for
    writing here; ``path(i)`` is where another process writes it (``part_writer``)."""

    def __init__(self, folder: Path, schema: "pa.Schema", ident: dict):
        self.folder, self.schema, self.ident = folder, schema, ident
        self.writers: dict[int, object] = {}

    def path(self, i: int) -> Path:
        return self.folder / f"part-{i}.parquet"

    def __call__(self, i: int) -> "pq.ParquetWriter":
        self.writers[i] = part_writer(self.path(i), self.schema, self.ident)
        return self.writers[i]

    def close(self, quiet: bool = False) -> None:
        for w in self.writers.values():
            try:
                w.close()
            except Exception:
                if not quiet:
                    raise
        self.writers = {}


#: columns whose row groups carry min/max: DuckDB skips row groups by them (the time budget
#: joins operations and calls in windows of correlation ids), and a table's extent is read
#: off them (``extent``)
STATISTICS = ("correlation_id", "start_ns", "end_ns")


def part_column(path: Path, column: str) -> np.ndarray:
    """One column of one cache part file as a NumPy array (nulls, which the cache does not
    hold in timestamp columns, as 0)."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    col = pq.ParquetFile(path, **READ).read(columns=[column]).column(0)
    return (pc.fill_null(col, 0) if col.null_count else col).to_numpy()


def part_columns(files: list[Path], column: str):
    """``part_column`` of each of ``files``, in order, read a few parts ahead on threads (one
    at a time, 16 parts of 8M kernels took 0.39 s on 2 cores; the whole column at once 0.12 s,
    but that holds it whole); memory holds at most ``AHEAD`` parts."""
    return _read_ahead(files, lambda f: part_column(f, column), AHEAD)


def part_tables(files: list[Path], columns: list[str], ahead: int = 4):
    """``columns`` of each of ``files`` (cache parts of one table, in order) as a list of
    NumPy arrays per part (a column with nulls as float with NaN, as Arrow gives it), read
    ``ahead`` parts ahead on threads: a table in row order without holding it whole."""
    import pyarrow.parquet as pq

    def read(f: Path) -> list[np.ndarray]:
        t = pq.ParquetFile(f, **READ).read(columns=columns)
        return [t.column(i).to_numpy() for i in range(len(columns))]
    return _read_ahead(files, read, ahead)


def _read_ahead(files: list[Path], read, ahead: int):
    """``read(f)`` of each of ``files``, in order, up to ``ahead`` of them at once on threads."""
    from collections import deque
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(ahead) as pool:
        pending = deque()
        for f in files:
            pending.append(pool.submit(read, f))
            if len(pending) >= ahead:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()


#: cache parts ``part_columns`` reads ahead
AHEAD = 8


def _group_statistics(files: list[Path], columns: tuple[str, ...]):
    """(part, row group index, its metadata, the statistics of each of ``columns`` (None where
    a group has none)) of every row group of cache parts, in order: metadata only."""
    import pyarrow.parquet as pq

    for f in files:
        part = pq.ParquetFile(f, **READ)
        names = part.schema_arrow.names
        for g in range(part.metadata.num_row_groups):
            group = part.metadata.row_group(g)
            yield part, g, group, [group.column(names.index(c)).statistics for c in columns]


def extent(files: list[Path], lo: str = "start_ns", hi: str = "end_ns") -> tuple | None:
    """(min of ``lo``, max of ``hi``) over cache parts, from their row groups' statistics
    (a row group without them is read); None when no row has both."""
    import pyarrow.compute as pc

    mins, maxs = [], []
    for part, g, _group, stats in _group_statistics(files, (lo, hi)):
        if all(s is not None and s.has_min_max for s in stats):
            mins.append(stats[0].min)
            maxs.append(stats[1].max)
        else:
            got = part.read_row_group(g, columns=[lo, hi])
            mins.append(pc.min(got.column(lo)).as_py())
            maxs.append(pc.max(got.column(hi)).as_py())
    mins, maxs = [v for v in mins if v is not None], [v for v in maxs if v is not None]
    return (int(min(mins)), int(max(maxs))) if mins and maxs else None


def id_ranges(files: list[Path] | None, column: str):
    """(min, max, non-null rows) of ``column`` per row group of cache parts, as three int64
    arrays, from the statistics alone; None when a group has none (or no files)."""
    import numpy as np

    if files is None:
        return None
    out = []
    for _part, _g, group, (st,) in _group_statistics(files, (column,)):
        rows = group.num_rows - (st.null_count if st is not None and st.has_null_count else 0)
        if not rows:
            continue
        if st is None or not st.has_min_max:
            return None
        out.append((st.min, st.max, rows))
    return tuple(np.array(c, np.int64).reshape(-1) for c in zip(*out)) if out else (
        np.empty(0, np.int64),) * 3


def part_writer(path: Path, schema: "pa.Schema", ident: dict) -> "pq.ParquetWriter":
    """A Parquet writer for one cache part of the report ``ident``: its footer names the
    report, every page carries a CRC. Dictionary-encodes only the string columns (trying it on
    every integer column triples write time for nothing) and delta-encodes the integers
    (timestamps and ids mostly grow): on the 16M-call API table that wrote 22% faster, read
    33% faster and was 3x smaller than plain lz4 pages."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    dict_cols = [f.name for f in schema if pa.types.is_dictionary(f.type)]
    int_encoding = {f.name: "DELTA_BINARY_PACKED" for f in schema if pa.types.is_integer(f.type)}
    tagged = schema.with_metadata({"nsightlab_source": json.dumps(ident)})
    stats = [c for c in STATISTICS if c in schema.names]
    return pq.ParquetWriter(path, tagged, compression="lz4", write_statistics=stats,
                            use_dictionary=dict_cols, column_encoding=int_encoding,
                            write_page_checksum=True)
