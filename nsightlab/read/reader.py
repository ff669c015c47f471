"""Reading the tables of one export: from SQLite, through the Parquet cache, into Arrow or pandas.

Every read goes through ``TableReader._cached``, the one policy for the cache:

1. a valid cache entry is read (only the columns asked for);
2. an entry that fails to read is dropped and the table is read again from SQLite, which
   rebuilds it — a damaged cache is never trusted and never fatal;
3. without an entry the SQLite read streams into a new entry (built aside, renamed into
   place) and hands back what was asked for on the way;
4. a cache folder that cannot be written (read-only, full disk) turns the cache off for this
   reader, with one progress note, and SQLite is read directly from then on.

Big activity tables are read by ``readers()`` threads (one per available core, capped by
``NSIGHTLAB_READERS``) over rowid ranges, each
converting its batches to the column contract (``nsightlab.read.tables``), writing its own cache
part and copying into preallocated DataFrame columns (``nsightlab.read.frames``).
"""
from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from nsightlab.errors import CorruptReportError
from nsightlab.read import frames, trace
from nsightlab.read import workers as part_workers
from nsightlab.read.db import BATCH_ROWS, ExportDB
from nsightlab.read.parallel import readers
from nsightlab.read.store import ReadStore
from nsightlab.read.table_cache import READ, EntryMeta, Parts, part_columns
from nsightlab.read.tables import (
    CHECKED,
    DEDUPED,
    DUPLICATE_KEY,
    StartOrder,
    TableSpec,
    check_columns,
    contract_batches,
    duplicate_positions,
    duration_limit,
    rows_of_pid,
    parts_in_order,
    to_pandas,
)

T = TypeVar("T")
OpenPart = Callable[[int], pq.ParquetWriter]


def _without(value: T, rows: np.ndarray) -> T:
    """``value`` (a DataFrame, an Arrow table, or None) without the rows at positions ``rows``."""
    if value is None or not len(rows):
        return value
    keep = np.ones(len(value), bool)
    keep[rows] = False
    if isinstance(value, pd.DataFrame):
        return frames.pick_rows(value, keep)  # (every caller replaces the frame it passed)
    return value.filter(pa.array(keep))


def _part_columns(files: list[Path], schema: pa.Schema):
    """(starts, keys) for ``tables.duplicate_positions`` over the cache parts ``files``:
    the start column one part at a time, and the key columns of given rows, read only from
    the parts that hold them (one part's columns in memory at a time)."""
    first = np.concatenate([[0], np.cumsum([part_rows(f) for f in files])]).astype(np.int64)

    def starts():
        return part_columns(files, "start_ns")

    def keys(rows: np.ndarray):
        part = np.searchsorted(first, rows, "right") - 1
        for i in np.unique(part):
            mine = rows[part == i]
            t = pq.read_table(files[i], columns=list(DUPLICATE_KEY), schema=schema, **READ)
            yield mine, t.take(pa.array(mine - first[i]))
    return starts, keys


def _rewrite(part: Path, table: pa.Table, schema: pa.Schema, ident: dict) -> None:
    """Replace the cache part file ``part`` with ``table`` (written aside, renamed over it)."""
    from nsightlab.read.table_cache import part_writer

    tmp = part.with_name(f".{part.name}.tmp")
    writer = part_writer(tmp, schema, ident)
    writer.write_table(table)
    writer.close()
    os.replace(tmp, part)


def _worker_error(answer: dict, db: ExportDB) -> Exception:
    """The exception a worker's error answer stands for in this process (naming the report as
    the user gave it)."""
    if answer["kind"] == "report":
        return CorruptReportError(answer["error"].replace(str(db.path), db.name))
    if answer["kind"] == "os":
        return OSError(answer.get("errno") or 0, answer["error"])
    return ValueError(answer["error"])  # values the contract cannot hold: _from_sqlite says so


#: rows of cache parts this process has opened: {(path, mtime_ns, size): rows}
_PART_ROWS: dict[tuple[str, int, int], int] = {}


def part_rows(path: Path) -> int:
    """Rows of a cache part, from its footer once per process: every read of a table asked
    each of its (up to 256) parts again, twice, on the main thread (~0.4 s of launch_compute
    on the GPU machine). A part is written once under a new name; its size and mtime key it."""
    st = os.stat(path)
    key = (str(path), st.st_mtime_ns, st.st_size)
    if key not in _PART_ROWS:
        _PART_ROWS[key] = pq.ParquetFile(path, **READ).metadata.num_rows
    return _PART_ROWS[key]


