"""Read-only access to one Nsight Systems SQLite export.

Two engines, each used where it is best:
- stdlib ``sqlite3`` for small things (metadata, StringIds, ENUM tables, TARGET_INFO_*): exact
  control over text decoding, so non-UTF-8 bytes never crash a read;
- ADBC (``adbc-driver-sqlite``) for the big activity tables: it streams Arrow record batches
  straight out of SQLite, several rowid ranges in parallel threads, which is what keeps an
  8M-kernel read within seconds and bounded memory.

Both open the file as ``file:...?mode=ro&immutable=1``: nsightlab never writes to, locks or
rolls back a user's report.
"""
from __future__ import annotations

import os
import sqlite3
import struct
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import quote

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from nsightlab.errors import CorruptReportError, NotAReportError
from nsightlab.read.locate import NSYS_REP_MAGIC
from nsightlab.read.parallel import readers, rowid_ends_sql, split_rowids

if "ARROW_DEFAULT_MEMORY_POOL" not in os.environ:
    # Big reads allocate and free hundreds of MB of transient Arrow buffers (SQLite batches,
    # Parquet row groups). Arrow's default allocator keeps freed memory mapped, so peak RSS
    # grew to ~2.5x the final DataFrame; jemalloc with immediate decay returns it to the OS.
    # Set ARROW_DEFAULT_MEMORY_POOL to choose another allocator.
    try:
        pa.set_memory_pool(pa.jemalloc_memory_pool())
        pa.jemalloc_set_decay_ms(0)
    except (NotImplementedError, AttributeError):  # a pyarrow built without jemalloc
        pass

SQLITE_MAGIC = b"SQLite format 3\x00"
#: rows per Arrow batch (and Parquet row group): big enough that per-batch Python work is
#: negligible, small enough that two readers in flight add only ~100 MB to peak memory
BATCH_ROWS = 65_536


def check_not_truncated(path: Path) -> None:
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


