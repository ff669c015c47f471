"""``nsightlab.open(path) -> Report``: one Nsight Systems report, whatever nsys wrote it.

A Report is a read-only SQLite export with its metadata (nsys and schema versions, GPUs,
processes, time span, which tables exist and how to record the missing ones) and public
accessors that hand out the tables of ``nsightlab.read.tables`` as pandas DataFrames with one column
contract. Finding the export is ``nsightlab.read.locate``' job, reading and caching tables
``nsightlab.read.reader``'s, keeping derived results ``nsightlab.read.result_store``'.
"""
from __future__ import annotations

import os
from collections.abc import Callable
from functools import cached_property
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from nsightlab.errors import UnknownTableError
from nsightlab.read import frames, metadata
from nsightlab.read.db import ExportDB
from nsightlab.read.reader import TableReader
from nsightlab.read.result_store import ResultStore
from nsightlab.read.parallel import readers
from nsightlab.read.store import ReadStore
from nsightlab.read.table_cache import EntryMeta, TableCache, extent, identity, part_columns, \
    remove_stale
from nsightlab.read.tables import (
    NVTX_TYPES,
    TABLES,
    TableSpec,
    breaks_order,
    check_columns,
    duration_limit,
    invalid_sql,
    to_pandas,
)


#: what it means that a table of work an application may simply not do is absent although
#: CUDA was traced: none of that work in this run, not a lost trace (``Report.missing_hint``)
NONE_IN_RUN = {"graph_execs": "the application launched no CUDA graph",
               "cuda_graph_nodes": "the application launched no CUDA graph",
               "memcpy": "the application made no memory copies",
               "memset": "the application set no memory"}
#: the two tables of CUDA graphs: one at graph level, one node by node (a trace has one)
GRAPH_TABLES = ("graph_execs", "cuda_graph_nodes")


def _rows_of(table: str) -> str:
    """SQL that keeps the source rows of ``table``: NVTX_EVENTS also holds domain and
    registration events, which are not ranges or marks."""
    return f" WHERE eventType IN ({NVTX_TYPES})" if table == "nvtx" else ""


