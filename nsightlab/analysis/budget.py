"""Where each iteration's wall-clock time goes: one time budget that the answers build on.

**Iterations are wall-clock windows that tile the loop.** An iteration starts at its NVTX range's
start (``iterN``, ``stepN``, TensorRT's ``ExecutionContext::enqueue``...; see
``ITERATION``) and ends at the later of its range's end and the end of the last GPU
work launched inside it. When the next iteration starts within ``TILE_GAP`` of that end (or
within 1.5x the gap the loop leaves between all its iterations: copies and syncs outside the
iteration range), the two are back to back and the iteration runs up to the next one's start; when the host runs
ahead (the next range starts before this iteration's GPU work ends), the next iteration starts
where this one's GPU work ends. Without iteration ranges the whole span of GPU activity is one
iteration, and ``source`` says so.

**The parts are disjoint and add up to the window**, per GPU: time with a kernel running;
then, of the remaining time, copies by direction and host memory kind (h2d/d2h pageable or
pinned, d2d, peer, other); then memsets; the rest is GPU idle, split by what the host was doing
during each idle stretch; a stretch is split where the call that launches the next operation
starts (before it: what the host was doing; while it runs: launch):

- ``idle_sync``: a synchronizing call (stream/device/event sync, synchronous copy) returned
  during it: the host waited for the GPU to drain, then had to issue new work (the launch
  that refills the queue counts here too: without the sync it would have been hidden);
- ``idle_launch``: launch overhead: the call that launched the next GPU operation was running
  (launch calls slower than the kernels they launch), or the host was only issuing work, with
  less than ``LAUNCH_STRETCH_NS`` since its previous launch call (framework dispatch);
- ``idle_host``: the host was doing something else for longer (CPU work, Python, ranges that
  launch nothing) before it issued the next operation;
- ``idle_unattributed``: no next operation, or no API record for it.

Copy time hidden under kernels (another stream) is counted as kernel time and reported beside
the budget as ``hidden_copy_ns``.
"""
from __future__ import annotations

import json

import numpy as np
import pandas as pd

from nsightlab.analysis.budget_parts import (  # noqa: F401  (the parts, as budget.PARTS...)
    BUSY_PARTS,
    COMM_PREFIX,
    COPY_PARTS,
    IDLE_PARTS,
    LAUNCH_STRETCH_NS,
    PARTS,
    add_idle,
    by_sync_frame,
    copy_codes,
    has_comm,
    idle_context,
    idle_pieces,
    in_gap_chunks,
    max_end_per_iteration,
    none_last,
)
from nsightlab.analysis import ending, iterations, kinds, steady, work
from nsightlab.analysis.budget_parts import COPY_WORDS as _COPY_WORDS
from nsightlab.analysis.iterations import ITERATION, base_name  # noqa: F401
from nsightlab.analysis.classify import sync_kind
from nsightlab.analysis.launches import pairs
from nsightlab.analysis.timeline import covered, union
from nsightlab.core import benchmath
from nsightlab.read.frames import release_memory
from nsightlab.read.report import Report
from nsightlab.renderers import words

OP_COLUMNS = ("device_id", "start_ns", "end_ns", "api_start_ns", "part")
DTYPES = {"device_id": np.int32, "start_ns": np.int64, "end_ns": np.int64,
          "api_start_ns": np.float64, "part": np.int8}
#: the iteration name when there are no iteration ranges
WHOLE_RUN = "(whole run)"
#: how the source of a run begins whose found loop contradicted itself
#: (``iterations.contradiction``): no loop, said so
NO_STEADY_LOOP = "no steady loop found"
#: how a run's iterations were found (the budget summary's ``iteration_how``): NVTX iteration
#: ranges, found in the trace, the whole span of GPU activity as one (nothing repeats),
#: rejected (a found loop that contradicted itself: the whole span), or no GPU activity
HOW_NVTX, HOW_FOUND, HOW_WHOLE, HOW_REJECTED, HOW_NONE = \
    "nvtx", "found", "whole", "rejected", "none"
ITERATED = (HOW_NVTX, HOW_FOUND)
#: the end of the source of a run taken whole
WHOLE_SPAN_WORDS = ": the whole span of GPU activity as one iteration"
#: the verdict of a run in which nothing repeats (set-up and one pass, a run that ended before
#: its loop, a trace with almost no GPU work): what its time went to, and no steady-state verdict
NO_LOOP = "no loop"
#: host time between two iteration ranges still counted in the first (Python loop overhead)
TILE_GAP_NS = 200_000
TILE_GAP_FRACTION = 0.05
#: a gap up to this many times the loop's median gap between iterations is the loop's own
#: (copies and syncs outside the iteration range, as trtexec's enqueue ranges leave them)
TYPICAL_GAP_FACTOR = 1.5


def ranges(report: Report) -> tuple[pd.DataFrame, str, str]:
    """The iteration ranges and how they were found, in words and as ``HOW_*``: NVTX
    iteration ranges where the run has them, else iterations found in the trace
    (``iterations.find``); empty when neither."""
    iters = iterations.nvtx_ranges(report).drop(columns="depth")
    if len(iters):
        first = base_name(iters["name"].iloc[0])
        how = "" if ITERATION.match(first) else (", numbered ranges that follow each other and "
                                                 "launch the work")
        own = kinds.user_numbers(iters["name"].map(base_name))
        how += ("; iterations go by the numbers their ranges carry" if own is not None else "")
        return iters, f"{len(iters)} NVTX iteration ranges ({first}...{how}), wall-clock", HOW_NVTX
    found = iterations.find(report)
    if not len(found.ranges):
        return found.ranges, f"no NVTX iteration ranges, and {found.source}", HOW_WHOLE
    r = found.ranges  # as found (the budget checks its windows again: ``_compute``)
    bad = iterations.contradiction(report, r["start_ns"].to_numpy(np.int64),
                                   r["end_ns"].to_numpy(np.int64))
    if bad:  # a found loop whose own numbers contradict each other is not a loop
        return r.iloc[:0], _rejected(found.found_words, bad), HOW_REJECTED
    return r, found.source, HOW_FOUND


def _rejected(found_words: str, why: str) -> str:
    """The source of a run whose found loop contradicted itself."""
    return f"{NO_STEADY_LOOP}: the sequence that repeats ({found_words}) contradicts itself: {why}"


