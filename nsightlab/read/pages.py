"""Integer tables read straight from the export's pages: SQLite's file format decoded in NumPy.

The cache's big reads (16M API calls, 8M kernels) are SQLite decoding: ADBC stepped through
each row and column in C at ~0.47 us a row of 8 columns (82% of a reader job). nsys's
activity tables hold only integers, so their B-tree leaf pages can be decoded for every row
at once instead: the cell pointers, each record's header (one byte per column: every integer
serial type is below 128) and each wanted column as an unaligned big-endian 8-byte load,
shifted to its size and sign-extended. ~0.2 us a row of 8 columns on the 2-core VM.

Only what the format guarantees is trusted, and anything else is refused (``Unsupported``),
so the reader falls back to SQL for the job: a WAL or hot journal beside the file, a page
that is not a table b-tree page, a record longer than a page (overflow), a value that is not
an integer or NULL (text, blob, a float), a header that disagrees with its record's length,
an INTEGER PRIMARY KEY or a column default. The answers are the SQL read's: the same rows
(rowids [lo, hi)) in rowid order, the same values, NULL where a column is NULL or absent,
and COALESCE where a column has several sources. The file is only read (``readinto``), never
mapped: mapped pages would count in every reader's resident memory.
"""
from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
from numpy.lib.stride_tricks import as_strided

#: rows per batch, as the SQL read's (``db.BATCH_ROWS``): the cache parts' row groups alike
BATCH_ROWS = 65_536
#: leaf pages decoded at once (~100 API calls a 4 KiB page: ~25K rows). A reader's peak
#: (500K calls a job, 2 cores): 1024 pages 0.17 s, 186 MB; 256 pages 0.15 s, 157 MB (SQL:
#: 0.29 s, 150 MB)
CHUNK_PAGES = 256
#: bytes of a value of each serial type (0 NULL, 1-6 integers, 8 and 9 the constants 0 and
#: 1); ``_NOT_INTEGER`` for the others (7 a float; from 10 on reserved, blob, text): refused
_NOT_INTEGER = 0xFF
_SIZE = np.full(256, _NOT_INTEGER, np.uint8)
_SIZE[[0, 1, 2, 3, 4, 5, 6, 8, 9]] = (0, 1, 2, 3, 4, 6, 8, 0, 0)
#: left then arithmetic right shift that sign-extends an 8-byte load ending at the value
_SHIFT = np.zeros(256, np.uint8)
_SHIFT[1:7] = (56, 48, 40, 32, 16, 0)
_LEAF, _INTERIOR = 0x0D, 0x05


class Unsupported(Exception):
    """This file or table is not one the page reader decodes: read it with SQL instead."""


