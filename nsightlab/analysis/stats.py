"""Summary statistics the way ``nsys stats`` computes them, for any grouping, fast.

NVIDIA's summaries report count, total, mean, median (the mean of the two middle values for
an even count), min, max and the *sample* standard deviation (0 for a single instance). The
recipes use these functions so that every summary agrees the same way.

pandas' groupby median over 8M rows costs ~1 s per column; here rows are ordered by group
once (a stable integer sort) and each group's slice is summarized with NumPy, so several value
columns cost little more than one.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pandas as pd

from nsightlab.read.parallel import readers

STATS = ("count", "total", "avg", "med", "min", "max", "stddev")


#: key combinations up to which ``group_ids`` numbers groups through a lookup table (12
#: bytes per combination), not a hash table
DENSE_KEYS = 1 << 22
#: rows per step of the chunked passes over a whole key or id column
CHUNK = 1 << 20


def group_ids(keys: pd.DataFrame) -> tuple[np.ndarray, pd.DataFrame]:
    """Dense group id per row for the key columns, and one row of key values per group
    (groups in order of first appearance).

    Every column's codes (categorical codes as they are; a constant column skipped; others
    factorized) are combined into one integer per row. When the combinations fit
    ``DENSE_KEYS`` (categorical keys: API or kernel names with their kinds), groups are
    numbered through a lookup table and the ids are int32 in the combined array itself, where
    ``pd.factorize`` held int64 keys, int64 ids and its hash table (api_sum at 16M calls:
    646 -> 583 MB peak)."""
    cols = []
    for c in keys.columns:
        col = keys[c]
        if isinstance(col.dtype, pd.CategoricalDtype):  # its codes already: no hash table
            cols.append((col.cat.codes.to_numpy(), len(col.cat.categories) + 1))  # -1: missing
        elif not _constant(col):  # one process, thread or GPU (the usual run): skipped
            codes, uniques = pd.factorize(col, use_na_sentinel=False)
            cols.append((codes, len(uniques)))
    size = 1
    for _, n in cols:
        size *= n + 1
    dense = size <= min(DENSE_KEYS, max(len(keys), 1 << 16))  # the table no bigger than the rows
    combined = np.zeros(len(keys), np.int32 if dense else np.int64)
    for codes, n in cols:  # codes in [-1, n): shifted to [0, n]
        combined *= n + 1  # in place: 8M-row keys cost one array, not one per step
        combined += codes
        combined += 1
    del cols
    if dense:
        gid = _dense_ids(combined, size)
    else:
        gid, _ = pd.factorize(combined)
        del combined
        gid = gid.astype(np.int32) if gid.max(initial=0) < 2**31 else gid
    # ids count up in order of first appearance: a group's first row is where the running
    # maximum of the ids grows (no 8M-row index array)
    grows = np.empty(len(gid), bool)
    grows[:1] = True
    np.greater(gid[1:], np.maximum.accumulate(gid)[:-1], out=grows[1:])
    first = np.flatnonzero(grows)
    return gid, keys.iloc[first].reset_index(drop=True)


def first_rows(keys: np.ndarray, size: int, dtype=np.int64) -> np.ndarray:
    """The first row of each key in [0, size) (``len(keys)`` where a key does not occur),
    without a hash or a sort: positions written in reverse, ``CHUNK`` rows at a time, the last
    chunk first, so a key's earliest row is written last."""
    first = np.full(size, len(keys), dtype)
    for a in reversed(range(0, len(keys), CHUNK)):
        part = keys[a:a + CHUNK]
        first[part[::-1]] = np.arange(a + len(part) - 1, a - 1, -1, dtype=dtype)
    return first


def _dense_ids(combined: np.ndarray, size: int) -> np.ndarray:
    """Group ids in order of first appearance for keys in [0, size), written over
    ``combined`` (int32), ``CHUNK`` rows at a time."""
    first = first_rows(combined, size)
    present = np.flatnonzero(first < len(combined))
    rank = np.full(size, -1, np.int32)
    rank[present[np.argsort(first[present], kind="stable")]] = np.arange(len(present),
                                                                         dtype=np.int32)
    for a in range(0, len(combined), CHUNK):
        combined[a:a + CHUNK] = rank[combined[a:a + CHUNK]]
    return combined


def _constant(col: pd.Series) -> bool:
    """Whether a numeric column holds one value in every row, none missing."""
    if col.dtype.kind not in "iu" or not len(col):
        return False
    v = col.to_numpy()
    return bool(v.min() == v.max())


