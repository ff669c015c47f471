"""``nsightlab.open(path) -> Report``: one Nsight Systems report, whatever nsys wrote it.

A Report wraps a read-only SQLite export and hands out the tables of ``nsightlab.tables`` as
pandas DataFrames with one column contract, reading through the Parquet cache. It also knows
the report's metadata (nsys and schema versions, GPUs, processes, time span, which tables
exist) and, for a table the report lacks, which ``nsys profile --trace`` option records it.
"""
from __future__ import annotations

import json
import lzma
import os
import shutil
import struct
from collections.abc import Callable
from functools import cached_property
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from . import frames, nsys as nsys_cli
from .cache import TableCache, default_root, keyed_dir
from .db import BATCH_ROWS, ExportDB, NSYS_REP_MAGIC
from .errors import CorruptReportError, NotAReportError, UnknownTableError, UnsupportedReportError
from .tables import NVTX_TYPES, TABLES, TableSpec, build_batch, to_pandas

#: tables whose presence says "this SQLite came from nsys export"
NSYS_MARKERS = ("StringIds", "TARGET_INFO_SESSION_START_TIME", "ThreadNames", "NVTX_EVENTS",
                "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME")
#: SQLite reader threads per big table: one per core of the 2-core target machine (3 measured
#: no faster); each also converts, caches and copies its own batches
PARALLEL_READERS = 2


def default_store() -> Path:
    """Where captures live: ``NSIGHTLAB_STORE``, else ``./captures``."""
    return Path(os.environ.get("NSIGHTLAB_STORE", "captures"))


def open(path: str | os.PathLike, *, cache: bool | None = None,
         cache_dir: str | os.PathLike | None = None,
         nsys: str | os.PathLike | None = None,
         progress: Callable[[str], None] | None = None) -> "Report":
    """Open an nsys report: a ``.sqlite`` export, a ``.nsys-rep``/``.qdrep``, a capture
    directory, or the name of a capture in the store (``NSIGHTLAB_STORE`` or ``./captures``).

    Args:
        path: what to open.
        cache: keep materialized tables as Parquet (default: on, unless ``NSIGHTLAB_NO_CACHE``).
        cache_dir: cache root for files outside a capture (default ``NSIGHTLAB_CACHE_DIR`` or
            ``~/.cache/nsightlab``).
        nsys: nsys executable for exporting ``.nsys-rep`` (default ``NSIGHTLAB_NSYS`` or PATH).
        progress: called with a one-line message before slow steps (exports, first reads of
            tables over a million rows); the CLI prints these to stderr.

    Raises:
        NsightlabError: the input cannot be read; the message names the file and the fix.
    """
    if cache is None:
        cache = not os.environ.get("NSIGHTLAB_NO_CACHE")
    root = Path(cache_dir) if cache_dir else default_root()
    p = Path(path)
    if not p.exists() and not p.is_absolute() and len(p.parts) == 1:
        stored = default_store() / p
        if stored.is_dir():
            p = stored
    if not p.exists():
        raise NotAReportError(
            f"{path}: no such file, directory or capture (captures are looked up in "
            f"{default_store()}; set NSIGHTLAB_STORE to look elsewhere)")
    capture = None
    if p.is_dir():
        capture, p = p, _capture_sqlite(p)
    if p.name.endswith(".sqlite.xz"):  # (a capture keeps the export in its own cache folder)
        p = _decompressed(p, capture / "cache" if capture is not None else keyed_dir(root, p),
                          progress)
    if p.suffix in nsys_cli.REPORT_SUFFIXES or _is_nsys_rep(p):
        p = _exported(p, capture, root, nsys, progress)
    if capture is not None:
        cache_root = capture / "cache"
    else:
        cache_root = keyed_dir(root, p)
    return Report(p, cache_root=cache_root if cache else None, source=Path(path),
                  progress=progress)


def _is_nsys_rep(p: Path) -> bool:
    try:
        with p.open("rb") as f:
            return f.read(len(NSYS_REP_MAGIC)) == NSYS_REP_MAGIC
    except OSError:
        return False