class PageFile:
    """An export opened for page reads: its header checked, no journal beside it."""

    def __init__(self, path: Path):
        self.path = Path(path)
        for suffix in ("-wal", "-journal"):  # pages there would override the file's
            side = Path(f"{self.path}{suffix}")
            if side.exists() and side.stat().st_size > 0:
                raise Unsupported(f"{side.name} beside the export")
        self.file = open(self.path, "rb", buffering=0)  # noqa: SIM115 (closed by close())
        head = self.file.read(100)
        if len(head) < 100 or head[:16] != b"SQLite format 3\x00":
            self.close()
            raise Unsupported("not an SQLite file")
        size = int.from_bytes(head[16:18], "big")
        self.page_size = 65536 if size == 1 else size
        if head[18] != 1 or head[19] != 1:  # 2: WAL mode
            self.close()
            raise Unsupported("WAL mode")
        self.usable = self.page_size - head[20]
        self.pages = os.fstat(self.file.fileno()).st_size // self.page_size

    def close(self) -> None:
        self.file.close()

    def read(self, numbers: np.ndarray) -> np.ndarray:
        """Pages ``numbers`` (1-based) as rows of a (len + 1, page_size) array, the last row
        zeros (room for the loads past a page's end); runs of consecutive pages in one
        read each."""
        ps = self.page_size
        out = np.zeros((len(numbers) + 1, ps), np.uint8)
        if len(numbers) and (numbers.min() < 1 or numbers.max() > self.pages):
            raise Unsupported("a page number past the end of the file")
        cuts = np.flatnonzero(np.diff(numbers) != 1) + 1
        for a, b in zip([0, *cuts.tolist()], [*cuts.tolist(), len(numbers)]):
            want = (b - a) * ps
            self.file.seek((int(numbers[a]) - 1) * ps)
            if self.file.readinto(memoryview(out[a:b]).cast("B")) != want:
                raise Unsupported("the file ended inside a page")
        return out

    def leaves(self, root: int, lo: int, hi: int) -> np.ndarray:
        """The leaf pages of the table b-tree at ``root`` that hold rowids in [lo, hi), in
        rowid order: each level's children whose key range meets the range."""
        level = np.array([root], np.int64)
        while True:
            # a b-tree is balanced: the level's first page tells whether it is the leaves
            # (``decode`` checks every leaf); a leaf level is not read here
            first = self.read(level[:1])[0, 100 if level[0] == 1 else 0]
            if first == _LEAF:
                return level
            pages = self.read(level)
            kinds = pages[np.arange(len(level)), np.where(level == 1, 100, 0)]
            if not (kinds == _INTERIOR).all():
                raise Unsupported("not a table b-tree")
            nxt = [self._children(pages[i], int(level[i]) == 1, lo, hi)
                   for i in range(len(level))]
            level = np.concatenate(nxt) if nxt else np.empty(0, np.int64)
            if not len(level):
                return level

    def _children(self, page: np.ndarray, first: bool, lo: int, hi: int) -> np.ndarray:
        """An interior page's children whose rowids meet [lo, hi): child i holds the keys in
        (key[i-1], key[i]], the right-most child those above the last key."""
        h = 100 if first else 0
        n = int(page[h + 3]) << 8 | int(page[h + 4])
        right = int.from_bytes(page[h + 8:h + 12].tobytes(), "big")
        ptr = page[h + 12:h + 12 + 2 * n].copy().view(">u2").astype(np.int64)
        if len(ptr) and ptr.max() > self.usable - 5:
            raise Unsupported("a cell pointer past the page")
        child = page[ptr[:, None] + np.arange(4)].astype(np.int64)
        child = child[:, 0] << 24 | child[:, 1] << 16 | child[:, 2] << 8 | child[:, 3]
        key, _ = varints(page, ptr + 4)
        below = np.concatenate([[np.iinfo(np.int64).min], key])  # each child's exclusive floor
        top = np.concatenate([key, [np.iinfo(np.int64).max]])
        every = np.concatenate([child, [right]])
        return every[(top >= lo) & (below < hi - 1)]


