"""Assemble big DataFrames straight from Arrow batches, without an intermediate Table.

``pyarrow.Table.to_pandas`` needs the whole Table in memory and then allocates the DataFrame
beside it: an 8M-kernel table peaks at ~2.5x its final size. FrameBuilder instead preallocates
one NumPy array per column and copies each batch into its slice as it arrives (from several
reader threads at once), so peak memory is the DataFrame plus one batch per thread.
Dictionary columns become pandas Categoricals over one dictionary unified across batches;
integer columns the contract marks nullable become pandas nullable integers.
"""
from __future__ import annotations

import mmap
import contextlib
import os
import threading

import numpy as np
import pandas as pd
import pyarrow as pa

from nsightlab.read.tables import TableSpec


def supported(spec: TableSpec, columns: list[str]) -> bool:
    """FrameBuilder handles integer and dictionary columns (all the big activity tables)."""
    types = {c.name: c.type for c in spec.columns}
    return all(pa.types.is_integer(types[c]) or pa.types.is_dictionary(types[c]) for c in columns)


def _prefault() -> bool:
    """Whether to prefault column mappings in the allocating thread (``alloc``): on a few
    cores one call beats a trap per page; on many, the reader threads that fill the columns
    take the faults side by side (16-core GPU machine, 8M kernels, two runs each: the three
    recipes 17.4 s prefaulted against 15.4 s not, report 24.7 s against 24.0 s).
    NSIGHTLAB_PREFAULT=1/0 decides instead."""
    given = os.environ.get("NSIGHTLAB_PREFAULT", "").strip()
    if given in ("0", "1"):
        return given == "1"
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return cores < 8


PREFAULT = _prefault()


def alloc(n: int, dtype) -> np.ndarray:
    """An uninitialised array backed by its own anonymous mapping.

    NumPy asks the kernel for transparent huge pages on big arrays; on VMs where huge pages must
    first be compacted, touching 800 MB that way took 1.4 s against 0.35 s with normal pages
    (measured on the 2-core development VM). A private mapping gets normal pages, prefaulted in
    one call (MAP_POPULATE) rather than one trap per page, and is returned to the OS as soon as
    the array is garbage collected.
    """
    size = max(1, n * np.dtype(dtype).itemsize)
    flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | (PREFAULT and getattr(mmap, "MAP_POPULATE", 0))
    return np.frombuffer(mmap.mmap(-1, size, flags=flags), dtype=dtype, count=n)