class Groups:
    """Rows ordered by group once (radix sort for < 32k groups), reused for every column."""

    def __init__(self, gid: np.ndarray, ngroups: int):
        counts = np.bincount(gid, minlength=ngroups)
        self.bounds = np.concatenate([[0], np.cumsum(counts)])
        self.n = ngroups
        if ngroups >= 2**15 or len(gid) <= CHUNK or len(gid) >= 2**31:
            small = gid.astype(np.int16) if ngroups < 2**15 else gid
            self.order = np.argsort(small, kind="stable")
            if len(gid) < 2**31:  # half the memory while every column is summarized
                self.order = self.order.astype(np.int32)
            return
        # a stable counting sort, ``CHUNK`` rows at a time, into int32 positions: an argsort
        # of 16M ids held 128 MB of int64 positions beside the int32 copy
        self.order = np.empty(len(gid), np.int32)
        fill = self.bounds[:-1].copy()
        for a in range(0, len(gid), CHUNK):
            g = gid[a:a + CHUNK].astype(np.int16)
            o = np.argsort(g, kind="stable")
            g = g[o]
            c = np.bincount(g, minlength=ngroups)
            before = np.concatenate([[0], np.cumsum(c)[:-1]])  # this chunk's group starts
            self.order[fill[g] + np.arange(len(g)) - before[g]] = o + a
            fill += c

    def summarize(self, values: np.ndarray) -> dict[str, np.ndarray]:
        """count/total/avg/med/min/max/stddev of ``values`` per group; NaN values are left
        out (like SQL NULLs); groups with no values get NaN statistics and count 0."""
        v = values[self.order]  # a copy: partitioned in place for medians
        del values  # the caller's temporary, when it passed one: 64 MB at 8M rows
        out = {s: np.full(self.n, np.nan) for s in STATS}
        out["count"] = np.zeros(self.n, np.int64)
        floating = v.dtype.kind == "f"

        def one(g: int) -> None:  # each group's slice of v is its own: safe side by side
            seg = v[self.bounds[g]:self.bounds[g + 1]]
            if floating:
                seg = _without_nan(seg)
            n = len(seg)
            out["count"][g] = n
            if not n:
                return
            total = seg.sum()
            out["total"][g] = total
            out["avg"][g] = total / n
            out["med"][g] = median_in_place(seg)
            out["min"][g] = seg.min()
            out["max"][g] = seg.max()
            out["stddev"][g] = _stddev(seg) if n > 1 else 0.0

        big = {g for g in range(self.n) if self.bounds[g + 1] - self.bounds[g] >= PARALLEL_ROWS}
        threads = min(len(big), readers())
        if threads < 2:
            big = set()
        if big:  # NumPy's sums, partitions and extremes release the GIL
            with ThreadPoolExecutor(threads) as pool:
                list(pool.map(one, sorted(big)))
        for g in range(self.n):
            if g not in big:
                one(g)
        return out


def _without_nan(seg: np.ndarray) -> np.ndarray:
    """``seg`` (a slice of a scratch copy) with its NaNs left out: the other values moved to
    its front in order, ``STD_CHUNK`` at a time (a copy of a 4M-row group per thread, side by
    side, was the peak of launch_compute at 8M kernels)."""
    if not np.isnan(seg).any():
        return seg
    kept = 0
    for a in range(0, len(seg), STD_CHUNK):
        part = seg[a:a + STD_CHUNK]
        values = part[~np.isnan(part)]  # a copy: the slots it moves into may overlap `part`
        seg[kept:kept + len(values)] = values
        kept += len(values)
    return seg[:kept]


#: groups of at least this many rows are summarized side by side, one thread each
PARALLEL_ROWS = 1 << 18
#: rows per pass of the standard deviation of a big group (its scratch: 8 MB, not 8M rows)
STD_CHUNK = 1 << 20


def _stddev(seg: np.ndarray) -> float:
    """Sample standard deviation; groups over ``STD_CHUNK`` rows summed in chunks (NumPy's
    ``std`` makes a float copy of the whole group)."""
    if len(seg) <= STD_CHUNK:
        return float(seg.std(ddof=1))
    mean = float(seg.mean())
    ss = sum(float(np.square(seg[a:a + STD_CHUNK] - mean).sum())
             for a in range(0, len(seg), STD_CHUNK))
    return float(np.sqrt(ss / (len(seg) - 1)))


def median_in_place(seg: np.ndarray) -> float:
    """Median of ``seg`` (a scratch copy), partitioned in place: no second 8M-row copy."""
    n = len(seg)
    k = n // 2
    if n % 2:
        seg.partition(k)
        return float(seg[k])
    seg.partition([k - 1, k])
    return (float(seg[k - 1]) + float(seg[k])) / 2


def describe(df: pd.DataFrame, by: list[str], value: str | list[str], prefix: str = "",
             suffix: str = "_ns") -> pd.DataFrame:
    """Group ``df`` by ``by`` and summarize ``value`` (one column or several).

    Columns: the ``by`` keys, then per value column v: ``{p}count`` and
    ``{p}{total,avg,med,min,max,stddev}{suffix}`` where p is ``prefix`` for a single value
    column and ``{v}_`` for several. Totals, minima and maxima are integers when every
    group has a value.
    """
    values = [value] if isinstance(value, str) else list(value)
    gid, keys = group_ids(df[by])
    groups = Groups(gid, len(keys))
    out = keys
    for v in values:
        p = prefix if isinstance(value, str) else f"{v}_"
        stats = groups.summarize(df[v].to_numpy())
        out[f"{p}count"] = stats["count"]
        for s in STATS[1:]:
            col = stats[s]
            if s in ("total", "min", "max") and not np.isnan(col).any():
                col = col.astype(np.int64)
            out[f"{p}{s}{suffix}"] = col
    return out