def gpu_ops(report: Report) -> dict[str, np.ndarray]:
    """Every kernel, copy, memset and whole-graph execution (graph-level traces) as arrays in
    start order: device_id, start_ns, end_ns,
    api_start_ns (the start of the API call that launched it; NaN where none was recorded) and
    part (the index of its ``BUSY_PARTS`` entry). The join is ``launches.pairs`` (integer
    keys), and plain arrays, not a DataFrame: no copies of millions of rows."""
    cols: dict[str, list[np.ndarray]] = {c: [] for c in OP_COLUMNS}
    for table in ("kernels", "memcpy", "memset", "graph_execs"):
        if not report.has_rows(table):
            continue
        oi, ai = pairs(report, table)
        extra = ["copy_kind", "src_kind", "dst_kind"] if table == "memcpy" else []
        ops = report.table(table, ["device_id", "start_ns", "end_ns", *extra])
        api_start = np.full(len(ops), np.nan)
        if len(oi):
            api_start[oi] = report.take("cuda_api", ["start_ns"], ai)["start_ns"].to_numpy()
        if table == "memcpy":
            code = copy_codes(ops)
        else:
            code = np.full(len(ops), BUSY_PARTS.index("memset" if table == "memset" else "kernels"),
                           np.int8)
            if table == "kernels" and has_comm(report):  # NCCL's kernels: communication
                names = report.table("kernels", ["name"])["name"]
                code[names.astype(str).str.startswith(COMM_PREFIX).to_numpy()] = \
                    BUSY_PARTS.index("communication")
        for c, v in (("device_id", ops["device_id"].to_numpy(np.int32)),
                     ("start_ns", ops["start_ns"].to_numpy(np.int64)),
                     ("end_ns", ops["end_ns"].to_numpy(np.int64)), ("api_start_ns", api_start),
                     ("part", code)):
            cols[c].append(v)
        del ops
    out = {c: np.concatenate(v) if len(v) > 1 else (v[0] if v else np.empty(0, DTYPES[c]))
           for c, v in cols.items()}
    if len(out["start_ns"]) > 1 and not np.all(out["start_ns"][1:] >= out["start_ns"][:-1]):
        order = np.argsort(out["start_ns"], kind="stable")
        out = {c: v[order] for c, v in out.items()}
    return _ties_in_time_order(out)


def _ties_in_time_order(ops: dict) -> dict:
    """``ops`` (in start order) with operations that start together ordered by when they were
    launched, then by end: "the operation that ends a gap" is then the same whatever the
    export's row order (nsys 2025.6 and later write rows out of time order). Only the tied
    rows are sorted (``engine.sort_ties``)."""
    from nsightlab.analysis.engine import sort_ties

    names = ["start_ns", *(c for c in ops if c != "start_ns")]
    col = sort_ties([ops[c] for c in names], 1, ((names.index("api_start_ns"), none_last),
                                                 names.index("end_ns")))
    return {c: col[names.index(c)] for c in ops}


def _select(ops: dict[str, np.ndarray], rows: np.ndarray) -> dict[str, np.ndarray]:
    return {c: v[rows] for c, v in ops.items()}


