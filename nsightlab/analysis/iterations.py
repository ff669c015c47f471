"""Iterations found in the trace itself, for runs without NVTX iteration ranges.

Most reports people share have no ``iterN`` ranges: PyTorch loops, LLM decode loops, ONNX
Runtime sessions. Their iterations are still in the trace, as **a sequence of GPU operations
that repeats** (kernel names in launch order, copies by direction, memsets, whole-graph
executions), one level of several: 12 blocks inside a forward pass, 24 tokens inside a
``generate()`` call, 3 calls.

**A level is an iteration, not a layer, when its boundaries are where host and GPU meet**: a
synchronizing call that returned between two operations (the host waited for the GPU), a host
gap with the GPU idle, a graph launch. Blocks that run back to back inside a pass are layers.
So:

1. operations of the busiest GPU in start order become tokens (never row order: exports of
   nsys 2025.6 and later are not in time order);
2. each candidate level comes from *anchor* tokens that occur exactly ``c`` times (``c`` >= 3):
   their occurrences cut the run into ``c`` units, moved back to the boundary evidence just
   before each occurrence; units are compared by a multiset hash (a prefix sum of random
   64-bit values per token, so the comparison is O(1) per unit and tolerant of kernels that
   swap order between streams);
3. among levels whose units are mostly alike, the innermost one with boundary evidence at most
   of its boundaries is the iteration (a decode step, not the layer inside it, not the
   ``generate()`` call around it); without any evidence (a fully asynchronous loop) the
   outermost level that repeats at least ``MIN_REPEATS`` times.

Iterations are returned as CPU ranges (first launch call to last, like NVTX ranges), so the
time budget tiles them into wall-clock windows exactly as it does NVTX iterations. The source
says what was used and how regular it is. Where nothing repeats, nothing is returned and the
callers fall back to the whole span.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from nsightlab.analysis import ending
from nsightlab.analysis.classify import sync_kind
from nsightlab.analysis.launches import pairs
from nsightlab.read.report import Report

# iteration ranges: iterN / iteration N / stepN / batchN (any domain), or TensorRT's own
# per-inference range (ExecutionContext::enqueue/execute[V2/V3]) whose children are its layers
ITERATION = re.compile(r"(?i)^((iter|iteration|step|batch)[ _-]?\d+|ExecutionContext::(enqueue|execute)\w*)$")


_DOMAIN = re.compile(r"^[^:]*:(?!:)")
#: a range name with a running number: its base and the number (replay3, req_12, sample-7)
NUMBERED = re.compile(r"^(?P<base>[A-Za-z][A-Za-z_. \-]{0,40}?)[ _.\-]?(?P<n>\d{1,7})$")
#: numbered ranges that are parts of a pass (layers, stages) or around many passes, never
#: its iterations
NOT_ITERATIONS = re.compile(
    r"(?i)^(block|blk|layer|layers|h|stage|head|encoder|decoder|enc|dec|conv|attn|attention|"
    r"mlp|ffn|module|bottleneck|res|resblock|transformer|down|up|level|op|node|kernel|part|"
    r"chunk|shard|rank|gpu|device|stream|thread|worker|epoch|layer_?norm|ln|norm|expert)$")
#: the fewest numbered ranges that can be a loop's iterations
MIN_NUMBERED = 3
#: share of numbered ranges that must each hold a launch call to be the run's iterations
#: (where fewer launches than ranges were recorded, an old tracer's, it cannot be checked)
NUMBERED_HOLD = 0.8


def base_name(name: str) -> str:
    """NVTX range name without its domain prefix, trimmed ('nsightlab:iter3' -> 'iter3');
    a C++ name is not a domain ('ExecutionContext::enqueue' stays, 'TensorRT:Execution
    Context::enqueue' loses 'TensorRT:')."""
    s = str(name)
    return _DOMAIN.sub("", s, count=1).strip() if not s.startswith(":") else s.strip()


def base_name_matches(names: pd.Series, pattern: re.Pattern) -> np.ndarray:
    """Whether each name's ``base_name`` matches ``pattern``, decided once per distinct name
    (a categorical column of 13M TensorRT layer ranges as strings took gigabytes)."""
    if isinstance(names.dtype, pd.CategoricalDtype):
        hit = np.array([bool(pattern.match(base_name(c))) for c in names.cat.categories], bool)
        codes = names.cat.codes.to_numpy()
        return np.where(codes >= 0, hit[np.maximum(codes, 0)] if len(hit) else False, False)
    return np.array([bool(pattern.match(base_name(n))) for n in names], bool)

def iteration_pattern(report: Report) -> re.Pattern:
    """The names of this run's iteration ranges: ``ITERATION`` (iterN, stepN, batchN,
    TensorRT's enqueue) where the run has such ranges; else ranges of one name with a running
    number (replayN, reqN, sampleN, ...) that are not layers (``NOT_ITERATIONS``), at least
    ``MIN_NUMBERED``, one after another, that launch work (``NUMBERED_HOLD`` of them hold a
    launch call, or the tracer is older than the driver's CUDA: launches may be unrecorded),
    the outermost such name; else ``ITERATION``. Decided once per report."""
    if ("iteration_pattern",) not in report.answers:
        report.answers[("iteration_pattern",)] = _pattern(report)
    return report.answers[("iteration_pattern",)]


def nvtx_ranges(report: Report) -> pd.DataFrame:
    """The NVTX iteration ranges (name, depth, start_ns, end_ns of the CPU range) in start
    order: the one rule every reader of them follows. Ranges named as iterations
    (``iteration_pattern``) at the outermost depth that has any (a step inside an iteration is
    not one); a range left open runs to the end of the recording."""
    if not report.has_rows("nvtx"):
        return pd.DataFrame({"name": pd.Series(dtype=object), "depth": pd.Series(dtype=np.int64),
                             "start_ns": pd.Series(dtype=np.int64),
                             "end_ns": pd.Series(dtype=np.int64)})
    # names first, then only the matching rows' times (13.6M TensorRT layer ranges: 8 bytes
    # a range instead of 29)
    nvtx = report.nvtx(["name", "kind"])
    rows = np.flatnonzero((nvtx["kind"] != "mark").to_numpy()
                          & base_name_matches(nvtx["name"], iteration_pattern(report)))
    del nvtx
    iters = report.take("nvtx", ["name", "depth", "start_ns", "end_ns"], rows)
    if len(iters):
        iters = iters[iters["depth"] == iters["depth"].min()]
    end = report.span_ns[1] if report.span_ns else np.iinfo(np.int64).max
    iters["end_ns"] = iters["end_ns"].fillna(end).astype(np.int64)
    iters["name"] = iters["name"].astype(str)
    return iters.sort_values("start_ns", kind="stable").reset_index(drop=True)


def _pattern(report: Report) -> re.Pattern:
    if not report.has_rows("nvtx"):
        return ITERATION
    n = report.nvtx(["name", "kind"])
    ranges = (n["kind"] != "mark").to_numpy()
    if (ranges & base_name_matches(n["name"], ITERATION)).any():
        return ITERATION
    names = n["name"].astype("category")
    bases: dict[str, str] = {}
    for c in names.cat.categories:
        m = NUMBERED.match(base_name(str(c)))
        if m and not NOT_ITERATIONS.match(m["base"].strip(" _.-")):
            bases[str(c)] = m["base"].strip(" _.-").lower()
    if not bases:
        return ITERATION
    base_of = names.map(bases).astype(object).to_numpy()
    rows = np.flatnonzero(ranges & pd.notna(base_of))
    got = report.take("nvtx", ["depth", "start_ns", "end_ns"], rows).assign(base=base_of[rows])
    api = old = None
    best = None
    for base, g in got.groupby("base", sort=True):
        g = g[g["depth"] == g["depth"].min()].sort_values("start_ns")
        lo, hi = g["start_ns"].to_numpy(np.int64), g["end_ns"].fillna(np.iinfo(np.int64).max) \
            .to_numpy(np.int64)
        if len(g) < MIN_NUMBERED or (hi[:-1] > lo[1:]).any():  # a loop's ranges follow each other
            continue
        if api is None:
            api = launch_starts(report)
        # each range launches work; where the tracer is older than the driver's CUDA, the
        # launches may have gone unrecorded (``budget.empty_iterations`` then says so)
        first = np.searchsorted(api, lo, side="left")
        launching = (first < len(api)) & (api[np.minimum(first, len(api) - 1)] <= hi) \
            if len(api) else np.zeros(len(lo), bool)
        if launching.mean() < NUMBERED_HOLD:
            if old is None:
                old = ending.older_than_driver(report) is not None
            if not old:
                continue
        key = (int(g["depth"].iloc[0]), -len(g))
        if best is None or key < best[0]:
            best = (key, base)
    if best is None:
        return ITERATION
    return re.compile(rf"(?i)^{re.escape(best[1])}[ _.\-]?\d{{1,7}}$")


def launch_starts(report: Report) -> np.ndarray:
    """The start times of the run's kernel and graph launch calls, sorted."""
    if not report.has_rows("cuda_api"):
        return np.array([], np.int64)
    names = report.cuda_api(["name"])["name"]
    if not isinstance(names.dtype, pd.CategoricalDtype):
        names = names.astype("category")
    launch = np.array([bool(re.match(ending.LAUNCH_CALLS, str(c)))
                       for c in names.cat.categories], bool)
    codes = names.cat.codes.to_numpy()
    rows = np.flatnonzero((codes >= 0) & launch[np.maximum(codes, 0)])
    return np.sort(report.take("cuda_api", ["start_ns"], rows)["start_ns"].to_numpy(np.int64))


#: a level must repeat at least this often to be a loop
MIN_REPEATS = 3
#: a unit this short with no boundary evidence is not an iteration: nothing tells the loop's
#: iteration from a pair of kernels inside it (an async loop of 1000 add/mul pairs)
MIN_UNIT_OPS = 2
#: share of a level's units that must be alike (the same operations as the most common unit)
#: for the level to count
MIN_ALIKE = 0.6
#: a repeat with nothing marking its boundaries (no syncs, graph launches or host gaps) is the
#: loop only where it holds this share of the GPU's busy time: less is the blocks of one pass
#: between work that does not repeat (a run that ended after its first pass: 12%; the
#: asynchronous loops with truth: 73% and more)
MIN_UNMARKED_COVERAGE = 0.3
#: share of its boundaries that must carry host/GPU evidence for a level to be "evidenced"
MIN_EVIDENCE = 0.7
#: share of the GPU's busy time the units must hold
MIN_COVERAGE = 0.1
#: anchor counts tried (the most supported ones)
MAX_LEVELS = 40
#: anchors tried per level (those seen first)
ANCHORS_PER_LEVEL = 4
#: warm-up iterations are looked for at most this many regular units before the loop
WARM_UP_SPREAD = 20
WARM_UP_OPS = 5000
#: most iterations added before and after the regular ones (warm-up, a changed tail)
MAX_EXTEND = 64
#: a level inside the iteration with more blocks than this per iteration is not layers (a
#: pair of kernels repeated 40,000 times in a step): no layers then
MAX_BLOCKS = 1024
#: a GPU idle gap this long, with the next launch call starting after it, marks a host gap
HOST_GAP_NS = 1_000_000
#: tokens of operations that are not kernels (kernel tokens are name codes >= 0): copies and
#: memsets count down from OTHER_TOKEN, graph executions from GRAPH_TOKEN
OTHER_TOKEN = -1
GRAPH_TOKEN = -(1 << 40)
#: kernels compared by class (``_by_class``): their tokens from here up
CLASS_TOKEN = 1 << 41


@dataclass
class Found:
    """Iterations found in a trace: ``ranges`` (name, start_ns, end_ns on the CPU, like NVTX
    iteration ranges; empty when nothing repeats), ``source`` (one sentence: the evidence and
    how regular), the level's numbers, and ``outer``: iterations per outer unit (a decode step's
    ``generate()`` call), 0 when there is none."""
    ranges: pd.DataFrame
    source: str
    found_words: str = ""  # what was found (count, length, alike, coverage), in words
    operations: int = 0  # operations in the modal unit
    alike_pct: float = 0.0
    coverage_pct: float = 0.0
    evidence: str = ""
    outer: int = 0
    levels: list = field(default_factory=list)  # every candidate level considered
    #: the level inside an iteration, as ranges like NVTX layer ranges (name blockJ: the J-th
    #: repeated block of its iteration), for lining up runs without NVTX layers
    layers: pd.DataFrame = field(default_factory=lambda: _no_ranges())


def sync_calls(report: Report) -> pd.DataFrame:
    """Synchronizing API calls: api_name and end_ns, sorted by end."""
    if not report.has_rows("cuda_api"):
        return pd.DataFrame({"api_name": [], "end_ns": np.array([], np.int64)})
    names = report.cuda_api(["name"])["name"]
    wanted = [n for n in names.cat.categories if sync_kind(str(n))]
    rows = np.flatnonzero(names.isin(wanted).to_numpy())
    ends = report.take("cuda_api", ["end_ns"], rows)["end_ns"].to_numpy(np.int64)
    api = names.iloc[rows].astype(str).to_numpy()
    order = np.argsort(ends, kind="stable")
    return pd.DataFrame({"api_name": api[order], "end_ns": ends[order]})


def operations(report: Report) -> dict[str, np.ndarray]:
    """GPU operations as arrays: token, device_id, start_ns, end_ns, api_start_ns and
    api_end_ns (of the launching call; NaN where none), sorted by device then start."""
    parts: dict[str, list[np.ndarray]] = {c: [] for c in
                                          ("token", "device_id", "start_ns", "end_ns",
                                           "api_start_ns", "api_end_ns")}
    other = 0
    for table in ("kernels", "memcpy", "memset", "graph_execs"):
        if not report.has_rows(table):
            continue
        extra = {"kernels": ["name"], "memcpy": ["copy_kind", "bytes"], "memset": ["bytes"],
                 "graph_execs": ["graph_id"]}[table]
        ops = report.table(table, ["device_id", "start_ns", "end_ns", *extra])
        if table == "kernels":
            token = ops["name"].cat.codes.to_numpy().astype(np.int32)
        elif table == "graph_execs":
            token = GRAPH_TOKEN - ops["graph_id"].to_numpy().astype(np.int64)
        else:  # copies and memsets by kind and size: the loop moves the same buffers each
            # time, set-up moves tensors of every shape once
            kind = ops["copy_kind"].astype(str) if table == "memcpy" else \
                pd.Series("memset", index=ops.index)
            key = kind + ":" + ops["bytes"].astype("Int64").astype(str)
            token = OTHER_TOKEN - pd.factorize(key)[0].astype(np.int64) - other
            other += len(set(key))
        # the columns as they are (no copy where the dtype is already right), the frame let
        # go before the launch calls are read: 8M kernels, ~200 MB less at the peak
        parts["token"].append(token)
        parts["device_id"].append(np.asarray(ops["device_id"].to_numpy(), np.int32))
        parts["start_ns"].append(np.asarray(ops["start_ns"].to_numpy(), np.int64))
        parts["end_ns"].append(np.asarray(ops["end_ns"].to_numpy(), np.int64))
        n_ops = len(ops)
        del ops
        api_s, api_e = np.full(n_ops, np.nan), np.full(n_ops, np.nan)
        oi, ai = pairs(report, table)
        for col, into in (("start_ns", api_s), ("end_ns", api_e)):
            if len(oi):  # one column of the calls at a time
                into[oi] = report.take("cuda_api", [col], ai)[col].to_numpy()
        del oi, ai
        parts["api_start_ns"].append(api_s)
        parts["api_end_ns"].append(api_e)
    if not parts["token"]:
        return {c: np.empty(0) for c in parts}
    # one table (the usual kernels-only trace) is not copied; rows already in (device,
    # start) order are not reordered: 8M kernels, 2 cores, 1.8 s and ~700 MB of copies
    out = {c: v[0] if len(v) == 1 else np.concatenate(v) for c, v in parts.items()}
    dev, start = out["device_id"], out["start_ns"]
    same = len(dev) < 2 or bool(np.all(dev[1:] == dev[:-1]))
    if (same or bool(np.all(dev[1:] >= dev[:-1]))) and _in_order(dev, start, same):
        return out
    order = np.lexsort((start, dev))
    return {c: v[order] for c, v in out.items()}


def _in_order(dev: np.ndarray, start: np.ndarray, same: bool) -> bool:
    """Whether ``start`` ascends within each device (devices already grouped)."""
    step = start[1:] >= start[:-1]
    if not same:
        step |= dev[1:] != dev[:-1]
    return bool(np.all(step))


def find(report: Report, ops: dict[str, np.ndarray] | None = None,
         syncs: pd.DataFrame | None = None) -> Found:
    """The iterations of a run without iteration ranges (see the module docstring); found once
    per open report (the budget and the run profile both ask)."""
    if ops is None and syncs is None:
        if ("found",) not in report.answers:
            report.answers[("found",)] = find(report, operations(report), sync_calls(report))
        return report.answers[("found",)]
    ops = operations(report) if ops is None else ops
    syncs = sync_calls(report) if syncs is None else syncs
    if len(ops["token"]) < 2 * MIN_REPEATS:
        return Found(_no_ranges(), "too few GPU operations to find a repeating sequence")
    devices, counts = np.unique(ops["device_id"], return_counts=True)
    dev = devices[np.argmax(counts)]  # the busiest GPU's sequence decides
    if len(devices) > 1:
        sel = ops["device_id"] == dev
        ops = {c: v[sel] for c, v in ops.items()}
    cut, why = _boundaries(ops, syncs)
    levels = _levels(ops, cut, lambda: _token_classes(report))
    if not levels:
        return Found(_no_ranges(), "no repeating sequence of GPU operations", levels=[])
    # a level whose units launch no kernel is data movement (set-up copies of same-shaped
    # weights, one sync each): never the loop
    levels = [lv for lv in levels if lv["computes"]]
    if not levels:
        return Found(_no_ranges(), "only set-up copies repeat (no kernel in the repeating "
                     "sequence)", levels=[])
    # a level alike only by its kernels' classes is the one seen by name where both are
    # (within 10% of its count): the names decide
    named = [lv["count"] for lv in levels if not lv.get("by_class")]
    levels = [lv for lv in levels if not lv.get("by_class")
              or not any(abs(c - lv["count"]) <= 0.1 * lv["count"] for c in named)]
    evidenced = [lv for lv in levels if lv["evidence"] >= MIN_EVIDENCE]
    if evidenced:  # the innermost level, of those holding the loop, whose boundaries are
        # where host and GPU meet (a decode step: not the layer inside, not the call around)
        most = max(lv["coverage"] for lv in evidenced)
        held = [lv for lv in evidenced if lv["coverage"] >= 0.5 * most]
        best = max(held, key=lambda lv: (lv["count"], lv["alike"]))
        # a level with a few more units than one over the same stretch of the run whose
        # boundaries all carry evidence, or whose units are more alike, is that level with
        # some units cut in two (a sync inside every 5th step, a host stall inside a pass),
        # not a level inside it (those have 2x the units or more)
        whole = [lv for lv in held if lv["count"] < best["count"] <= 1.5 * lv["count"]
                 and lv["coverage"] >= 0.98 * best["coverage"]
                 and (lv["evidence"] >= best["evidence"] + 0.1
                      or lv["alike"] >= best["alike"] + 0.1)]
        if whole:
            best = max(whole, key=lambda lv: (lv["evidence"], lv["alike"], lv["count"]))
        best = _split_alike(ops, best, cut)
    else:  # a fully asynchronous loop: the outermost level that repeats
        alike = [lv for lv in levels if lv["alike"] >= 0.8] or levels
        best = min(alike, key=lambda lv: (lv["count"], -lv["alike"]))
        if best["coverage"] < MIN_UNMARKED_COVERAGE:  # the layers of one pass, not a loop
            return Found(_no_ranges(), f"a {best['length']}-operation sequence repeated "
                         f"{best['count']:,} times in {100 * best['coverage']:.0f}% of the GPU's "
                         "busy time with nothing marking iterations: layers of one pass, not a "
                         "loop", levels=[])
    if best["evidence"] < MIN_EVIDENCE and best["length"] <= MIN_UNIT_OPS:
        return Found(_no_ranges(), f"a {best['length']}-operation sequence repeated "
                     f"{best['count']:,} times with nothing marking iterations (no syncs, graph "
                     "launches or host gaps between them)", levels=[])
    # the level around the iteration (a decode step's generate() call): evidenced, its count
    # a divisor of the iterations' (give or take the one unit the loop's edges add or cut)
    # with 4 iterations or more in each (its first unit may differ: the warm-up call); the
    # outermost such level (the calls, not a pattern of a few tokens inside them)
    outer = [lv for lv in evidenced if 4 * lv["count"] <= best["count"]
             and min((best["count"] + d) % lv["count"] for d in (-1, 0, 1)) == 0
             and lv["alike"] >= MIN_ALIKE]
    per_outer = round(best["count"] / min(lv["count"] for lv in outer)) if outer else 0
    ranges = _ranges(ops, best["starts"], best["ends"], tile=True)
    layers = _layers(ops, best, levels)
    reasons = _evidence_words(why, best["starts"]) if best["evidence"] >= MIN_EVIDENCE else \
        "none (an asynchronous loop): the outermost level that repeats"
    shape = (f"{per_outer} iterations x {round(best['count'] / per_outer)} outer units of "
             if per_outer else f"{best['count']} iterations of ")
    alike = (" (but for kernels that change from one to the next: grids, KV lengths)"
             if best.get("tolerant") else "")
    what = (f"{shape}a {best['length']}-operation sequence, {best['alike']:.0%} of them "
            f"alike{alike}, in {best['coverage']:.0%} of the GPU's busy time")
    source = f"found in the trace (no NVTX iteration ranges): {what}; boundaries: {reasons}"
    return Found(ranges, source, found_words=what, operations=best["length"],
                 alike_pct=100 * best["alike"],
                 coverage_pct=100 * best["coverage"], evidence=reasons, outer=per_outer,
                 layers=layers,
                 levels=[{k: v for k, v in lv.items() if k not in ("starts", "ends")}
                         for lv in levels])


def _split_alike(ops: dict, best: dict, cut: np.ndarray) -> dict:
    """``best`` with each unit cut at its inner boundaries when every unit holds the same
    number of stretches between host/GPU boundaries and those stretches are alike in size
    (within 1.5x) and operations (30% of their distinct kernels shared: two batch sizes pick
    different GEMM and conv kernels): a loop of two input shapes that syncs after each pass
    repeats as pairs of passes, but each pass is an iteration (of two kinds). A decode step's
    sampling stretch (10 operations beside 125) and a training step's optimizer stay inside
    their step."""
    starts, ends = best["starts"], best["ends"]
    cuts = np.flatnonzero(cut)
    inner = np.searchsorted(cuts, ends, "left") - np.searchsorted(cuts, starts, "right")
    k = int(np.bincount(inner).argmax()) if len(inner) else 0
    if k < 1 or (inner == k).mean() < 0.8:
        return best
    unit = int(np.flatnonzero(inner == k)[len(np.flatnonzero(inner == k)) // 2])
    a, b = int(starts[unit]), int(ends[unit])
    edges = [a, *cuts[(cuts > a) & (cuts < b)].tolist(), b]
    pieces = [ops["token"][x:y] for x, y in zip(edges[:-1], edges[1:])]
    sizes = [len(p) for p in pieces]
    if min(sizes) * 1.5 < max(sizes):
        return best
    sets = [set(np.unique(p).tolist()) for p in pieces]
    shared = set.intersection(*sets)
    if len(shared) < 0.3 * len(set.union(*sets)):
        return best
    if any(a <= b for i, a in enumerate(sets) for j, b in enumerate(sets) if i != j):
        return best  # one stretch is another plus a tail (micro-batches, then the optimizer)
    lo = np.searchsorted(cuts, starts, "right")
    extra = [cuts[i:i + k] for i, n_in in zip(lo, inner) if n_in == k]
    new = np.unique(np.concatenate([starts, *extra]))
    new_ends = np.concatenate([new[1:], [ends[-1]]])
    return {**best, "starts": new, "ends": new_ends, "count": len(new),
            "length": int(np.median(np.diff(np.append(new, ends[-1]))))}


def _no_ranges() -> pd.DataFrame:
    return pd.DataFrame({"name": pd.Series(dtype=object), "start_ns": np.array([], np.int64),
                         "end_ns": np.array([], np.int64)})


def _boundaries(ops: dict, syncs: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Boundary evidence before each operation i (``cut[i]``) and what it was (``why[i]``: 0
    none, 1 a sync returned, 2 a graph launch, 3 a host gap with the GPU idle)."""
    n = len(ops["token"])
    start, end = ops["start_ns"], ops["end_ns"]
    api = np.where(np.isnan(ops["api_start_ns"]), start, ops["api_start_ns"])
    done = np.maximum.accumulate(end)  # the GPU finished everything before op i at done[i-1]
    why = np.zeros(n, np.int8)
    if n > 1:
        lo = np.maximum(done[:-1], api[:-1])  # after op i-1 finished and was launched ...
        hi = api[1:]  # ... and before op i's launch call
        se = syncs["end_ns"].to_numpy(np.int64)
        if len(se):
            k = np.searchsorted(se, hi, "right") - 1
            synced = (k >= 0) & (se[np.maximum(k, 0)] >= lo)
            why[1:][synced] = 1
        gap = (start[1:] - done[:-1] >= HOST_GAP_NS) & (api[1:] - done[:-1] >= HOST_GAP_NS)
        why[1:][(why[1:] == 0) & gap] = 3
    why[(ops["token"] <= GRAPH_TOKEN) & (why == 0)] = 2
    why[0] = 0
    return why > 0, why


def _levels(ops: dict, cut: np.ndarray, classes=None) -> list[dict]:
    """Every candidate level, as units (``starts``/``ends``, operation indices) with how alike
    they are, how many boundaries carry evidence and the share of busy time they hold. Units
    come from anchors (tokens occurring exactly ``count`` times, their occurrences moved back
    to the evidence just before them) and from the evidence itself (the segments between
    boundaries, grouped in the period that makes them most alike: a training step holds two
    syncs, the optimizer's and the loss's). ``classes()``: each kernel token's class (for units
    alike by their work when not by their kernels' names)."""
    tok = ops["token"]
    n = len(tok)
    # tokens numbered by a hash (pandas), not a sort; small codes so that the stable sort
    # below is a radix sort (8M operations, 2 cores: ~2 s less)
    inv, codes = pd.factorize(tok)
    inv = inv.astype(np.int16 if len(codes) < 2**15 else np.int32)
    counts = np.bincount(inv)
    h = np.random.default_rng(0).integers(0, np.iinfo(np.int64).max, len(codes),
                                          dtype=np.int64).astype(np.uint64)
    m = {"prefix": np.concatenate([[np.uint64(0)], np.cumsum(h[inv], dtype=np.uint64)]),
         "busy": np.concatenate([[0.0], np.cumsum((ops["end_ns"] - ops["start_ns"])
                                                  .astype(np.float64))]),
         "cut": cut, "token": tok, "kernel": (tok >= 0) | (tok <= GRAPH_TOKEN),
         "hash": h, "inv": inv, "counts": counts, "classes": classes}
    # every token's positions from one stable sort (not one pass over the run per anchor)
    order = np.argsort(inv, kind="stable")
    bounds = np.concatenate([[0], np.cumsum(counts)])
    first = order[bounds[:-1]]
    last = order[bounds[1:] - 1]
    cuts = np.flatnonzero(cut)
    out = []
    # anchors: candidate counts by support (operations explained by tokens of exactly c)
    # (a count whose units would hold fewer than 3 operations is a pair of kernels inside a
    # step, no iteration, and too many blocks for layers: not tried)
    cand = pd.Series(counts[(counts >= MIN_REPEATS) & (counts <= n // 3)]).value_counts()
    support = cand.index.to_numpy() * cand.to_numpy()
    for c in sorted(int(x) for x in cand.index.to_numpy()[np.argsort(-support,
                                                                     kind="stable")][:MAX_LEVELS]):
        anchors = np.flatnonzero(counts == c)
        tried = []
        # those seen first, and those spread widest over the run (set-up copies of
        # same-shaped weights are seen first and spread over nothing)
        seen = anchors[np.argsort(first[anchors], kind="stable")]
        wide = anchors[np.argsort(first[anchors] - last[anchors], kind="stable")]
        picked = list(dict.fromkeys([*seen[:ANCHORS_PER_LEVEL - 2], *wide[:2],
                                     *seen[ANCHORS_PER_LEVEL - 2:]]))[:ANCHORS_PER_LEVEL]
        for a in picked:
            got = _anchor_level(m, order[bounds[a]:bounds[a + 1]], cuts, n)
            if got:
                tried.append(got)
        if tried:  # the anchor whose units hold the loop best
            out.append(max(tried, key=lambda lv: lv["alike"] * lv["coverage"]))
    # evidence: segments between boundaries, in groups of p
    if len(cuts) >= MIN_REPEATS:
        seg = np.concatenate([[0], cuts, [n]])
        seg = np.unique(seg)
        best = None
        for p in range(1, 9):
            for phase in range(p):
                b = seg[phase::p]
                if len(b) <= MIN_REPEATS:
                    continue
                got = _assess(m, b[:-1], b[1:])
                if got and (best is None or got["alike"] > best["alike"] + 0.02):
                    best = got
        if best:
            best["source"] = "segments"
            out.append(best)
    return out


def _anchor_level(m: dict, q: np.ndarray, cuts: np.ndarray, n: int) -> dict | None:
    """Units starting at the anchor's occurrences ``q``, each moved back to the last boundary
    evidence since the previous occurrence."""
    prev = np.concatenate([[max(0, 2 * q[0] - q[1])], q[:-1]])
    j = np.searchsorted(cuts, q, "right") - 1
    at = cuts[np.maximum(j, 0)] if len(cuts) else q
    has = (j >= 0) & (at > prev) if len(cuts) else np.zeros(len(q), bool)
    starts = np.maximum.accumulate(np.where(has, at, q))
    if (np.diff(starts) <= 0).any():
        return None
    modal = int(np.median(np.diff(starts)))
    k = np.searchsorted(cuts, starts[-1] + max(modal // 2, 1), "left")
    last = int(cuts[k]) if k < len(cuts) and cuts[k] <= starts[-1] + 1.5 * modal + 1 \
        else min(n, int(starts[-1]) + modal)
    ends = np.concatenate([starts[1:], [last]])
    got = _assess(m, starts, ends)
    if got is None:  # alike but for the operations that vary from step to step
        tolerant = _tolerant(m, len(q))
        got = _assess(tolerant, starts, ends) if tolerant is not None else None
        if got is None and m.get("classes") is not None:  # alike by their work: the same
            # classes of kernel, their variants apart (a decode step's copy and cast kernels
            # that alternate from one token to the next)
            got = _assess(_by_class(m), starts, ends)
            if got:
                got["by_class"] = True
        if got:
            got["tolerant"] = True
    if got:
        got["source"] = "anchor"
    return got


def _by_class(m: dict) -> dict:
    """``m`` with kernels compared by their class (``classify.kernel_class``), not their name;
    copies, memsets and graph executions as they are. Made once per ``m``."""
    if "by_class" not in m:
        classes = m["classes"]()
        tok = m["token"]
        kernel = tok >= 0
        kind = tok.astype(np.int64).copy()
        if kernel.any() and len(classes):
            kind[kernel] = CLASS_TOKEN + classes[np.minimum(tok[kernel], len(classes) - 1)]
        inv = pd.factorize(kind)[0]
        h = np.random.default_rng(1).integers(0, np.iinfo(np.int64).max, inv.max() + 1,
                                              dtype=np.int64).astype(np.uint64)
        m["by_class"] = {**m, "prefix": np.concatenate([[np.uint64(0)],
                                                        np.cumsum(h[inv], dtype=np.uint64)])}
    return m["by_class"]


def _token_classes(report: Report) -> np.ndarray:
    """Each kernel name's class, as a number, by its token (the name's category code)."""
    from nsightlab.analysis.classify import kernel_class

    names = report.table("kernels", ["name"])["name"]
    cats = names.cat.categories if isinstance(names.dtype, pd.CategoricalDtype) else []
    codes = pd.factorize(pd.Series([kernel_class(str(c)) for c in cats], dtype=object))[0]
    return np.asarray(codes, np.int64)


def _tolerant(m: dict, count: int) -> dict | None:
    """``m`` with units compared only by the operations that can recur evenly in ``count``
    units (tokens seen a multiple of ``count`` times): a decode step whose attention kernel
    changes as the KV cache grows is still the same step. None when those operations are
    fewer than half of all."""
    even = m["counts"] % count == 0
    if even[m["inv"]].mean() < 0.5:
        return None
    h = np.where(even, m["hash"], np.uint64(0))
    return {**m, "prefix": np.concatenate([[np.uint64(0)],
                                           np.cumsum(h[m["inv"]], dtype=np.uint64)])}


def _assess(m: dict, starts: np.ndarray, ends: np.ndarray) -> dict | None:
    """A level's units kept to the loop (from the first to the last unit at least half the
    size of the most common unit: set-up copies and stray operations before and after the loop
    are left out), with alike (share of operations in units like the most common one),
    evidence (share of boundaries with host/GPU evidence) and coverage (share of busy time)."""
    sig = m["prefix"][ends] - m["prefix"][starts]
    sizes = (ends - starts).astype(np.float64)
    uniq, sig_inv = np.unique(sig, return_inverse=True)
    # the loop's unit: of the units that recur (MIN_REPEATS times or more), the one holding the
    # most operations in all (one long warm-up unit does not recur; set-up copies recur but
    # hold one operation each)
    per_sig = np.bincount(sig_inv)
    size_of = np.zeros(len(uniq))
    size_of[sig_inv] = sizes
    weight = np.where(per_sig >= MIN_REPEATS, per_sig * size_of, -1.0)
    modal = int(np.argmax(weight)) if weight.max() > 0 else int(np.argmax(per_sig))
    # the loop: from the first unit like the most common one to the last (set-up before and
    # clean-up after are left out), then back over the warm-up (``_warm_up``)
    at = np.flatnonzero(sig_inv == modal)
    lo, hi = int(at[0]), int(at[-1]) + 1
    starts, ends, sizes, sig_inv = starts[lo:hi], ends[lo:hi], sizes[lo:hi], sig_inv[lo:hi]
    more = _after(m, int(ends[-1]), int(starts[0]), int(np.median(sizes[sig_inv == modal])))
    if len(more):
        starts = np.concatenate([starts, more[:-1]])
        ends = np.concatenate([ends, more[1:]])
        sizes = (ends - starts).astype(np.float64)
        sig_inv = np.concatenate([sig_inv, np.full(len(more) - 1, -1)])
    warm = _warm_up(m, int(starts[0]), int(ends[0] - starts[0]))
    if len(warm):
        starts = np.concatenate([warm, starts])
        ends = np.concatenate([warm[1:], [starts[len(warm)]], ends])
        sizes = (ends - starts).astype(np.float64)
        sig_inv = np.concatenate([np.full(len(warm), -1), sig_inv])
    c = len(starts)
    if c < MIN_REPEATS:
        return None
    a, b = starts[np.argmax(sig_inv == modal)], ends[np.argmax(sig_inv == modal)]
    computes = bool((m["kernel"][a:b]).any())
    alike = float((sig_inv == modal).mean())
    coverage = float(m["busy"][ends[-1]] - m["busy"][starts[0]]) / (m["busy"][-1] or 1.0)
    evidence = float(m["cut"][starts[1:]].mean())
    if alike < MIN_ALIKE or coverage < MIN_COVERAGE:
        return None
    distinct = len(np.unique(m["token"][a:b]))
    return {"count": c, "length": int(np.median(sizes)), "alike": alike, "coverage": coverage,
            "evidence": evidence, "computes": computes, "distinct": distinct,
            "starts": starts, "ends": ends}


def _warm_up(m: dict, start: int, size: int) -> np.ndarray:
    """Starts of the warm-up iterations before the loop's first regular unit at ``start``.
    Going back boundary by boundary (or, in a loop without boundaries, occurrence by
    occurrence of the unit's first token), each earlier stretch that holds the first token of
    the regular unit is an iteration, up to ``WARM_UP_OPS`` operations long: compilation,
    autotuning and allocation lengthen the first iterations, they do not change how they
    begin. Set-up (weights copied in, no such token) ends the walk."""
    tok, cut = m["token"], m["cut"]
    t, here, out = tok[start], start, []
    limit = max(WARM_UP_SPREAD * max(size, 1), WARM_UP_OPS)
    cuts = np.flatnonzero(cut[:start])
    while here > 0 and len(out) < MAX_EXTEND:
        lo = max(0, here - limit)
        seen = np.flatnonzero(tok[lo:here] == t)
        if not len(seen):
            break
        o = lo + int(seen[-1])  # the token's previous occurrence, and the boundary before it
        before = np.flatnonzero(tok[lo:o] == t)
        floor = lo + int(before[-1]) if len(before) else lo
        k = np.searchsorted(cuts, o, "right") - 1
        p = int(cuts[k]) if k >= 0 and cuts[k] > floor else o
        if cut[start] and not cut[p]:
            break  # the loop's units begin at evidence: one that does not is set-up
        out.append(p)
        here = p
    return np.array(out[::-1], np.int64)


def _after(m: dict, end: int, first: int, size: int) -> np.ndarray:
    """Boundaries of the iterations after the loop's last regular unit (which ends at
    ``end``): units that begin as the regular ones do (the token at ``first``), at boundary
    evidence, at most ``WARM_UP_SPREAD`` regular units long (a decode step whose attention
    kernel changed as its cache grew). Returns [end, next ends...], or empty."""
    tok, cut = m["token"], m["cut"]
    n, t = len(tok), tok[first]
    if end >= n or tok[end] != t or (cut[first] and not cut[end]):
        return np.empty(0, np.int64)
    out = [end]
    limit = max(WARM_UP_SPREAD * max(size, 1), WARM_UP_OPS)
    while True:
        here = out[-1]
        if len(out) > MAX_EXTEND:
            return np.array(out, np.int64)
        window = slice(here + 1, min(n, here + limit))
        begins = tok[window] == t
        if cut[first]:  # the loop's units begin at evidence: so do the later ones
            begins &= cut[window]
        seen = np.flatnonzero(begins)
        if len(seen):
            out.append(here + 1 + int(seen[0]))
            continue
        # the last one: up to the next boundary after a regular unit's length, or that length
        cuts = np.flatnonzero(cut[here + 1:min(n, here + 2 * size + 1)])
        out.append(min(n, here + 1 + int(cuts[-1]) if len(cuts) else here + size))
        return np.array(out, np.int64)


def _layers(ops: dict, best: dict, levels: list[dict]) -> pd.DataFrame:
    """The blocks inside each iteration: the outermost level whose count is a multiple (2x or
    more) of the iterations' and whose units are mostly alike (12 transformer blocks a pass),
    as CPU ranges named by their place in the iteration (block0, block1...)."""
    n = best["count"]
    def per_iteration(lv: dict) -> int:  # blocks per iteration, if the level nests (a few
        # anchor occurrences in set-up or warm-up make 289 blocks of 24 x 12)
        k = round(lv["count"] / n)
        return k if k >= 2 and abs(lv["count"] - k * n) <= max(2, 0.05 * k * n) else 0

    inner = [lv for lv in levels if per_iteration(lv) and lv["alike"] >= MIN_ALIKE
             and lv["evidence"] < MIN_EVIDENCE and per_iteration(lv) <= MAX_BLOCKS]
    if not inner:
        return _no_ranges()
    lv = min(inner, key=lambda x: (x["count"], -x["alike"]))
    it = np.searchsorted(best["starts"], lv["starts"], "right") - 1
    keep = (it >= 0) & (lv["starts"] < best["ends"][np.maximum(it, 0)])
    starts, ends, it = lv["starts"][keep], lv["ends"][keep], it[keep]
    if not len(starts):
        return _no_ranges()
    place = np.arange(len(it)) - np.searchsorted(it, it, "left")
    out = _ranges(ops, starts, np.minimum(ends, best["ends"][it]))
    out["name"] = [f"block{j}" for j in place]
    return out


def _ranges(ops: dict, starts: np.ndarray, ends: np.ndarray, tile: bool = False) -> pd.DataFrame:
    """Each unit as a CPU range: from the first launch call of its operations to the end of the
    last (GPU times where a launch call is missing)."""
    s = np.where(np.isnan(ops["api_start_ns"]), ops["start_ns"], ops["api_start_ns"])
    e = np.where(np.isnan(ops["api_end_ns"]), ops["start_ns"], ops["api_end_ns"])
    lo = _per_unit(np.minimum, s, starts, ends)
    hi = _per_unit(np.maximum, e, starts, ends)
    hi = np.maximum(hi, lo)
    # ranges must not overlap (the budget tiles them): end each where the next starts; with
    # ``tile`` (iterations) run each to there: the host's time between two units (a stall,
    # work that launches nothing) is the loop's, in the iteration it follows, as the period
    # from one iteration's start to the next is what a loop's iteration takes
    hi[:-1] = lo[1:] if tile else np.minimum(hi[:-1], lo[1:])
    return pd.DataFrame({"name": [f"iter{i}" for i in range(len(lo))], "start_ns": lo,
                         "end_ns": hi})


def _per_unit(f: np.ufunc, x: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """``f.reduce(x[a:b])`` for every unit [starts[i], ends[i]) (not empty), in one pass."""
    idx = np.column_stack([starts, ends]).ravel()
    return f.reduceat(np.append(x, x[-1]), idx)[::2].astype(np.int64)


def _evidence_words(why: np.ndarray, starts: np.ndarray) -> str:
    """What marked the boundaries, most common first."""
    kinds = why[starts[1:]]
    words = {1: "a synchronizing call returned (the host waited for the GPU)",
             2: "a CUDA graph launch", 3: "a host gap with the GPU idle"}
    found = [(int((kinds == k).sum()), w) for k, w in words.items() if (kinds == k).any()]
    total = max(len(kinds), 1)
    return "; ".join(f"{w} at {n / total:.0%}" for n, w in sorted(found, reverse=True))


#: a found loop whose median iteration is shorter than this is no loop (bursts of operations
#: launched together, not iterations)
MIN_ITERATION_NS = 1_000
#: the kernels of a found loop's iterations, on the busiest stream of each, may run past
#: their windows by this factor in all (a kernel that starts in one window and ends in the
#: next); beyond it the windows are not the loop's iterations
STREAM_FIT = 1.5
#: the found loop's first this many iterations are checked, holding about this many kernels
CHECKED_ITERATIONS = 2_000
CHECKED_KERNELS = 200_000


def contradiction(report: Report, start: np.ndarray, end: np.ndarray) -> str | None:
    """Why iterations found in the trace (windows ``start``..``end``, GPU time) cannot be a
    loop, in words; None when they hold together: none ends before it begins, the median
    iteration lasts
    ``MIN_ITERATION_NS`` or more, and the kernels that start in the iterations fit inside
    them on one stream (their time on the busiest stream of each iteration, summed over the
    loop, is at most ``STREAM_FIT`` times the loop's wall time): a kernel stream cannot run
    longer than the time it has. Long loops: their first iterations (``CHECKED_*``)."""
    wall = (end - start).astype(np.float64)
    if not len(wall):
        return None
    if (wall < 0).any():
        n = int((wall < 0).sum())
        return ("one of its iterations ends before it begins" if n == 1 else
                f"{n} of its iterations end before they begin")
    med = float(np.median(wall))
    if med < MIN_ITERATION_NS:
        return f"its median iteration lasts {med / 1e3:.2f} µs"
    if not report.has_rows("kernels"):
        return None
    t = report.kernels(["start_ns"])["start_ns"].to_numpy(np.int64)  # the finder's column
    # the first iterations say it (a structure, not a sample): up to CHECKED_ITERATIONS and
    # about CHECKED_KERNELS kernels, never fewer than 3 iterations
    keep = int(np.clip(len(wall) * CHECKED_KERNELS // max(len(t), 1), 3, CHECKED_ITERATIONS))
    if len(wall) > keep:
        first = np.argsort(start, kind="stable")[:keep]
        start, end, wall = start[first], end[first], wall[first]
    near = np.flatnonzero((t >= start.min()) & (t < end.max()))
    k, t = report.take("kernels", ["device_id", "stream_id", "end_ns"], near), t[near]
    order = np.argsort(start, kind="stable")
    at = np.searchsorted(start[order], t, side="right") - 1
    ok = at >= 0
    at = np.where(ok, order[np.clip(at, 0, None)], 0)
    ok &= t < end[at]
    if not ok.any():
        return None
    stream = (k["device_id"].to_numpy(np.int64) << 32) | k["stream_id"].to_numpy(np.int64)
    sid, uniq = pd.factorize(stream[ok])  # hashing: no sort of millions of kernels
    group = at[ok] * len(uniq) + sid
    lo, hi = t[ok], k["end_ns"].to_numpy(np.int64)[ok]
    # the time each stream is busy in each iteration: the union of its kernels (kernels of
    # one stream may overlap: programmatic dependent launch), not their sum
    order = np.lexsort((lo, group))
    g, lo, hi = group[order], lo[order], hi[order]
    reach = pd.Series(hi).groupby(g).cummax().to_numpy()
    before = np.concatenate([[np.iinfo(np.int64).min], reach[:-1]])
    before[np.flatnonzero(np.diff(g)) + 1] = np.iinfo(np.int64).min  # each group anew
    busy = np.clip(hi - np.maximum(lo, before), 0, None).astype(np.float64)
    per = np.bincount(g, weights=busy,
                      minlength=len(wall) * len(uniq)).reshape(len(wall), len(uniq))
    busiest, total = float(per.max(axis=1).sum()), float(wall.sum())
    if busiest > STREAM_FIT * total:
        return (f"its iterations' kernels take {busiest / len(wall) / 1e6:.3g} ms per iteration "
                f"on one stream in {total / len(wall) / 1e6:.3g} ms of wall clock")
    return None

