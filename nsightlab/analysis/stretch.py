"""How much sharing a GPU stretched a process's iterations.

Processes that share a GPU without MPS take turns on it (time-slicing): a kernel launched
while another process's kernels run waits, and a running kernel is preempted for the other's
slice, its span then holding the other's kernels and the context switches. Under MPS their
kernels run at once and slow each other. Either way the trace of them together shows what
happened, not what would have happened alone; the truth is each process run alone.

Here each of a process's iterations is replayed without the other processes, from its own
records:

- its host keeps its own pace: every API call as long as it took, the time between calls as it
  was, except a call that waits for the GPU (a synchronize, a blocking copy), which waits
  until the replayed GPU work launched before it has ended;
- each GPU operation starts when its launch call has run (plus the process's usual launch
  latency) or when the previous operation of its stream ends, whichever is later;
- each kernel lasts its intrinsic length: the median of its clean runs (no other process's
  kernel within a few µs of it) at the same place of the same kind of iteration; a kernel with
  no clean run keeps its length less the other processes' kernel time inside its span
  (time-sliced; under MPS its own length).

An iteration's stretch is its length in the trace less its replayed length. Checked against
the same processes run alone and together in one trace (tests/data/procs, the ``st-*``
captures): within 15% where the host's own work kept its pace (see docs/processes.md). What
the replay cannot see: a host that itself ran slower beside the other processes (CPU
contention); it is the host's, not the GPU's.

The replay is a loop over calls: at most ``BLOCKS`` blocks of ``BLOCK`` consecutive steady
iterations are replayed (the first of each warms the replay in and is not counted), so a
long trace costs the same as a short one.
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from nsightlab.analysis.classify import sync_kind
from nsightlab.read.report import Report

BLOCKS = 8
BLOCK = 9
#: a kernel with another process's kernel this close (ns) is not a clean run
CLEAN_NS = 3_000
#: what a synchronizing call costs when the GPU is already done (ns)
SYNC_FLOOR_NS = 5_000
#: a copy call that ends this close (ns) after its copy, having lasted longer, waited for it
BLOCKING_COPY_NS = 20_000
COLUMNS = ["iteration", "kind", "start_ns", "wall_ns", "alone_ns", "stretch_ns", "shared"]
_ASYNC_COPY = re.compile(r"^(cudaMemcpy|cuMemcpy).*Async")


def replay(view: Report, others: pd.DataFrame, iterations: pd.DataFrame,
           concurrent: bool) -> pd.DataFrame:
    """Per replayed iteration of the process of ``view`` (``COLUMNS``): its length in the trace
    (between the first calls of it and of the next), replayed alone, the stretch, and whether
    another process's kernels ran during it. ``others``: start_ns, end_ns of the other
    processes' kernels on the same GPU; ``iterations``: the process's iterations (the budget's
    table: start_ns, end_ns, phase, kind) of one GPU."""
    it = iterations[iterations["phase"] != "warm-up"] if "phase" in iterations else iterations
    it = it.sort_values("start_ns").reset_index(drop=True)
    if len(it) < 3 or not view.has_rows("cuda_api") or not view.has_rows("kernels"):
        return pd.DataFrame(columns=COLUMNS)
    starts = it["start_ns"].to_numpy(np.int64)
    spans = [(lo, min(lo + BLOCK, len(it))) for lo in _blocks(len(it))]
    spans = [(lo, hi) for lo, hi in spans if hi - lo >= 2]
    # the calls and operations of the replayed blocks only (a long trace costs a short one's)
    edge = lambda hi: starts[hi] + 1 if hi < len(it) else np.iinfo(np.int64).max  # noqa: E731
    win = [(starts[lo], edge(hi)) for lo, hi in spans]
    api = _within(view.cuda_api(["start_ns", "end_ns", "correlation_id", "name", "tid"]), win)
    ops = _operations(view)
    ops = ops[ops["correlation_id"].isin(api["correlation_id"])].reset_index(drop=True)
    if api.empty or ops.empty:
        return pd.DataFrame(columns=COLUMNS)
    tid = ops.merge(api[["correlation_id", "tid"]], on="correlation_id")["tid"].mode().iloc[0]
    api = api[api["tid"] == tid].sort_values("start_ns").reset_index(drop=True)
    order = np.argsort(others["start_ns"].to_numpy(np.int64), kind="stable")
    os_ = others["start_ns"].to_numpy(np.int64)[order]
    oe = others["end_ns"].to_numpy(np.int64)[order]
    ops["inside"] = _overlap(ops["start_ns"].to_numpy(np.int64), ops["end_ns"].to_numpy(np.int64),
                             os_, oe)
    ops["length"] = _intrinsic(ops, it, os_, oe, concurrent)
    ops["idle"] = _idle_at_launch(ops, api, os_, oe)
    cs = api["start_ns"].to_numpy(np.int64)
    first = np.searchsorted(cs, starts)
    rows = []
    for lo, hi in spans:  # iterations lo .. hi-1; lo warms the replay in
        a, b = first[lo], first[hi] if hi < len(it) else len(cs) - 1
        if b <= a:
            continue
        s = _run(api.iloc[a:b + 1], ops)
        for j in range(lo + 1, hi if hi < len(it) else hi - 1):
            i0, i1 = first[j] - a, first[j + 1] - a
            if i1 <= i0 or i1 >= len(s):
                continue
            w0, w1 = cs[a + i0], cs[a + i1]
            wall, alone = float(w1 - w0), float(s[i1] - s[i0])
            rows.append({"iteration": int(it["iteration"].iloc[j]) if "iteration" in it else j,
                         "kind": str(it["kind"].iloc[j]) if "kind" in it else "",
                         "start_ns": int(w0), "wall_ns": wall, "alone_ns": alone,
                         "stretch_ns": wall - alone,
                         "shared": bool(np.any((os_ < w1) & (oe > w0)))})
    return pd.DataFrame(rows, columns=COLUMNS)


def summary(per: pd.DataFrame) -> dict | None:
    """Medians over the replayed iterations that shared the GPU: iterations, wall_ns,
    alone_ns, stretch_ns; None when none did."""
    sh = per[per["shared"]] if len(per) else per
    if sh.empty:
        return None
    return {"iterations": int(len(sh)), "replayed": int(len(per)),
            "wall_ns": float(sh["wall_ns"].median()), "alone_ns": float(sh["alone_ns"].median()),
            "stretch_ns": float(sh["stretch_ns"].median())}


def _within(t: pd.DataFrame, windows: list) -> pd.DataFrame:
    """Rows of ``t`` that start inside one of ``windows`` ([lo, hi) pairs)."""
    s = t["start_ns"].to_numpy(np.int64)
    keep = np.zeros(len(t), bool)
    for lo, hi in windows:
        keep |= (s >= lo) & (s < hi)
    return t[keep]


def _operations(view: Report) -> pd.DataFrame:
    """The process's GPU operations: start_ns, end_ns, stream_id, correlation_id, kernel."""
    cols = ["start_ns", "end_ns", "stream_id", "correlation_id"]
    parts = [view.kernels(cols).assign(kernel=True)]
    for t in ("memcpy", "memset"):
        if view.has_rows(t):
            parts.append(view.table(t, cols).assign(kernel=False))
    return pd.concat(parts, ignore_index=True).sort_values("start_ns", kind="stable") \
        .reset_index(drop=True)


