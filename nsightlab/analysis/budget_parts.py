"""The time budget's parts and the rules that fill them, shared by both ways of computing it.

``budget`` computes the budget in memory, ``budget_stream`` out of core from sorted streams;
both import the parts, the copy rule, the launch-stretch rule and the idle attribution from
here, so the two give the same numbers by construction and neither imports the other back.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pandas as pd

from nsightlab.read.parallel import readers

#: busy parts in priority order: time covered by an earlier part is not counted again
COPY_PARTS = ("h2d_pageable", "h2d_pinned", "d2h_pageable", "d2h_pinned", "d2d", "peer",
              "copy_other")
#: "communication": NCCL kernels where no other kernel of the GPU runs (exposed collectives;
#: under compute they count as kernels, the part before it)
BUSY_PARTS = ("kernels", "communication", *COPY_PARTS, "memset")
#: kernel names of the communication part (NCCL's device kernels)
COMM_PREFIX = "nccl"
IDLE_PARTS = ("idle_sync", "idle_launch", "idle_host", "idle_unattributed")
#: the copy parts as a sentence says them
COPY_WORDS = {"h2d_pageable": "host-to-device copies from pageable memory",
              "h2d_pinned": "host-to-device copies (pinned)",
              "d2h_pageable": "device-to-host copies into pageable memory",
              "d2h_pinned": "device-to-host copies (pinned)", "d2d": "device-to-device copies",
              "peer": "peer copies", "copy_other": "other copies"}
PARTS = (*BUSY_PARTS, *IDLE_PARTS)
#: host time since the previous launch call under which idle GPU time counts as launch
#: overhead (the framework issuing work: PyTorch eager dispatch is 5-50 us an op), not as host
#: work; CPU stretches longer than this between launches are the application's own work
LAUNCH_STRETCH_NS = 100_000
#: idle gaps attributed per pass (bounds scratch memory on reports of millions of kernels:
#: ~10 MB a pass), by up to IDLE_THREADS threads at once. Eight, not one per core: the budget's
#: start-order pass hands out ~1M gaps a second, which 8 threads attribute with time to
#: spare, and 16 held ~160 MB of scratch in flight beside DuckDB's sort (launch_compute's
#: main process at 100M kernels on 16 cores: 1013 MB)
GAP_CHUNK = 1 << 16
IDLE_THREADS = 8


def has_comm(report) -> bool:
    """Whether the report's strings hold an NCCL kernel name (cheap: the string table, not
    the kernels): only then are kernel names read to tell communication apart."""
    def check() -> bool:
        if not report.db.has("StringIds"):
            return False
        return bool(report.db.query(f"SELECT 1 FROM StringIds WHERE value LIKE "
                                    f"'{COMM_PREFIX}%' LIMIT 1"))
    return report.db.once("has_comm", check)


def copy_part(copy_kind: str, src_kind: str, dst_kind: str) -> str:
    """The budget part of one copy: direction, and for host memory whether it is pinned."""
    if copy_kind in ("Host-to-Device", "Unified Host-to-Device"):
        return "h2d_pinned" if src_kind == "Pinned" else "h2d_pageable"
    if copy_kind in ("Device-to-Host", "Unified Device-to-Host"):
        return "d2h_pinned" if dst_kind == "Pinned" else "d2h_pageable"
    if copy_kind in ("Device-to-Device", "Unified Device-to-Device", "Array-to-Array",
                     "Array-to-Device", "Device-to-Array"):
        return "d2d"
    if copy_kind == "Peer-to-Peer":
        return "peer"
    return "copy_other"


def max_end_per_iteration(out: np.ndarray, rs: np.ndarray, re_: np.ndarray, t: np.ndarray,
                          e: np.ndarray) -> None:
    """``out[i] = max(out[i], e)`` for every launch at ``t`` inside iteration range i
    ([rs, re_], sorted by start); the streamed budget calls it once per batch."""
    if len(t) > 1 and len(rs) and np.all(t[1:] >= t[:-1]):
        return _max_end_sorted(out, rs, re_, t, e)
    i = np.searchsorted(rs, t, "right") - 1
    inside = (i >= 0) & (t <= re_[np.maximum(i, 0)])
    i, e = i[inside], e[inside]
    if not len(i):
        return
    if not np.all(i[1:] >= i[:-1]):  # launches come in call order: rarely taken
        order = np.argsort(i, kind="stable")
        i, e = i[order], e[order]
    # the max per run of equal iteration indices (np.maximum.at over every launch: 10x slower)
    first = np.flatnonzero(np.concatenate([[True], i[1:] != i[:-1]]))
    np.maximum.at(out, i[first], np.maximum.reduceat(e, first))


def _max_end_sorted(out: np.ndarray, rs: np.ndarray, re_: np.ndarray, t: np.ndarray,
                    e: np.ndarray) -> None:
    """``max_end_per_iteration`` for launches in time order (the usual case): each iteration's
    launches are one slice of ``t``, found by searching the iterations' bounds in ``t``
    (thousands of searches, not millions), and one ``maximum.reduceat`` takes every slice's
    maximum: 0.7 s -> ~0.05 s at 8M launches on 2 cores."""
    nxt = np.append(rs[1:], np.iinfo(np.int64).max)  # a launch belongs to the last range begun
    lo = np.searchsorted(t, rs, "left")
    hi = np.minimum(np.searchsorted(t, re_, "right"), np.searchsorted(t, nxt, "left"))
    has = hi > lo
    if not has.any():
        return
    lo, hi, which = lo[has], hi[has], np.flatnonzero(has)
    bounds = np.stack([lo, hi], axis=1).ravel()
    if bounds[-1] == len(t):
        bounds = bounds[:-1]  # the last slice runs to the end
    top = np.maximum.reduceat(e, bounds)[0::2]
    np.maximum.at(out, which, top)


def in_gap_chunks(n: int, work) -> list:
    """``work(chunk)`` for each slice of ``GAP_CHUNK`` of the ``n`` gaps, on up to
    ``IDLE_THREADS`` threads (NumPy releases the GIL in the searches and the arithmetic)."""
    chunks = [slice(a, a + GAP_CHUNK) for a in range(0, n, GAP_CHUNK)]
    threads = min(IDLE_THREADS, readers(), len(chunks))
    if threads < 2:
        return [work(c) for c in chunks]
    with ThreadPoolExecutor(threads) as pool:
        return list(pool.map(work, chunks))


def idle_context(start: np.ndarray, end: np.ndarray, syncs: pd.DataFrame) -> dict:
    """What ``idle_pieces`` needs besides the gaps: the windows and the sync calls (their
    ends, and their API names as codes into ``sync_names``)."""
    codes, names = pd.factorize(syncs["api_name"].to_numpy(), sort=True)
    return {"start": start, "end": end, "se": syncs["end_ns"].to_numpy(np.int64),
            "sync_code": codes.astype(np.int64), "sync_names": np.asarray(names, dtype=object)}


def add_idle(ctx: dict, done: list) -> dict:
    """Sum the idle parts per window of ``idle_pieces`` results."""
    out = {f"{part}_ns": np.zeros(len(ctx["start"]), np.int64) for part in IDLE_PARTS}
    for sums, *_ in done:
        for k, v in sums.items():
            out[k] += v
    return out


def by_sync_frame(ctx: dict, done: list) -> pd.DataFrame:
    """Idle time and stretches per sync API (largest first) from ``idle_pieces`` results."""
    n = len(ctx["sync_names"])
    idle, count = np.zeros(n, np.int64), np.zeros(n, np.int64)
    for _, i, c in done:
        idle += i
        count += c
    has = count > 0
    out = pd.DataFrame({"api_name": ctx["sync_names"][has], "idle_ns": idle[has],
                        "stretches": count[has]})
    return out.sort_values("idle_ns", ascending=False, kind="stable").reset_index(drop=True)


def idle_pieces(gs: np.ndarray, ge: np.ndarray, launch_at: np.ndarray, quick: np.ndarray,
                ctx: dict) -> tuple[dict, np.ndarray, np.ndarray]:
    """Attribute gaps [gs, ge) of the busy union (see ``_idle``), given per gap when the call
    that launched the operation ending it started (``launch_at``, NaN: unknown) and whether
    the previous launch call started at most ``LAUNCH_STRETCH_NS`` before that (``quick``):
    (idle time per part and window, idle time and pieces per sync API code)."""
    start, end, n = ctx["start"], ctx["end"], len(ctx["start"])
    out = {f"{part}_ns": np.zeros(n, np.int64) for part in IDLE_PARTS}
    # pieces: each gap clipped to each window it overlaps (most gaps lie in one window)
    first = np.searchsorted(end, gs, "right")
    count = np.maximum(np.searchsorted(start, ge, "left") - first, 0)
    g = np.repeat(np.arange(len(gs)), count)
    w = np.repeat(first, count) + (np.arange(count.sum()) - np.repeat(np.cumsum(count) - count, count))
    ps, pe = np.maximum(gs[g], start[w]), np.minimum(ge[g], end[w])
    keep = pe > ps
    g, w, ps, pe = g[keep], w[keep], ps[keep], pe[keep]
    launch_at, quick = launch_at[g], quick[g]
    known = ~np.isnan(launch_at)
    del g
    # split each piece where that call started: before it the host was elsewhere (or waiting
    # in a sync), while it ran the GPU waited for the launch itself
    at = np.nan_to_num(launch_at).astype(np.int64)
    cut = np.where(known, np.clip(at, ps, pe), pe)
    before, during = cut - ps, pe - cut
    # a sync that returned before the launch call: the host waited, then issued new work
    se = ctx["se"]
    k = np.searchsorted(se, cut, "right") - 1
    synced = ((k >= 0) & (se[np.maximum(k, 0)] >= ps)) if len(se) else np.zeros(len(ps), bool)
    cause = np.full(len(ps), 3, np.int8)  # unattributed: no next operation or no launch record
    cause[known] = np.where(quick[known], 1, 2)  # dispatch / host work
    cause[synced] = 0
    for code, part in enumerate(IDLE_PARTS):
        sel = (cause == code) & (before > 0)
        out[f"{part}_ns"] += np.bincount(w[sel], weights=before[sel], minlength=n).astype(np.int64)
    # after a sync the queue is empty: the launch that refills it is the sync's cost too
    sel = known & (during > 0)
    for part, which in (("idle_launch", sel & ~synced), ("idle_sync", sel & synced)):
        out[f"{part}_ns"] += np.bincount(w[which], weights=during[which],
                                         minlength=n).astype(np.int64)
    m = len(ctx["sync_names"])
    code = ctx["sync_code"][k[synced]] if len(se) else np.empty(0, np.int64)
    idle = (before + np.where(known, during, 0))[synced]
    return (out, np.bincount(code, weights=idle, minlength=m).astype(np.int64),
            np.bincount(code, minlength=m).astype(np.int64))


def none_last(launched: np.ndarray) -> np.ndarray:
    """Launch call starts as a sort key for operations that start together (the in-memory
    budget and the streamed one order them alike): no recorded call (NaN) last."""
    return np.nan_to_num(launched, nan=np.inf)


def copy_codes(copies: pd.DataFrame) -> np.ndarray:
    """The ``BUSY_PARTS`` index of every copy, classifying each distinct (copy kind, source
    memory, destination memory) once."""
    trio = [copies[c].astype("category") for c in ("copy_kind", "src_kind", "dst_kind")]
    codes = np.stack([t.cat.codes.to_numpy(np.int32) for t in trio], axis=1)
    uniq, inverse = np.unique(codes, axis=0, return_inverse=True)
    label = lambda t, i: str(t.cat.categories[i]) if i >= 0 else ""  # noqa: E731
    per = np.array([BUSY_PARTS.index(copy_part(*(label(t, i) for t, i in zip(trio, row))))
                    for row in uniq], np.int8)
    return per[inverse.reshape(-1)] if len(per) else np.empty(0, np.int8)