def varints(buf: np.ndarray, at: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """SQLite varints at positions ``at`` of ``buf``: (values, lengths). Big-endian groups of
    7 bits while the high bit is set; the ninth byte is whole."""
    value = np.zeros(len(at), np.int64)
    length = np.zeros(len(at), np.int64)
    live = np.arange(len(at))
    for k in range(9):
        if not len(live):
            break
        b = buf[at[live] + k].astype(np.int64)
        value[live] = (value[live] << (8 if k == 8 else 7)) | (b if k == 8 else b & 0x7F)
        length[live] += 1
        live = live[b >= 0x80] if k < 8 else live[:0]
    return value, length


def table_layout(db, table: str) -> tuple[int, list[str]]:
    """(root page, columns in record order) of an ordinary rowid table, or ``Unsupported``
    for one whose records the page reader would misread."""
    got = db.query("SELECT rootpage, sql FROM sqlite_master WHERE type = 'table' AND name = ?",
                   (table,))
    if not got or not got[0][0] or "WITHOUT ROWID" in (got[0][1] or "").upper():
        raise Unsupported(f"{table}: not an ordinary table")
    info = db.query(f'PRAGMA table_xinfo("{table}")')
    # (cid, name, type, notnull, default, pk, hidden): a rowid alias is stored as NULL,
    # a default stands in for a column older records lack, a generated column is not stored
    if any(r[5] or r[4] is not None or r[6] for r in info):
        raise Unsupported(f"{table}: a key, default or generated column")
    return int(got[0][0]), [r[1] for r in info]


def batches(file: PageFile, db, table: str, columns: Sequence[tuple[str, Sequence[str]]],
            lo: int, hi: int) -> Iterator["pa.RecordBatch"]:
    """Rowids [lo, hi) of ``table`` as Arrow batches of ``BATCH_ROWS``: for each (name,
    sources) of ``columns`` an int64 column, the first source that is not NULL (a source
    the table lacks is NULL). Raises ``Unsupported`` (possibly after some batches) where
    the SQL read must answer instead."""
    import pyarrow as pa

    root, names = table_layout(db, table)
    where = {n: i for i, n in enumerate(names)}
    wanted = sorted({where[s] for _, srcs in columns for s in srcs if s in where})
    if not wanted:  # rows are counted by the columns decoded: none would count none
        raise Unsupported(f"{table}: none of the columns asked for")
    leaves = file.leaves(root, lo, hi)
    held: list[dict[int, tuple[np.ndarray, np.ndarray]]] = []
    count = 0

    def emit(parts: list[dict], n: int):
        out = []
        for name, srcs in columns:
            value, null = _coalesced(parts, [where[s] for s in srcs if s in where], n)
            out.append(_int64_array(pa, value, null))
        return pa.RecordBatch.from_arrays(out, names=[c for c, _ in columns])

    for a in range(0, len(leaves), CHUNK_PAGES):
        chunk = leaves[a:a + CHUNK_PAGES]
        bounds = (lo if a == 0 else None, hi if a + CHUNK_PAGES >= len(leaves) else None)
        got = decode(file.read(chunk), file.page_size, file.usable, len(names), wanted, bounds)
        held.append(got)
        count += len(next(iter(got.values()))[0]) if got else 0
        while count >= BATCH_ROWS:
            first, held = _split(held, BATCH_ROWS)
            count -= BATCH_ROWS
            yield emit(first, BATCH_ROWS)
    if count:
        yield emit(held, count)


def _split(held: list[dict], n: int) -> tuple[list[dict], list[dict]]:
    """The first ``n`` rows of decoded chunks, and the rest."""
    first, rest, left = [], [], n
    for part in held:
        size = len(next(iter(part.values()))[0])
        if left >= size:
            first.append(part)
        elif left > 0:
            first.append({j: (v[:left], m[:left]) for j, (v, m) in part.items()})
            rest.append({j: (v[left:], m[left:]) for j, (v, m) in part.items()})
        else:
            rest.append(part)
        left -= size
    return first, rest


def _coalesced(parts: list[dict], sources: list[int], n: int) -> tuple[np.ndarray, np.ndarray]:
    """(values, NULL mask) of ``n`` rows: the first of the ``sources`` columns that is not
    NULL (SQL's COALESCE); all NULL without sources."""
    if not sources:
        return np.zeros(n, np.int64), np.ones(n, bool)
    value = np.concatenate([p[sources[0]][0] for p in parts]) if parts else np.zeros(0, np.int64)
    null = np.concatenate([p[sources[0]][1] for p in parts]) if parts else np.zeros(0, bool)
    for s in sources[1:]:
        if not null.any():
            break
        v2 = np.concatenate([p[s][0] for p in parts])
        n2 = np.concatenate([p[s][1] for p in parts])
        value = np.where(null, v2, value)
        null = null & n2
    return value, null


def _int64_array(pa, value: np.ndarray, null: np.ndarray):
    n = len(value)
    if not null.any():
        return pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(value)])
    valid = np.packbits(~null, bitorder="little")
    return pa.Array.from_buffers(pa.int64(), n, [pa.py_buffer(valid), pa.py_buffer(value)],
                                 null_count=int(null.sum()))


