"""Interval arithmetic on GPU/CPU timelines, vectorized with NumPy.

Everything here works on plain arrays of start/end nanoseconds so that recipes can apply it
to millions of operations: the union of intervals (busy time), covered time inside windows
(busy % per bin or per range), idle gaps (NVIDIA's ``gpu_gaps`` method), and reductions over
many [lo, hi) slices at once.
"""
from __future__ import annotations

import numpy as np


def union(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Merge intervals into disjoint, sorted ones (touching intervals merge)."""
    if len(starts) == 0:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    if np.all(starts[1:] >= starts[:-1]):  # usually already in start order
        s, e = starts.astype(np.int64, copy=False), ends.astype(np.int64, copy=False)
    else:
        order = np.argsort(starts, kind="stable")
        s, e = starts[order].astype(np.int64), ends[order].astype(np.int64)
    us, ue, _ = union_in_order(s, e)
    return us, ue


def union_in_order(s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``union`` of intervals already in start order (int64), with the position of each
    merged interval's first interval in ``s``."""
    reach = np.maximum.accumulate(e)
    # a new merged interval begins where a start lies beyond everything reached before it
    new = np.empty(len(s), bool)
    new[0] = True
    new[1:] = s[1:] > reach[:-1]
    first = np.flatnonzero(new)
    last = np.append(first[1:], len(s)) - 1
    return s[first], reach[last], first


def busy_time(starts: np.ndarray, ends: np.ndarray, chunk: int = 1 << 20,
              reach: int = np.iinfo(np.int64).min) -> int:
    """Length of the union of intervals, without building it: each interval adds the part
    of it beyond everything that started before it ended. Sorted by start in chunks, so
    8M intervals need a few MB of scratch, not the ~400 MB ``union`` would. ``reach``: the
    latest end of intervals already counted (all starting no later than these)."""
    if len(starts) == 0:
        return 0
    if not np.all(starts[1:] >= starts[:-1]):
        order = np.argsort(starts, kind="stable")
        starts, ends = starts[order], ends[order]
    total = 0
    for a in range(0, len(starts), chunk):
        s = starts[a:a + chunk].astype(np.int64, copy=False)
        e = ends[a:a + chunk].astype(np.int64, copy=False)
        prev = np.maximum.accumulate(np.concatenate([[reach], e[:-1]]))
        total += int(np.maximum(0, e - np.maximum(s, prev)).sum())
        reach = max(reach, int(e.max()))
    return total


class BusyByKey:
    """``busy_time`` per key (process and GPU...) over a stream of intervals that come in
    start order within each key, batch by batch: the latest end reached is carried per key.
    ``total``: {key: busy ns}."""

    def __init__(self):
        self.total: dict = {}
        self.reach: dict = {}

    def add(self, key, starts: np.ndarray, ends: np.ndarray) -> None:
        if not len(starts):
            return
        before = self.reach.get(key, np.iinfo(np.int64).min)
        self.total[key] = self.total.get(key, 0) + busy_time(starts, ends, reach=before)
        self.reach[key] = max(before, int(ends.max()))


def covered(ms: np.ndarray, me: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Time covered by disjoint sorted intervals (ms, me) inside each window [a, b)."""
    a, b = np.asarray(a), np.asarray(b)
    if len(ms) == 0:
        return np.zeros(np.broadcast_shapes(a.shape, b.shape), np.int64)
    cum = np.zeros(len(ms) + 1, np.int64)  # covered time up to each interval: once for both
    np.cumsum(me - ms, out=cum[1:])
    return _covered_before(ms, me, b, cum) - _covered_before(ms, me, a, cum)


def _covered_before(ms: np.ndarray, me: np.ndarray, t: np.ndarray, cum: np.ndarray
                    ) -> np.ndarray:
    """Covered time in (-inf, t) for each t (``cum``: covered time before each interval)."""
    i = np.searchsorted(ms, t, "right")  # intervals starting at or before t
    full = cum[i]
    last = np.maximum(i - 1, 0)
    overhang = np.where(i > 0, np.maximum(me[last] - t, 0), 0)
    return full - overhang


def gaps(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Idle gaps between operations that may overlap (NVIDIA's gpu_gaps method): pair the
    j-th smallest end with the (j+1)-th smallest start; where the end comes first, every
    operation that had started had finished, so the device was idle until that start."""
    if len(starts) < 2:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    s = starts.astype(np.int64)  # one copy each, sorted in place (nearly sorted: fast)
    s.sort(kind="stable")
    e = ends.astype(np.int64)
    e.sort(kind="stable")
    idle = e[:-1] < s[1:]
    return e[:-1][idle], s[1:][idle]


def slice_reduce(ufunc: np.ufunc, values: np.ndarray, lo: np.ndarray, hi: np.ndarray,
                 empty) -> np.ndarray:
    """``ufunc.reduce(values[lo[i]:hi[i]])`` for every i at once; ``empty`` where lo == hi."""
    if len(lo) == 0:
        return np.empty(0, values.dtype)
    padded = np.append(values, values[-1:] if len(values) else [empty])
    idx = np.empty(2 * len(lo), np.int64)
    idx[0::2], idx[1::2] = lo, hi
    out = ufunc.reduceat(padded, idx)[0::2]
    return np.where(hi > lo, out, empty)