class FrameBuilder:
    """Collects batches of ``columns`` of ``spec`` into ``capacity`` preallocated rows."""

    def __init__(self, spec: TableSpec, columns: list[str], capacity: int):
        self.columns = columns
        by_name = {c.name: c for c in spec.columns}
        self.nullable = {c for c in columns if by_name[c].nullable}
        self.values: dict[str, np.ndarray] = {}
        self.categories: dict[str, dict[str, int]] = {}
        for c in columns:
            t = by_name[c].type
            if pa.types.is_dictionary(t):
                # int16 codes (kernel and API names number far fewer than 32k); widened to
                # int32 on the fly if a report has more distinct strings
                self.values[c] = alloc(capacity, np.int16)
                self.categories[c] = {}
            else:
                self.values[c] = alloc(capacity, t.to_pandas_dtype())
        self.masks: dict[str, np.ndarray] = {}
        self.lock = threading.Lock()

    def put(self, offset: int, batch: pa.RecordBatch) -> None:
        """Copy ``batch`` (with at least ``columns``) into rows [offset, offset + len)."""
        end = offset + batch.num_rows
        for c in self.columns:
            arr = batch.column(c)
            if c in self.categories:
                codes = self._codes(c, arr)
                with self.lock:  # dictionary columns may be widened: write under the lock
                    target = self.values[c]
                    if len(self.categories[c]) > np.iinfo(target.dtype).max:
                        wide = alloc(len(target), np.int32)
                        wide[:] = target
                        target = self.values[c] = wide
                    target[offset:end] = codes
                continue
            if arr.null_count:
                with self.lock:
                    mask = self.masks.get(c)
                    if mask is None:
                        mask = self.masks[c] = alloc(len(self.values[c]), bool)  # zeroed
                mask[offset:end] = arr.is_null().to_numpy(zero_copy_only=False)
                arr = arr.fill_null(0)
            self.values[c][offset:end] = arr.to_numpy(zero_copy_only=False)

    def _codes(self, c: str, arr: pa.DictionaryArray) -> np.ndarray:
        """Codes of ``arr`` in the column's global dictionary (-1 for null)."""
        local = arr.dictionary.to_pylist()
        with self.lock:
            cats = self.categories[c]
            remap = np.array([cats.setdefault(v, len(cats)) for v in local] + [-1], np.int32)
        ind = arr.indices
        idx = (ind.fill_null(-1) if ind.null_count else ind).to_numpy(zero_copy_only=False)
        return remap[idx]  # index -1 picks the trailing -1: nulls stay null

    def frame(self, spans: list[tuple[int, int]]) -> pd.DataFrame:
        """The DataFrame of the filled rows; ``spans`` are the (offset, rows) that were filled."""
        pieces: list[list[int]] = []
        for o, n in sorted(spans):
            if n and pieces and pieces[-1][0] + pieces[-1][1] == o:
                pieces[-1][1] += n  # adjacent parts: one slice, no copy
            elif n:
                pieces.append([o, n])
        dense = len(pieces) <= 1 and (not pieces or pieces[0][0] == 0)

        def rows(a: np.ndarray) -> np.ndarray:
            if dense:
                return a[: pieces[0][1]] if pieces else a[:0]
            return np.concatenate([a[o:o + n] for o, n in pieces]) if pieces else a[:0]

        out = {}
        for c in self.columns:
            v = rows(self.values[c])
            if c in self.categories:
                cats = pd.Index(list(self.categories[c]), dtype=object)
                out[c] = pd.Categorical.from_codes(v, categories=cats, validate=False)
            elif c in self.nullable or c in self.masks:
                mask = rows(self.masks[c]) if c in self.masks else np.zeros(len(v), bool)
                out[c] = pd.arrays.IntegerArray(v, mask)
            else:
                out[c] = v
        return pd.DataFrame(out, copy=False)


def pick_rows(df: pd.DataFrame, rows: np.ndarray) -> pd.DataFrame:
    """The rows ``rows`` (positions, or a boolean mask) of ``df`` as a new frame, taken one
    column at a time and each of ``df``'s columns dropped once copied: the peak is ``df`` plus
    one column, not two whole frames (8M launches: ~300 MB less). ``df`` is emptied; the caller
    replaces it with the result."""
    if rows.dtype == bool:
        rows = np.flatnonzero(rows)
    out = {}
    for c in list(df.columns):
        out[c] = df[c].take(rows).reset_index(drop=True)
        del df[c]
    return pd.DataFrame(out, copy=False)


def release_memory() -> None:
    """Give freed heap memory back to the operating system (glibc's ``malloc_trim``). NumPy
    temporaries freed in worker threads stay in those threads' malloc arenas otherwise: ~300 MB
    were still held after the time budget of 8M kernels on the 16-core machine. Nothing where
    the C library has no ``malloc_trim`` (musl, macOS)."""
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).malloc_trim(0)


def plain_text(df: pd.DataFrame) -> pd.DataFrame:
    """Category and other string columns in pandas' own text dtype (``str`` in pandas 3,
    object before; missing values stay missing), so every recipe's text columns look alike
    in pandas, Parquet and JSON whatever the recipe built them from."""
    text_dtype = text_dtype_of_pandas()
    for c in df.columns:
        s = df[c]
        text = isinstance(s.dtype, (pd.CategoricalDtype, pd.StringDtype)) or (
            s.dtype == object and pd.api.types.infer_dtype(s, skipna=True) in ("string", "empty"))
        if text and s.dtype != text_dtype:
            plain = s.astype(object).where(s.notna(), None)
            df[c] = plain if text_dtype == object else plain.astype(text_dtype)
    return df


def text_dtype_of_pandas():
    """The dtype pandas gives a new column of text: ``str`` in pandas 3, object in pandas 2."""
    return pd.Series(["x"], dtype=object).astype(str).dtype