def _overlap(s: np.ndarray, e: np.ndarray, os_: np.ndarray, oe: np.ndarray) -> np.ndarray:
    """Per span [s, e): the time other spans (sorted by start, not overlapping each other
    much) run inside it."""
    out = np.zeros(len(s))
    if not len(os_):
        return out
    reach = np.maximum.accumulate(oe)
    j0 = np.searchsorted(reach, s, side="right")  # first other span that can reach past s
    j1 = np.searchsorted(os_, e, side="left")     # others starting before e
    for i in np.flatnonzero(j1 > j0):
        a, b = j0[i], j1[i]
        out[i] = np.clip(np.minimum(oe[a:b], e[i]) - np.maximum(os_[a:b], s[i]), 0, None).sum()
    return out


def _intrinsic(ops: pd.DataFrame, it: pd.DataFrame, os_: np.ndarray, oe: np.ndarray,
               concurrent: bool) -> np.ndarray:
    """Each operation's length alone (see the module docstring)."""
    s, e = ops["start_ns"].to_numpy(np.int64), ops["end_ns"].to_numpy(np.int64)
    length = (e - s).astype(float)
    fallback = length if concurrent else length - ops["inside"].to_numpy()
    clean = _overlap(s - CLEAN_NS, e + CLEAN_NS, os_, oe) == 0
    w = np.searchsorted(it["start_ns"].to_numpy(np.int64), s, side="right") - 1
    inside = (w >= 0) & ops["kernel"].to_numpy()
    key = pd.DataFrame({"w": np.where(inside, w, -1), "s": s})
    place = key.groupby("w")["s"].rank(method="first").to_numpy()
    kind = it["kind"].astype(str).to_numpy() if "kind" in it else np.full(len(it), "")
    k = pd.Series([f"{kind[x]}:{int(p)}" if ok else None
                   for x, p, ok in zip(np.clip(w, 0, None), place, inside)])
    med = pd.DataFrame({"k": k, "d": length})[clean & k.notna().to_numpy()] \
        .groupby("k")["d"].median()
    alone = k.map(med).to_numpy(float)
    return np.where(np.isnan(alone), fallback, np.minimum(alone, length))


