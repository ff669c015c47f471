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
import threading
from collections.abc import Callable, Iterator
from functools import cached_property
from pathlib import Path
from urllib.parse import quote

import numpy as np
import pyarrow as pa

from .errors import CorruptReportError, NotAReportError

SQLITE_MAGIC = b"SQLite format 3\x00"
NSYS_REP_MAGIC = b"NVIDIA Tegra Profiler Report"
#: rows per Arrow batch that ADBC hands back; large batches keep Python overhead negligible
BATCH_ROWS = 262_144


def sqlite_uri(path: Path) -> str:
    """URI that opens ``path`` read-only and immutable (no locks, no journal rollback)."""
    return f"file:{quote(str(path.resolve()))}?mode=ro&immutable=1"


def _decode(raw: bytes) -> str:
    return raw.decode("utf-8", errors="replace")


class ExportDB:
    """One nsys SQLite export, opened read-only, with its capability map.

    Raises NotAReportError / CorruptReportError on construction when the file is not a
    readable SQLite database; deciding whether it is an *nsys* export is the Report's job.
    """

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        try:
            with open(self.path, "rb") as f:
                head = f.read(len(SQLITE_MAGIC))
        except IsADirectoryError:
            raise NotAReportError(f"{self.path}: is a directory, not an nsys SQLite export") from None
        except OSError as e:
            raise NotAReportError(f"{self.path}: cannot open ({e.strerror}); check the path") from None
        if head != SQLITE_MAGIC:
            if head.startswith(NSYS_REP_MAGIC[: len(head)]) and head:
                raise NotAReportError(
                    f"{self.path}: is an nsys report, not SQLite; open it as a .nsys-rep "
                    "(rename it) or export it: nsys export --type sqlite -o OUT.sqlite FILE")
            raise NotAReportError(
                f"{self.path}: not an SQLite file; give an nsys export (.sqlite), a .nsys-rep or a "
                "capture directory")
        self.uri = sqlite_uri(self.path)
        try:
            self.conn = sqlite3.connect(self.uri, uri=True, check_same_thread=False)
            self.conn.text_factory = _decode
            rows = self.conn.execute(
                "SELECT name FROM sqlite_master WHERE type IN ('table', 'view')").fetchall()
        except sqlite3.DatabaseError as e:
            raise CorruptReportError(
                f"{self.path}: the SQLite file is damaged or truncated ({e}); export the report "
                "again with nsys export --type sqlite") from None
        self.tables: set[str] = {r[0] for r in rows}
        self._columns: dict[str, list[str]] = {}

    # ---- schema -------------------------------------------------------------------------
    def has(self, table: str) -> bool:
        return table in self.tables

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
            raise CorruptReportError(
                f"{self.path}: the SQLite file is damaged or truncated ({e}); export the report "
                "again with nsys export --type sqlite") from None

    def count(self, table: str) -> int:
        if table not in self.tables:
            return 0
        return self.query(f'SELECT count(*) FROM "{table}"')[0][0]

    def check_integrity(self) -> None:
        """Touch the last page of the file cheaply: a truncated export fails here, not mid-analysis."""
        try:
            for t in sorted(self.tables):
                if not t.startswith("sqlite_"):
                    self.conn.execute(f'SELECT max(rowid) FROM "{t}"').fetchall()
            self.conn.execute("PRAGMA quick_check(1)").fetchall()
        except sqlite3.DatabaseError as e:
            raise CorruptReportError(
                f"{self.path}: the SQLite file is damaged or truncated ({e}); export the report "
                "again with nsys export --type sqlite") from None

    # ---- string and enum dictionaries ---------------------------------------------------
    @cached_property
    def strings(self) -> "StringTable":
        rows = self.query("SELECT id, value FROM StringIds") if self.has("StringIds") else []
        return StringTable([r[0] for r in rows], [r[1] for r in rows])

    def enum_labels(self, table: str, fallback: dict[int, str]) -> dict[int, str]:
        """id -> label from an ENUM_* table, falling back to known values where it is missing."""
        out = dict(fallback)
        if self.has(table) and "label" in self.columns(table):
            out.update({int(i): str(lbl) for i, lbl in self.query(f'SELECT id, label FROM "{table}"')})
        return out

    # ---- bulk reads ---------------------------------------------------------------------
    def rowid_ranges(self, table: str, parts: int) -> list[tuple[int, int]]:
        """Split ``table`` into ``parts`` contiguous rowid ranges [lo, hi) of similar size."""
        lo, hi = self.query(f'SELECT min(rowid), max(rowid) FROM "{table}"')[0]
        if lo is None:
            return []
        step = max(1, (hi - lo + parts) // parts)
        return [(a, min(a + step, hi + 1)) for a in range(lo, hi + 1, step)]

    def stream(self, sql: str) -> Iterator[pa.RecordBatch]:
        """Stream the result of ``sql`` as Arrow record batches (ADBC engine)."""
        import adbc_driver_sqlite.dbapi as adbc

        with adbc.connect(self.uri) as con, con.cursor() as cur:
            cur.adbc_statement.set_options(**{"adbc.sqlite.query.batch_rows": str(BATCH_ROWS)})
            try:
                cur.execute(sql)
                reader = cur.fetch_record_batch()
                yield from reader
            except Exception as e:  # adbc raises its own DatabaseError family
                raise CorruptReportError(
                    f"{self.path}: reading failed ({str(e).splitlines()[0]}); the export may be "
                    "truncated: export the report again with nsys export --type sqlite") from None

    def parallel(self, jobs: list[Callable[[], None]]) -> None:
        """Run ``jobs`` in threads (SQLite reads, Arrow compute and Parquet writes release the GIL)."""
        errors: list[BaseException] = []

        def run(job: Callable[[], None]) -> None:
            try:
                job()
            except BaseException as e:  # re-raised in the caller's thread
                errors.append(e)

        threads = [threading.Thread(target=run, args=(j,)) for j in jobs]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
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

        Only the distinct ids of this batch go into the dictionary, so the work is per distinct
        string, not per row. ``transform`` rewrites the dictionary values (e.g. strip a suffix).
        """
        idx = ids.to_numpy(zero_copy_only=False)
        valid = ~ids.is_null().to_numpy(zero_copy_only=False) if ids.null_count else None
        raw = np.where(valid, idx, 0) if valid is not None else idx
        raw = np.clip(raw.astype(np.int64), -1, len(self.pos) - 1)
        pos = self.pos[raw]
        if valid is not None:
            pos = np.where(valid, pos, -1)
        uniq, codes = np.unique(pos, return_inverse=True)
        has_missing = len(uniq) > 0 and uniq[0] == -1
        dict_pos = uniq[1:] if has_missing else uniq
        values = self.values.take(pa.array(dict_pos, pa.int64()))
        codes = codes.astype(np.int32) - (1 if has_missing else 0)
        if transform is not None:
            # the transform may map two strings to one (cudaMemcpy_v3020 -> cudaMemcpy):
            # re-encode so that dictionary values stay unique
            enc = transform(values).dictionary_encode()
            values = enc.dictionary
            remap = enc.indices.to_numpy(zero_copy_only=False).astype(np.int32)
            codes = np.where(codes >= 0, remap[np.maximum(codes, 0)], -1).astype(np.int32)
        mask = codes < 0 if has_missing else None
        indices = pa.array(codes, pa.int32(), mask=mask)
        return pa.DictionaryArray.from_arrays(indices, values)
