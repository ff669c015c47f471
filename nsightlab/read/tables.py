"""The table contract: what every ``Report.<table>()`` returns, whatever the nsys version.

Each table is a TableSpec: its columns (snake_case, units in the names, documented), the nsys
SQLite table it comes from, the ``nsys profile --trace`` option that records it, the SQL that
reads it (built from the columns this export actually has: a column an older schema lacks reads
as NULL) and an Arrow conversion (StringIds -> dictionary strings, ENUM ids -> labels, globalTid
-> pid/tid). Conversion works batch by batch, so big tables stream straight into Parquet.

Bump ``nsightlab.read.table_cache.TABLE_VERSION`` whenever a contract or conversion changes: it is part of
every cache key.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from nsightlab.errors import CorruptReportError, UnsupportedReportError
from nsightlab.read.db import ExportDB
from nsightlab.read.parallel import MAX_NS
from nsightlab.read.parallel import duration_limit as parallel_duration_limit
from nsightlab.read.table_cache import TABLE_VERSION  # noqa: F401  (re-exported: the contract's version)

if TYPE_CHECKING:  # imported where used: reader processes convert batches without pandas
    import pandas as pd

I32, I64, U32, STR = pa.int32(), pa.int64(), pa.uint32(), pa.string()
DICT = pa.dictionary(pa.int32(), pa.string())

# Fallback labels for exports without ENUM_* tables (values from NVIDIA's schema docs / CUPTI).
COPY_KIND = {0: "Unknown", 1: "Host-to-Device", 2: "Device-to-Host", 3: "Host-to-Array",
             4: "Array-to-Host", 5: "Array-to-Array", 6: "Array-to-Device", 7: "Device-to-Array",
             8: "Device-to-Device", 9: "Host-to-Host", 10: "Peer-to-Peer",
             11: "Unified Host-to-Device", 12: "Unified Device-to-Host",
             13: "Unified Device-to-Device"}
MEM_KIND = {0: "Pageable", 1: "Pinned", 2: "Device", 3: "Array", 4: "Managed",
            5: "Device Static", 6: "Managed Static", 7: "Unknown"}
SYNC_TYPE = {0: "Unknown", 1: "Event sync", 2: "Stream wait sync", 3: "Stream sync",
             4: "Context sync"}
LAUNCH_TYPE = {0: "Unknown", 1: "Regular", 2: "Coop Single Device", 3: "Coop Multi Device",
               4: "CBL Commandlist"}
EVENT_CLASS = {0: "CUDA runtime", 1: "CUDA driver", 13: "CUDA EGL driver", 28: "cuDNN",
               29: "cuBLAS", 67: "CUDA backtrace", 77: "CUDA graph node creation"}
# NVTX_EVENTS.eventType: 70/71 are the "NVTXT" variants NVIDIA's own summaries count alongside
NVTX_KIND = {34: "mark", 59: "push_pop", 60: "start_end", 70: "push_pop", 71: "start_end"}
NVTX_TYPES = ", ".join(map(str, NVTX_KIND))


@dataclass(frozen=True)
class Column:
    name: str
    type: pa.DataType
    doc: str
    nullable: bool = False


#: a SELECT of one table's integer columns as (result name, source columns) pairs: each
#: result is the first of its sources that is not NULL (COALESCE), NULL where the export has
#: none of them. ``plain_sql`` writes it as SQL; ``pages.batches`` reads it off the pages.
Plain = tuple[tuple[str, tuple[str, ...]], ...]


@dataclass(frozen=True)
class Later:
    """Columns of a big table that its first read leaves out, read from SQLite into a cache
    entry of their own the first time one of them is asked for (``TableSpec.rest``).

    Reading a column from SQLite costs time whether or not anything uses it: in one reader,
    the 8 columns every recipe needs of 500k kernels took 0.18 s, all 20 (with the launch
    configuration, which no recipe reads) 0.46 s. ``first_sql``/``first_convert`` read and
    convert the other columns; ``sources`` are the source columns of these, ``convert`` turns
    a batch of them (and start/end) into them."""

    columns: tuple[str, ...]
    first_sql: Callable[[ExportDB], str]
    first_convert: Callable[[ExportDB, pa.RecordBatch], dict[str, pa.Array]]
    sources: tuple[str, ...]
    convert: Callable[[ExportDB, pa.RecordBatch], dict[str, pa.Array]]
    #: the first read as ``TableSpec.plain`` describes it (None: SQL only)
    first_plain: Callable[[ExportDB], Plain] | None = None


@dataclass(frozen=True)
class TableSpec:
    """One logical table. ``read`` returns SQL for the export; ``convert`` turns one Arrow batch
    of that SQL's result into a batch with exactly ``columns``; ``finish`` (optional) is a
    whole-table pass for the few tables that need one (NVTX nesting depth)."""

    name: str
    source: str
    trace: str  # the nsys profile options that record it ("" = every profile does)
    doc: str
    columns: tuple[Column, ...]
    sql: Callable[[ExportDB], str]
    convert: Callable[[ExportDB, pa.RecordBatch], dict[str, pa.Array]]
    #: a whole-table pass for the few tables that need one (NVTX nesting depth): the values of
    #: column ``finish_column``, computed from the columns ``finish_reads`` of the whole table,
    #: handed over part by part (only those columns are held when the table is read in parts)
    finish: Callable[[Iterator[pa.Table]], pa.Array] | None = None
    finish_reads: tuple[str, ...] = ()
    finish_column: str = ""
    split: bool = True  # read rowid ranges in parallel (big activity tables)
    #: SQL reading rowids [lo, hi) (default: ``sql`` with a WHERE on rowid appended)
    ranged: Callable[[ExportDB, int, int], str] | None = None
    #: ``sql`` as a ``Plain`` description, for tables of integers read by the reader
    #: processes straight from the export's pages (``pages``; SQL where they cannot be)
    plain: Callable[[ExportDB], Plain] | None = None
    #: columns the first read leaves out (``first`` and ``rest`` are the two reads)
    later: Later | None = None
    #: of a ``rest`` spec: the table whose first read it completes
    base: TableSpec | None = None
    #: source columns its rows mean nothing without (when and where the work ran, what a copy
    #: moved): a table that lacks one is refused, naming it (``check_columns``); the other
    #: columns an export lacks read as NULL
    required: tuple[str, ...] = ()

    @cached_property
    def first(self) -> TableSpec:
        """The first read of a table with ``later`` columns: the others, under its name."""
        return replace(self, columns=tuple(c for c in self.columns
                                           if c.name not in self.later.columns),
                       sql=self.later.first_sql, convert=self.later.first_convert, later=None,
                       plain=self.later.first_plain)

    @cached_property
    def rest(self) -> TableSpec:
        """The ``later`` columns of a table as a table of their own, ``<name>+``: the same
        rows in the same order as ``first`` (its timestamps are read along, so the same rows
        are left out: ``drop_invalid`` with the first read's limit)."""
        later = self.later
        return replace(
            self, name=f"{self.name}+", base=self, later=None, ranged=None,
            columns=tuple(c for c in self.columns
                          if c.name in later.columns or c.name in ("start_ns", "end_ns")),
            **_integers(self.source, "start", "end", *later.sources),
            convert=lambda db, b: {"start_ns": b.column("start"), "end_ns": b.column("end"),
                                   **later.convert(db, b)})

    @property
    def schema(self) -> pa.Schema:
        # Arrow fields stay nullable; Column.nullable documents where nulls are expected
        return pa.schema([pa.field(c.name, c.type) for c in self.columns])

    def range_sql(self, db: ExportDB, lo: int, hi: int) -> str:
        """The SELECT of rowids [lo, hi) of the source table."""
        if self.ranged is not None:
            return self.ranged(db, lo, hi)
        return f"{self.sql(db)} WHERE rowid >= {lo} AND rowid < {hi}"

    def finished(self, table: pa.Table) -> pa.Table:
        """``table`` (every column) with ``finish_column`` computed by ``finish``."""
        i = table.schema.get_field_index(self.finish_column)
        return table.set_column(i, table.schema.field(i),
                                self.finish(iter([table.select(list(self.finish_reads))])))

    def empty(self) -> pd.DataFrame:
        return to_pandas(self.schema.empty_table(), self)

    def present(self, db: ExportDB) -> bool:
        return db.has(self.source) and (self.source != GM or db.has(GMI))


def check_columns(db: ExportDB, spec: TableSpec) -> None:
    """Refuse a table that lacks a column ``spec.required`` names (a tool that never wrote
    it, or a column renamed or dropped), with one line naming them: read as NULL, it would
    put every row on no GPU or no thread.

    Raises:
        CorruptReportError: the table lacks a required column.
    """
    missing = [c for c in spec.required if c not in db.columns(spec.source)]
    if missing:
        raise CorruptReportError(
            f"{db.name}: table {spec.source} has no {'/'.join(missing)} column"
            f"{'s' if len(missing) > 1 else ''} (renamed or dropped: not an nsys export as "
            "written); export the report again with nsys export")


# ---- data quality of activity rows ------------------------------------------------------------
#: tables whose rows are activity intervals: a row whose start/end cannot be (NULL or not an
#: integer, end before start, a duration longer than the whole trace) is left out of every read,
#: counted and reported instead. Work in flight at a capture's or slice's edges (started before
#: the first recorded CUDA call, or still running after the last) is real: it is kept, as
#: ``nsys stats`` keeps it, and noted by the completeness check.
CHECKED = ("kernels", "memcpy", "memset", "syncs", "graph_execs", "cuda_api")
#: activity tables whose exact duplicate rows (``DUPLICATE_KEY`` equal) are dropped once and
#: counted: a row recorded twice is one operation. (API calls are not: 2022-era exports hold
#: two rows for one call legitimately.)
DEDUPED = ("kernels", "memcpy", "memset")
DUPLICATE_KEY = ("correlation_id", "device_id", "stream_id", "start_ns", "end_ns", "pid")


def duration_limit(db: ExportDB) -> int:
    """The longest an activity row may last: the whole trace (``parallel.duration_limit``),
    read once per export."""
    def query(sql: str):
        return db.query(sql)[0] if db.has("ANALYSIS_DETAILS") else None
    return db.once("duration_limit", lambda: parallel_duration_limit(query))


def invalid_sql(limit: int) -> str:
    """SQL condition on the source columns (start, "end") of a row that is left out."""
    return ('start IS NULL OR "end" IS NULL OR typeof(start) != \'integer\' '
            f'OR typeof("end") != \'integer\' OR "end" < start OR start < {-MAX_NS} '
            f'OR "end" > {MAX_NS} OR "end" - start > {limit}')


def drop_invalid(batch: pa.RecordBatch, limit: int) -> pa.RecordBatch:
    """``batch`` (with start_ns and end_ns) without the rows ``invalid_sql`` describes."""
    start, end = batch.column("start_ns"), batch.column("end_ns")
    ok = pc.and_(pc.is_valid(start), pc.is_valid(end))
    ok = pc.and_(ok, pc.greater_equal(end, start))
    ok = pc.and_(ok, pc.and_(pc.greater_equal(start, -MAX_NS), pc.less_equal(end, MAX_NS)))
    ok = pc.fill_null(ok, False)
    if pc.all(ok).as_py():  # in range: the difference cannot overflow
        ok = pc.less_equal(pc.subtract(end, start), limit)
    else:
        safe = pc.if_else(ok, pc.subtract(pc.if_else(ok, end, 0), pc.if_else(ok, start, 0)), 0)
        ok = pc.and_(ok, pc.less_equal(safe, limit))
    ok = pc.fill_null(ok, False)
    return batch if pc.all(ok).as_py() else batch.filter(ok)


#: rows of starts sorted at once when an export's rows are out of time order (int64 values
#: and positions, their order: ~260 MB); more rows are split into value ranges of about this
#: many, one pass over the start column each (``tied_rows``)
RANGE_ROWS = 1 << 23
#: every SAMPLE_STEP-th start is kept to choose those value ranges
SAMPLE_STEP = 64


def duplicate_positions(starts: Callable[[], Iterator[np.ndarray]],
                        keys: Callable[[np.ndarray], Iterator[tuple[np.ndarray, pa.Table]]]
                        ) -> np.ndarray:
    """Row positions of a table that repeat an earlier row exactly (its ``DUPLICATE_KEY``
    columns), sorted. Duplicates share a start, so only rows whose start is tied with
    another's (``tied_rows`` over ``starts()``: the start column chunk by chunk, in row order)
    are compared, their keys read by ``keys(positions)`` (yielding (positions, their key
    columns) a piece at a time). Memory stays bounded however long the table: a cached
    table is never read whole (at 100M kernels that had taken kernel_sum's process to
    1.9 GB)."""
    tied = tied_rows(starts)
    if not len(tied):
        return np.empty(0, np.int64)
    import pandas as pd

    pos, cols = [], {c: [] for c in DUPLICATE_KEY}
    for at, picked in keys(tied):
        pos.append(at)
        for c in DUPLICATE_KEY:
            cols[c].append(pc.fill_null(picked.column(c).cast(pa.int64()), -1).to_numpy())
    df = pd.DataFrame({c: np.concatenate(v) for c, v in cols.items()})
    return np.concatenate(pos)[df.duplicated().to_numpy()].astype(np.int64)


def breaks_order(s: np.ndarray, prev) -> bool:
    """Whether the chunk ``s`` (not empty) of a column read in chunks is out of order, within
    itself or after ``prev`` (the last value of the chunks before it; None: the first)."""
    return bool((prev is not None and s[0] < prev) or np.any(s[1:] < s[:-1]))


class StartOrder:
    """Whether the rows of one cache part come in start order, batch by batch as they are
    written (``add``), and its first and last start: what the reader processes answer, so
    that the entry's meta.json can say whether the whole table is in start order
    (``parts_in_order``) and ``Report.in_start_order`` need not read the column again
    (16M calls: 0.25 s on 16 cores, a cost of every sync_gaps)."""

    def __init__(self):
        self.first = self.last = None
        self.ordered = True

    def add(self, column) -> None:
        if not self.ordered or not len(column):
            return
        if column.null_count:  # a start the reads leave in: no claim about the order
            self.ordered = False
            return
        s = column.to_numpy()
        if breaks_order(s, self.last):
            self.ordered = False
            return
        self.first = int(s[0]) if self.first is None else self.first
        self.last = int(s[-1])

    def answer(self) -> list | bool:
        """[first, last] start (empty: no rows) when in order, else False."""
        if not self.ordered:
            return False
        return [] if self.first is None else [self.first, self.last]


def rows_of_pid(t: "pa.Table | pa.RecordBatch", pid: int, who: "pa.Array | None" = None
               ) -> pa.Table:
    """The rows of ``t`` of process ``pid`` and of no process (pid 0 or null): a process's
    share of a cache part (``read.split``). ``who``: the rows' pids, where ``t`` has no
    ``pid`` column (a table's later columns). Each dictionary column's dictionary is cut to
    the values those rows use: rows filtered out of a part keep the part's dictionary, and a
    process's kernel names would then be every process's."""
    who = t.column("pid") if who is None else who
    kept = t.filter(pc.fill_null(pc.or_(pc.equal(who, pid), pc.equal(who, 0)), True))
    if isinstance(kept, pa.RecordBatch):
        kept = pa.Table.from_batches([kept])
    cols = []
    for c in kept.columns:
        if pa.types.is_dictionary(c.type) and c.num_chunks:
            chunks = []
            for a in c.chunks:
                idx = a.indices.to_numpy(zero_copy_only=False)
                valid = ~np.asarray(a.is_null()) if a.null_count else None
                used = np.unique(idx[valid] if valid is not None else idx)
                remap = np.zeros(len(a.dictionary), dtype=idx.dtype)
                remap[used] = np.arange(len(used), dtype=idx.dtype)
                new = pa.array(remap[idx], type=a.indices.type,
                               mask=None if valid is None else ~valid)
                chunks.append(pa.DictionaryArray.from_arrays(new, a.dictionary.take(
                    pa.array(used, pa.int64()))))
            c = pa.chunked_array(chunks, type=c.type)
        cols.append(c)
    return pa.Table.from_arrays(cols, schema=kept.schema)


def parts_in_order(answers: list) -> bool | None:
    """Whether parts whose ``StartOrder.answer`` (in part order) are ``answers`` hold the
    table in start order; None when one of them did not say."""
    if any(a is None for a in answers):
        return None
    last = None
    for a in answers:
        if a is False:
            return False
        if a:
            if last is not None and a[0] < last:
                return False
            last = a[1]
    return True


def tied_rows(starts: Callable[[], Iterator[np.ndarray]]) -> np.ndarray:
    """Sorted positions of the rows whose start equals another row's. ``starts()`` yields
    the start column (nulls as 0) in chunks in row order; it is called again for each value
    range when the rows are out of time order (nsys 2025.6 and later) and more than
    ``RANGE_ROWS``. In time order: one pass, holding one chunk and the ties."""
    ties, sample, ordered, prev, n = [], [], True, None, 0
    for s in starts():
        if not len(s):
            continue
        if ordered and breaks_order(s, prev):
            ordered = False
        if ordered:
            t = np.flatnonzero(s[1:] == s[:-1]) + n
            ties += [t, t + 1] + ([np.array([n - 1, n])] if prev == s[0] else [])
            prev = s[-1]
        sample.append(s[::SAMPLE_STEP].copy())
        n += len(s)
    if ordered:
        return np.unique(np.concatenate(ties)) if ties else np.empty(0, np.int64)
    k = -(-n // RANGE_ROWS)
    cuts = np.unique(np.quantile(np.concatenate(sample), np.linspace(0, 1, k + 1)[1:-1],
                                 method="lower")) if k > 1 else np.empty(0, np.int64)
    del sample
    found = []
    for lo, hi in zip([None, *cuts], [*cuts, None]):  # [lo, hi) of start values
        pos, val, at = [], [], 0
        for s in starts():
            inside = np.ones(len(s), bool) if lo is None else s >= lo
            if hi is not None:
                inside &= s < hi
            pos.append(np.flatnonzero(inside) + at)
            val.append(s[inside])
            at += len(s)
        p, v = np.concatenate(pos), np.concatenate(val)
        del pos, val
        order = np.argsort(v, kind="stable")
        v = v[order]
        t = np.flatnonzero(v[1:] == v[:-1])
        if len(t):
            found.append(p[order[np.concatenate([t, t + 1])]])
    return np.unique(np.concatenate(found)) if found else np.empty(0, np.int64)


def contract_batches(spec: "TableSpec", db: ExportDB, raws: "Iterator[pa.RecordBatch]",
                     limit: int | None) -> "Iterator[tuple[pa.RecordBatch, int, int]]":
    """The rows ``raws`` (batches of ``spec.sql``'s result: ``db.stream``, or ``pages``) hold of
    ``spec``, batch by batch, in the column contract, rows with impossible timestamps left
    out (``drop_invalid``; ``limit`` None: not checked). Yields (batch, rows read, rows left
    out): the one conversion loop of reader threads and reader processes."""
    for raw in raws:
        b = build_batch(spec, db, raw)
        n = b.num_rows
        if limit is not None:
            b = drop_invalid(b, limit)
        yield b, raw.num_rows, n - b.num_rows


# ---- SQL and Arrow helpers -------------------------------------------------------------------
def pick(db: ExportDB, table: str, *names: str) -> str:
    """``name AS name`` for each source column, ``NULL AS name`` where this schema lacks it;
    a timestamp that is not an integer (a damaged export) reads as NULL (``drop_invalid``)."""
    have = set(db.columns(table))
    return ", ".join(f'{_source(n) if n in have else "NULL"} AS "{n}"' for n in names)


def _source(n: str) -> str:
    """The SQL of source column ``n`` as ``pick`` reads it (a timestamp that is not an
    integer as NULL)."""
    if n in ("start", "end"):
        return f'CASE WHEN typeof("{n}") = \'integer\' THEN "{n}" END'
    return f'"{n}"'


def plain_sql(db: ExportDB, table: str, plain: Plain) -> str:
    """The SELECT that ``plain`` describes (``pick``'s rules for each source)."""
    have = set(db.columns(table))
    exprs = []
    for name, sources in plain:
        got = [_source(s) for s in sources if s in have]
        expr = "NULL" if not got else got[0] if len(got) == 1 else f"COALESCE({', '.join(got)})"
        exprs.append(f'{expr} AS "{name}"')
    return f"SELECT {', '.join(exprs)} FROM {table}"


def _plain(*names: str) -> Plain:
    return tuple((n, (n,)) for n in names)


def _integers(table: str, *names: str) -> dict:
    """``sql`` and ``plain`` of a spec that reads integer columns ``names`` of ``table`` as
    they are: read from the pages by the reader processes (``pages``), else by this SQL."""
    return {"sql": lambda db: plain_sql(db, table, _plain(*names)),
            "plain": lambda db: _plain(*names)}


def select(db: ExportDB, table: str, *names: str, extra: str = "") -> str:
    """``SELECT <names> [, extra] FROM table`` with ``pick``'s NULLs for absent columns."""
    return f"SELECT {pick(db, table, *names)}{', ' + extra if extra else ''} FROM {table}"


def _pids(b: pa.RecordBatch, db: ExportDB | None) -> pa.Array:
    """The process of each GPU row; rows without a ``globalPid`` (a minimal export's table
    without the column, as other tools' fixture generators write them, or a NULL) are of the
    process whose CUDA calls launched them (``launching_process``)."""
    g = b.column("globalPid")
    if db is None or not g.null_count:
        return pid_of(g)
    one = db.once("launching_process", lambda: launching_process(db))
    return pc.fill_null(pid_of(g), pa.scalar(one, I32))


#: the GPU activity tables whose rows a CUDA call launched (their correlationId is its)
LAUNCHED = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY",
            "CUPTI_ACTIVITY_KIND_MEMSET", "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
            "CUPTI_ACTIVITY_KIND_GRAPH_TRACE")


def launching_process(db: ExportDB) -> int:
    """The one process whose CUDA calls launched the GPU work (their correlation ids are the
    GPU rows'); that of every CUDA call when none matches, 0 when no call names its thread.

    Raises:
        UnsupportedReportError: several processes launched GPU work, and rows without a
            globalPid cannot be given to one of them.
    """
    api = "CUPTI_ACTIVITY_KIND_RUNTIME"
    if not db.has(api) or "globalTid" not in db.columns(api):
        return 0
    calls = (f"SELECT count(DISTINCT globalTid >> 24), min(globalTid >> 24) FROM {api} "
             "WHERE globalTid IS NOT NULL")
    launched = " UNION ".join(f"SELECT correlationId FROM {t}" for t in LAUNCHED
                              if db.has(t) and "correlationId" in db.columns(t))
    n, g = db.query(f"{calls} AND correlationId IN ({launched})")[0] if launched else (0, None)
    if not n:  # no call matches a GPU row: the process of every call, if there is one
        n, g = db.query(calls)[0]
    if n > 1:
        raise UnsupportedReportError(
            f"{db.name}: GPU rows without a globalPid, and {n} processes launched GPU work: "
            "their work cannot be told apart; export the report with nsys export (it writes "
            "globalPid), or profile one process")
    return int(g) & 0xFFFFFF if g is not None else 0


def pid_of(g: pa.Array) -> pa.Array:
    """PID bits of a globalTid/globalPid (HW:8 VM:8 PID:24 TID:24)."""
    return pc.bit_wise_and(pc.shift_right(g.cast(I64), 24), 0xFFFFFF).cast(I32)


def tid_of(g: pa.Array) -> pa.Array:
    return pc.bit_wise_and(g.cast(I64), 0xFFFFFF).cast(I32)


def labels(ids: pa.Array, table: dict[int, str]) -> pa.DictionaryArray:
    """Dictionary array of enum labels; an id with no label reads as its number."""
    enc = ids.cast(I64, safe=False).dictionary_encode()
    names = [table.get(int(u), str(int(u))) for u in enc.dictionary.to_pylist()]
    return pa.DictionaryArray.from_arrays(enc.indices.cast(I32), pa.array(names, STR))


def strip_version(names: pa.Array) -> pa.Array:
    """CUDA API names as ``nsys stats`` prints them: a 4-digit version suffix is dropped
    (``cudaLaunchKernel_v7000`` -> ``cudaLaunchKernel``), a 5-digit one is kept
    (``cudaGraphLaunch_v10000``, ``cudaGetDeviceProperties_v12000``)."""
    cut = pc.utf8_slice_codeunits(names, 0, -6)
    versioned = pc.equal(pc.utf8_slice_codeunits(names, -6, -4), "_v")
    return pc.if_else(versioned, cut, names)


def valid_utf8(arr: pa.Array) -> pa.Array:
    """ADBC passes SQLite TEXT bytes through unchecked; repair invalid UTF-8 (rare) here."""
    try:
        arr.validate(full=True)
        return arr
    except pa.ArrowInvalid:
        raw = arr.cast(pa.binary()).to_pylist()
        return pa.array([None if b is None else b.decode("utf-8", "replace") for b in raw], STR)


def duration(b: pa.RecordBatch) -> pa.Array:
    return pc.subtract(b.column("end"), b.column("start"))


def to_pandas(table: pa.Table, spec: TableSpec | None = None) -> pd.DataFrame:
    """Arrow -> pandas with stable dtypes: integer columns the contract marks nullable are
    always pandas nullable integers (Int64...), the others plain NumPy integers (unless a
    report breaks the contract with a null, which then also yields a nullable integer)."""
    nullable = {c.name for c in spec.columns if c.nullable} if spec is not None else set()
    fix = {f.name: table.column(f.name) for f in table.schema
           if pa.types.is_integer(f.type) and (f.name in nullable or table.column(f.name).null_count)}
    # self_destruct frees each Arrow column as it is converted: peak memory ~1x, not 2x
    df = table.to_pandas(split_blocks=True, self_destruct=True)
    del table
    for name, col in fix.items():
        df[name] = col.to_pandas(types_mapper=_nullable_int)
    return df


def nullable_int64(values, missing) -> pd.arrays.IntegerArray:
    """Whole nanoseconds (or ids) as a pandas Int64 array, NA where ``missing`` is True."""
    import pandas as pd

    missing = np.asarray(missing, bool)
    return pd.arrays.IntegerArray(np.where(missing, 0, values).astype(np.int64), missing)


def _nullable_int(t: pa.DataType):
    import pandas as pd

    return {I32: pd.Int32Dtype(), I64: pd.Int64Dtype(), U32: pd.UInt32Dtype()}.get(t)


# ---- GPU activity ----------------------------------------------------------------------------
K = "CUPTI_ACTIVITY_KIND_KERNEL"
GPU_COMMON = (
    Column("start_ns", I64, "GPU start, ns on the session timeline"),
    Column("end_ns", I64, "GPU end, ns"),
    Column("duration_ns", I64, "end_ns - start_ns"),
    Column("pid", I32, "process id (from globalPid)"),
    Column("device_id", I32, "CUDA device id (TARGET_INFO_GPU.id)"),
    Column("context_id", U32, "CUDA context id"),
    Column("stream_id", U32, "CUDA stream id"),
    Column("correlation_id", U32, "links to the launching API call (cuda_api.correlation_id)"),
)
GRAPH_NODE = Column("graph_node_id", I64, "CUDA graph node that launched it (graph replays)", True)
GPU_SOURCE = ("start", "end", "globalPid", "deviceId", "contextId", "streamId", "correlationId")
#: what a GPU row means nothing without: when it ran, on which GPU, context and stream (its
#: process, globalPid, is that of the call that launched it where the export lacks it)
GPU_REQUIRED = ("start", "end", "deviceId", "contextId", "streamId")


def gpu_common(b: pa.RecordBatch, db: ExportDB | None = None) -> dict[str, pa.Array]:
    return {"start_ns": b.column("start"), "end_ns": b.column("end"), "duration_ns": duration(b),
            "pid": _pids(b, db), "device_id": b.column("deviceId"),
            "context_id": b.column("contextId"), "stream_id": b.column("streamId"),
            "correlation_id": b.column("correlationId")}


LAUNCH_SOURCE = ("shortName", "gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ",
                 "registersPerThread", "staticSharedMemory", "dynamicSharedMemory", "launchType",
                 "graphNodeId")


def _kernel_plain(db: ExportDB, launch: bool = True) -> Plain:
    """The kernels' SELECT; without ``launch``, the first read's (``Later``)."""
    return (*_plain(*GPU_SOURCE, *(LAUNCH_SOURCE if launch else ())),
            ("nameId", ("demangledName", "shortName")))


def _kernel_sql(db: ExportDB, launch: bool = True) -> str:
    return plain_sql(db, K, _kernel_plain(db, launch))


def _kernel_first(db: ExportDB, b: pa.RecordBatch) -> dict[str, pa.Array]:
    return {**gpu_common(b, db), "name": db.strings.lookup(b.column("nameId"))}


def _kernel_launch(db: ExportDB, b: pa.RecordBatch) -> dict[str, pa.Array]:
    return {
        "short_name": db.strings.lookup(b.column("shortName")),
        **{f"{k}_{a}": b.column(f"{k}{a.upper()}") for k in ("grid", "block") for a in "xyz"},
        "registers_per_thread": b.column("registersPerThread"),
        "static_shared_bytes": b.column("staticSharedMemory"),
        "dynamic_shared_bytes": b.column("dynamicSharedMemory"),
        "launch_type": labels(b.column("launchType"), db.enum_labels(
            "ENUM_CUDA_KERNEL_LAUNCH_TYPE", LAUNCH_TYPE)),
        "graph_node_id": b.column("graphNodeId"),
    }


KERNELS = TableSpec(
    name="kernels", source=K, trace="--trace=cuda",
    required=GPU_REQUIRED,
    doc="One row per CUDA kernel execution on the GPU.",
    columns=GPU_COMMON + (
        Column("name", DICT, "demangled kernel name, as `nsys stats` prints it"),
        Column("short_name", DICT, "base function name (shortName)"),
        Column("grid_x", I32, "grid size in x (blocks)"), Column("grid_y", I32, "grid size in y"),
        Column("grid_z", I32, "grid size in z"),
        Column("block_x", I32, "block size in x (threads)"), Column("block_y", I32, "block size in y"),
        Column("block_z", I32, "block size in z"),
        Column("registers_per_thread", I32, "registers per thread"),
        Column("static_shared_bytes", I32, "static shared memory per block"),
        Column("dynamic_shared_bytes", I32, "dynamic shared memory per block"),
        Column("launch_type", DICT, "Regular, Coop Single Device, ..."),
        GRAPH_NODE,
    ),
    sql=_kernel_sql,
    plain=_kernel_plain,
    convert=lambda db, b: {**_kernel_first(db, b), **_kernel_launch(db, b)},
    # the launch configuration: no recipe reads it
    later=Later(columns=("short_name", "grid_x", "grid_y", "grid_z", "block_x", "block_y",
                         "block_z", "registers_per_thread", "static_shared_bytes",
                         "dynamic_shared_bytes", "launch_type", "graph_node_id"),
                first_sql=lambda db: _kernel_sql(db, launch=False), first_convert=_kernel_first,
                first_plain=lambda db: _kernel_plain(db, launch=False),
                sources=LAUNCH_SOURCE, convert=_kernel_launch),
)

MC = "CUPTI_ACTIVITY_KIND_MEMCPY"


def _memcpy(db: ExportDB, b: pa.RecordBatch) -> dict[str, pa.Array]:
    kind = labels(b.column("copyKind"), db.enum_labels("ENUM_CUDA_MEMCPY_OPER", COPY_KIND))
    name = pc.binary_join_element_wise("[CUDA memcpy ", kind.dictionary, "]", "")
    mem = db.enum_labels("ENUM_CUDA_MEM_KIND", MEM_KIND)
    return {**gpu_common(b, db), "name": pa.DictionaryArray.from_arrays(kind.indices, name),
            "copy_kind": kind, "bytes": b.column("bytes"),
            "src_kind": labels(b.column("srcKind"), mem),
            "dst_kind": labels(b.column("dstKind"), mem),
            "graph_node_id": b.column("graphNodeId")}


MEMCPY = TableSpec(
    name="memcpy", source=MC, trace="--trace=cuda",
    required=GPU_REQUIRED + ("bytes",),
    doc="One row per CUDA memory copy on the GPU.",
    columns=GPU_COMMON + (
        Column("name", DICT, "'[CUDA memcpy Host-to-Device]' etc., as `nsys stats` prints it"),
        Column("copy_kind", DICT, "Host-to-Device, Device-to-Host, Device-to-Device, ..."),
        Column("bytes", I64, "bytes copied"),
        Column("src_kind", DICT, "source memory: Pageable, Pinned, Device, ..."),
        Column("dst_kind", DICT, "destination memory kind"),
        GRAPH_NODE,
    ),
    **_integers(MC, *GPU_SOURCE, "bytes", "copyKind", "srcKind", "dstKind", "graphNodeId"),
    convert=_memcpy,
)

MS = "CUPTI_ACTIVITY_KIND_MEMSET"
MEMSET = TableSpec(
    name="memset", source=MS, trace="--trace=cuda",
    required=GPU_REQUIRED + ("bytes",),
    doc="One row per CUDA memset on the GPU.",
    columns=GPU_COMMON + (
        Column("name", DICT, "'[CUDA memset]', as `nsys stats` prints it"),
        Column("bytes", I64, "bytes set"),
        Column("value", I32, "byte value written"),
        Column("mem_kind", DICT, "memory kind: Device, Managed, ..."),
        GRAPH_NODE,
    ),
    **_integers(MS, *GPU_SOURCE, "bytes", "value", "memKind", "graphNodeId"),
    convert=lambda db, b: {
        **gpu_common(b, db),
        "name": pa.DictionaryArray.from_arrays(pa.array(np.zeros(len(b), np.int32)),
                                               pa.array(["[CUDA memset]"])),
        "bytes": b.column("bytes"), "value": b.column("value"),
        "mem_kind": labels(b.column("memKind"), db.enum_labels("ENUM_CUDA_MEM_KIND", MEM_KIND)),
        "graph_node_id": b.column("graphNodeId"),
    },
)

SY = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"
SYNCS = TableSpec(
    name="syncs", source=SY, trace="--trace=cuda",
    required=GPU_REQUIRED,
    doc="One row per CUDA synchronization the host waited on (CUPTI synchronization activity).",
    columns=GPU_COMMON + (
        Column("sync_type", DICT, "Event sync, Stream wait sync, Stream sync, Context sync"),
        Column("event_id", I64, "CUDA event waited on, if any", True),
    ),
    **_integers(SY, *GPU_SOURCE, "syncType", "eventId"),
    convert=lambda db, b: {
        **gpu_common(b, db),
        "sync_type": labels(b.column("syncType"),
                            db.enum_labels("ENUM_CUPTI_SYNC_TYPE", SYNC_TYPE)),
        "event_id": b.column("eventId"),
    },
)

GT = "CUPTI_ACTIVITY_KIND_GRAPH_TRACE"
GRAPH_EXECS = TableSpec(
    name="graph_execs", source=GT, trace="--trace=cuda (graph-level tracing, nsys's default)",
    required=GPU_REQUIRED,
    doc="One row per execution of a CUDA graph as a whole on the GPU: what nsys records for a "
        "graph replay with --cuda-graph-trace=graph (its default), where the graph's kernels "
        "have no records of their own. Node-level traces (--cuda-graph-trace=node) have none.",
    columns=GPU_COMMON + (
        Column("graph_id", U32, "the CUDA graph"),
        Column("graph_exec_id", U32, "the executable graph instance replayed"),
    ),
    **_integers(GT, *GPU_SOURCE, "graphId", "graphExecId"),
    convert=lambda db, b: {
        **gpu_common(b, db), "graph_id": b.column("graphId"),
        "graph_exec_id": b.column("graphExecId"),
    },
)

# ---- CPU side --------------------------------------------------------------------------------
RT = "CUPTI_ACTIVITY_KIND_RUNTIME"
API_SOURCE = ("start", "end", "globalTid", "correlationId", "nameId", "callchainId",
              "eventClass", "returnValue")


def _api(db: ExportDB, b: pa.RecordBatch) -> dict[str, pa.Array]:
    return {"start_ns": b.column("start"), "end_ns": b.column("end"), "duration_ns": duration(b),
            "pid": pid_of(b.column("globalTid")), "tid": tid_of(b.column("globalTid")),
            "correlation_id": b.column("correlationId"),
            "name": db.strings.lookup(b.column("nameId"), strip_version),
            "api_kind": labels(b.column("eventClass"),
                               db.enum_labels("ENUM_NSYS_EVENT_CLASS", EVENT_CLASS)),
            "return_value": b.column("returnValue"),
            "callchain_id": b.column("callchainId")}


CUDA_API = TableSpec(
    name="cuda_api", source=RT, trace="--trace=cuda",
    required=("start", "end"),
    doc="One row per CUDA runtime or driver API call on a CPU thread (driver calls are in the "
        "same nsys table, told apart by api_kind).",
    columns=(
        Column("start_ns", I64, "CPU start, ns"), Column("end_ns", I64, "CPU end, ns"),
        Column("duration_ns", I64, "end_ns - start_ns"),
        Column("pid", I32, "process id"), Column("tid", I32, "thread id"),
        Column("correlation_id", U32, "links to kernels/memcpy/memset/syncs it caused"),
        Column("name", DICT, "API name as `nsys stats` prints it: a 4-digit version suffix "
               "dropped (cudaLaunchKernel_v7000 -> cudaLaunchKernel), a 5-digit one kept "
               "(cudaGraphLaunch_v10000)"),
        Column("api_kind", DICT, "CUDA runtime, CUDA driver, CUDA backtrace, ..."),
        Column("return_value", I32, "CUresult / cudaError_t", True),
        Column("callchain_id", I32, "CUDA_CALLCHAINS id when backtraces were recorded", True),
    ),
    # every column in the first read: api_kind and return_value were a later read once
    # (only api_sum reads them), but that second pass over 16M calls cost `report` ~1 s on
    # 16 cores, and reading them at first costs ~10% more SQLite decoding
    **_integers(RT, *API_SOURCE),
    convert=_api,
)

# ---- NVTX ------------------------------------------------------------------------------------
NV = "NVTX_EVENTS"


def _nvtx_sql(db: ExportDB, rows: tuple[int, int] | None = None) -> str:
    """NVTX ranges and marks with their text, domain and category names, in start order
    (``rows``: only rowids [lo, hi), still in start order)."""
    have = set(db.columns(NV))

    def col(alias: str, name: str) -> str:
        return f"{alias}.{name}" if name in have else "NULL"

    def text(a: str) -> str:
        # registered strings live in StringIds (textId), the rest inline (text)
        if "textId" in have and db.has("StringIds"):
            return (f"COALESCE({col(a, 'text')}, "
                    f"(SELECT value FROM StringIds WHERE id = {a}.textId))")
        return col(a, "text")

    dom = col("e", "domainId")
    # domain names come from eventType 75 rows, category names from eventType 33 rows, both
    # scoped to the process (ids are per process)
    names = (f"SELECT {col('n', 'domainId')} AS domainId, n.globalTid & ~0xFFFFFF AS gpid, "
             f"max({text('n')}) AS name FROM {NV} n WHERE n.eventType = 75 GROUP BY 1, 2")
    cats = (f"SELECT {col('c', 'domainId')} AS domainId, c.globalTid & ~0xFFFFFF AS gpid, "
            f"{col('c', 'category')} AS category, max({text('c')}) AS name FROM {NV} c "
            "WHERE c.eventType = 33 GROUP BY 1, 2, 3")
    if rows is not None:  # one of many range queries: each would scan the table for these
        names = db.once("nvtx_domains", lambda: _values(db.query(names), 3)) or names
        cats = db.once("nvtx_categories", lambda: _values(db.query(cats), 4)) or cats
    return f"""
        WITH names(domainId, gpid, name) AS ({names}),
             cats(domainId, gpid, category, name) AS ({cats})
        SELECT e.start, e."end", e.eventType, e.globalTid, {col('e', 'endGlobalTid')} AS endGlobalTid,
               {text('e')} AS text, COALESCE({dom}, 0) AS domainId, d.name AS domain,
               k.name AS categoryName, {col('e', 'color')} AS color, {col('e', 'rangeId')} AS rangeId
        FROM {NV} e
        LEFT JOIN names d ON d.domainId = {dom} AND d.gpid = (e.globalTid & ~0xFFFFFF)
        LEFT JOIN cats k ON k.domainId = {dom} AND k.gpid = (e.globalTid & ~0xFFFFFF)
                        AND k.category = {col('e', 'category')}
        WHERE e.eventType IN ({NVTX_TYPES}){
            f" AND e.rowid >= {rows[0]} AND e.rowid < {rows[1]}" if rows else ""}
        ORDER BY e.start"""


def _values(rows: list[tuple], width: int) -> str | None:
    """``rows`` (ints, text, NULLs) as an SQL VALUES list of ``width`` columns (an empty one
    selects nothing); None where a value cannot be written as a literal."""
    def literal(v) -> str:
        if v is None:
            return "NULL"
        if isinstance(v, int):
            return str(v)
        if isinstance(v, str) and "\x00" not in v:
            return "'" + v.replace("'", "''") + "'"
        raise ValueError(v)

    try:
        listed = ", ".join("(" + ", ".join(literal(v) for v in r) + ")" for r in rows)
    except ValueError:
        return None
    return f"VALUES {listed}" if rows else f"SELECT {', '.join(['NULL'] * width)} WHERE 0"


def _nvtx_convert(db: ExportDB, b: pa.RecordBatch) -> dict[str, pa.Array]:
    text = valid_utf8(b.column("text").cast(STR))
    domain = valid_utf8(b.column("domain").cast(STR))
    # nsys stats names a range "domain:text"; in the default domain push/pop ranges are just
    # "text" while start/end ranges are ":text" (its nvtx_sum joins coalesce(domain, ''))
    start_end = pc.is_in(b.column("eventType"), pa.array([60, 71], I64))
    prefix = pc.if_else(pc.and_(pc.is_null(domain), start_end), "", domain)
    text_or_empty = pc.fill_null(text, "")  # payload-only ranges have no text: name them ""
    name = pc.if_else(pc.is_null(prefix), text_or_empty,
                      pc.binary_join_element_wise(prefix, text_or_empty, ":"))
    end = b.column("end")
    gt = b.column("globalTid")
    endgt = b.column("endGlobalTid")
    return {
        "start_ns": b.column("start"), "end_ns": end,
        "duration_ns": pc.subtract(end, b.column("start")),
        "pid": pid_of(gt), "tid": tid_of(gt),
        "end_tid": tid_of(pc.coalesce(endgt.cast(I64), gt.cast(I64))),
        "kind": labels(b.column("eventType"), NVTX_KIND),
        "name": name.dictionary_encode(), "text": text, "domain": domain.dictionary_encode(),
        "domain_id": b.column("domainId"),
        "category": valid_utf8(b.column("categoryName").cast(STR)).dictionary_encode(),
        "color": b.column("color"), "range_id": b.column("rangeId"),
        "depth": pa.nulls(len(b), I32),
    }


def _nvtx_depth(tables: Iterator[pa.Table]) -> pa.Array:
    """Nesting depth of each range among the ranges of its own kind on its own thread
    (push/pop ranges per thread; start/end ranges per thread they started on). 0 = outermost.
    ``tables``: start_ns, end_ns, pid, tid and kind of the whole table in start order, part
    by part, held as three NumPy columns (start, end, and one key per (pid, tid, kind), -1
    for marks): 13.6M ranges took +0.72 GB at peak, no pandas groups."""
    cols: dict[str, list[np.ndarray]] = {"start": [], "end": [], "key": []}
    for t in tables:
        cols["start"].append(t.column("start_ns").to_numpy())
        # a range never closed holds every later one (depth 0 if it is outermost, not -1)
        cols["end"].append(pc.fill_null(t.column("end_ns"), np.iinfo(np.int64).max).to_numpy())
        # pid and tid are 24-bit; a range without a thread (NULL globalTid) is of thread 0
        key = pc.fill_null(t.column("pid"), 0).to_numpy().astype(np.int64) << 26
        key |= pc.fill_null(t.column("tid"), 0).to_numpy().astype(np.int64) << 1
        kinds = [(c.dictionary.to_pylist(), c.indices.to_numpy(zero_copy_only=False))
                 for c in t.column("kind").chunks]
        kind = np.concatenate([np.array([{"mark": -1, "start_end": 1}.get(str(v), 0)
                                         for v in labels] or [0], np.int64)[codes]
                               for labels, codes in kinds]) if kinds else np.empty(0, np.int64)
        key |= np.maximum(kind, 0)
        key[kind < 0] = -1
        cols["key"].append(key)
    start, end, key = (np.concatenate(cols.pop(c)) if cols[c] else np.empty(0, np.int64)
                       for c in ("start", "end", "key"))
    depth = np.zeros(len(start), np.int32)  # marks: 0
    keys = np.unique(key)
    keys = keys[keys >= 0]
    if len(keys) == 1 and (key == keys[0]).all():
        groups, key = [None], None  # one thread, one kind, no marks (usual): no copies
    elif len(keys) <= 64:  # a few threads and kinds: one pass each, no sort of the keys
        groups = (np.flatnonzero(key == k).astype(np.int32 if len(key) < 2**31 else np.int64)
                  for k in keys)
    else:
        rows = np.flatnonzero(key >= 0)
        order = np.argsort(key[rows], kind="stable")
        rows = rows[order]
        del order
        key = key[rows]
        cut = np.flatnonzero(key[1:] != key[:-1]) + 1
        key = None
        groups = (rows[lo:hi] for lo, hi in zip(np.concatenate([[0], cut]),
                                                np.concatenate([cut, [len(rows)]])))
    for group in groups:  # rows of one (pid, tid, kind), in table order: in start order
        s = start if group is None else start[group]
        if not np.all(s[1:] > s[:-1]):  # equal starts: the longer range opens first
            group = np.arange(len(start)) if group is None else group
            order = np.lexsort((-end[group], s))
            group, s = group[order], s[order]
            del order
        ends = np.sort(end if group is None else end[group])
        for a in range(0, len(s), 1 << 22):  # ranges opened before minus closed by then
            b = min(a + (1 << 22), len(s))
            at = slice(a, b) if group is None else group[a:b]
            depth[at] = np.arange(a, b) - np.searchsorted(ends, s[a:b], side="right")
    return pa.array(depth, I32)


NVTX = TableSpec(
    name="nvtx", source=NV, trace="--trace=nvtx",
    required=("start", "eventType", "globalTid"),
    doc="NVTX push/pop ranges, start/end ranges and marks, with resolved text and domains.",
    columns=(
        Column("start_ns", I64, "CPU start, ns"),
        Column("end_ns", I64, "CPU end, ns (null for marks)", True),
        Column("duration_ns", I64, "end_ns - start_ns (null for marks)", True),
        Column("pid", I32, "process id"), Column("tid", I32, "thread that opened the range"),
        Column("end_tid", I32, "thread that closed it (start/end ranges may cross threads)"),
        Column("kind", DICT, "push_pop, start_end or mark"),
        Column("name", DICT, "'domain:text', as `nsys stats` prints it (default domain: "
                             "'text' for push/pop, ':text' for start/end ranges)"),
        Column("text", STR, "range text (inline or registered string)", True),
        Column("domain", DICT, "NVTX domain name; null for the default domain", True),
        Column("domain_id", I64, "NVTX domain id (0 = default)"),
        Column("category", DICT, "category name, if one was registered", True),
        Column("color", I64, "ARGB color, if set", True),
        Column("range_id", I64, "start/end range id", True),
        Column("depth", I32, "nesting depth on its thread among ranges of its kind, 0 = outermost"),
    ),
    sql=_nvtx_sql, convert=_nvtx_convert, ranged=lambda db, lo, hi: _nvtx_sql(db, (lo, hi)),
    finish=_nvtx_depth, finish_reads=("start_ns", "end_ns", "pid", "tid", "kind"),
    finish_column="depth",
)

# ---- GPU metrics, graphs, threads ------------------------------------------------------------
GM, GMI = "GPU_METRICS", "TARGET_INFO_GPU_METRICS"
#: GPU-metrics clocks labelled [MHz] that nsys (2025.3) records in Hz (1980009500 for a
#: 1980 MHz boost clock) are read in MHz, as labelled
GPU_METRICS_VALUE = ("CASE WHEN m.metricName LIKE '%[MHz]%' AND g.value > 100000 "
                     "THEN CAST(ROUND(g.value / 1e6) AS INTEGER) ELSE g.value END")
#: a GPU-metrics sample that cannot be: a share outside 0-100%, a clock outside 0-10 GHz, a
#: time more than a second before the session (nsys 2025.3 starts sampling ~0.1-0.2 ms before
#: the session's zero: those samples are real, and kept) (SQL over GPU_METRICS g joined to
#: TARGET_INFO_GPU_METRICS m)
GPU_METRICS_IMPOSSIBLE = (f"g.timestamp < -1000000000 OR (m.metricName LIKE '%\\%]%' ESCAPE '\\' AND "
                          f"(g.value < 0 OR g.value > 100)) OR (m.metricName LIKE '%[MHz]%' "
                          f"AND (({GPU_METRICS_VALUE}) < 0 OR ({GPU_METRICS_VALUE}) > 10000))")


def gpu_metrics_impossible_sql() -> str:
    """SQL counting the GPU-metrics samples every read leaves out (``GPU_METRICS_IMPOSSIBLE``)."""
    return (f"SELECT count(*) FROM {GM} g JOIN {GMI} m ON g.typeId = m.typeId "
            f"AND g.metricId = m.metricId WHERE {GPU_METRICS_IMPOSSIBLE}")


GPU_METRICS = TableSpec(
    name="gpu_metrics", source=GM, trace="--gpu-metrics-devices=all",
    doc="GPU metrics samples in long form (Tensor Active, SMs Active, DRAM bandwidth, ...).",
    columns=(
        Column("timestamp_ns", I64, "sample time, ns"),
        Column("gpu", I32, "GPU index (typeId & 0xFF)"),
        Column("metric", DICT, "metric name as recorded, e.g. 'Tensor Active [Throughput %]'"),
        Column("value", I64, "sample value (percent for throughput metrics, MHz for clocks)"),
    ),
    # metricId is only unique per typeId: join on both; physically impossible samples are
    # left out (counted by ``gpu_metrics_impossible_sql``, said by the completeness check)
    sql=lambda db: f"SELECT g.timestamp, g.typeId, m.metricName, {GPU_METRICS_VALUE} AS value "
                   f"FROM {GM} g "
                   f"JOIN {GMI} m ON g.typeId = m.typeId AND g.metricId = m.metricId "
                   f"WHERE NOT ({GPU_METRICS_IMPOSSIBLE})",
    convert=lambda db, b: {
        "timestamp_ns": b.column("timestamp"),
        "gpu": pc.bit_wise_and(b.column("typeId").cast(I64), 0xFF),
        "metric": valid_utf8(b.column("metricName").cast(STR)).dictionary_encode(),
        "value": b.column("value"),
    },
    split=False,
)

GN = "CUDA_GRAPH_NODE_EVENTS"
CUDA_GRAPH_NODES = TableSpec(
    name="cuda_graph_nodes", source=GN, trace="--trace=cuda --cuda-graph-trace=node",
    doc="CUDA graph node creation/instantiation events on the host (graph-node tracing).",
    columns=(
        Column("start_ns", I64, "CPU time, ns"), Column("end_ns", I64, "CPU end, ns"),
        Column("pid", I32, "process id"), Column("tid", I32, "thread id"),
        Column("graph_node_id", I64, "node id (kernels.graph_node_id)"),
        Column("original_graph_node_id", I64, "node it was cloned from", True),
        Column("name", DICT, "event name, if recorded", True),
        Column("api_kind", DICT, "event class"),
    ),
    sql=lambda db: select(db, GN, "start", "end", "globalTid", "graphNodeId",
                          "originalGraphNodeId", "nameId", "eventClass"),
    convert=lambda db, b: {
        "start_ns": b.column("start"), "end_ns": b.column("end"),
        "pid": pid_of(b.column("globalTid")), "tid": tid_of(b.column("globalTid")),
        "graph_node_id": b.column("graphNodeId"),
        "original_graph_node_id": b.column("originalGraphNodeId"),
        "name": db.strings.lookup(b.column("nameId")),
        "api_kind": labels(b.column("eventClass"),
                           db.enum_labels("ENUM_NSYS_EVENT_CLASS", EVENT_CLASS)),
    },
    split=False,
)

TN = "ThreadNames"
THREADS = TableSpec(
    name="threads", source=TN, trace="",
    doc="Named threads with their process.",
    columns=(
        Column("pid", I32, "process id"), Column("tid", I32, "thread id"),
        Column("thread_name", STR, "thread name", True),
        Column("process_name", STR, "process name (PROCESSES.name)", True),
        Column("priority", I32, "thread priority", True),
    ),
    sql=lambda db: (
        f"SELECT t.globalTid, s.value AS threadName, "
        f"{'p.name' if db.has('PROCESSES') else 'NULL'} AS processName, t.priority "
        f"FROM {TN} t LEFT JOIN StringIds s ON s.id = t.nameId "
        + ("LEFT JOIN PROCESSES p ON p.globalPid = (t.globalTid & ~0xFFFFFF) "
           if db.has("PROCESSES") else "") + "ORDER BY t.globalTid"),
    convert=lambda db, b: {
        "pid": pid_of(b.column("globalTid")), "tid": tid_of(b.column("globalTid")),
        "thread_name": valid_utf8(b.column("threadName").cast(STR)),
        "process_name": valid_utf8(b.column("processName").cast(STR)),
        "priority": b.column("priority"),
    },
    split=False,
)

MU = "CUDA_GPU_MEMORY_USAGE_EVENTS"
MEM_OPERATION = {0: "Allocation", 1: "Deallocation"}
MEMORY = TableSpec(
    name="memory", source=MU, trace="--cuda-memory-usage=true",
    doc="One row per GPU memory allocation or free the CUDA driver made (device, pinned host, "
        "managed and static memory, memory pools), with the CUDA API call it correlates to.",
    columns=(
        Column("start_ns", I64, "when the allocation or free happened, ns"),
        Column("pid", I32, "process id (from globalPid)"),
        Column("device_id", I32, "GPU"),
        Column("context_id", I32, "CUDA context"),
        Column("operation", DICT, "Allocation or Deallocation"),
        Column("bytes", I64, "size of the allocation (also given on its free)"),
        Column("kind", DICT, "memory kind: Device, Pinned, Pageable, Managed, Array, Device "
                             "Static, Managed Static, Unknown"),
        Column("address", I64, "virtual address (pairs a free with its allocation)"),
        Column("correlation_id", U32, "the CUDA API call that made it (cuda_api.correlation_id)",
               True),
        Column("stream_id", I32, "stream, for stream-ordered (pool) allocations", True),
        Column("pool_address", I64, "memory pool it came from (stream-ordered allocations)", True),
        Column("pool_size_bytes", I64, "that pool's size after the operation", True),
        Column("name", STR, "name given to the allocation, if any", True),
    ),
    sql=lambda db: select(db, MU, "start", "globalPid", "deviceId", "contextId",
                          "memoryOperationType", "bytes", "memKind", "address", "correlationId",
                          "streamId", "localMemoryPoolAddress", "localMemoryPoolSize", "name"),
    convert=lambda db, b: {
        "start_ns": b.column("start"), "pid": pid_of(b.column("globalPid")),
        "device_id": b.column("deviceId"), "context_id": b.column("contextId"),
        "operation": labels(b.column("memoryOperationType"),
                            db.enum_labels("ENUM_CUDA_DEV_MEM_EVENT_OPER", MEM_OPERATION)),
        "bytes": b.column("bytes"),
        "kind": labels(b.column("memKind"), db.enum_labels("ENUM_CUDA_MEM_KIND", MEM_KIND)),
        "address": b.column("address"), "correlation_id": b.column("correlationId"),
        "stream_id": b.column("streamId"), "pool_address": b.column("localMemoryPoolAddress"),
        "pool_size_bytes": b.column("localMemoryPoolSize"), "name": b.column("name"),
    },
    split=False,
)

TABLES: dict[str, TableSpec] = {t.name: t for t in (
    KERNELS, CUDA_API, MEMCPY, MEMSET, SYNCS, GRAPH_EXECS, NVTX, GPU_METRICS, CUDA_GRAPH_NODES,
    THREADS, MEMORY)}


def entry_spec(name: str) -> TableSpec:
    """The spec that builds cache entry ``name`` from rowid ranges (in reader processes): a
    table's, its ``first`` read's when it has later columns, or those (``<table>+``)."""
    if name.endswith("+"):
        return TABLES[name[:-1]].rest
    spec = TABLES[name]
    return spec if spec.later is None else spec.first


def build_batch(spec: TableSpec, db: ExportDB, batch: pa.RecordBatch) -> pa.RecordBatch:
    """Convert one raw batch into the contract's schema (casting each column safely)."""
    cols = spec.convert(db, batch)
    arrays = []
    for c in spec.columns:
        a = cols[c.name]
        if isinstance(a, pa.ChunkedArray):
            a = a.combine_chunks()
        # unchecked casts: values come from CUPTI fields of exactly these widths, and a checked
        # cast costs more than reading the column from SQLite
        arrays.append(a if a.type == c.type else a.cast(c.type, safe=False))
    return pa.RecordBatch.from_arrays(arrays, schema=spec.schema)


def tables_markdown() -> str:
    """The column contract as Markdown (docs/tables.md is this text; a test keeps it current)."""
    out = ["# nsightlab tables", "",
           "Generated from `nsightlab/read/tables.py` (`python -m nsightlab.read.tables > docs/tables.md`).",
           "Every `Report.<name>()` returns these columns, whatever nsys version wrote the report.",
           "Integer columns marked *nullable* are pandas nullable integers (`Int64`...); string",
           "columns of repeated values are categoricals.", "",
           "**Rows left out.** An activity row (kernels, memcpy, memset, syncs, graph_execs,",
           "cuda_api) whose start/end cannot be — NULL or not an integer, end before start, or",
           "lasting longer than the whole trace (ANALYSIS_DETAILS) — is left out of every read and",
           "counted in a warning. Exact duplicate kernel, memcpy and memset rows (same correlation",
           "id, device, stream, start and end) are kept once and counted in a warning; API calls",
           "are never deduplicated (2022-era exports hold two rows per call). Work already running",
           "when a capture or slice opened, or still running when it closed, is real: it is kept,",
           "as `nsys stats` keeps it, and noted. Rows are read in no particular order: every",
           "\"previous\" and \"next\" lookup sorts by time first.", ""]
    for spec in TABLES.values():
        out += [f"## `{spec.name}`", "", spec.doc, "",
                f"Source: `{spec.source}`; recorded by "
                + (f"`nsys profile {spec.trace}`." if spec.trace else "every nsys profile."), "",
                "| column | type | meaning |", "|---|---|---|"]
        for c in spec.columns:
            typ = "string (categorical)" if pa.types.is_dictionary(c.type) else str(c.type)
            out.append(f"| `{c.name}` | {typ}{', nullable' if c.nullable else ''} | {c.doc} |")
        out.append("")
    return "\n".join(out)


if __name__ == "__main__":
    print(tables_markdown(), end="")