def _capture_sqlite(d: Path) -> Path:
    """The report inside a capture directory: manifest.json's ``sqlite`` (or ``nsys_rep``)
    artifact (or its ``.xz``), else the only ``*.sqlite`` (``.sqlite.xz``, ``.nsys-rep``) in it."""
    manifest = d / "manifest.json"
    if manifest.is_file():
        try:
            m = json.loads(manifest.read_text())
        except ValueError:
            raise CorruptReportError(f"{manifest}: not valid JSON; repair it or capture again") from None
        for key in ("sqlite", "nsys_rep"):
            if isinstance(m.get(key), str):
                for name in (m[key], m[key] + ".xz"):  # shared captures may compress the export
                    if (d / name).is_file():
                        return d / name
    for pattern in ("*.sqlite", "*.sqlite.xz", "*.nsys-rep", "*.qdrep"):
        found = sorted(d.glob(pattern))
        if len(found) == 1:
            return found[0]
        if len(found) > 1:
            raise NotAReportError(
                f"{d}: holds {len(found)} {pattern} files; open one of them directly "
                f"(e.g. {found[0]})")
    raise NotAReportError(f"{d}: a directory without an nsys report (.sqlite or .nsys-rep); "
                          "give a report file or a capture directory")


def _exported(rep: Path, capture: Path | None, root: Path, nsys: str | os.PathLike | None,
              progress: Callable[[str], None] | None) -> Path:
    """SQLite for a .nsys-rep: an up-to-date sibling ``X.sqlite`` (as ``nsys stats`` uses),
    else an export into the capture (ours) or the cache folder (never next to user files)."""
    sibling = rep.with_suffix(".sqlite")
    if sibling.is_file() and sibling.stat().st_mtime >= rep.stat().st_mtime:
        return sibling
    out = (capture / sibling.name) if capture is not None else keyed_dir(root, rep) / sibling.name
    if out.is_file():
        return out
    exe = nsys_cli.find_nsys(nsys)
    if progress is not None and exe is not None:
        progress(f"exporting {rep.name} to SQLite with {exe} ...")
    return nsys_cli.export_sqlite(rep, out, exe)


