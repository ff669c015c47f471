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
  kernel within a few µs of it) at the same place of the same kind of work; a kernel with
  no clean run keeps its length less the other processes' kernel time inside its span
  (time-sliced; under MPS its own length).

An iteration's stretch is its length in the trace less its replayed length. Checked against
the same processes run alone and together in one trace (tests/data/procs, the ``st-*``
captures): within 15% where the host's own work kept its pace (see docs/processes.md). What
the replay cannot see: a host that itself ran slower beside the other processes (CPU
contention); it is the host's, not the GPU's.

The replay is a loop over calls: at most ``BLOCKS`` blocks of consecutive steady iterations,
``CALLS`` calls in all, are replayed (the first iteration of each warms the replay in and is
not counted), so a long trace costs the same as a short one.
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from nsightlab.analysis.classify import sync_kind
from nsightlab.analysis.timeline import covered, union
from nsightlab.read.report import Report

BLOCKS = 8
BLOCK = 9
#: API calls replayed at most, over all blocks
CALLS = 50_000
#: a kernel with another process's kernel this close (ns) is not a clean run
CLEAN_NS = 3_000
#: what a synchronizing call costs when the GPU is already done (ns)
SYNC_FLOOR_NS = 5_000
#: a copy call that ends this close (ns) after its copy, having lasted longer, waited for it
BLOCKING_COPY_NS = 20_000
COLUMNS = ["iteration", "kind", "start_ns", "wall_ns", "alone_ns", "stretch_ns", "shared",
           "held_ns", "guessed_ns"]
#: ``summary``'s keys
SUMMARY = ["iterations", "replayed", "wall_ns", "alone_ns", "stretch_ns", "held_ns",
           "guessed_ns"]
_ASYNC_COPY = re.compile(r"^(cudaMemcpy|cuMemcpy).*Async")