def _idle_at_launch(ops: pd.DataFrame, api: pd.DataFrame, os_: np.ndarray,
                    oe: np.ndarray) -> np.ndarray:
    """Whether each operation went to an idle GPU: its stream had nothing running when its
    launch call began, and no other process's kernel ran until it started."""
    call = ops["correlation_id"].map(api.drop_duplicates("correlation_id")
                                     .set_index("correlation_id")["start_ns"])
    prev = ops.groupby("stream_id")["end_ns"].shift(1)  # ops are in start order
    c = call.fillna(ops["start_ns"]).to_numpy(np.int64)
    alone = _overlap(c, np.maximum(c, ops["start_ns"].to_numpy(np.int64)), os_, oe) == 0
    return (prev.isna() | (prev < call)).to_numpy() & call.notna().to_numpy() & alone


def _blocks(n: int) -> list[int]:
    """First iterations of the blocks replayed: all of them for a short run, else ``BLOCKS``
    blocks spread over the run."""
    if n <= BLOCKS * BLOCK:
        return list(range(0, n, BLOCK))
    return [int(x) for x in np.linspace(0, n - BLOCK, BLOCKS).round()]


def _run(calls: pd.DataFrame, ops: pd.DataFrame) -> np.ndarray:
    """The replayed start of each call of ``calls`` (consecutive calls of one thread)."""
    cs = calls["start_ns"].to_numpy(np.int64)
    ce = calls["end_ns"].to_numpy(np.int64)
    names = calls["name"].astype(str).to_numpy()
    mine = ops[ops["correlation_id"].isin(calls["correlation_id"])]
    by = mine.groupby("correlation_id").indices
    ostart = mine["start_ns"].to_numpy(np.int64)
    oend = mine["end_ns"].to_numpy(np.int64)
    ostream = mine["stream_id"].to_numpy()
    olen = mine["length"].to_numpy(float)
    corr = calls["correlation_id"].to_numpy()
    pos = {c: i for i, c in enumerate(corr)}
    # the launch latency: from the call's start to its operation's, where the stream was idle
    lat = np.array([ostart[j] - cs[pos[c]] for c, js in by.items() for j in js
                    if c in pos and ostart[j] >= cs[pos[c]] and mine["idle"].iat[j]], dtype=float)
    latency = float(np.median(lat)) if len(lat) else 0.0
    blocking = np.array([bool(sync_kind(n)) and sync_kind(n) != "stream_wait" for n in names])
    out = np.zeros(len(cs))
    free: dict = {}
    done = -np.inf
    t = float(cs[0])
    for i in range(len(cs)):
        if i:
            t = t + float(cs[i] - ce[i - 1])
        out[i] = t
        js = by.get(corr[i], ())
        for j in js:
            start = max(t + latency, free.get(ostream[j], -np.inf))
            free[ostream[j]] = start + olen[j]
            done = max(done, start + olen[j])
        took = float(ce[i] - cs[i])
        waits = blocking[i] or (len(js) and _ASYNC_COPY.match(names[i]) and took > BLOCKING_COPY_NS
                                and abs(ce[i] - max(oend[j] for j in js)) < BLOCKING_COPY_NS)
        t = max(t + min(took, SYNC_FLOOR_NS), done) if waits else t + took
    return out