def _decompressed(xz: Path, folder: Path, progress: Callable[[str], None] | None) -> Path:
    """An xz-compressed export, decompressed once into ``folder`` (a cache, never beside it)."""
    out = folder / xz.name[: -len(".xz")]
    if not out.is_file():
        if progress is not None:
            progress(f"decompressing {xz.name} ...")
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
        try:
            with lzma.open(xz) as src, tmp.open("wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
        except (lzma.LZMAError, EOFError) as e:
            tmp.unlink(missing_ok=True)
            raise CorruptReportError(f"{xz}: not a complete xz file ({e}); copy it again") from None
        os.replace(tmp, out)
    return out


def _check_not_truncated(path: Path) -> None:
    """SQLite's header records the page count; a file shorter than that was cut off."""
    with path.open("rb") as f:
        head = f.read(100)
    if len(head) < 100:
        raise CorruptReportError(f"{path}: truncated SQLite file ({len(head)} bytes); export "
                                 "the report again with nsys export --type sqlite")
    page_size = struct.unpack(">H", head[16:18])[0]
    page_size = 65536 if page_size == 1 else page_size
    change, pages, valid_for = (struct.unpack(">I", head[o:o + 4])[0] for o in (24, 28, 92))
    size = path.stat().st_size
    if change == valid_for and pages and size < pages * page_size:
        raise CorruptReportError(
            f"{path}: truncated SQLite file ({size} of {pages * page_size} bytes); copy it "
            "again or export the report again with nsys export --type sqlite")


class Report:
    """One nsys SQLite export, read-only. Tables come back as DataFrames (see ``TABLES``)."""

    def __init__(self, sqlite_path: str | os.PathLike, *, cache_root: Path | None = None,
                 source: Path | None = None, progress: Callable[[str], None] | None = None):
        self.path = Path(sqlite_path)
        self.progress = progress
        self.source = source or self.path
        self.db = ExportDB(self.path)
        _check_not_truncated(self.path)
        self._meta = self._read_export_meta()
        self.cache = TableCache(cache_root, self.path) if cache_root is not None else None

    def __repr__(self) -> str:
        return (f"<Report {self.path.name}: nsys {self.nsys_version}, schema "
                f"{self.schema_version}, {len(self.gpus)} GPU(s)>")

    # ---- metadata -----------------------------------------------------------------------
    def _read_export_meta(self) -> dict[str, str]:
        for t in ("META_DATA_EXPORT", "EXPORT_META_DATA"):
            if self.db.has(t):
                return {str(k): str(v) for k, v in self.db.query(f"SELECT name, value FROM {t}")}
        if any(self.db.has(t) for t in NSYS_MARKERS):
            raise UnsupportedReportError(
                f"{self.path}: an nsys SQLite export without version metadata (nsys 2021.x or "
                "older); export the .nsys-rep again with nsys 2022.1 or newer: "
                "nsys export --type sqlite -o NEW.sqlite REPORT.nsys-rep")
        raise NotAReportError(f"{self.path}: an SQLite database, but not an Nsight Systems "
                              "export; give the .sqlite written by nsys export")

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
        """GPUs of the target: device_id, name, chip, sm_count, memory_bytes, compute_capability."""
        cols = ["device_id", "name", "chip", "sm_count", "memory_bytes", "compute_capability",
                "bus_location"]
        if self.db.has("TARGET_INFO_GPU"):
            have = set(self.db.columns("TARGET_INFO_GPU"))
            pick = lambda c: c if c in have else "NULL"  # noqa: E731
            rows = self.db.query(
                f"SELECT id, name, {pick('chipName')}, {pick('smCount')}, {pick('totalMemory')}, "
                f"{pick('computeMajor')} || '.' || {pick('computeMinor')}, {pick('busLocation')} "
                "FROM TARGET_INFO_GPU ORDER BY id")
        elif self.db.has("TARGET_INFO_CUDA_GPU"):  # nsys < 2021.3
            rows = self.db.query(
                "SELECT deviceId, name, NULL, numMultiprocessors, totalMemory, "
                "computeCapabilityMajor || '.' || computeCapabilityMinor, busLocation "
                "FROM TARGET_INFO_CUDA_GPU ORDER BY deviceId")
        else:
            rows = []
        return pd.DataFrame(rows, columns=cols)

    @cached_property
    def processes(self) -> pd.DataFrame:
        """Processes in the report: pid, name, uses_cuda (it created CUDA streams)."""
        if not self.db.has("PROCESSES"):
            return pd.DataFrame({"pid": pd.Series(dtype="int64"), "name": pd.Series(dtype=str),
                                 "uses_cuda": pd.Series(dtype=bool)})
        cuda = set()
        if "processId" in self.db.columns("TARGET_INFO_CUDA_STREAM"):
            cuda = {r[0] for r in self.db.query(
                "SELECT DISTINCT processId FROM TARGET_INFO_CUDA_STREAM")}
        rows = self.db.query("SELECT pid, name FROM PROCESSES ORDER BY pid")
        return pd.DataFrame([(p, n, p in cuda) for p, n in rows],
                            columns=["pid", "name", "uses_cuda"])

    @cached_property
    def span_ns(self) -> tuple[int, int] | None:
        """(start_ns, end_ns) of the profiling session."""
        if self.db.has("ANALYSIS_DETAILS"):
            cols = set(self.db.columns("ANALYSIS_DETAILS"))
            if {"startTime", "stopTime"} <= cols:
                row = self.db.query("SELECT min(startTime), max(stopTime) FROM ANALYSIS_DETAILS")[0]
                if row[0] is not None:
                    return int(row[0]), int(row[1])
        lo, hi = None, None
        for spec in TABLES.values():
            if spec.split and self.db.has(spec.source):
                a, b = self.db.query(f'SELECT min(start), max("end") FROM {spec.source}')[0]
                if a is not None:
                    lo, hi = (a, b) if lo is None else (min(lo, a), max(hi, b))
        return (int(lo), int(hi)) if lo is not None else None

    def has(self, table: str) -> bool:
        """Whether the report recorded ``table`` (an nsightlab table name)."""
        return self._spec(table).present(self.db)

    def missing_hint(self, table: str) -> str | None:
        """None if ``table`` is present, else how to record it next time."""
        spec = self._spec(table)
        if spec.present(self.db):
            return None
        how = f"profile with nsys profile {spec.trace}" if spec.trace else "profile it again"
        return f"{self.path.name} has no {spec.source} table: {how}"

    @cached_property
    def row_counts(self) -> dict[str, int]:
        """Rows per nsightlab table (0 where the report lacks it)."""
        out = {}
        for name, spec in TABLES.items():
            if not spec.present(self.db):
                out[name] = 0
            elif name == "nvtx":
                out[name] = self.db.query(
                    f"SELECT count(*) FROM NVTX_EVENTS WHERE eventType IN ({NVTX_TYPES})")[0][0]
            else:
                out[name] = self.db.count(spec.source)
        return out

    def info(self) -> dict:
        """Summary as plain data (what ``nsightlab info --json`` prints)."""
        span = self.span_ns
        return {
            "path": str(self.source),
            "sqlite": str(self.path),
            "nsys_version": self.nsys_version,
            "schema_version": self.schema_version,
            "gpus": self.gpus.to_dict("records"),
            "processes": self.processes.to_dict("records"),
            "span_ns": None if span is None else span[1] - span[0],
            "start_ns": None if span is None else span[0],
            "end_ns": None if span is None else span[1],
            "tables": self.row_counts,
            "missing": {t: self.missing_hint(t) for t in TABLES if not self.has(t)},
        }

    # ---- tables -------------------------------------------------------------------------
    def _spec(self, name: str) -> TableSpec:
        try:
            return TABLES[name]
        except KeyError:
            raise UnknownTableError(
                f"{name!r} is not an nsightlab table; choose one of {', '.join(TABLES)}") from None

    def table(self, name: str, columns: list[str] | None = None) -> pd.DataFrame:
        """Table ``name`` as a DataFrame with the contract's columns (or just ``columns``).

        A table the report lacks is an empty frame with the right columns; ``missing_hint``
        says how to record it.
        """
        spec = self._spec(name)
        keep = self._columns(spec, columns)
        if spec.present(self.db) and spec.split and frames.supported(spec, keep):
            return self._frame(spec, keep)
        return to_pandas(self.arrow(name, columns), spec)

    def arrow(self, name: str, columns: list[str] | None = None) -> pa.Table:
        """Table ``name`` as an Arrow table (see ``table``)."""
        spec = self._spec(name)
        keep = self._columns(spec, columns)
        if not spec.present(self.db):
            return spec.schema.empty_table().select(keep)
        if self.cache is None:
            return self._collect(spec, None, keep)[1]
        for attempt in (0, 1):
            files = self.cache.files(name)
            if files is None:  # first read: stream into the cache, keep what was asked for
                try:
                    return self.cache.build(
                        name, lambda open_part: self._collect(spec, open_part, keep), spec.schema)
                except OSError as e:
                    self._cache_unusable(e)
                    return self._collect(spec, None, keep)[1]
            try:
                return pq.read_table(files, columns=keep, schema=spec.schema)
            except (OSError, pa.ArrowException):
                if attempt:
                    raise
                self.cache.drop(name)  # damaged entry: rebuild it, never trust it
        raise AssertionError("unreachable")

    def _columns(self, spec: TableSpec, columns: list[str] | None) -> list[str]:
        if columns is None:
            return spec.schema.names
        unknown = [c for c in columns if c not in spec.schema.names]
        if unknown:
            raise UnknownTableError(
                f"{spec.name} has no column(s) {', '.join(unknown)}; its columns are "
                f"{', '.join(spec.schema.names)}")
        return list(columns)

    def _frame(self, spec: TableSpec, keep: list[str]) -> pd.DataFrame:
        """Big activity tables: batches go straight into preallocated columns (FrameBuilder),
        from the Parquet cache when it is valid, else from SQLite (building the cache)."""
        if self.cache is not None:
            files = self.cache.files(spec.name)
            if files is not None:
                try:
                    return self._frame_from_parquet(spec, keep, files)
                except (OSError, pa.ArrowException):
                    self.cache.drop(spec.name)  # damaged entry: rebuild it, never trust it
            try:
                return self.cache.build(spec.name, lambda open_part: self._frame_from_sqlite(
                    spec, keep, open_part), spec.schema)
            except OSError as e:
                self._cache_unusable(e)
        return self._frame_from_sqlite(spec, keep, None)[1]

    def _cache_unusable(self, error: OSError) -> None:
        """A cache folder that cannot be written (read-only, full disk) is not fatal: read
        SQLite directly from now on, and say so once."""
        if self.progress is not None:
            self.progress(f"cannot write the cache in {self.cache.root} ({error.strerror}); "
                          "reading without it (set NSIGHTLAB_CACHE_DIR to a writable folder)")
        self.cache = None

    def take(self, name: str, columns: list[str], rows) -> pd.DataFrame:
        """Rows at positions ``rows`` of ``columns`` of table ``name``, in the order given.

        Reads the Parquet cache batch by batch and keeps only the wanted rows, so picking 8M of
        a 16M-row table never holds the whole columns (without a cache: a full read).
        """
        spec = self._spec(name)
        keep = self._columns(spec, columns)
        rows = np.asarray(rows, dtype=np.int64)
        if self.cache is None or not spec.split or not frames.supported(spec, keep):
            return self.table(name, keep).iloc[rows].reset_index(drop=True)
        if self.cache.files(name) is None:
            self.table(name, keep[:1])  # builds the cache
        files = self.cache.files(name)
        order = None if np.all(rows[1:] >= rows[:-1]) else np.argsort(rows, kind="stable")
        wanted = rows if order is None else rows[order]
        sizes = [pq.ParquetFile(f).metadata.num_rows for f in files]
        bases = np.concatenate([[0], np.cumsum(sizes)])
        builder = frames.FrameBuilder(spec, keep, len(rows))

        def job(i: int) -> Callable[[], None]:
            def run() -> None:
                base = int(bases[i])
                for b in pq.ParquetFile(files[i]).iter_batches(
                        batch_size=BATCH_ROWS, columns=keep, use_threads=False):
                    k0, k1 = np.searchsorted(wanted, [base, base + b.num_rows])
                    if k1 > k0:
                        builder.put(int(k0), b.take(pa.array(wanted[k0:k1] - base)))
                    base += b.num_rows
            return run

        self.db.parallel([job(i) for i in range(len(files))])
        df = builder.frame([(0, len(rows))])
        if order is not None:
            df = df.iloc[np.argsort(order, kind="stable")].reset_index(drop=True)
        return df

    def _frame_from_parquet(self, spec: TableSpec, keep: list[str], files: list[Path]
                            ) -> pd.DataFrame:
        sizes = [pq.ParquetFile(f).metadata.num_rows for f in files]
        offsets = [sum(sizes[:i]) for i in range(len(files))]
        builder = frames.FrameBuilder(spec, keep, sum(sizes))

        def job(i: int) -> Callable[[], None]:
            def run() -> None:
                at = offsets[i]
                for b in pq.ParquetFile(files[i]).iter_batches(
                        batch_size=BATCH_ROWS, columns=keep, use_threads=False):
                    builder.put(at, b)
                    at += b.num_rows
            return run

        self.db.parallel([job(i) for i in range(len(files))])
        return builder.frame(list(zip(offsets, sizes)))

    def _frame_from_sqlite(self, spec: TableSpec, keep: list[str], open_part: Callable | None
                           ) -> tuple[int, pd.DataFrame]:
        ranges = self.db.rowid_ranges(spec.source, PARALLEL_READERS)
        self._announce(spec, sum(hi - lo for lo, hi in ranges), open_part is not None)
        offsets = [sum(hi - lo for lo, hi in ranges[:i]) for i in range(len(ranges))]
        builder = frames.FrameBuilder(spec, keep, sum(hi - lo for lo, hi in ranges))
        filled = [0] * len(ranges)

        def sink(part: int, batch: pa.RecordBatch) -> None:
            builder.put(offsets[part] + filled[part], batch)
            filled[part] += batch.num_rows

        self._stream(spec, open_part, sink, ranges)
        return sum(filled), builder.frame(list(zip(offsets, filled)))

    def _announce(self, spec: TableSpec, rows: int, caching: bool) -> None:
        if self.progress is not None and rows >= 1_000_000:
            where = " into the cache" if caching else ""
            self.progress(f"reading {spec.name} of {self.path.name} (~{rows:,} rows){where} ...")

    def _collect(self, spec: TableSpec, open_part: Callable | None,
                 keep: list[str]) -> tuple[int, pa.Table]:
        """Read ``spec`` from SQLite into an Arrow table of the ``keep`` columns (writing the
        cache parts on the way when ``open_part`` is given). Returns (rows, table)."""
        ranges = self.db.rowid_ranges(spec.source, PARALLEL_READERS) if spec.split else [None]
        whole = spec.finish is not None or len(keep) == len(spec.columns)
        kept: list[list[pa.RecordBatch]] = [[] for _ in ranges]
        self._stream(spec, open_part if spec.finish is None else None,
                     lambda i, b: kept[i].append(b if whole else b.select(keep)), ranges)
        schema = spec.schema if whole else pa.schema([spec.schema.field(c) for c in keep])
        table = pa.Table.from_batches([b for p in kept for b in p], schema=schema)
        if spec.finish is not None:  # whole-table pass (NVTX depth) before caching
            table = spec.finish(table)
            if open_part is not None:
                open_part(0).write_table(table)
            table = table.select(keep)
        return table.num_rows, table

    def _stream(self, spec: TableSpec, open_part: Callable | None,
                sink: Callable[[int, pa.RecordBatch], None], ranges: list) -> None:
        """Read ``spec`` from SQLite, one thread per rowid range (``None`` = the whole query),
        converting each batch to the contract, writing it to that part's Parquet file when
        ``open_part`` is given, and handing it to ``sink(part, batch)``."""
        sql = spec.sql(self.db)
        queries = [sql if r is None else f"{sql} WHERE rowid >= {r[0]} AND rowid < {r[1]}"
                   for r in ranges]

        def job(i: int) -> Callable[[], None]:
            def run() -> None:
                writer = open_part(i) if open_part is not None else None
                for raw in self.db.stream(queries[i]):
                    b = build_batch(spec, self.db, raw)
                    if writer is not None:
                        writer.write_batch(b)
                    sink(i, b)
            return run

        if open_part is not None and not queries:
            open_part(0)  # an empty table still gets its (empty) Parquet file
        self.db.parallel([job(i) for i in range(len(queries))])

    def kernels(self, columns: list[str] | None = None) -> pd.DataFrame:
        """CUDA kernels (see ``nsightlab.tables.KERNELS`` for the columns)."""
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

    def nvtx(self, columns: list[str] | None = None) -> pd.DataFrame:
        """NVTX ranges and marks with text, domain and nesting depth."""
        return self.table("nvtx", columns)

    def gpu_metrics(self, columns: list[str] | None = None) -> pd.DataFrame:
        """GPU metrics samples, long form (timestamp_ns, gpu, metric, value)."""
        return self.table("gpu_metrics", columns)

    def cuda_graph_nodes(self, columns: list[str] | None = None) -> pd.DataFrame:
        """CUDA graph node events (with --cuda-graph-trace=node)."""
        return self.table("cuda_graph_nodes", columns)

    def threads(self, columns: list[str] | None = None) -> pd.DataFrame:
        """Named threads and their processes."""
        return self.table("threads", columns)

    def call_stacks(self, ids) -> dict[int, str]:
        """CPU call stacks of API calls recorded with backtraces (``cuda_api.callchain_id``):
        id -> frames, innermost first, joined with " < ". Empty where none were recorded."""
        wanted = sorted({int(i) for i in ids if i is not None and i == i})
        if not wanted or not self.db.has("CUDA_CALLCHAINS"):
            return {}
        have = set(self.db.columns("CUDA_CALLCHAINS"))
        if not {"id", "symbol", "stackDepth"} <= have:
            return {}
        # exports number the API rows' callchainId from 0 and CUDA_CALLCHAINS.id from 1 (seen
        # in a 2.9.1 export: chain 4 is the stack of the call with callchainId 3)
        first_ref = self.db.query("SELECT min(callchainId) FROM CUPTI_ACTIVITY_KIND_RUNTIME")[0][0]
        first_id = self.db.query("SELECT min(id) FROM CUDA_CALLCHAINS")[0][0]
        offset = 1 if first_ref == 0 and first_id == 1 else 0
        ids = [i + offset for i in wanted]
        marks = ",".join("?" * len(ids))
        rows = self.db.query(
            "SELECT c.id, COALESCE(s.value, '?') FROM CUDA_CALLCHAINS c "
            f"LEFT JOIN StringIds s ON s.id = c.symbol WHERE c.id IN ({marks}) "
            "ORDER BY c.id, c.stackDepth", tuple(ids)) if len(ids) < 30000 else []
        out: dict[int, list[str]] = {}
        for i, sym in rows:
            out.setdefault(int(i) - offset, []).append(str(sym))
        return {i: " < ".join(frames) for i, frames in out.items()}

    def close(self) -> None:
        self.db.conn.close()

    def __enter__(self) -> "Report":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