def decode(pages: np.ndarray, page_size: int, usable: int, ncols: int, wanted: list[int],
           bounds: tuple[int | None, int | None]) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Columns ``wanted`` (record positions) of every cell of leaf ``pages`` (``read``'s
    rows, the last one padding): {position: (int64 values, NULL mask)}, in page then cell
    order. ``bounds`` (lo, hi): rowids to keep on the first and last page (None: all)."""
    pages_ = pages[:-1]
    if not (pages_[:, 0] == _LEAF).all():
        raise Unsupported("not a table leaf page")
    count = (pages_[:, 3].astype(np.int64) << 8) | pages_[:, 4]
    width = int(count.max()) if len(count) else 0
    ptr = pages_[:, 8:8 + 2 * width].copy().view(">u2")
    flat = pages.reshape(-1)
    ptr = ptr[np.arange(width) < count[:, None]]
    if len(ptr) and (ptr.max() > usable - 4 or ptr.min() < 8):
        raise Unsupported("a cell pointer past the page")
    cell = np.repeat(np.arange(len(pages_), dtype=np.int64) * page_size, count) + ptr
    # payload length (1 or 2 bytes; no overflow pages), then the rowid's length
    b0 = flat[cell].astype(np.int64)
    two = b0 >= 0x80
    b1 = flat[cell + 1].astype(np.int64)
    if (two & (b1 >= 0x80)).any():
        raise Unsupported("a record longer than 16 KiB")
    payload = np.where(two, (b0 & 0x7F) << 7 | b1, b0)
    if len(payload) and payload.max() > usable - 35:
        raise Unsupported("a record past its page (overflow)")
    key_at = cell + 1 + two
    rec = key_at + 1
    more = flat[key_at] >= 0x80
    k = 1
    while more.any():
        if k == 9:
            raise Unsupported("a malformed rowid")
        rec += more
        more &= flat[key_at + k] >= 0x80
        k += 1
    size = flat[rec].astype(np.int64)  # the header's own length, then one byte per column
    if len(size) and (size.max() >= 0x80 or size.min() < 1 or size.max() > ncols + 1):
        raise Unsupported("a record header of another shape")
    span = max(wanted, default=-1) + 1
    head = as_strided(flat, shape=(len(flat) - ncols, ncols), strides=(1, 1))[rec + 1].T.copy()
    short = size - 1 < ncols  # older records lack the columns added since: NULL
    if short.any():
        head[np.arange(ncols)[:, None] >= (size - 1)[None, :]] = 0
    sizes = _SIZE[head]
    if sizes.max(initial=0) == _NOT_INTEGER:
        raise Unsupported("a value that is not an integer")
    if (size + sizes.sum(axis=0, dtype=np.int16) != payload).any():
        raise Unsupported("a record header that disagrees with its length")
    ends = np.cumsum(sizes[:span], axis=0, dtype=np.int32) if span else None
    body = rec + size - 8  # an 8-byte load ending at column j's last byte starts here + ends[j]
    loads = as_strided(np.frombuffer(flat, ">i8", count=1), shape=(len(flat) - 7,), strides=(1,))
    keep = _kept(flat, cell, two, bounds)
    out = {}
    for j in wanted:
        t = head[j]
        x = loads[body + ends[j]].astype(np.int64)
        shift = _SHIFT[t]
        x <<= shift
        x >>= shift
        const = t >= 8
        if const.any():
            x[const] = t[const] == 9
        null = t == 0
        x[null] = 0
        out[j] = (x, null) if keep is None else (x[keep], null[keep])
    return out


def _kept(flat, cell, two, bounds) -> np.ndarray | None:
    """Cells whose rowid is in [lo, hi) (``bounds``: a bound is None where the b-tree's keys
    put every cell of these pages inside it); None when all are."""
    lo, hi = bounds
    if lo is None and hi is None:
        return None
    rowid, _ = varints(flat, cell + 1 + two)
    keep = np.ones(len(cell), bool)
    if lo is not None:
        keep &= rowid >= lo
    if hi is not None:
        keep &= rowid < hi
    return None if keep.all() else keep