def windows(iters: pd.DataFrame, gpu_end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Wall-clock windows of the iterations (see the module docstring): ``gpu_end`` is the
    end of the last GPU work each iteration launched (-1 where none)."""
    rs, re_ = iters["start_ns"].to_numpy(np.int64), iters["end_ns"].to_numpy(np.int64)
    end = np.maximum(re_, gpu_end)
    start = rs.copy()
    # the gap every iteration of a steady loop leaves (trtexec copies results and syncs
    # outside its enqueue range): part of the loop, not a pause between phases
    gaps = rs[1:] - end[:-1]
    typical = float(np.median(gaps[gaps > 0])) if (gaps > 0).sum() >= 3 else 0.0
    for i in range(1, len(rs)):
        start[i] = max(rs[i], end[i - 1])  # the host ran ahead: start when the last one ends
        gap = rs[i] - end[i - 1]
        if 0 <= gap <= max(TILE_GAP_NS, TILE_GAP_FRACTION * (end[i - 1] - start[i - 1]),
                           TYPICAL_GAP_FACTOR * typical):
            end[i - 1] = rs[i]  # back to back: the loop's own overhead belongs to the iteration
        end[i] = max(end[i], start[i])
    return start, end


def _gpu_end_per_iteration(iters: pd.DataFrame, ops: dict) -> np.ndarray:
    """End of the last GPU op whose launch call started inside each iteration range."""
    out = np.full(len(iters), -1, np.int64)
    api = ops["api_start_ns"]
    known = ~np.isnan(api)
    if known.any() and len(iters):
        max_end_per_iteration(out, iters["start_ns"].to_numpy(np.int64),
                              iters["end_ns"].to_numpy(np.int64), api[known].astype(np.int64),
                              ops["end_ns"][known])
    return out


def compute(report: Report) -> tuple[pd.DataFrame, pd.DataFrame, str]:
    """The budget: (per iteration and GPU, idle time by sync API, how iterations were found).

    Columns of the first: iteration, name, device_id, start_ns, end_ns, wall_ns, one ``*_ns``
    column per part (``PARTS``; they add up to wall_ns), hidden_copy_ns. Big reports are
    computed out of core (``budget_stream``, same numbers), others in memory.
    """
    from nsightlab.analysis import engine
    from nsightlab.analysis.budget_stream import StreamedOps

    # the iterations first: finding them in a trace without ranges holds every operation in
    # memory (~350 MB at 8M kernels), which is then let go before the operations are joined
    # to their launch calls (8M kernels without NVTX, 2 cores: main process 1.25 -> 0.97 GB)
    found = None
    if report.has_rows("kernels") or report.has_rows("memcpy"):
        found = ranges(report)
        if found[2] == HOW_FOUND:  # the operations were read: give their memory back
            release_memory()
    return engine.analyse(report, lambda db: _compute(report, StreamedOps(report, db), found),
                          lambda: _compute(report, MemoryOps(report), found))


class MemoryOps:
    """Every GPU operation in memory (``gpu_ops``), as ``budget_stream.StreamedOps``."""

    def __init__(self, report: Report):
        self.report, self.ops = report, gpu_ops(report)
        self.count = len(self.ops["start_ns"])

    def span(self) -> tuple[int, int]:
        return int(self.ops["start_ns"].min()), int(self.ops["end_ns"].max())

    def syncs(self) -> pd.DataFrame:
        return iterations.sync_calls(self.report)

    def gpu_end(self, iters: pd.DataFrame) -> np.ndarray:
        return _gpu_end_per_iteration(iters, self.ops)

    def budgets(self, start: np.ndarray, end: np.ndarray, syncs: pd.DataFrame) -> dict:
        ops, out = self.ops, {}
        devices = np.unique(ops["device_id"]) if self.count else []
        for dev in devices:
            mine = ops if len(devices) == 1 else _select(ops,
                                                         np.flatnonzero(ops["device_id"] == dev))
            out[int(dev)] = _device_budget(mine, start, end, syncs)
        return out


def _compute(report: Report, ops, found: tuple | None = None
             ) -> tuple[pd.DataFrame, pd.DataFrame, str]:
    syncs = ops.syncs()
    iters, source, how = (found or ranges(report)) if ops.count else \
        (iterations.nvtx_ranges(report).drop(columns="depth"), "", HOW_NONE)
    if how == HOW_NVTX:
        iters, lost = ending.untraced_tail(report, iters)
        source += f"; {lost}" if lost else ""
    cut = ending.cut(report, iters, how != HOW_FOUND) if ops.count else \
        (iters, pd.DataFrame(columns=ending.CUT_COLUMNS))
    iters = cut[0]
    if len(cut[1]):
        source += f"; the last ({cut[1]['name'].iloc[0]}) cut by the trace's end and left out"
    if len(iters) and ops.count:
        start, end = windows(iters, ops.gpu_end(iters))
        names = iters["name"].map(base_name).to_numpy()
        bad = iterations.contradiction(report, start, end) if how == HOW_FOUND else None
        if bad:  # a found loop whose own numbers contradict each other is not a loop
            iters, cut = iters.iloc[:0], (iters.iloc[:0], cut[1].iloc[:0])
            how, source = HOW_REJECTED, _rejected(iterations.find(report).found_words, bad)
    if not (len(iters) and ops.count):
        lo, hi = ops.span() if ops.count else (0, 0)
        start, end, names = np.array([lo]), np.array([hi]), np.array([WHOLE_RUN])
        how = HOW_NONE if not ops.count else how if how == HOW_REJECTED else HOW_WHOLE
        source = f"{source}{WHOLE_SPAN_WORDS}" if ops.count else "no GPU activity"
    # iterations found inside an outer unit (decode steps in a generate() call): the kinds
    # may recur once a unit (the prefill, the call's last step)
    outer = iterations.find(report).outer if how == HOW_FOUND else 0
    done = work.signatures(report, start, end, syncs) if ops.count and len(iters) else None
    ids = done.ids if done is not None and done.known else np.zeros(len(start), np.int64)
    loop = kinds.classify(end - start, cycle=outer, work=ids)
    moved = _copy_bytes(report, start, end) if ops.count else {}
    rows, causes = [], []
    for dev, (parts, idle) in ops.budgets(start, end, syncs).items():
        rows.append(pd.DataFrame({"iteration": np.arange(len(start)), "name": names,
                                  "device_id": int(dev), "start_ns": start, "end_ns": end,
                                  "wall_ns": end - start, **parts, **moved.get(int(dev), {}),
                                  "phase": loop.phase, "kind": loop.label, "work": ids}))
        causes.append(idle)
    columns = ["iteration", "name", "device_id", "start_ns", "end_ns", "wall_ns",
               *(f"{p}_ns" for p in PARTS), "hidden_copy_ns", *BYTES, "phase", "kind", "work"]
    table = pd.concat(rows, ignore_index=True) if rows else pd.DataFrame(columns=columns)
    for c in BYTES:
        table[c] = table[c].fillna(0).astype(np.int64) if c in table else np.int64(0)
    table = table[columns]
    by_sync = merge_by_sync(causes)
    by_sync["idle_ns_per_iteration"] = by_sync["idle_ns"] / max(len(start), 1)
    del ops, rows, causes
    release_memory()  # the idle threads' scratch: before the caller builds its own tables
    table.attrs["cut"] = cut[1]  # the iteration the trace's end cut (``ending.cut``)
    table.attrs["how"] = how
    table.attrs["work"] = work_table(done, table)
    return table, by_sync, source


WORK_COLUMNS = ["work", "level", "iterations", "kind", "kernels", "copies", "memsets", "syncs",
                "graphs", "tokens"]


def work_table(done, table: pd.DataFrame) -> pd.DataFrame:
    """One row per kind of work (``work.signatures``): its id, the level of the signatures,
    its iterations, the kind of iteration most of them are, what one iteration of it runs
    (kernels, copies, memsets, syncs, graph launches) and ``tokens``: the kernel names (or
    classes) and other operations of its first iteration with their counts, as JSON."""
    import json

    if done is None or not len(done.kinds):
        return pd.DataFrame(columns=WORK_COLUMNS)
    t = done.kinds.copy()
    first = table[table["device_id"] == table["device_id"].iloc[0]] if len(table) else table
    label = first["kind"].to_numpy(object) if len(first) else np.array([], object)
    t["kind"] = [pd.Series(label[done.ids == w]).mode().iloc[0] if len(label) else ""
                 for w in t["work"]]
    t["level"] = done.level
    t["tokens"] = [json.dumps(done.tokens.get(int(w), {}), sort_keys=True) for w in t["work"]]
    return t[WORK_COLUMNS].reset_index(drop=True)


#: bytes copied per iteration, by direction (for the words of a kind that copies)
BYTES = ("h2d_bytes", "d2h_bytes", "d2d_bytes")
_BYTE_KINDS = {"Host-to-Device": "h2d_bytes", "Device-to-Host": "d2h_bytes",
               "Device-to-Device": "d2d_bytes"}


def _copy_bytes(report: Report, start: np.ndarray, end: np.ndarray) -> dict:
    """Bytes copied per iteration window (by the copy's start), by GPU and direction:
    {device: {"h2d_bytes": array, ...}}; empty without copies."""
    if not report.has_rows("memcpy"):
        return {}
    mc = report.memcpy(["device_id", "start_ns", "bytes", "copy_kind"])
    at = np.searchsorted(start, mc["start_ns"].to_numpy(), "right") - 1
    inside = (at >= 0) & (mc["start_ns"].to_numpy() <= end[np.maximum(at, 0)])
    out: dict = {}
    kind = mc["copy_kind"].astype(str).to_numpy()
    dev = mc["device_id"].to_numpy()
    nbytes = mc["bytes"].to_numpy(np.float64)
    for d in np.unique(dev):
        out[int(d)] = {c: np.bincount(at[sel], weights=nbytes[sel], minlength=len(start))
                       .astype(np.int64)
                       for k, c in _BYTE_KINDS.items()
                       for sel in [inside & (dev == d) & (kind == k)]}
    return out


def api_names(report: Report) -> list[str]:
    """The distinct CUDA API names of the run (on a big report from DuckDB: the name column of
    200M calls is ~1 GB in pandas)."""
    from nsightlab.analysis import engine

    if not report.has_rows("cuda_api"):
        return []
    return engine.analyse(report, lambda db: db.distinct("cuda_api", "name"), lambda: [
        str(n) for n in report.cuda_api(["name"])["name"].cat.categories])


def merge_by_sync(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """Per-GPU ``by_sync_frame`` tables as one: idle time and stretches per sync API over
    all GPUs, largest first."""
    both = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(
        {"api_name": pd.Series(dtype=object), "idle_ns": pd.Series(dtype=np.int64),
         "stretches": pd.Series(dtype=np.int64)})
    out = both.groupby("api_name", as_index=False, sort=True)[["idle_ns", "stretches"]].sum()
    return out.sort_values("idle_ns", ascending=False, kind="stable").reset_index(drop=True)


def _device_budget(ops: dict, start: np.ndarray, end: np.ndarray,
                   syncs: pd.DataFrame) -> tuple[dict, pd.DataFrame]:
    """Parts per window for one GPU's operations, and the idle time per sync API."""
    parts: dict[str, np.ndarray] = {}
    s, e, kind = ops["start_ns"], ops["end_ns"], ops["part"]
    present = np.bincount(kind, minlength=len(BUSY_PARTS)) > 0
    done = np.zeros(len(start), np.int64)
    cum_s, cum_e = np.empty(0, np.int64), np.empty(0, np.int64)
    copy_total = np.zeros(len(start), np.int64)
    for code, part in enumerate(BUSY_PARTS):
        if present[code]:
            sel = kind == code if present.sum() > 1 else slice(None)
            cs, ce = union(np.concatenate([cum_s, s[sel]]), np.concatenate([cum_e, e[sel]]))
            now = covered(cs, ce, start, end)
            if part in COPY_PARTS:
                ps, pe = union(s[sel], e[sel])
                copy_total += covered(ps, pe, start, end)
            parts[f"{part}_ns"] = now - done
            done, cum_s, cum_e = now, cs, ce
        else:
            parts[f"{part}_ns"] = np.zeros(len(start), np.int64)
    copies = sum(parts[f"{p}_ns"] for p in COPY_PARTS)
    idle_parts, by_sync = _idle(cum_s, cum_e, start, end, ops, syncs)
    parts.update(idle_parts)
    parts["hidden_copy_ns"] = copy_total - copies
    return parts, by_sync


def _idle(ms: np.ndarray, me: np.ndarray, start: np.ndarray, end: np.ndarray,
          ops: dict, syncs: pd.DataFrame) -> tuple[dict, pd.DataFrame]:
    """Idle stretches (the complement of the busy union inside each window) by cause; the
    gaps are taken ``GAP_CHUNK`` at a time, so a launch-bound run of 8M kernels (8M gaps) needs
    a few hundred MB of scratch, not a few GB."""
    # gaps of the busy union, including before the first and after the last busy interval
    gs = np.concatenate([[np.iinfo(np.int64).min], me])
    ge = np.concatenate([ms, [np.iinfo(np.int64).max]])
    ctx = idle_context(start, end, syncs)
    op_start, api = ops["start_ns"], ops["api_start_ns"]
    launches_at = _unique(api[~np.isnan(api)])

    def work(chunk: slice):
        cs, ce = gs[chunk], ge[chunk]
        # the operation that ends each gap, and when its launch call started
        nxt = np.minimum(np.searchsorted(op_start, ce, "left"), max(len(op_start) - 1, 0))
        launch_at = api[nxt] if len(op_start) else np.full(len(ce), np.nan)
        launch_at = np.where(ce == np.iinfo(np.int64).max, np.nan, launch_at)
        # host time since the previous launch call: short stretches are the framework issuing work
        at = np.nan_to_num(launch_at).astype(np.int64)
        j = np.searchsorted(launches_at, at, "left") - 1
        if len(launches_at):
            quick = (j >= 0) & (at - launches_at[np.maximum(j, 0)] <= LAUNCH_STRETCH_NS)
        else:  # no API trace (an export without CUPTI_ACTIVITY_KIND_RUNTIME): no launch known
            quick = np.zeros(len(at), bool)
        return idle_pieces(cs, ce, launch_at, quick, ctx)

    done = in_gap_chunks(len(gs), work)
    return add_idle(ctx, done), by_sync_frame(ctx, done)


def _unique(values: np.ndarray) -> np.ndarray:
    """``np.unique(values)``; without its sort when ``values`` are in order already (launch
    calls of operations in start order almost always are: 0.5 s at 8M on 2 cores)."""
    if len(values) < 2 or not np.all(values[1:] >= values[:-1]):
        return np.unique(values)
    return values[np.concatenate([[True], values[1:] != values[:-1]])]


# ---- verdicts ---------------------------------------------------------------------------------
#: verdict thresholds (``budget`` recipe parameters). A part that takes at least
#: ``dominant_pct`` of the iteration decides the verdict: past half of the time, speeding up
#: anything else cannot give more than 2x. ``notable_pct``: a secondary cause worth its own
#: advice (a sync costing 15% of an iteration is worth removing even in a compute-bound run).
DEFAULTS = {"dominant_pct": 50.0, "notable_pct": 15.0}
GROUPS = {"kernels": ("kernels",), "communication": ("communication",),
          "copies": (*COPY_PARTS, "memset"), "sync": ("idle_sync",),
          "launch": ("idle_launch",), "host": ("idle_host",),
          "unattributed": ("idle_unattributed",)}
VERDICTS = {"kernels": "compute-bound", "communication": "communication-bound",
            "copies": "copy-bound", "sync": "sync-bound",
            "launch": "launch-bound", "host": "host-bound"}
COPY_WORDS = {**_COPY_WORDS, "memset": "memsets"}


def summarize(table: pd.DataFrame, by_sync: pd.DataFrame, graphs: bool,
              params: dict | None = None) -> pd.DataFrame:
    """One row per GPU: the loop (every iteration after warm-up, ``nsightlab.analysis.kinds``):
    its iterations and statistics, its mean wall time (what throughput sees: total time /
    iterations), every part per iteration (``*_ns``, means over the loop: they add up to the
    mean) and its share (``*_pct``), hidden copy time, verdict, evidence and advice; then the
    main kind's iterations and median. Without iteration ranges the evidence says that set-up
    time is in it."""
    params = {**DEFAULTS, **(params or {})}
    rows = []
    for dev, g in table.groupby("device_id", sort=True):
        label = _labels(g)
        st = kinds.stats(g["wall_ns"].to_numpy(float), label)
        st["main_cov_pct"] = kinds.cov_pct(g["wall_ns"].to_numpy(float)[label == kinds.MAIN])
        st["trend"] = kinds.describe(g["wall_ns"].to_numpy(float), label).trend is not None \
            or _kernel_trend_explains(g, label)
        use = g[label != kinds.WARM_UP] if st["steady_iterations"] else g
        wall = float(use["wall_ns"].mean())
        main = g["wall_ns"].to_numpy(float)[label == kinds.MAIN]
        row = {"device_id": int(dev), "iterations": len(g),
               "steady_iterations": st["steady_iterations"],
               "warmup_iterations": st["warmup_iterations"],
               "outlier_iterations": st["outlier_iterations"], "kinds": st["kinds"],
               "wall_ns": wall, "wall_med_ns": st["p50_ns"], "wall_p95_ns": st["p95_ns"],
               "wall_p99_ns": st["p99_ns"], "wall_cov_pct": st["cov_pct"],
               "warmup_ns": st["warmup_ns"], "main_iterations": int(len(main)),
               "main_med_ns": benchmath.median(main, st["p50_ns"])}
        _add_parts(row, use, wall)
        whole = (g["name"] == WHOLE_RUN).all()
        row["verdict"], row["verdict_code"], row["evidence"], advice = verdict(
            row, by_sync, graphs, params, whole)
        row["advice"], row["advice_records"] = words.said(advice), json.dumps(advice)
        if whole:  # nothing repeats: no steady state to judge
            row["verdict"], row["verdict_code"], row["advice"], row["advice_records"] = \
                NO_LOOP, "no_loop", "", "[]"
            row["evidence"] = "the whole span of GPU activity, set-up included, " + row["evidence"]
        elif loop_words(st):
            row["evidence"] += "; " + loop_words(st)
        rows.append(row)
    return pd.DataFrame(rows)


def _labels(g: pd.DataFrame) -> np.ndarray:
    """Each iteration's kind (``kinds``' labels): from the table, else classified now."""
    if "kind" in g:
        return g["kind"].to_numpy(object)
    return kinds.classify(g["wall_ns"].to_numpy(float)).label


def _add_parts(row: dict, use: pd.DataFrame, wall: float) -> None:
    """The mean of every part over iterations ``use``, and its share of ``wall``."""
    for p in PARTS:
        row[f"{p}_ns"] = float(use[f"{p}_ns"].mean()) if len(use) else 0.0
    for p in PARTS:
        row[f"{p}_pct"] = 100.0 * row[f"{p}_ns"] / wall if wall else 0.0
    row["hidden_copy_ns"] = float(use["hidden_copy_ns"].mean()) if len(use) else 0.0


def kinds_table(table: pd.DataFrame, by_sync: pd.DataFrame, graphs: bool,
                params: dict | None = None, works: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per GPU and kind of iteration (the main kind first, then the others, the
    outliers and the warm-up; ``nsightlab.analysis.kinds``): which iterations (``pattern``,
    ``which``), how many, their median / min / max / mean wall time, their total time and its
    share of the loop's (``share_pct``: warm-up's against the loop's too, though it is not in
    it), every part's mean, the verdict of the kind's own mean budget, and ``cause``: the part
    that makes it differ from the main kind (none for the main kind; for a trend's main kind,
    the part that grows from the first quarter to the last)."""
    params = {**DEFAULTS, **(params or {})}
    out = []
    for dev, g in table.groupby("device_id", sort=True):
        wall = g["wall_ns"].to_numpy(float)
        label = _labels(g)
        ids = g["work"].to_numpy(np.int64) if "work" in g else None
        with kinds.numbered(kinds.user_numbers(g["name"])):  # iter8 is iteration 8
            out += _kind_rows(g, int(dev), wall, label, ids, works, by_sync, graphs, params)
    cols = ["device_id", "kind", "pattern", "which", "head", "base", "iterations", "med_ns",
            "min_ns", "max_ns", "mean_ns", "time_ns", "share_pct", "period", "basis", "work",
            "verdict", "cause", "kernel_first_ns", "kernel_last_ns", "kernel_quarter",
            "same_work", "work_kernels", "first", "listed", *(f"trend_{k}" for k in TREND),
            *(f"{p}_ns" for p in PARTS), "hidden_copy_ns", *BYTES]
    return pd.DataFrame(out, columns=cols)


#: a trend's numbers in the kinds table (``trend_*``: ``kinds.Loop.trend``)
TREND = ("change_pct", "first_ns", "last_ns", "quarter")


def _kind_rows(g: pd.DataFrame, dev: int, wall: np.ndarray, label: np.ndarray, ids, works,
               by_sync: pd.DataFrame, graphs: bool, params: dict) -> list[dict]:
    """``kinds_table``'s rows of one GPU."""
    out = []
    loop = kinds.describe(wall, label, ids)
    loop_ns = float(wall[label != kinds.WARM_UP].sum())
    main = g[label == kinds.MAIN]
    groups = [(x.name, x.pattern, x.words, x.head) for x in loop.kinds if (label == x.name).any()]
    basis = {x.name: x.basis for x in loop.kinds}
    basis[kinds.MAIN] = "work"
    if (label == kinds.OUTLIER).any():
        rows = np.flatnonzero(label == kinds.OUTLIER)
        head = f"iteration{'s' if len(rows) > 1 else ''} {kinds.listed(rows, 8)}"
        groups.append((kinds.OUTLIER, "isolated", f"{len(rows)} of {len(wall) - loop.warmup}: "
                       + head, head))
    if loop.warmup:
        head = f"iteration {kinds.number(0)}" if loop.warmup == 1 else \
            f"iterations {kinds.number(0)}-{kinds.number(loop.warmup - 1)}"
        groups.append((kinds.WARM_UP, "prefix", head, head))
    for name, pattern, which, head in groups:
        mine = g[label == name]
        w = mine["wall_ns"].to_numpy(float)
        row = {"device_id": dev, "kind": name, "pattern": pattern, "which": which, "head": head,
               "base": which, "iterations": len(mine), "med_ns": benchmath.median(w),
               "min_ns": float(w.min()), "max_ns": float(w.max()), "mean_ns": float(w.mean()),
               "time_ns": float(w.sum()),
               "share_pct": 100.0 * float(w.sum()) / loop_ns if loop_ns else float("nan"),
               "period": next((x.period for x in loop.kinds if x.name == name), None),
               "basis": basis.get(name, "pace"),
               "work": _work_words(works, ids, label, name) if ids is not None else ""}
        _add_parts(row, mine, row["mean_ns"])
        for c in BYTES:
            row[c] = float(mine[c].mean()) if c in mine else 0.0
        row["verdict"] = verdict({**row, "wall_ns": row["mean_ns"]}, by_sync, graphs,
                                 params)[0]
        row["cause"] = (steady.cause(mine, main) if name != kinds.MAIN else
                        steady.trend_cause(main) if loop.trend else "")
        row["work_kernels"] = _work_kernels(works, ids, label == name)
        at = np.flatnonzero(label == name)  # its iterations, by the numbers words use
        row["first"], row["listed"] = kinds.number(at[0]), kinds.listed(at)
        if name == kinds.MAIN and loop.cycle and sum(
                x.basis == "work" for x in loop.kinds if x.name != kinds.MAIN) >= 2:
            row["period"] = loop.cycle  # the main kind's: the cycle the work repeats in
            row["which"] += "; " + words.cycle(loop.cycle)
        if name == kinds.MAIN:  # the same work's kernels growing (or shrinking) in time
            same, kt = _kernel_trend(mine, ids, label == name, works)
            row["kernel_first_ns"] = kt["first_ns"] if kt else float("nan")
            row["kernel_last_ns"] = kt["last_ns"] if kt else float("nan")
            row["kernel_quarter"] = kt["quarter"] if kt else 0
            row["same_work"] = same
        if name == kinds.MAIN and loop.trend:
            row["pattern"] = "trend"
            row.update({f"trend_{k}": loop.trend[k] for k in TREND})
            row["which"] += "; " + words.trend(row)
        out.append(row)
    return out


def _kernel_trend(mine: pd.DataFrame, ids, rows, works) -> tuple[bool, dict | None]:
    """(whether the main kind's iterations are known to run one work, the trend in their
    kernel time: ``kinds.kernel_trend``) over the main kind's iterations that run its usual
    work (all of them where the work is unknown)."""
    if "kernels_ns" not in mine or not len(mine):
        return False, None
    known = works is not None and len(works) > 0 and ids is not None
    usual = kinds.usual_work(ids, rows) if known else None
    same = known and usual is not None and bool((ids[rows] == usual).all())
    k = mine["kernels_ns"].to_numpy(float)
    if known and usual is not None:
        k = k[ids[rows] == usual]
    return same, kinds.kernel_trend(k)


def _kernel_trend_explains(g: pd.DataFrame, label: np.ndarray) -> bool:
    """Whether the main kind's kernel time trends and, that growth taken out, its wall times
    vary less than ``kinds.UNSTABLE_COV_PCT``: the trend is why the loop varies (a KV cache),
    not the host."""
    main = g[label == kinds.MAIN]
    if len(main) < 2 or kinds.kernel_trend(main["kernels_ns"].to_numpy(float)) is None:
        return False
    k = main["kernels_ns"].to_numpy(float)
    rest = main["wall_ns"].to_numpy(float) - k + float(np.median(k))
    return kinds.cov_pct(rest) <= kinds.UNSTABLE_COV_PCT


def _work_kernels(works: pd.DataFrame | None, ids, rows) -> float:
    """The kernels one iteration of the usual work of iterations ``rows`` runs (``works``'
    count); NaN where unknown."""
    if works is None or not len(works) or ids is None:
        return float("nan")
    w = kinds.usual_work(ids, rows)
    got = works.loc[works["work"] == w, "kernels"] if w is not None else []
    return float(got.iloc[0]) if len(got) else float("nan")


def _work_words(works: pd.DataFrame | None, ids: np.ndarray, label: np.ndarray,
                name: str) -> str:
    """What the usual work of kind ``name`` runs against the main kind's, in words
    (``work.difference``); "" for the main kind, the same work, or no work table."""
    import json

    if works is None or not len(works) or name == kinds.MAIN:
        return ""
    mine = kinds.usual_work(ids, label == name)
    main = kinds.usual_work(ids, label == kinds.MAIN)
    if mine is None or main is None or mine == main:
        return ""
    tok = {int(r.work): json.loads(r.tokens) for r in works.itertuples()}
    if mine not in tok or main not in tok:
        return ""
    return work.difference(tok[main], tok[mine])


def empty_iterations(report: Report, table: pd.DataFrame) -> dict | None:
    """A completeness finding (``partial``) when iterations of the budget ``table`` ran no
    kernel although kernel launch calls were made inside them: the trace lacks their kernels
    (the kernel trace stopped, buffers were lost, the capture was cut). None otherwise. The
    launch calls are read only when some iteration has no kernel time."""
    if not len(table):
        return None
    if (table["name"] == WHOLE_RUN).all():
        return _untraced_run(report)
    # (only where nsys says CUDA events may be missing: no read of the ranges otherwise)
    ranges_ = iterations.nvtx_ranges(report) if ending.stopped_early(report) else table.iloc[:0]
    _, lost = ending.untraced_tail(report, ranges_)
    if lost:  # the CUDA records end before the ranges do: what is left may lack part too
        return {"check": "cuda_trace_lost", "severity": "partial",
                "message": f"of its {len(ranges_)} NVTX iteration ranges, {lost}"
                           "; the iterations before them may lack records too: verdicts are "
                           "withheld"}
    first = table[table["device_id"] == table["device_id"].iloc[0]]
    empty = first["kernels_ns"].to_numpy() == 0
    if not empty.any() or not report.has_rows("cuda_api"):
        return None
    t = iterations.launch_starts(report)
    lo, hi = first["start_ns"].to_numpy(np.int64), first["end_ns"].to_numpy(np.int64)
    launched = np.searchsorted(t, hi, "right") - np.searchsorted(t, lo, "left")
    bad = empty & (launched > 0)
    if not bad.any():
        return _untraced(report, first, empty, len(t), lo, hi)
    nums = kinds.user_numbers(first["name"])
    nums = first["iteration"].to_numpy() if nums is None else nums
    which = ", ".join(str(i) for i in nums[bad][:5])
    return {"check": "iterations_without_gpu_work", "severity": "partial",
            "message": f"{int(bad.sum())} of {len(first)} iterations hold no kernel although "
                       f"{int(launched[bad].sum()):,} kernel launch calls were made in them "
                       f"(iteration {which}{' ...' if bad.sum() > 5 else ''}): the trace lacks "
                       "their kernels (kernel trace stopped, buffers lost, capture cut); "
                       "verdicts are withheld"}


#: CUDA driver entry-point look-ups: the CUDA 12+ runtime calls the driver through these, and
#: an nsys older than the runtime may not see the calls made through them
LOOKUP = "cuGetProcAddress"
#: iterations without any CUDA call or GPU work, of all, that say the launches went unrecorded
UNTRACED_SHARE = 0.8
#: in a run without iterations, the share of its CUDA calls that are entry-point look-ups
#: which, with a tracer older than the driver, says launches went unrecorded (nsys 2023.4 on
#: CUDA 13: 880 of 1,160)
LOOKUP_SHARE = 0.5


def _lookups(report: Report) -> tuple[int, int]:
    """(the driver entry-point look-ups among the run's CUDA calls, all its CUDA calls)."""
    names = report.cuda_api(["name"])["name"].astype(str)
    return int(names.str.startswith(LOOKUP).sum()), len(names)


def _untraced(report: Report, first: pd.DataFrame, empty: np.ndarray, launches: int,
              lo: np.ndarray, hi: np.ndarray) -> dict | None:
    """``partial`` when most iterations (``UNTRACED_SHARE``, 2 or more) hold no CUDA call
    and no GPU work at all while the process did launch GPU work outside them: the loop's launches went
    unrecorded (seen: nsys 2023.4 on the CUDA 13 runtime, whose calls go through driver entry
    points that its CUPTI does not trace). The entry-point look-ups and the nsys and driver
    versions are said beside it as support, not proof."""
    busy = first[[f"{c}_ns" for c in BUSY_PARTS]].sum(axis=1).to_numpy()
    idle = empty & (busy == 0)
    if idle.sum() < max(2, UNTRACED_SHARE * len(first)) or not (
            report.has_rows("kernels") or report.has_rows("memcpy")):
        return None
    t = np.sort(report.cuda_api(["start_ns"])["start_ns"].to_numpy(np.int64))
    calls = np.searchsorted(t, hi, "right") - np.searchsorted(t, lo, "left")
    bare = idle & (calls == 0)
    if bare.sum() < max(2, UNTRACED_SHARE * len(first)):
        return None
    older = ending.older_than_driver(report)
    if older is None:  # a loop that ran on the CPU, or launches lost some other way: the
        return None    # versions do not say the tracer missed them
    lookups = _lookups(report)[0]
    versions = (f"; {older}: an nsys older than the application's CUDA misses launches made "
                "through driver entry points")
    wall = benchmath.median(hi - lo) / 1e6
    return {"check": "launches_untraced", "severity": "partial",
            "message": f"launches not recorded: {int(bare.sum())} of {len(first)} iterations "
                       f"({wall:.3g} ms each) "
                       "hold no CUDA call, kernel or copy, though the process ran GPU work "
                       f"outside them ({launches:,} launch call(s)"
                       + (f", {lookups:,} {LOOKUP} look-ups" if lookups else "") + ")"
                       + versions + "; profile with an nsys at least as new as the CUDA "
                       "runtime; verdicts are withheld"}


def _untraced_run(report: Report) -> dict | None:
    """``partial`` for a run without iterations whose tracer is older than the driver's CUDA
    and whose CUDA calls are mostly driver entry-point look-ups: the calls made through them,
    the launches among them, went unrecorded (the GPU work recorded is what came before)."""
    older = ending.older_than_driver(report)
    if older is None or not report.has_rows("cuda_api"):
        return None
    lookups, calls = _lookups(report)
    if lookups < LOOKUP_SHARE * calls:
        return None
    ops = sum(report.row_count(t) for t in ("kernels", "memcpy", "memset", "graph_execs"))
    return {"check": "launches_untraced", "severity": "partial",
            "message": f"launches not recorded: {lookups:,} of the {calls:,} CUDA calls "
                       f"recorded are {LOOKUP} look-ups, against {ops:,} GPU operations, and "
                       f"no iterations were found; {older}: an nsys older than the "
                       "application's CUDA misses launches made through driver entry points; "
                       "profile with an nsys at least as new as the CUDA runtime; verdicts are "
                       "withheld"}


def trace_findings(report: Report, out, checked: list[dict]) -> list[dict]:
    """The completeness findings that need the budget's iterations (``out``: the run's
    ``loop.Loop``; ``checked``: ``completeness.check``'s findings, whose edge notes are
    evidence): iterations without GPU work (``empty_iterations``), and how the trace ended
    (``ending.finding``: a cut last iteration, a workload that exited with an error)."""
    in_flight = next((f["in_flight"] for f in checked if f.get("in_flight")), None)
    found = [empty_iterations(report, out.iterations), ending.finding(report, out.cut, in_flight)]
    return [f for f in found if f]


def loop_words(st: dict) -> str:
    """What the verdict's mean is over, said in one clause when something was left out or the
    mean misleads: the iterations after warm-up, the median when the two differ, and
    whether the loop is stable."""
    n, k = st["iterations"], st["steady_iterations"]
    out = (f"the mean of the {k} iterations after warm-up ({st['warmup_iterations']} of {n} "
           "left out)" if st["warmup_iterations"] else "")
    if st["p50_ns"] and abs(st["mean_ns"] - st["p50_ns"]) > kinds.MEAN_MEDIAN_PCT / 100 * st["p50_ns"]:
        out += f"{'; ' if out else ''}the median iteration is {st['p50_ns'] / 1e6:.3f} ms"
    cov = st.get("main_cov_pct", st["cov_pct"])
    if cov > kinds.UNSTABLE_COV_PCT and not st.get("trend"):
        out += (f"{'; ' if out else ''}UNSTABLE: the {'main kind' if st['kinds'] > 1 else 'loop'}"
                f"'s iterations vary by {cov:.0f}% (CoV, outliers apart), so one run's numbers "
                "may not repeat")
    return out


def parts_table(summary: pd.DataFrame) -> pd.DataFrame:
    """A ``summarize`` table as rows of parts (those of at least 0.1% of the iteration): gpu
    (with several GPUs), part, time_ns and share_pct per iteration, then the copy time hidden
    under kernels: how a person reads a budget, where the summary is one wide row."""
    rows = []
    many = len(summary) > 1
    for _, b in summary.iterrows():
        gpu = {"gpu": int(b["device_id"])} if many else {}
        rows += [{**gpu, "part": part, "time_ns": float(b[f"{part}_ns"]),
                  "share_pct": float(b[f"{part}_pct"])}
                 for part in PARTS if b[f"{part}_pct"] >= 0.1]
        if b["hidden_copy_ns"] > 0:
            rows.append({**gpu, "part": "(copies hidden under kernels)",
                         "time_ns": float(b["hidden_copy_ns"]), "share_pct": float("nan")})
    return pd.DataFrame(rows)


def busy_pct(row) -> float:
    """Share of the iteration with GPU work (everything but the idle parts) of a summary row."""
    return 100.0 - sum(float(row[f"{p}_pct"]) for p in IDLE_PARTS)


def verdict(row: dict, by_sync: pd.DataFrame, graphs: bool, params: dict, whole: bool = False
            ) -> tuple[str, str, str, list[dict]]:
    """(verdict, its code: the ``VERDICTS`` key, "mixed" or "none"; evidence, advice records)
    for one GPU's mean iteration (a ``summarize`` row); ``whole``: the whole span as one
    iteration (its evidence is not per iteration)."""
    share = {grp: sum(row[f"{p}_pct"] for p in parts) for grp, parts in GROUPS.items()}
    top = max(share, key=share.get)
    wall = row["wall_ns"]
    if not wall:
        return "no GPU activity", "none", "the iterations hold no GPU work", []
    copies = sorted(((row[f"{p}_ns"], p) for p in GROUPS["copies"]), reverse=True)
    named = {"kernels": "kernels", "communication": "NCCL kernels with no compute beside them",
             "copies": COPY_WORDS[copies[0][1]] if copies[0][0] else "copies",
             "sync": "GPU idle after host syncs", "launch": "GPU idle waiting for launches",
             "host": "GPU idle while the host works", "unattributed": "GPU idle (no cause known)"}
    ranked = sorted(share, key=share.get, reverse=True)
    evidence = f"{'' if whole else 'per iteration '}{wall / 1e6:.3f} ms: " + ", ".join(
        f"{named[g]} {share[g]:.0f}%" for g in ranked if share[g] >= 1)
    code = top if share[top] >= params["dominant_pct"] and top in VERDICTS else "mixed"
    if code != "mixed":
        word = VERDICTS[top]
        if top == "copies":
            word += f" ({copies[0][1].replace('_', ' ')})"
    else:
        second = ranked[1]
        word = f"mixed ({named[top]} {share[top]:.0f}%, {named[second]} {share[second]:.0f}%)"
    return word, code, evidence, _advice(row, share, copies, by_sync, graphs, params)


def _advice(row, share, copies, by_sync, graphs, params) -> list[dict]:
    """Advice that the numbers support, most important first, as records (said by
    ``renderers.words.advice``)."""
    out = []
    notable = params["notable_pct"]
    copy_ns = sum(ns for ns, _ in copies)
    if share["copies"] >= notable:
        pageable = sum(row[f"{p}_ns"] for p in ("h2d_pageable", "d2h_pageable"))
        if pageable >= 0.5 * copy_ns:
            out.append(words.record("pin_pageable", pageable_pct=100 * pageable / copy_ns))
        elif share["copies"] >= params["dominant_pct"]:
            out.append(words.record("copies_pinned"))
        if row["hidden_copy_ns"] < 0.1 * copy_ns and share["kernels"] >= 5:
            out.append(words.record("copies_serial"))
    if share["sync"] >= notable and len(by_sync):
        top = by_sync.iloc[0]
        per_iter = top["stretches"] / max(row["iterations"], 1)
        if per_iter >= 0.5:
            out.append(words.record(
                "sync_in_loop", about=str(top["api_name"]), per_iteration=per_iter,
                idle_per_iteration_ns=top["idle_ns_per_iteration"],
                copy=sync_kind(str(top["api_name"])) in ("memcpy", "memset")))
        else:  # after a few iterations only: the host's wait after it returned, not the call's
            out.append(words.record(
                "sync_rare", about=str(top["api_name"]), times=int(top["stretches"]),
                iterations=int(row["iterations"]), idle_ns=top["idle_ns"],
                idle_per_iteration_ns=top["idle_ns_per_iteration"]))
    if share["launch"] >= notable:
        out.append(words.record("launch_with_graphs" if graphs else "launch"))
    if share["communication"] >= notable:
        out.append(words.record("communication", communication_ns=row["communication_ns"]))
    if share["host"] >= notable:
        out.append(words.record("host", idle_host_ns=row["idle_host_ns"]))
    return out