class ExportDB:
    """One nsys SQLite export, opened read-only, with its capability map.

    Raises NotAReportError / CorruptReportError on construction when the file is not a
    readable SQLite database; deciding whether it is an *nsys* export is the Report's job.
    """

    def __init__(self, path: str | os.PathLike, shown: str | os.PathLike | None = None):
        self.path = Path(path)
        #: the report as the user gave it (a .sqlite.xz, .nsys-rep or capture whose export is
        #: this file in the cache): what every message names
        self.name = str(shown) if shown is not None else str(self.path)
        try:
            with open(self.path, "rb") as f:
                head = f.read(len(SQLITE_MAGIC))
        except IsADirectoryError:
            raise NotAReportError(f"{self.name}: is a directory, not an nsys SQLite export") from None
        except OSError as e:
            raise NotAReportError(f"{self.name}: cannot open ({e.strerror}); check the path") from None
        if head.startswith(b"NVR\x00"):
            raise NotAReportError(
                f"{self.name}: is an Nsight Compute report (.ncu-rep), not an Nsight Systems one; "
                "give the .sqlite or .nsys-rep of an nsys profile here (nsightlab report, diff, "
                "info and table read an .ncu-rep as one)")
        if head != SQLITE_MAGIC:
            if head.startswith(NSYS_REP_MAGIC[: len(head)]) and head:
                raise NotAReportError(
                    f"{self.name}: is an nsys report, not SQLite; open it as a .nsys-rep "
                    "(rename it) or export it: nsys export --type sqlite -o OUT.sqlite FILE")
            raise NotAReportError(
                f"{self.name}: not an SQLite file; give an nsys export (.sqlite), a .nsys-rep or a "
                "capture directory")
        check_not_truncated(self.path)
        # read-only and immutable: no locks, no journal rollback
        self.uri = f"file:{quote(str(self.path.resolve()))}?mode=ro&immutable=1"
        try:
            self.conn = sqlite3.connect(self.uri, uri=True, check_same_thread=False)
            self.conn.text_factory = lambda raw: raw.decode("utf-8", errors="replace")
            rows = self.conn.execute(
                "SELECT name, type FROM sqlite_master WHERE type IN ('table', 'view')").fetchall()
        except sqlite3.DatabaseError as e:
            raise self._damaged(e) from None
        self.tables: set[str] = {r[0] for r in rows}
        self.views: set[str] = {r[0] for r in rows if r[1] == "view"}
        self._once: dict[str, object] = {}
        self._ahead: dict[str, threading.Thread] = {}  # once() keys started by ahead()
        #: once() keys a command will ask for, which a step that runs anyway may answer on
        #: its way (``remember``): the time budget's join leaves the kernel/call pairs
        self.wanted: set[str] = set()
        self._columns: dict[str, list[str]] = {}
        self._enums: dict[str, dict[int, str]] = {}
        self._strings: StringTable | None = None
        self._lock = threading.Lock()  # converters in reader threads share the caches

    # ---- schema -------------------------------------------------------------------------
    def has(self, table: str) -> bool:
        return table in self.tables

    def process_filter(self, table: str, pid: int) -> str | None:
        """SQL that keeps the rows of ``table`` of process ``pid`` and of no process (tables
        keyed by ``globalPid``/``globalTid``: nsys's HW:8 VM:8 PID:24 TID:24, or
        ``processId``); None for a table of no process (the session's, GPUs', strings')."""
        cols = set(self.columns(table))
        col = next((c for c in ("globalPid", "globalTid") if c in cols), None)
        if col is not None:
            p = f"(({col} >> 24) & 16777215)"
            return f"({col} IS NULL OR {p} = 0 OR {p} = {int(pid)})"
        return f"processId = {int(pid)}" if "processId" in cols else None

    def columns(self, table: str) -> list[str]:
        """Column names of ``table`` (empty if the table is absent)."""
        if table not in self._columns:
            if table not in self.tables:
                return []
            self._columns[table] = [r[1] for r in self.query(f'PRAGMA table_info("{table}")')]
        return self._columns[table]

    def query(self, sql: str, params: tuple = ()) -> list[tuple]:
        """Run a small query with the stdlib engine; damage surfaces as CorruptReportError."""
        try:
            return self.conn.execute(sql, params).fetchall()
        except sqlite3.DatabaseError as e:
            if isinstance(e, sqlite3.OperationalError) and "no such" in str(e):
                raise
            raise self._damaged(e) from None

    def _damaged(self, e: sqlite3.DatabaseError) -> CorruptReportError:
        return CorruptReportError(
            f"{self.name}: the SQLite file is damaged or truncated ({e}); export the report "
            "again with nsys export --type sqlite")

    def once(self, key: str, compute):
        """``compute()``, run once per export and remembered (facts derived by a full scan).
        When ``ahead`` started it, its answer is awaited; if it failed there, ``compute()``
        runs here, so its error is raised in the caller's thread."""
        if key not in self._once:
            with self._lock:
                started = self._ahead.get(key)
            if started is not None:
                started.join()
            self._once[key] = self._once[key] if key in self._once else compute()
        return self._once[key]

    def ahead(self, key: str, compute) -> None:
        """Start ``once(key, compute)`` on a thread of its own now (a scan the command will
        need, run while it reads its own tables); nothing when it has run or been started."""
        with self._lock:
            if key in self._once or key in self._ahead:
                return

            def run() -> None:
                try:
                    self._once[key] = compute()
                except Exception:  # noqa: BLE001  (once() runs it again and raises)
                    pass

            self._ahead[key] = threading.Thread(target=run, daemon=True, name=f"nsightlab {key}")
            self._ahead[key].start()

    def remember(self, key: str, value) -> None:
        """Give ``once(key, ...)`` its answer, found by another step (nothing when it has one)."""
        with self._lock:
            self._once.setdefault(key, value)

    def knows(self, key: str) -> bool:
        """Whether ``once(key, ...)`` has its answer already."""
        return key in self._once

    def count(self, table: str) -> int:
        if table not in self.tables:
            return 0
        return self.query(f'SELECT count(*) FROM "{table}"')[0][0]

    # ---- string and enum dictionaries ---------------------------------------------------
    @property
    def strings(self) -> "StringTable":
        """StringIds, loaded once (under a lock: reader threads ask for it concurrently)."""
        with self._lock:
            if self._strings is None:
                if not self.has("StringIds"):
                    raise CorruptReportError(
                        f"{self.name}: has no StringIds table (the names of kernels, API calls "
                        "and ranges): the export is damaged or incomplete; export the report "
                        "again (nsys export --type sqlite)")
                rows = self.query("SELECT id, value FROM StringIds")
                self._strings = StringTable([r[0] for r in rows], [r[1] for r in rows])
            return self._strings

    def enum_labels(self, table: str, fallback: dict[int, str]) -> dict[int, str]:
        """id -> label from an ENUM_* table, falling back to known values where it is missing."""
        with self._lock:
            if table not in self._enums:
                self._enums[table] = self._read_enum(table, fallback)
            return self._enums[table]

    def _read_enum(self, table: str, fallback: dict[int, str]) -> dict[int, str]:
        out = dict(fallback)
        if self.has(table) and "label" in self.columns(table):
            out.update({int(i): str(lbl) for i, lbl in self.query(f'SELECT id, label FROM "{table}"')})
        return out

    # ---- bulk reads ---------------------------------------------------------------------
    def rowid_span(self, table: str) -> int | None:
        """max(rowid) - min(rowid) + 1 (about the row count, from the index: instant); None
        for a view."""
        if table in self.views:
            return None
        lo, hi = self.rowid_bounds(table)
        return 0 if lo is None else int(hi - lo + 1)

    def rowid_bounds(self, table: str) -> tuple[int | None, int | None]:
        """(min(rowid), max(rowid)) of ``table`` (``parallel.rowid_ends_sql``)."""
        return tuple(self.query(rowid_ends_sql(table))[0])

    def rowid_ranges(self, table: str, parts: int) -> list[tuple[int, int] | None]:
        """Split ``table`` into ``parts`` contiguous rowid ranges [lo, hi) of similar size;
        ``[None]`` (read it whole) for a view, which has no rowid."""
        if table in self.views:
            return [None]
        lo, hi = self.rowid_bounds(table)
        return [] if lo is None else split_rowids(lo, hi, parts)

    def over_ranges(self, sql: str, table: str, parts: int) -> list[tuple]:
        """The one-row result of ``sql`` (an aggregate SELECT over ``table`` ending in a WHERE
        clause, or holding ``{rows}`` where the rowid condition goes) on each of ``parts``
        rowid ranges, run at once in threads with their own connections (SQLite releases the
        GIL): a full scan of a 16M-row table in a fraction of the time of one query."""
        ranges = self.rowid_ranges(table, parts)
        if len(ranges) <= 1:
            return self.query(sql.replace("{rows}", "1"))
        out: list[tuple] = [()] * len(ranges)

        def job(i: int, lo: int, hi: int) -> Callable[[], None]:
            def run() -> None:
                con = sqlite3.connect(self.uri, uri=True, check_same_thread=False)
                try:
                    rows = f"rowid >= {lo} AND rowid < {hi}"
                    query = sql.replace("{rows}", rows) if "{rows}" in sql else f"{sql} AND {rows}"
                    out[i] = con.execute(query).fetchone()
                except sqlite3.DatabaseError as e:
                    raise self._damaged(e) from None
                finally:
                    con.close()
            return run

        self.parallel([job(i, lo, hi) for i, (lo, hi) in enumerate(ranges)])
        return out

    def stream(self, sql: str) -> Iterator[pa.RecordBatch]:
        """Stream the result of ``sql`` as Arrow record batches (ADBC engine). ADBC's own
        low-level objects, not its DB-API module: that one imports pandas and
        pyarrow.dataset (0.3 s in each reader process, whose start-up the cold read waits
        for)."""
        import adbc_driver_manager as adbc
        import adbc_driver_sqlite

        handles = []
        try:
            handles.append(adbc_driver_sqlite.connect(self.uri))
            handles.append(adbc.AdbcConnection(handles[0]))
            handles.append(adbc.AdbcStatement(handles[1]))
            stmt = handles[2]
            stmt.set_sql_query(sql)
            stmt.set_options(**{"adbc.sqlite.query.batch_rows": str(BATCH_ROWS)})
            stream, _ = stmt.execute_query()
            yield from pa.RecordBatchReader._import_from_c(stream.address)
        except Exception as e:  # ADBC's own errors, or Arrow's from the stream
            raise CorruptReportError(
                f"{self.name}: reading failed ({str(e).splitlines()[0]}); the export may be "
                "truncated: export the report again with nsys export --type sqlite") from None
        finally:
            for h in reversed(handles):
                h.close()

    def parallel(self, jobs: list[Callable[[], None]]) -> None:
        """Run ``jobs`` on up to ``readers()`` threads, one per core (SQLite reads, Arrow compute and Parquet
        writes release the GIL). Not a thread per job: 64 cache parts read by 64 threads on
        16 cores spent a second starting threads that waited for the GIL. The first error
        is raised here once every job has ended."""
        errors: list[BaseException] = []

        def run(job: Callable[[], None]) -> None:
            try:
                job()
            except BaseException as e:  # re-raised in the caller's thread
                errors.append(e)

        if len(jobs) == 1:
            run(jobs[0])
        elif jobs:
            with ThreadPoolExecutor(min(len(jobs), readers())) as pool:
                list(pool.map(run, jobs))
        if errors:
            raise errors[0]