class Report:
    """One nsys SQLite export, read-only. Tables come back as DataFrames (see ``TABLES``)."""

    def __init__(self, sqlite_path: str | os.PathLike, *, cache_root: Path | None = None,
                 source: Path | None = None, progress: Callable[[str], None] | None = None,
                 store: ReadStore | None = None):
        self.path = Path(sqlite_path)
        self.source = Path(source) if source is not None else self.path
        self.db = ExportDB(self.path, self.source)
        self._meta = metadata.export_meta(self.db)
        #: its table cache and reads under way (``read.store``): the one its open began, or a
        #: process's view's (``ReadStore.for_pid``); by default a new one for ``cache_root``
        self.store = store if store is not None else ReadStore(self.path, cache_root)
        cache_root = self.store.root
        if cache_root is not None:  # what killed runs left behind
            remove_stale(cache_root)
            remove_stale(cache_root / "results")
        self._reader = self.store.reader = TableReader(self.db, self.store, progress)
        #: derived results (recipes, run profiles) of this report; None without a cache
        self.results = ResultStore(cache_root / "results") if cache_root is not None else None
        #: recipe answers given in this process (``Recipe.run``), by recipe, code and parameters
        self.answers: dict = {}

    def __repr__(self) -> str:
        return (f"<Report {self.path.name}: nsys {self.nsys_version}, schema "
                f"{self.schema_version}, {len(self.gpus)} GPU(s)>")

    def _repr_html_(self) -> str:
        """What the export holds, for a notebook: versions, GPUs, span, rows per table."""
        import html

        info = self.info()
        span = f"{info['span_ns'] / 1e9:.3f} s" if info["span_ns"] is not None else "-"
        rows = "".join(f"<tr><td>{html.escape(t)}</td><td style='text-align:right'>{n:,}</td></tr>"
                       for t, n in info["tables"].items() if n)
        gpus = ", ".join(str(g.get("name", g.get("device_id"))) for g in info["gpus"]) or "-"
        return (f"<div><b>Report</b> {html.escape(str(self.source))}<br>nsys "
                f"{html.escape(str(info['nsys_version']))}, schema "
                f"{html.escape(str(info['schema_version']))}; GPUs: {html.escape(gpus)}; span "
                f"{span}<table><tr><th>table</th><th>rows</th></tr>{rows}</table></div>")

    @property
    def cache(self) -> TableCache | None:
        """The Parquet table cache (None when off, or after its folder proved unwritable)."""
        return self.store.cache

    def note(self, message: str) -> None:
        """Tell the user something on the progress channel (stderr in the CLI), if any."""
        if self._reader.progress is not None:
            self._reader.progress(message)

    @property
    def rows_read(self) -> int:
        """Table rows this Report has handed out so far (from the cache or SQLite)."""
        return self._reader.rows_read

    @property
    def identity(self) -> dict:
        """The export's identity (resolved path, size, mtime): what cached results key on."""
        return identity(self.path)

    # ---- metadata -----------------------------------------------------------------------
    @property
    def nsys_version(self) -> str | None:
        """Version of the nsys that exported this file, e.g. '2025.3.2.0'."""
        return self._meta.get("EXPORT_PRODUCT_VERSION")

    @property
    def schema_version(self) -> str | None:
        """Export schema version, e.g. '3.20.3'."""
        return self._meta.get("EXPORT_SCHEMA_VERSION")

    @cached_property
    def gpus(self) -> pd.DataFrame:
        """GPUs of the target: device_id, name, chip, sm_count, memory_bytes, compute_capability,
        bus_location."""
        return metadata.gpus(self.db)

    @cached_property
    def processes(self) -> pd.DataFrame:
        """Processes in the report: pid, name, uses_cuda (it created CUDA streams)."""
        return metadata.processes(self.db)

    @cached_property
    def span_ns(self) -> tuple[int, int] | None:
        """(start_ns, end_ns) of the profiling session."""
        return metadata.span(self.db)

    def has(self, table: str) -> bool:
        """Whether the report recorded ``table`` (an nsightlab table name)."""
        return self.spec(table).present(self.db)

    @cached_property
    def drivers(self) -> dict[str, str]:
        """NVIDIA driver and CUDA versions where the export records them (``driver``,
        ``cuda``); empty otherwise."""
        return metadata.drivers(self.db)

    @cached_property
    def capture_manifest(self) -> dict:
        """The manifest of the capture this report came from ({} for a plain report)."""
        return metadata.capture_manifest(self.source)

    @cached_property
    def capture_options(self) -> dict[str, str]:
        """The options nsys recorded the report with (META_DATA_CAPTURE; empty before 2023)."""
        return metadata.capture_options(self.db)

    def traced(self, what: str) -> bool:
        """Whether ``what`` (CUDA, NVTX) was traced: as the capture options say, else (an
        older nsys, or an export another tool wrote) CUDA was when CUDA calls or kernels are
        recorded; NVTX has no other table to tell."""
        said = metadata.traced(self.capture_options, what)
        if said is not None:
            return said
        return what == "CUDA" and any(self.spec(t).present(self.db) for t in ("cuda_api", "kernels"))

    def missing_hint(self, table: str) -> str | None:
        """None if ``table`` is present, else how to record it next time (never an option
        that was already on: then what the absence means; for work an application may not
        do, CUDA graphs or copies, "none in this run", not an alarm)."""
        spec = self.spec(table)
        if spec.present(self.db):
            return None
        what = "NVTX" if table == "nvtx" else "CUDA" if "--trace=cuda" in spec.trace else None
        other_graphs = table in GRAPH_TABLES and any(
            self.spec(t).present(self.db) for t in GRAPH_TABLES if t != table)
        if what and self.traced(what) and not other_graphs:
            if table in NONE_IN_RUN:
                return (f"{self.source.name} has no {spec.source} table: none in this run "
                        f"({what} was traced; {NONE_IN_RUN[table]})")
            return (f"{self.source.name} has no {spec.source} table although {what} was traced: "
                    "the application recorded none, or the trace was lost")
        how = f"profile with nsys profile {spec.trace}" if spec.trace else "profile it again"
        return f"{self.source.name} has no {spec.source} table: {how}"

    def row_count(self, table: str) -> int:
        """Rows of nsightlab table ``table`` (0 where the report lacks it)."""
        spec = self.spec(table)
        if not spec.present(self.db):
            return 0
        if self._is_cut(table):  # its rows are in the cache entry cut from the whole report's
            self.prefetch([table])
        meta = self.cache.meta(table) if self.cache is not None else None
        if meta is not None:  # rows kept and left out, counted when it was cached (a count
            # of 8M kernels in SQLite: 0.2 s)
            return sum(p.rows for p in meta.parts) + (meta.dropped or 0)
        check_columns(self.db, spec)  # a table it cannot read is named, not counted
        return self.db.query(f'SELECT count(*) FROM "{spec.source}"{_rows_of(table)}')[0][0]

    def has_rows(self, table: str) -> bool:
        """Whether ``table`` is present and holds at least one row (one cheap query)."""
        spec = self.spec(table)
        if not spec.present(self.db):
            return False
        if self._is_cut(table):  # its cache entry, cut from the whole report's
            return self.row_count(table) > 0
        check_columns(self.db, spec)
        return bool(self.db.query(f'SELECT 1 FROM "{spec.source}"{_rows_of(table)} LIMIT 1'))

    def _is_cut(self, table: str) -> bool:
        return table in self.store.cut

    def _in_whole(self, table: str, where: str) -> tuple[ExportDB, str]:
        """(the export that holds ``table``'s rows, ``where`` for this Report's rows there):
        this one, or for a table cut from the whole report's cache, the whole report's with
        this process's filter."""
        if not self._is_cut(table):
            return self.db, where
        whole = self.store.whole.reader.db
        keep = whole.process_filter(self.spec(table).source, self.store.pid)
        return whole, f"({where}) AND {keep}" if keep else where

    def any_where(self, table: str, where: str) -> bool:
        """Whether some row of ``table`` (as the export has it: source columns) satisfies SQL
        ``where``."""
        db, where = self._in_whole(table, where)
        source = self.spec(table).source
        if not self.spec(table).present(db):
            return False
        return bool(db.query(f'SELECT EXISTS (SELECT 1 FROM "{source}" WHERE {where})')[0][0])

    @cached_property
    def row_counts(self) -> dict[str, int]:
        """Rows per nsightlab table (0 where the report lacks it)."""
        return {name: self.row_count(name) for name in TABLES}

    def info(self) -> dict:
        """What the export holds, as plain data (``nsightlab info --json`` adds the trace
        completeness findings of ``nsightlab.analysis.completeness`` as ``warnings``)."""
        span = self.span_ns
        start, end = span if span is not None else (None, None)
        return {
            "path": str(self.source), "sqlite": str(self.path),
            "nsys_version": self.nsys_version, "schema_version": self.schema_version,
            "gpus": self.gpus.to_dict("records"), "processes": self.processes.to_dict("records"),
            "span_ns": None if span is None else end - start, "start_ns": start, "end_ns": end,
            "tables": self.row_counts,
            "missing": {t: self.missing_hint(t) for t in TABLES if not self.has(t)},
        }

    # ---- tables -------------------------------------------------------------------------
    def spec(self, name: str) -> TableSpec:
        """The column contract of table ``name`` (UnknownTableError for other names)."""
        try:
            return TABLES[name]
        except KeyError:
            raise UnknownTableError(
                f"{name!r} is not an nsightlab table; choose one of {', '.join(TABLES)}") from None

    def _columns(self, spec: TableSpec, columns: list[str] | None) -> list[str]:
        if columns is None:
            return spec.schema.names
        unknown = [c for c in columns if c not in spec.schema.names]
        if unknown:
            raise UnknownTableError(
                f"{spec.name} has no column(s) {', '.join(unknown)}; its columns are "
                f"{', '.join(spec.schema.names)}")
        return list(columns)

    def table(self, name: str, columns: list[str] | None = None) -> pd.DataFrame:
        """Table ``name`` as a DataFrame with the contract's columns (or just ``columns``).

        A table the report lacks is an empty frame with the right columns; ``missing_hint``
        says how to record it.
        """
        spec = self.spec(name)
        keep = self._columns(spec, columns)
        if spec.present(self.db) and spec.split and frames.supported(spec, keep):
            return self._reader.frame(spec, keep)
        return to_pandas(self.arrow(name, columns), spec)

    def arrow(self, name: str, columns: list[str] | None = None) -> pa.Table:
        """Table ``name`` as an Arrow table (see ``table``)."""
        spec = self.spec(name)
        keep = self._columns(spec, columns)
        if not spec.present(self.db):
            return spec.schema.empty_table().select(keep)
        return self._reader.arrow(spec, keep)

    def take(self, name: str, columns: list[str], rows) -> pd.DataFrame:
        """Rows at positions ``rows`` of ``columns`` of table ``name``, in the order given,
        without holding whole columns of a cached big table (see ``TableReader.take``)."""
        spec = self.spec(name)
        keep = self._columns(spec, columns)
        rows = np.asarray(rows, dtype=np.int64)  # int32 rows would be widened per batch
        if not (spec.present(self.db) and spec.split):
            return self.table(name, keep).iloc[rows].reset_index(drop=True)
        return self._reader.take(spec, keep, rows)

    #: a kernel's launch configuration: nsightlab's columns and the export's
    LAUNCH = {"grid_x": "gridX", "grid_y": "gridY", "grid_z": "gridZ", "block_x": "blockX",
              "block_y": "blockY", "block_z": "blockZ", "static_shared_bytes":
              "staticSharedMemory", "dynamic_shared_bytes": "dynamicSharedMemory"}

    def launches_at(self, rows) -> pd.DataFrame:
        """The launch configuration (``LAUNCH``: grid, block, shared memory) of the kernels at
        positions ``rows`` (sorted). A few iterations' kernels are read from SQLite by the
        rowid span they cover, checked row by row against the cached start times (the launch
        columns of an 8M-kernel table are not read whole for them); where the rows and the
        export are not in step (a process's view, dropped duplicates) through ``take``."""
        rows = np.asarray(rows, np.int64)
        source = self.spec("kernels").source
        if len(rows) and not self.store.cut and self.spec("kernels").present(self.db) \
                and set(self.LAUNCH.values()) <= set(self.db.columns(source)):
            lo, hi = self.db.rowid_bounds(source)
            n = self.row_count("kernels")
            if lo is not None and hi - lo + 1 == n and rows[-1] < n:
                got = pd.DataFrame(np.array(self.db.query(  # NULL: NaN
                    f'SELECT start, {", ".join(self.LAUNCH.values())} FROM "{source}" '
                    "WHERE rowid >= ? AND rowid <= ? ORDER BY rowid",
                    (int(lo + rows[0]), int(lo + rows[-1]))), dtype=np.float64).reshape(
                    -1, 1 + len(self.LAUNCH)), columns=["start", *self.LAUNCH])
                starts = self.table("kernels", ["start_ns"])["start_ns"].to_numpy(np.int64)
                if len(got) == rows[-1] - rows[0] + 1:
                    got = got.iloc[rows - rows[0]]
                    if (got["start"].to_numpy(np.int64) == starts[rows]).all():
                        return got[list(self.LAUNCH)].reset_index(drop=True)
        return self.take("kernels", list(self.LAUNCH), rows)

    def prefetch(self, tables: list[str]) -> None:
        """Build the Parquet cache of ``tables`` now (those the report has), so later reads
        are fast; nothing without a cache."""
        for name in tables:
            if self.has(name):
                self._reader.ensure_cached(self.spec(name))

    def kernels(self, columns: list[str] | None = None) -> pd.DataFrame:
        """CUDA kernels (see ``nsightlab.read.tables.KERNELS`` for the columns)."""
        return self.table("kernels", columns)

    def cuda_api(self, columns: list[str] | None = None) -> pd.DataFrame:
        """CUDA runtime and driver API calls."""
        return self.table("cuda_api", columns)

    def memcpy(self, columns: list[str] | None = None) -> pd.DataFrame:
        """CUDA memory copies."""
        return self.table("memcpy", columns)

    def memset(self, columns: list[str] | None = None) -> pd.DataFrame:
        """CUDA memsets."""
        return self.table("memset", columns)

    def syncs(self, columns: list[str] | None = None) -> pd.DataFrame:
        """CUDA synchronizations (stream/event/context syncs the host waited on)."""
        return self.table("syncs", columns)

    def graph_execs(self, columns: list[str] | None = None) -> pd.DataFrame:
        """Whole-graph executions of a graph-level trace (nsys's default for CUDA graphs)."""
        return self.table("graph_execs", columns)

    def nvtx(self, columns: list[str] | None = None) -> pd.DataFrame:
        """NVTX ranges and marks with text, domain and nesting depth."""
        return self.table("nvtx", columns)

    def gpu_metrics(self, columns: list[str] | None = None) -> pd.DataFrame:
        """GPU metrics samples, long form (timestamp_ns, gpu, metric, value)."""
        return self.table("gpu_metrics", columns)

    def cuda_graph_nodes(self, columns: list[str] | None = None) -> pd.DataFrame:
        """CUDA graph node events (with --cuda-graph-trace=node)."""
        return self.table("cuda_graph_nodes", columns)

    def dropped_rows(self, table: str) -> int | None:
        """Rows of ``table`` left out of every read (missing or impossible timestamps), from
        its cache entry; None when the table is not cached."""
        return self._reader.dropped_rows(self.spec(table))

    def is_cached(self, table: str) -> bool:
        """Whether ``table`` (its first read) has a valid cache entry: reading it is cheap."""
        return self._cache_files(table) is not None

    def _cache_files(self, table: str) -> list[Path] | None:
        """The cache part files of ``table``'s first read; None when it has no valid entry."""
        return None if self.cache is None else self.cache.files(self._first_entry(table))

    def cache_meta(self, table: str) -> EntryMeta | None:
        """The meta.json of ``table``'s first read's cache entry; None when not cached."""
        return None if self.cache is None else self.cache.meta(self._first_entry(table))

    def _first_entry(self, table: str) -> str:
        """The cache entry of ``table``'s first read (a table with later columns has two)."""
        spec = self.spec(table)
        return spec.first.name if spec.later else spec.name

    def timed(self, table: str) -> bool:
        """Whether the export has activity table ``table`` with its start and end columns
        (absent or damaged otherwise: reading it says which)."""
        spec = self.spec(table)
        return spec.present(self.db) and {"start", "end"} <= set(self.db.columns(spec.source))

    def _over_kept_rows(self, table: str, select: str, where: str = "1",
                        db: ExportDB | None = None) -> list[tuple]:
        """``SELECT select`` over the rows of ``table`` (of ``db``, default this export's)
        that every read keeps and ``where`` holds for, one row per rowid range, the ranges
        scanned in parallel."""
        source, db = self.spec(table).source, db or self.db
        return db.over_ranges(
            f'SELECT {select} FROM "{source}" '
            f"WHERE NOT ({invalid_sql(duration_limit(db))}) AND ({where})",
            source, readers(db.rowid_span(source) or 0))

    def extent(self, table: str) -> tuple[int, int] | None:
        """(first start, last end) in ns of an activity table's rows that every read keeps
        (None: no such row): from its cache entry's statistics when it is cached, else one
        SQL aggregate over rowid ranges in parallel, never a read of the table."""
        if not self.timed(table):
            return None
        files = self._cache_files(table)
        if files is not None:
            return extent(files)
        rows = self._over_kept_rows(table, 'min(start), max("end")')
        los = [r[0] for r in rows if r[0] is not None]
        his = [r[1] for r in rows if r[1] is not None]
        return (int(min(los)), int(max(his))) if los else None

    def in_start_order(self, table: str) -> bool:
        """Whether the rows of activity table ``table`` come in start order, as reads return
        them (exports before nsys 2025.6 almost always do; later ones do not). Said by the
        cache entry's meta.json where the reader processes built it (each checks its part as
        it writes it); otherwise checked a cache part at a time when the table is cached: a
        200M-row column is never held whole for a yes or no (at 100M kernels that had taken
        sync_gaps to 2 GB). Once per export."""
        def check() -> bool:
            meta = self.cache_meta(table)
            if meta is not None and meta.in_start_order is not None:  # said by the reader
                return meta.in_start_order  # processes that built the entry
            files = self._cache_files(table)
            chunks = (self.table(table, ["start_ns"])["start_ns"].to_numpy(),) \
                if files is None else part_columns(files, "start_ns")
            last = None
            for s in (c for c in chunks if len(c)):
                if breaks_order(s, last):
                    return False
                last = s[-1]
            return True
        return self.db.once(f"in_start_order:{table}", check)

    def count_where(self, table: str, where: str) -> int:
        """Rows of an activity table that every read keeps and SQL ``where`` (on the source
        columns) holds for: one aggregate over rowid ranges in parallel."""
        if not self.timed(table):
            return 0
        db, where = self._in_whole(table, where)
        return int(sum(r[0] or 0 for r in self._over_kept_rows(table, "count(*)", where, db)))

    def duplicate_rows(self, table: str) -> int | None:
        """Exact duplicate rows of an activity table left out of every read (same correlation
        id, device, stream, start and end: one operation recorded twice); None until the
        table has been read."""
        return self._reader.duplicate_count(self.spec(table))

    def memory(self, columns: list[str] | None = None) -> pd.DataFrame:
        """GPU memory allocations and frees (with --cuda-memory-usage=true)."""
        return self.table("memory", columns)

    def threads(self, columns: list[str] | None = None) -> pd.DataFrame:
        """Named threads and their processes."""
        return self.table("threads", columns)

    def call_stacks(self, ids) -> dict[int, str]:
        """CPU call stacks of API calls recorded with backtraces (``cuda_api.callchain_id``):
        id -> frames, innermost first, joined with " < ". Empty where none were recorded."""
        return metadata.call_stacks(self.db, ids)

    def close(self) -> None:
        self.db.conn.close()

    def __enter__(self) -> "Report":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