def _cut_facts(meta: EntryMeta, orders: list) -> EntryMeta:
    """meta.json's facts of a process's entry taken from the whole report's (``meta``: the
    whole entry's; ``orders``: each part's ``StartOrder`` answer): no row left out or
    duplicate (else the tables are copied, not cut), the same duration limit."""
    return EntryMeta(dropped=0, limit=meta.limit, in_start_order=parts_in_order(orders))


class TableReader:
    """Reads tables of one export (``db``), through its ``store``'s cache when there is one
    (and, of a process's view, its big tables from the whole report's store)."""

    def __init__(self, db: ExportDB, store: ReadStore,
                 progress: Callable[[str], None] | None = None):
        self.db = db
        self.store = store
        self.progress = progress
        #: activity rows left out of the last SQLite read of each table (``drop_invalid``)
        self.dropped: dict[str, int] = {}
        #: rows handed out so far (progress over many reports)
        self.rows_read = 0
        #: the duration limit the last SQLite read of each table checked rows against
        self.limits: dict[str, int | None] = {}
        #: row positions of exact duplicates left out of each table (``_dedupe``)
        self.duplicates: dict[str, np.ndarray] = {}
        #: whether the rows of each table built by the reader processes are in start order
        #: (``tables.parts_in_order``; None: not known), kept in its meta.json
        self.orders: dict[str, bool | None] = {}
        #: held while an entry is built: one build at a time (``report`` runs steps on two
        #: threads, which may ask for the same entry at once; the reader pool is one)
        self._builds = threading.RLock()

    # ---- the three ways to read ----------------------------------------------------------
    def arrow(self, spec: TableSpec, keep: list[str]) -> pa.Table:
        """Columns ``keep`` of ``spec`` as an Arrow table."""
        got = [self._cached(s, lambda files, s=s, k=k: pq.read_table(
            files, columns=k, schema=s.schema, **READ),
            lambda open_part, s=s, k=k: self._collect(s, open_part, k))
            for s, k in self._groups(spec, keep)]
        if len(got) == 1:
            return got[0]
        self._same_rows(spec, [t.num_rows for t in got])
        columns = {name: t.column(name) for t in got for name in t.column_names}
        return pa.table([columns[c] for c in keep], names=keep)

    def frame(self, spec: TableSpec, keep: list[str]) -> pd.DataFrame:
        """Columns ``keep`` of a big activity table (``frames.supported``) as a DataFrame,
        batches copied straight into preallocated columns."""
        return self._side_by_side(spec, keep, [self._cached(
            s, lambda files, s=s, k=k: self._frame_from_parts(s, k, files),
            lambda open_part, s=s, k=k: self._frame_from_sqlite(s, k, open_part)
            if s.finish is None else self._collect_frame(s, open_part, k))
            for s, k in self._groups(spec, keep)])

    def _groups(self, spec: TableSpec, keep: list[str]) -> list[tuple[TableSpec, list[str]]]:
        """Where columns ``keep`` of ``spec`` are read from: (spec, columns) for each cache
        entry. A table with ``later`` columns (``tables.Later``) read in rowid ranges is cached
        as two entries, its first read and, once one is asked for, its later columns (same
        rows, same order); without a cache, or from a view, it is read whole."""
        if spec.later is None or not spec.split or spec.source in self.db.views:
            return [(spec, keep)]
        later = [c for c in keep if c in spec.later.columns]
        if not later:
            return [(spec.first, keep)]
        self.ensure_cached(spec.first)  # the later columns' read keeps the same rows
        if self.store.cache is None:
            return [(spec, keep)]
        first = [c for c in keep if c not in spec.later.columns]
        return [(spec.first, first)] * bool(first) + [(spec.rest, later)]

    def _same_rows(self, spec: TableSpec, rows: list[int]) -> None:
        """Entries read side by side must hold the same rows: else both are dropped."""
        if len(set(rows)) > 1:
            self.store.cache.drop(spec.first.name)
            self.store.cache.drop(spec.rest.name)
            raise CorruptReportError(
                f"{self.db.name}: the cached columns of {spec.name} disagree ({rows} rows); "
                "the cache entries were removed: run the command again")

    def _side_by_side(self, spec: TableSpec, keep: list[str], got: list[pd.DataFrame]
                      ) -> pd.DataFrame:
        """The DataFrames read from the entries of ``_groups`` as one, columns ``keep``."""
        if len(got) == 1:
            return got[0]
        self._same_rows(spec, [len(df) for df in got])
        return pd.concat(got, axis=1)[keep]

    def _collect_frame(self, spec: TableSpec, open_part: OpenPart | None, keep: list[str]
                       ) -> tuple[int, pd.DataFrame]:
        """``_collect`` as a DataFrame: a table with a whole-table pass (``finish``) read from
        SQLite without a cache entry."""
        n, table = self._collect(spec, open_part, keep)
        return n, to_pandas(table, spec)

    def take(self, spec: TableSpec, keep: list[str], rows: np.ndarray) -> pd.DataFrame:
        """Rows at positions ``rows`` (in that order) of columns ``keep`` of a big table.

        From the cache, batch by batch, keeping only the wanted rows: picking 8M of a
        16M-row table never holds its whole columns. Without a cache entry the columns are
        read whole (building the entry) and the rows picked from them.
        """
        return self._side_by_side(spec, keep, [self._take(s, k, rows)
                                               for s, k in self._groups(spec, keep)])

    def _take(self, spec: TableSpec, keep: list[str], rows: np.ndarray) -> pd.DataFrame:
        order = None if np.all(rows[1:] >= rows[:-1]) else np.argsort(rows, kind="stable")
        wanted = rows if order is None else rows[order]

        compact = frames.supported(spec, keep)  # else (text columns) Arrow pieces, joined

        def from_parts(files: list[Path]) -> pd.DataFrame:
            builder = frames.FrameBuilder(spec, keep, len(rows)) if compact else None
            pieces: list[tuple[int, pa.RecordBatch]] = []

            def pick(base: int, batch: pa.RecordBatch) -> None:
                k0, k1 = np.searchsorted(wanted, [base, base + batch.num_rows])
                if k1 > k0:
                    got = batch.take(pa.array(wanted[k0:k1] - base))
                    if compact:
                        builder.put(int(k0), got)
                    else:
                        pieces.append((int(k0), got))

            self._scan_parts(files, keep, pick, only=wanted)
            if compact:
                return builder.frame([(0, len(rows))])
            schema = pa.schema([spec.schema.field(c) for c in keep])
            return to_pandas(pa.Table.from_batches([b for _, b in sorted(
                pieces, key=lambda p: p[0])], schema=schema), spec)

        def from_sqlite(open_part: OpenPart | None) -> tuple[int, pd.DataFrame]:
            n, whole = self._frame_from_sqlite(spec, keep, open_part) \
                if compact and spec.finish is None else self._collect_frame(spec, open_part, keep)
            whole = _without(whole, self._uncached_duplicates(spec))
            return n, whole.iloc[wanted].reset_index(drop=True)

        if (spec.base or spec).name in DEDUPED:
            self.ensure_cached(spec)  # rows are picked from the table its duplicates left out
        df = self._cached(spec, from_parts, from_sqlite, picked=True)
        if order is not None:
            df = df.iloc[np.argsort(order, kind="stable")].reset_index(drop=True)
        return df

    def ensure_cached(self, spec: TableSpec) -> None:
        """Build the cache entry of ``spec`` (nothing when it is valid or there is no cache);
        of a table with ``later`` columns, the entry of its first read."""
        spec = self._groups(spec, [])[0][0]
        if self.store.cache is not None and self.store.cache.files(spec.name) is None:
            self._cached(spec, lambda files: None,
                         lambda open_part: (self._fill(spec, open_part), None))

    # ---- the cache policy ------------------------------------------------------------------
    def _cached(self, spec: TableSpec, from_parts: Callable[[list[Path]], T],
                from_sqlite: Callable[[OpenPart | None], tuple[int, T]],
                picked: bool = False) -> T:
        """Read through the cache (see the module docstring for the policy). ``picked``:
        ``from_sqlite`` hands back chosen rows of the table, its duplicates left out already."""
        out = self._cached_read(spec, from_parts, from_sqlite, picked)
        if out is not None:
            self.rows_read += len(out)
        return out

    def _cached_read(self, spec: TableSpec, from_parts: Callable[[list[Path]], T],
                     from_sqlite: Callable[[OpenPart | None], tuple[int, T]],
                     picked: bool) -> T:
        if self.store.cache is None or self.store.cache.files(spec.name) is not None:
            return self._read_or_build(spec, from_parts, from_sqlite, picked)
        with self._builds:  # built, or found built by the thread that held the lock
            return self._read_or_build(spec, from_parts, from_sqlite, picked)

    def _read_or_build(self, spec: TableSpec, from_parts: Callable[[list[Path]], T],
                       from_sqlite: Callable[[OpenPart | None], tuple[int, T]],
                       picked: bool) -> T:
        if self.store.cache is not None:
            files = self.store.cache.files(spec.name)
            if files is None and self._cut_from_whole(spec):
                files = self.store.cache.files(spec.name)
            # entries built in worker processes, and tables with a whole-table pass (NVTX
            # depth: done over the finished parts), are built first and then read
            if files is None and (self._in_processes(spec) or spec.finish is not None):
                try:
                    if self._in_processes(spec):
                        trace.mark(f"{spec.name}: waiting for the reader processes")
                        self._build_in_processes(spec)
                        trace.mark(f"{spec.name}: cached")
                    else:
                        self._from_sqlite(spec, lambda: self._build(
                            spec, lambda parts: (self._fill(spec, parts), None)))
                    files = self.store.cache.files(spec.name)
                except OSError as e:
                    self._cache_unusable(e)
        if self.store.cache is not None:
            if files is not None:
                try:
                    got = from_parts(files)
                    trace.mark(f"{spec.name}: read from the cache")
                    return got
                except (OSError, pa.ArrowException):
                    self.store.cache.drop(spec.name)  # damaged entry: rebuild it, never trust it
            try:
                built = self._from_sqlite(spec, lambda: self._build(spec, from_sqlite))
                frames.release_memory()  # the reader threads' arenas: 8M kernels kept ~550 MB
                return built
            except OSError as e:
                self._cache_unusable(e)
        value = self._from_sqlite(spec, lambda: from_sqlite(None)[1])
        return value if picked else _without(value, self._uncached_duplicates(spec))

    def _cut_from_whole(self, spec: TableSpec) -> bool:
        """Build ``spec``'s entry from the whole report's (``ReadStore.for_pid``; built there
        first, by its reader processes, once for every process): its parts with this process's
        rows only (and those of no process), part by part on every core. The later columns' entry
        (``kernels+``) has no pid column: its parts keep the rows the first read's parts of
        the whole report kept for this process. False when ``spec`` is not cut here."""
        if (spec.base or spec).name not in self.store.cut:
            return False
        whole, pid = self.store.whole, self.store.pid
        base = spec.base.first if spec.base is not None else None
        if base is not None:  # the first read (its pid column), then the later columns
            whole.reader.ensure_cached(spec.base)
        whole.reader.ensure_cached(spec)
        meta = whole.cache.meta(spec.name) or EntryMeta()
        if base is None and self._adopt_share(spec, whole, pid, meta):
            return True
        files = whole.cache.files(spec.name)
        masks = whole.cache.files(base.name) if base is not None else files
        if files is None or masks is None or len(files) != len(masks):
            raise CorruptReportError(f"{self.db.name}: the cache of {spec.name} changed while "
                                     "it was read: run the command again")

        orders: list = [None] * len(files)  # each cut part's start order (``StartOrder``)

        def fill(parts) -> tuple[int, None]:
            counts = [0] * len(files)

            def job(i: int) -> Callable[[], None]:
                def run() -> None:
                    t = pq.read_table(files[i], **READ)
                    who = pq.read_table(masks[i], columns=["pid"], **READ)["pid"]
                    if len(who) != len(t):
                        raise CorruptReportError(
                            f"{self.db.name}: the cached columns of {spec.name} disagree with "
                            "its first read: run the command again")
                    kept = rows_of_pid(t, pid, who)
                    parts(i).write_table(kept, row_group_size=BATCH_ROWS)  # as read
                    counts[i] = kept.num_rows
                    if "start_ns" in kept.column_names:  # a process's rows may be in start
                        order = StartOrder()  # order where the whole table's are not
                        for chunk in kept["start_ns"].chunks:
                            order.add(chunk)
                        orders[i] = order.answer()
                return run

            self.db.parallel([job(i) for i in range(len(files))])
            trace.mark(f"{spec.name}: cut from the whole report's cache ({sum(counts)} rows)")
            return sum(counts), None

        self.store.cache.build(spec.name, fill, spec.schema, lambda: _cut_facts(meta, orders))
        return True

    def _adopt_share(self, spec: TableSpec, whole: ReadStore, pid: int, meta: EntryMeta) -> bool:
        """Make this process's share of the whole report's parts, which the reader processes
        wrote as they read them (``ReadStore.take_share``), ``spec``'s entry: no cut."""
        got = whole.take_share(spec.name, pid)
        if got is None:
            return False
        folder, answers = got
        try:
            self.store.cache.commit(spec.name, folder, sum(a["rows"] for a in answers),
                                    _cut_facts(meta, [a.get("order") for a in answers]))
        except (OSError, pa.ArrowException):  # then cut, as without a share
            import shutil

            shutil.rmtree(folder, ignore_errors=True)
            return False
        trace.mark(f"{spec.name}: this process's share of the whole report's read")
        return True

    def _facts(self, spec: TableSpec) -> EntryMeta:
        """What an entry's meta.json records of its read: rows left out as impossible, the
        duration limit rows were checked against, the positions of the exact duplicates left
        out (the later columns' read keeps the same rows), and whether the rows are in start
        order (from the reader processes, when they said)."""
        dups = self.duplicates.get(spec.name, ())
        return EntryMeta(dropped=self.dropped.get(spec.name, 0), limit=self.limits.get(spec.name),
                         duplicate_rows=tuple(int(x) for x in dups),
                         in_start_order=self.orders.get(spec.name))

    # ---- exact duplicate rows --------------------------------------------------------------
    def _build(self, spec: TableSpec, fill: Callable[[object], tuple[int, T]]) -> T:
        """``cache.build`` of ``spec``, with the exact duplicate rows of a ``DEDUPED`` table
        left out of its parts and of what ``fill`` hands back."""
        def filled(parts) -> tuple[int, T]:
            n, value = fill(parts)
            parts.close()
            rows = self._dedupe(spec, parts.folder)
            return n - len(rows), _without(value, rows)
        return self.store.cache.build(spec.name, filled, spec.schema, lambda: self._facts(spec))

    def _dedupe(self, spec: TableSpec, folder: Path) -> np.ndarray:
        """Leave the exact duplicate rows (``tables.duplicate_positions``) out of the finished
        parts in ``folder``; the later columns' entry leaves out the rows its first read did.
        Returns their positions (recorded in meta.json by ``_facts``)."""
        if (spec.base or spec).name not in DEDUPED:
            return np.empty(0, np.int64)
        files = sorted(folder.glob("part-*.parquet"), key=lambda f: int(f.stem[5:]))
        if spec.base is not None:
            meta = self.store.cache.meta(spec.base.name) or EntryMeta()
            rows = np.asarray(meta.duplicate_rows, np.int64)
        else:  # the start column first: without tied starts there is no duplicate to look for
            rows = duplicate_positions(*_part_columns(files, spec.schema))
        if len(rows):
            at = 0
            for f in files:
                part = pq.read_table(f, schema=spec.schema, **READ)
                mine = rows[(rows >= at) & (rows < at + part.num_rows)] - at
                at += part.num_rows
                if len(mine):
                    cache = self.store.cache
                    _rewrite(f, _without(part, mine), spec.schema,
                             cache.ident_of(spec.name) if cache is not None else {})
        self.duplicates[spec.name] = rows
        return rows

    def _uncached_duplicates(self, spec: TableSpec) -> np.ndarray:
        """Positions of the exact duplicate rows of a ``DEDUPED`` table read without a cache
        (its key columns read once per export)."""
        whole = spec.base or spec
        if whole.name not in DEDUPED:
            return np.empty(0, np.int64)
        def find() -> np.ndarray:
            keys = self._collect(whole, None, list(DUPLICATE_KEY))[1]
            return duplicate_positions(
                lambda: iter([pc.fill_null(keys.column("start_ns"), 0).to_numpy()]),
                lambda rows: iter([(rows, keys.take(pa.array(rows)))]))
        rows = self.db.once(f"duplicates:{whole.name}", find)
        self.duplicates[spec.name] = rows
        return rows

    def _from_sqlite(self, spec: TableSpec, read: Callable[[], T]) -> T:
        """``read()``, with values the column contract cannot hold (text in a timestamp
        column, ids out of range) reported as a damaged export, not a traceback."""
        try:
            return read()
        except (pa.ArrowException, OverflowError, ValueError) as e:
            raise CorruptReportError(
                f"{self.db.name}: table {spec.source} holds values nsightlab cannot read "
                f"({str(e).splitlines()[0][:120]}); the export is damaged: export the report "
                "again (nsys export --type sqlite)") from None

    def _cache_unusable(self, error: OSError) -> None:
        """A cache folder that cannot be written is not fatal: say so once, read SQLite."""
        if self.progress is not None:
            self.progress(f"cannot write the cache in {self.store.cache.root} ({error.strerror}); "
                          "reading without it (set NSIGHTLAB_CACHE_DIR to a writable folder)")
        self.store.cache = None

    # ---- cache entries built by worker processes ----------------------------------------
    def _in_processes(self, spec: TableSpec) -> bool:
        """Whether ``spec``'s entry is built by worker processes (``part_workers``): a big
        table split by rowid, read with more than one reader."""
        return spec.split and spec.source not in self.db.views \
            and part_workers.in_processes(self.db.rowid_span(spec.source) or 0)

    def _build_in_processes(self, spec: TableSpec) -> None:
        """Build ``spec``'s cache entry in ``readers()`` worker processes over rowid ranges
        (``ReadStore.read``), or finish the read that ``nsightlab.open`` started
        (``ReadStore.start``)."""
        started = self.store.started.get(spec.name)
        if started is not None:
            with started.lock:  # two reports of one export (a diff of it with itself): one
                if not started.finished:  # finishes, the other finds the entry
                    self._from_sqlite(spec, lambda: self._finish_started(spec, started))
                    return
            if self.store.cache.files(spec.name) is not None:
                return
        self._checked_sql(spec)
        lo, hi = self.db.rowid_bounds(spec.source)
        started = self.store.read([(spec.name, lo, hi)], self._limit(spec),
                                  processes=readers(hi - lo + 1))[0]
        with started.lock:
            self._from_sqlite(spec, lambda: self._finish_started(spec, started))

    def _died(self, spec: TableSpec, error: Exception) -> CorruptReportError:
        part_workers.discard_pool()
        return CorruptReportError(
            f"{self.db.name}: a reader process died while reading {spec.source} ({error}); "
            "if memory is short, read with fewer processes (NSIGHTLAB_READERS=2)")

    def _finish_started(self, spec: TableSpec, started) -> None:
        """Finish the read of ``spec`` under way in the worker processes (``store.Started``:
        begun by ``nsightlab.open``, or by ``_build_in_processes``): wait for it (the meter
        moving), run its whole-table pass (NVTX depth), leave out its exact duplicates and
        commit the entry."""
        import shutil

        try:
            self._checked_sql(spec)
            self.limits[spec.name] = self._limit(spec)  # what the started jobs checked against
            ranges = [tuple(job["rows"]) for job in started.jobs]
            self._announce(spec, sum(b - a for a, b in ranges), True)
            meter, seen = self._meter(spec, ranges), 0
            try:
                while not started.done.wait(0.25):
                    now = sum(a.get("rows", 0) + a.get("dropped", 0) for a in started.answers if a)
                    meter(now - seen)
                    seen = now
            finally:
                meter(0, done=True)
            if started.error is not None:
                if isinstance(started.error, part_workers.WorkerDied):
                    raise self._died(spec, started.error)
                raise started.error
            for answer in started.answers:
                if "error" in answer:
                    raise _worker_error(answer, self.db)
            self.dropped[spec.name] = sum(a["dropped"] for a in started.answers)
            if spec.finish is None:
                self.orders[spec.name] = parts_in_order([a.get("order") for a in started.answers])
            else:
                self._finish_parts(spec, Parts(started.folder, spec.schema,
                                               self.store.cache.ident_of(spec.name)))
            duplicates = self._dedupe(spec, started.folder)
            self.store.cache.commit(spec.name, started.folder,
                                    sum(a["rows"] for a in started.answers) - len(duplicates),
                                    self._facts(spec))
            # the processes' shares hold every row of theirs: else they are cut again
            started.whole = not len(duplicates) and not self.dropped[spec.name]
        except BaseException:
            if not started.done.is_set():  # Ctrl-C while the workers still write its parts
                part_workers.discard_pool()
            shutil.rmtree(started.folder, ignore_errors=True)
            raise
        finally:
            started.finished = True
            if not started.whole:
                started.drop_shares()

    # ---- Parquet parts ---------------------------------------------------------------------
    def _scan_parts(self, files: list[Path], keep: list[str],
                    on_batch: Callable[[int, pa.RecordBatch], None],
                    only: np.ndarray | None = None) -> list[int]:
        """Stream every part (one thread each), calling ``on_batch(first_row, batch)`` with
        the batch's row position in the whole table; ``only`` (sorted row positions): skip
        the parts that hold none of them. Returns the parts' row counts."""
        sizes = [part_rows(f) for f in files]
        bases = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        todo = range(len(files))
        if only is not None:
            first = np.searchsorted(only, bases[:-1])
            todo = [i for i in todo if first[i] < len(only) and only[first[i]] < bases[i + 1]]

        def job(i: int) -> Callable[[], None]:
            def run() -> None:
                at = int(bases[i])
                for b in pq.ParquetFile(files[i], **READ).iter_batches(
                        batch_size=BATCH_ROWS, columns=keep, use_threads=False):
                    on_batch(at, b)
                    at += b.num_rows
            return run

        self.db.parallel([job(i) for i in todo])
        return sizes

    def _frame_from_parts(self, spec: TableSpec, keep: list[str], files: list[Path]
                          ) -> pd.DataFrame:
        sizes = [part_rows(f) for f in files]
        builder = frames.FrameBuilder(spec, keep, sum(sizes))
        self._scan_parts(files, keep, builder.put)
        offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(int).tolist()
        return builder.frame(list(zip(offsets, sizes)))

    # ---- SQLite ------------------------------------------------------------------------------
    def _frame_from_sqlite(self, spec: TableSpec, keep: list[str], open_part: OpenPart | None
                           ) -> tuple[int, pd.DataFrame]:
        ranges = self.db.rowid_ranges(spec.source, readers(self.db.rowid_span(spec.source)))
        sizes = [r[1] - r[0] if r is not None else self.db.count(spec.source) for r in ranges]
        self._announce(spec, sum(sizes), open_part is not None)
        offsets = [sum(sizes[:i]) for i in range(len(ranges))]
        builder = frames.FrameBuilder(spec, keep, sum(sizes))
        filled = [0] * len(ranges)

        def sink(part: int, batch: pa.RecordBatch) -> None:
            builder.put(offsets[part] + filled[part], batch)
            filled[part] += batch.num_rows

        self._stream(spec, open_part, sink, ranges)
        return sum(filled), builder.frame(list(zip(offsets, filled)))

    def _announce(self, spec: TableSpec, rows: int, caching: bool) -> None:
        if self.progress is not None and rows >= 1_000_000:
            where = " into the cache" if caching else ""
            self.progress(f"reading {spec.name} of {self.db.path.name} (~{rows:,} rows){where} ...")

    def _fill(self, spec: TableSpec, open_part: OpenPart) -> int:
        """Write ``spec``'s cache parts from SQLite, keeping nothing: a column kept from each
        batch keeps the whole batch alive (imported Arrow data shares one release), which
        grew a cold read of 8M kernels to 1.4 GB. Returns the rows written."""
        if spec.finish is not None and not spec.split:  # the whole table in memory
            return self._collect(spec, open_part, [spec.columns[0].name])[0]
        ranges = self.db.rowid_ranges(spec.source, readers(self.db.rowid_span(spec.source))) \
            if spec.split else [None]
        rows = [0] * len(ranges)

        def count(i: int, b: pa.RecordBatch) -> None:
            rows[i] += b.num_rows
        self._stream(spec, open_part, count, ranges)
        if spec.finish is not None:
            self._finish_parts(spec, open_part)
        return sum(rows)

    def _finish_parts(self, spec: TableSpec, parts) -> None:
        """``spec.finish`` over the whole table from its written parts (``cache.Parts``),
        holding only the columns it reads (a whole NVTX table held ~210 bytes a range: 2.9
        GB at 13.6M ranges), then each part rewritten with the column it computed. The parts
        come from rowid ranges, each in start order; where rowids are not in start order the
        table is put in start order here (then held whole, as a single-query read would)."""
        parts.close()
        files = sorted(parts.folder.glob("part-*.parquet"), key=lambda f: int(f.stem[5:]))
        start = pq.read_table(files, columns=["start_ns"], schema=spec.schema, **READ)
        start = start.column("start_ns").to_numpy()
        if len(start) > 1 and not np.all(start[1:] >= start[:-1]):
            order = np.argsort(start, kind="stable")
            whole = pq.read_table(files, schema=spec.schema, **READ).take(order)
            for f in files:
                f.unlink()
            del start, order
            parts(0).write_table(spec.finished(whole))
            parts.close()
            return
        del start
        values = spec.finish(pq.read_table(f, columns=list(spec.finish_reads), schema=spec.schema,
                                           **READ) for f in files)
        at = 0
        for f in files:
            part = pq.read_table(f, schema=spec.schema, **READ)
            n = part.num_rows
            i = part.schema.get_field_index(spec.finish_column)
            part = part.set_column(i, part.schema.field(i), values.slice(at, n))
            at += n
            _rewrite(f, part, spec.schema, parts.ident)

    def _collect(self, spec: TableSpec, open_part: OpenPart | None,
                 keep: list[str]) -> tuple[int, pa.Table]:
        """Read ``spec`` from SQLite into an Arrow table of the ``keep`` columns (writing the
        cache parts on the way when ``open_part`` is given). Returns (rows, table)."""
        ranges = self.db.rowid_ranges(spec.source, readers(self.db.rowid_span(spec.source))) \
            if spec.split else [None]
        whole = spec.finish is not None or len(keep) == len(spec.columns)
        kept: list[list[pa.RecordBatch]] = [[] for _ in ranges]
        def keep_columns(i: int, b: pa.RecordBatch) -> None:
            # copies of the columns asked for: a column of an imported batch keeps the whole
            # batch alive (its buffers share one release)
            kept[i].append(b if whole else pa.RecordBatch.from_arrays(
                [pa.concat_arrays([b.column(c)]) for c in keep], names=keep))
        self._stream(spec, open_part if spec.finish is None else None, keep_columns, ranges)
        schema = spec.schema if whole else pa.schema([spec.schema.field(c) for c in keep])
        table = pa.Table.from_batches([b for p in kept for b in p], schema=schema)
        if spec.finish is not None:  # whole-table pass (NVTX depth) before caching
            table = spec.finished(table)
            if open_part is not None:
                open_part(0).write_table(table)
            table = table.select(keep)
        return table.num_rows, table

    def _stream(self, spec: TableSpec, open_part: OpenPart | None,
                sink: Callable[[int, pa.RecordBatch], None], ranges: list) -> None:
        """Read ``spec`` from SQLite, one thread per rowid range (``None`` = the whole query),
        converting each batch to the contract, writing it to that part's Parquet file when
        ``open_part`` is given, and handing it to ``sink(part, batch)``."""
        sql = self._checked_sql(spec)
        queries = [sql if r is None else spec.range_sql(self.db, *r) for r in ranges]
        limit = self._limit(spec)
        dropped = [0] * len(queries)
        meter = self._meter(spec, ranges)

        def job(i: int) -> Callable[[], None]:
            def run() -> None:
                writer = open_part(i) if open_part is not None else None
                for b, read, left_out in contract_batches(spec, self.db,
                                                          self.db.stream(queries[i]), limit):
                    meter(read)
                    dropped[i] += left_out  # rows with impossible timestamps: reported
                    if writer is not None:
                        writer.write_batch(b)
                    sink(i, b)
            return run

        if open_part is not None and not queries:
            open_part(0)  # an empty table still gets its (empty) Parquet file
        try:
            self.db.parallel([job(i) for i in range(len(queries))])
        finally:
            meter(0, done=True)
        self.dropped[spec.name] = sum(dropped)

    def _limit(self, spec: TableSpec) -> int | None:
        """The duration limit (``tables.duration_limit``) a checked table's rows are read
        against (None: not checked); the later columns' read uses its first read's."""
        name, limit = spec.name, None
        if spec.base is not None:  # later columns: the rows the first read kept
            meta = self.store.cache.meta(spec.base.name) if self.store.cache is not None else None
            limit = meta.limit if meta is not None else None
            spec = spec.base
        if limit is None and spec.name in CHECKED:
            limit = duration_limit(self.db)
        self.limits[name] = limit
        return limit

    def _checked_sql(self, spec: TableSpec) -> str:
        """The SELECT of ``spec``, once its table is known to hold the columns it cannot be
        read without (``tables.check_columns``)."""
        check_columns(self.db, spec)
        return spec.sql(self.db)

    def _meter(self, spec: TableSpec, ranges: list) -> Callable[..., None]:
        """``meter(rows)`` counts rows read from SQLite (from any reader thread) and, for big
        tables, hands ``progress`` a meter twice a second (``"\r..."``: rows so far, share,
        rate); ``meter(0, done=True)`` clears it."""
        total = sum(r[1] - r[0] for r in ranges if r is not None)
        if self.progress is None or total < 1_000_000:
            return lambda rows, done=False: None
        t0 = time.monotonic()
        state = {"rows": 0, "shown": t0}
        lock = threading.Lock()

        def meter(rows: int, done: bool = False) -> None:
            with lock:
                state["rows"] += rows
                now = time.monotonic()
                if done:
                    self.progress("\r")
                elif now - state["shown"] >= 0.5:
                    state["shown"] = now
                    n = state["rows"]
                    self.progress(f"\rreading {spec.name} of {self.db.path.name}: {n / 1e6:.1f}M "
                                  f"of ~{total / 1e6:.1f}M rows ({100 * n / total:.0f}%), "
                                  f"{n / max(now - t0, 1e-9) / 1e6:.1f}M rows/s")
        return meter

    def dropped_rows(self, spec: TableSpec) -> int | None:
        """Rows of ``spec`` every read leaves out, as recorded when its cache entry was built
        (or counted by this reader without a cache); None when it has not been read."""
        meta = self.store.cache.meta(spec.name) if self.store.cache is not None else None
        if meta is None or meta.dropped is None:
            return self.dropped.get(spec.name) if self.store.cache is None else None
        return meta.dropped

    def duplicate_count(self, spec: TableSpec) -> int | None:
        """Exact duplicate rows of ``spec`` every read leaves out (``_dedupe``), known once
        the table has been read (from its cache entry, or counted by this reader); None
        before: a table a command does not read changes none of its numbers."""
        if spec.name not in DEDUPED:
            return 0
        if spec.name in self.duplicates:
            return len(self.duplicates[spec.name])
        meta = self.store.cache.meta(spec.name) if self.store.cache is not None else None
        return None if meta is None else meta.duplicates