class StringTable:
    """The StringIds table as an Arrow array, for turning id columns into dictionary columns."""

    def __init__(self, ids: list[int], values: list[str]):
        self.values = pa.array(values, pa.string())
        size = (max(ids) + 1) if ids else 0
        # position of each id in `values`; -1 where an id does not exist
        self.pos = np.full(size + 1, -1, dtype=np.int64)
        if ids:
            self.pos[np.asarray(ids, dtype=np.int64)] = np.arange(len(ids), dtype=np.int64)

    def lookup(self, ids: pa.Array, transform: Callable[[pa.Array], pa.Array] | None = None
               ) -> pa.DictionaryArray:
        """Dictionary array of the strings behind ``ids`` (null ids and unknown ids -> null).

        Hash-encodes the ids first (one pass, GIL released), so the string work is per
        distinct id, not per row. ``transform`` rewrites the dictionary values (e.g. strip a
        suffix); values it merges are re-encoded so the dictionary stays unique.
        """
        enc = ids.cast(pa.int64(), safe=False).dictionary_encode()
        uniq = enc.dictionary.to_numpy(zero_copy_only=False)
        inside = (uniq >= 0) & (uniq < len(self.pos))
        pos = np.where(inside, self.pos[np.where(inside, uniq, 0)], -1)
        found = pos >= 0
        values = self.values.take(pa.array(np.where(found, pos, 0), pa.int64()))
        if not found.all():
            values = pc.if_else(pa.array(found), values, pa.nulls(len(values), pa.string()))
        if transform is not None:
            values = transform(values)
        if transform is not None or not found.all():
            # merge duplicates / drop nulls from the dictionary by re-encoding it
            again = values.dictionary_encode()
            remap = again.indices
            codes = pc.take(remap, enc.indices)
            return pa.DictionaryArray.from_arrays(codes.cast(pa.int32()), again.dictionary)
        return pa.DictionaryArray.from_arrays(enc.indices.cast(pa.int32()), values)