def replay(view: Report, others: pd.DataFrame, iterations: pd.DataFrame,
           concurrent: bool) -> pd.DataFrame:
    """Per replayed iteration of the process of ``view`` (``COLUMNS``): its length in the trace
    (between the first calls of it and of the next), replayed alone, the stretch, whether
    another process's kernels ran during it, and ``held_ns``: the other processes' kernel time
    inside its own kernels' spans (preempted by time-slicing, its kernel time counts it);
    ``guessed_ns``: the length of its kernels that shared the GPU and never ran clean at their
    place (their length alone is a guess: the stretch is then a lower bound). ``others``:
    start_ns, end_ns of the other processes' kernels on the same GPU; ``iterations``: the
    process's iterations (the budget's table: start_ns, end_ns, phase, kind) of one GPU."""
    it = iterations[iterations["phase"] != "warm-up"] if "phase" in iterations else iterations
    it = it.sort_values("start_ns").reset_index(drop=True)
    if len(it) < 3 or not view.has_rows("cuda_api") or not (
            view.has_rows("kernels") or view.has_rows("graph_execs")):
        return pd.DataFrame(columns=COLUMNS)
    starts = it["start_ns"].to_numpy(np.int64)
    api = view.cuda_api(["start_ns", "end_ns", "correlation_id", "name", "tid"])
    per = max(1, len(api) // len(it))  # calls per iteration
    spans = [(lo, hi) for lo, hi in _blocks(len(it), per) if hi - lo >= 2]
    # the calls and operations of the replayed blocks only (a long trace costs a short one's)
    edge = lambda hi: starts[hi] + 1 if hi < len(it) else np.iinfo(np.int64).max  # noqa: E731
    windows = [(starts[lo], edge(hi)) for lo, hi in spans]
    api = _within(api, windows)
    # operations of those calls: they start after their call, by the end of the next block
    # at the latest (a cheap cut by time first: a long trace's millions are not sorted)
    ops = _operations(view, [(lo, nxt) for (lo, _), (nxt, _) in
                             zip(windows, [*windows[1:], (np.iinfo(np.int64).max, 0)])])
    ops = ops[ops["correlation_id"].isin(api["correlation_id"])].reset_index(drop=True)
    if api.empty or ops.empty:
        return pd.DataFrame(columns=COLUMNS)
    # the thread that launched most of them (ops are of these calls: never empty here)
    tid = ops.merge(api[["correlation_id", "tid"]], on="correlation_id")["tid"].mode().iloc[0]
    api = api[api["tid"] == tid].sort_values("start_ns").reset_index(drop=True)
    busy = _Busy(others["start_ns"].to_numpy(np.int64), others["end_ns"].to_numpy(np.int64))
    s, e = ops["start_ns"].to_numpy(np.int64), ops["end_ns"].to_numpy(np.int64)
    length = (e - s).astype(float)
    inside = busy.within(s, e)
    ops["length"], fell = _intrinsic(ops, it, busy, length if concurrent else length - inside)
    ops["idle"] = _idle_at_launch(ops, api, busy)
    kern = ops["kernel"].to_numpy()
    held = np.concatenate([[0.0], np.cumsum(np.where(kern, inside, 0.0))])
    # kernels that shared the GPU with no clean run to tell their length alone
    guessed = np.concatenate([[0.0], np.cumsum(np.where(kern & fell & (inside > 0), length,
                                                        0.0))])
    cs = api["start_ns"].to_numpy(np.int64)
    first = np.searchsorted(cs, starts)
    rows = []
    for lo, hi in spans:  # iterations lo .. hi-1; lo warms the replay in
        a, b = first[lo], first[hi] if hi < len(it) else len(cs) - 1
        if b <= a:
            continue
        r = _run(api.iloc[a:b + 1], ops)
        for j in range(lo + 1, hi if hi < len(it) else hi - 1):
            i0, i1 = first[j] - a, first[j + 1] - a
            if i1 <= i0 or i1 >= len(r):
                continue
            w0, w1 = cs[a + i0], cs[a + i1]
            wall, alone = float(w1 - w0), float(r[i1] - r[i0])
            k0, k1 = np.searchsorted(s, [w0, w1])  # its kernels that start in the iteration
            rows.append({"iteration": int(it["iteration"].iloc[j]) if "iteration" in it else j,
                         "kind": str(it["kind"].iloc[j]) if "kind" in it else "",
                         "start_ns": int(w0), "wall_ns": wall, "alone_ns": alone,
                         "stretch_ns": wall - alone,
                         "shared": bool(busy.within(np.array([w0]), np.array([w1]))[0] > 0),
                         "held_ns": float(held[k1] - held[k0]),
                         "guessed_ns": float(guessed[k1] - guessed[k0])})
    return pd.DataFrame(rows, columns=COLUMNS)


def summary(per: pd.DataFrame) -> dict | None:
    """``SUMMARY``: how many replayed iterations shared the GPU, of how many replayed, and the
    medians over those that shared it; None when none did."""
    sh = per[per["shared"]] if len(per) else per
    if sh.empty:
        return None
    medians = {c: float(sh[c].median()) for c in SUMMARY[2:]}
    return {"iterations": int(len(sh)), "replayed": int(len(per)), **medians}


class _Busy:
    """When the other processes' kernels ran (their spans merged): the time they ran inside
    any spans is two lookups each (``timeline.covered``)."""

    def __init__(self, starts: np.ndarray, ends: np.ndarray):
        self.s, self.e = union(starts, ends) if len(starts) else (np.zeros(0, np.int64),) * 2

    def within(self, s: np.ndarray, e: np.ndarray) -> np.ndarray:
        """Per span [s, e): the time some other process's kernel ran inside it."""
        return covered(self.s, self.e, np.asarray(s, np.int64),
                       np.asarray(e, np.int64)).astype(float)


def _within(t: pd.DataFrame, windows: list) -> pd.DataFrame:
    """Rows of ``t`` that start inside one of ``windows`` ([lo, hi) pairs, in time order)."""
    s = t["start_ns"].to_numpy(np.int64)
    keep = np.zeros(len(t), bool)
    for lo, hi in windows:
        keep |= (s >= lo) & (s < hi)
    return t[keep]


def _operations(view: Report, windows: list) -> pd.DataFrame:
    """The process's GPU operations that start inside ``windows``: start_ns, end_ns,
    stream_id, correlation_id, kernel (a kernel, or a whole-graph execution of a graph-level
    trace: replayed as one kernel)."""
    cols = ["start_ns", "end_ns", "stream_id", "correlation_id"]
    parts = [_within(view.table(t, cols), windows).assign(kernel=t in ("kernels", "graph_execs"))
             for t in ("kernels", "graph_execs", "memcpy", "memset") if view.has_rows(t)]
    return pd.concat(parts, ignore_index=True).sort_values("start_ns", kind="stable") \
        .reset_index(drop=True)


def _intrinsic(ops: pd.DataFrame, it: pd.DataFrame, busy: _Busy,
               fallback: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each operation's length alone (see the module docstring): a kernel's clean median at
    its place of its kind of work (the iterations' ``work``: the same kernels, whatever their
    pace; else their kind), else ``fallback``; and where it is the fallback."""
    s, e = ops["start_ns"].to_numpy(np.int64), ops["end_ns"].to_numpy(np.int64)
    length = (e - s).astype(float)
    clean = busy.within(s - CLEAN_NS, e + CLEAN_NS) == 0
    w = np.searchsorted(it["start_ns"].to_numpy(np.int64), s, side="right") - 1
    inside = (w >= 0) & ops["kernel"].to_numpy()
    place = pd.Series(s).groupby(np.where(inside, w, -1)).rank(method="first").to_numpy(np.int64)
    kind = pd.factorize(it["work"])[0] if "work" in it else \
        pd.factorize(it["kind"].astype(str))[0] if "kind" in it else np.zeros(len(it), int)
    key = np.where(inside, kind[np.clip(w, 0, None)].astype(np.int64) * (1 << 32) + place, -1)
    ok = clean & inside
    med = pd.Series(length[ok]).groupby(key[ok]).median()
    alone = pd.Series(key).map(med).to_numpy(float, copy=True)
    alone[~inside] = np.nan
    guessed = np.isnan(alone)
    return np.where(guessed, fallback, np.minimum(alone, length)), guessed


def _idle_at_launch(ops: pd.DataFrame, api: pd.DataFrame, busy: _Busy) -> np.ndarray:
    """Whether each operation went to an idle GPU: its stream had nothing running when its
    launch call began, and no other process's kernel ran until it started."""
    call = ops["correlation_id"].map(api.drop_duplicates("correlation_id")
                                     .set_index("correlation_id")["start_ns"])
    prev = ops.groupby("stream_id")["end_ns"].shift(1)  # ops are in start order
    c = call.fillna(ops["start_ns"]).to_numpy(np.int64)
    alone = busy.within(c, np.maximum(c, ops["start_ns"].to_numpy(np.int64))) == 0
    return (prev.isna() | (prev < call)).to_numpy() & call.notna().to_numpy() & alone


def _blocks(n: int, per: int) -> list[tuple[int, int]]:
    """The blocks of iterations replayed, [lo, hi): all of them for a short run, else up to
    ``BLOCKS`` blocks spread over the run, ``CALLS`` calls (``per`` an iteration) in all."""
    most = max(4, CALLS // per)
    if n <= min(most, BLOCKS * BLOCK):
        return [(lo, min(lo + BLOCK, n)) for lo in range(0, n, BLOCK)]
    size = max(3, min(BLOCK, most // BLOCKS))
    count = max(1, min(BLOCKS, most // size))
    return [(int(lo), int(lo) + size) for lo in np.linspace(0, n - size, count).round()]


def _run(calls: pd.DataFrame, ops: pd.DataFrame) -> np.ndarray:
    """The replayed start of each call of ``calls`` (consecutive calls of one thread)."""
    cs = calls["start_ns"].to_numpy(np.int64)
    ce = calls["end_ns"].to_numpy(np.int64)
    name = calls["name"].astype(str)
    kinds = {n: sync_kind(n) for n in name.unique()}
    blocking = name.map(lambda n: kinds[n] not in (None, "stream_wait")).to_numpy()
    copy = name.map(lambda n: bool(_ASYNC_COPY.match(n))).to_numpy()
    at = pd.Index(calls["correlation_id"]).get_indexer(ops["correlation_id"])
    mine = np.flatnonzero(at >= 0)
    mine = mine[np.argsort(at[mine], kind="stable")]
    call_of = at[mine]
    ostart = ops["start_ns"].to_numpy(np.int64)[mine]
    # the launch latency: from the call's start to its operation's, where the GPU was idle
    lat = ostart - cs[call_of]
    good = ops["idle"].to_numpy()[mine] & (lat >= 0)
    latency = float(np.median(lat[good])) if good.any() else 0.0
    first = np.searchsorted(call_of, np.arange(len(cs)), side="left").tolist()
    last = np.searchsorted(call_of, np.arange(len(cs)), side="right").tolist()
    stream = ops["stream_id"].to_numpy()[mine].tolist()
    olen = ops["length"].to_numpy(float)[mine].tolist()
    oend = ops["end_ns"].to_numpy(np.int64)[mine].tolist()
    gap = np.concatenate([[0], cs[1:] - ce[:-1]]).astype(float).tolist()
    took = (ce - cs).astype(float).tolist()
    ce_, blocking, copy = ce.tolist(), blocking.tolist(), copy.tolist()
    out = [0.0] * len(cs)
    free: dict = {}
    done = -np.inf
    t = float(cs[0])
    for i in range(len(cs)):
        t += gap[i]
        out[i] = t
        end_own = None
        for j in range(first[i], last[i]):
            start = max(t + latency, free.get(stream[j], -np.inf))
            free[stream[j]] = start + olen[j]
            done = max(done, start + olen[j])
            end_own = oend[j] if end_own is None else max(end_own, oend[j])
        waits = blocking[i] or (copy[i] and end_own is not None and took[i] > BLOCKING_COPY_NS
                                and abs(ce_[i] - end_own) < BLOCKING_COPY_NS)
        t = max(t + min(took[i], SYNC_FLOOR_NS), done) if waits else t + took[i]
    return np.asarray(out)
