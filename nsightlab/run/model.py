"""One run's model, per iteration: the common ground on which runs are compared.

FP16 and FP8/NVFP4 engines run *different* kernels, so runs are lined up where they agree:
per iteration (NVTX ranges named ``iterN`` / ``iteration N`` / ``stepN``, in any domain, or
TensorRT's ``ExecutionContext::enqueue``/``execute*`` range around each inference), per
layer (the NVTX ranges one level inside an iteration: TensorRT layers, ``blockN``), per kernel
class and precision, and per kernel *slot*: the k-th kernel of a class inside a layer. A slot's
kernel may change name between runs (an FP16 GEMM becomes an FP8 one); the slot stays.

Without iteration ranges the whole span of GPU activity counts as one iteration, and
``iteration_source`` says so.
"""
from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from pandas.api.types import union_categoricals

from nsightlab.analysis import budget, completeness, ending, gpu_metrics as gm, iterations, kinds, loop, runtime
from nsightlab.analysis.budget import base_name
from nsightlab.analysis.classify import MATH_CLASSES as MATH, annotate, sync_kind
from nsightlab.analysis.launches import first_of_call, launches, want_pairs
from nsightlab.analysis.stats import first_rows
from nsightlab.analysis.timeline import busy_time, slice_reduce
from nsightlab.analysis.processes import gpu_work
from nsightlab.analysis.work import shapes as work_shapes
from nsightlab.core import benchmath
from nsightlab.core.units import natural_key
from nsightlab.errors import NoDataError, NsightlabError
from nsightlab.read.frames import pick_rows, release_memory
from nsightlab.read import trace
from nsightlab.read.machine import of_report
from nsightlab.read.split import of_one_process
from nsightlab.read.report import Report
from nsightlab.read.table_cache import code_fingerprint

OUTSIDE = "(outside layers)"
#: depth given to iterations found in the trace (the blocks found inside them: one deeper)
FOUND_DEPTH = -10
ITERATION_LAYER = "(iteration)"


def layer_key(name: str) -> str:
    """Layer names as they line up between runs: domain, case and spacing do not matter."""
    return re.sub(r"\s+", " ", base_name(name)).lower()


@dataclass
class RunProfile:
    """Per-iteration summary of one report (see module docstring). Times are ns/iteration."""

    @property
    def runtime(self) -> str:
        """The runtime(s) that ran its kernels, as one name ("unknown" without evidence)."""
        return runtime.named(self.runtimes)

    label: str
    iterations: int  # every iteration, warm-up and outliers included
    iteration_source: str
    median_ns: float             # median wall-clock iteration of the loop (after warm-up)
    kernel_ns: float             # kernel time per iteration of the loop
    kernels: float               # kernels per iteration
    busy_pct: float              # share of the iteration with GPU work (kernels, copies, memsets)
    by_class: pd.DataFrame       # kernel_class, time_ns, count
    by_precision: pd.DataFrame   # precision, kernel_class, time_ns
    by_layer: pd.DataFrame       # layer, time_ns, count, math_precision
    slots: pd.DataFrame          # layer, kernel_class, slot, name, precision, time_ns
    flat_slots: pd.DataFrame     # the same with layers ignored (layer = "(iteration)")
    overheads: dict = field(default_factory=dict)
    tensor_core: dict = field(default_factory=dict)
    gpu_span_ns: float = 0.0     # mean GPU span (first kernel start to last kernel end)
    iteration_how: str = "nvtx"  # how the iterations were found: ``budget.HOW_*``
    outside_kernel_ns: float = 0.0  # kernel time outside the iterations (warm-up, compile), total
    budget: dict = field(default_factory=dict)  # the budget summary of the first GPU
    steady_iterations: int = 0   # the loop's iterations (after warm-up): every number's base
    mean_ns: float = 0.0         # mean iteration of the loop: what throughput sees (the
    #                              budget's parts add up to it)
    gpus: list = field(default_factory=list)  # names of the GPUs the run used
    batch: int | None = None     # items per iteration, where the capture manifest says
    drivers: dict = field(default_factory=dict)  # NVIDIA driver and CUDA versions, if recorded
    latency: dict = field(default_factory=dict)  # wall-clock iteration: mean/p50/p95/p99/min/max_ns
    warnings: list = field(default_factory=list)  # trace completeness: check, severity, message
    main_median_ns: float = 0.0         # median iteration of the main kind (the same kind in two runs)
    kinds: list = field(default_factory=list)  # the budget's kinds table (first GPU) as records
    runtimes: list = field(default_factory=list)  # per process: ``analysis.runtime.identify``
    settings: dict = field(default_factory=dict)  # the ORT runner's: io_binding, cuda_graph, profiler_on
    walls: list = field(default_factory=list)  # wall time of every steady iteration, in order
    main_walls: list = field(default_factory=list)  # the same, of the main kind's iterations
    main_kernel_walls: list = field(default_factory=list)  # their GPU time with a kernel running
    work: dict = field(default_factory=dict)  # the main kind's work: what one iteration runs
    #                                           (``analysis.work`` tokens with counts; empty
    #                                           where the work is unknown)
    shapes: dict = field(default_factory=dict)  # what that work ran on: each kernel's grid,
    #                                           each copy's bytes (``analysis.work.shapes``)
    machine: dict = field(default_factory=dict)  # the capture's machine state, where
    #                                              recorded (``read.machine.of_report``)
    pace: dict = field(default_factory=dict)  # medians over the main kind's iterations:
    #                                           kernel_ns (GPU busy), host_ns (host work and
    #                                           launch idle), idle_sync_ns, queued_ns (GPU idle with
    #                                           a launched kernel waiting to start)


FRAMES = ("by_class", "by_precision", "by_layer", "slots", "flat_slots")


def profile(report: Report, label: str | None = None, light=None) -> RunProfile:
    """Summarize ``report`` per iteration (kept in the report's result store). ``light``: a
    ``threading.Event`` set once its launch table is past its peak of memory (or served)."""
    label = label or report.source.name
    if report.results is None:
        return _computed(report, label, light)
    tables, attrs = report.results.get_or_compute(
        "profile", {}, [report.path], code_fingerprint(),
        lambda: _split(_computed(report, label, light)))
    return RunProfile(**attrs, **tables, label=label)


def _split(p: RunProfile) -> tuple[dict[str, pd.DataFrame], dict]:
    """A profile as (frames, JSON attributes) for the result store (the label is not kept:
    it is how the caller names the run)."""
    attrs = {k: v for k, v in p.__dict__.items() if k not in FRAMES and k != "label"}
    return {f: getattr(p, f) for f in FRAMES}, attrs


def _computed(report: Report, label: str, light=None) -> RunProfile:
    """``_compute``, then the memory its 8M-row temporaries freed given back to the system
    (glibc keeps it in its arenas: ~300 MB at 8M kernels on 16 cores) before the next step."""
    out = _compute(report, label, light)
    release_memory()
    return out


def _compute(report: Report, label: str, light=None) -> RunProfile:
    """The profile itself (``profile`` adds the result store around it)."""
    # first the budget and the completeness checks: their scratch memory is gone before the
    # launch table (the big one) is read; the budget's join, in DuckDB, leaves that table's
    # kernel/call pairs
    want_pairs(report)
    summary = _budget(report)
    checked = completeness.check(report)
    warnings = [w for w in checked if w["severity"] != "note"] + _trace_gaps(report, checked)
    ranges, iters = _iteration_ranges(report)
    # kernel time of launches left out of lk: outside every iteration, and in the warm-up
    # iterations (left out here, not copied out of an 8M-row table later)
    outside, unsteady = [0.0], [0.0]
    steady_ = _steady_iterations(report, iters, len(iters))

    def inside(api_start: np.ndarray, op_rows: np.ndarray) -> np.ndarray:
        it = _containing(iters["start_ns"].to_numpy(), iters["end_ns"].to_numpy(), api_start)
        keep = it >= 0
        if steady_ is not None:
            keep &= steady_[np.maximum(it, 0)]
        if not keep.all():
            k = report.take("kernels", ["start_ns", "end_ns"], op_rows[~keep])
            dur = (k["end_ns"] - k["start_ns"]).to_numpy()
            out = it[~keep] < 0
            outside[0], unsteady[0] = float(dur[out].sum()), float(dur[~out].sum())
        return keep

    trace.mark("profile: budget, checks, iterations")
    lk = launches(report, op_columns=("start_ns", "end_ns", "name"),
                  api_columns=("start_ns", "end_ns"), where=inside if len(iters) else None
                  ).drop(columns="pid")
    trace.mark("profile: launch table")
    if report.has_rows("graph_execs"):  # a graph-level trace: each replay as one operation
        lk = _with_graph_execs(report, lk, iters)
    if lk.empty:
        why = report.missing_hint("kernels") or (
            report.missing_hint("cuda_api") if report.has_rows("kernels") else None)
        raise NsightlabError(f"{report.source}: no kernel launches to compare "
                             f"({why or 'profile with --trace=cuda'})")
    all_kernels_ns = float((lk["end_ns"] - lk["start_ns"]).sum()) + outside[0] + unsteady[0]
    lk, n = _assign_iterations(lk, ranges, iters)
    total = n
    # warm-up included
    inside_ns = float((lk["end_ns"] - lk["start_ns"]).sum()) + unsteady[0]
    lk, iters, n = _steady_only(lk, iters, n, steady_)
    trace.mark("profile: iterations and layers assigned")
    calls = _launch_calls(lk, n)
    queued = _queued(lk, n)
    for c in ("api_start_ns", "api_end_ns", "api_row"):  # in place: 150 MB at 8M launches
        del lk[c]
    lk = annotate(lk, copy=False).drop(columns=["precision_confidence"])
    dur = (lk["end_ns"] - lk["start_ns"]).to_numpy()
    lk["dur"] = dur
    # GPU span per iteration, and the time inside it with a kernel running
    spans = _spans(lk)
    span_ns = float((spans["e"] - spans["s"]).mean()) if len(spans) else 0.0
    busy_i = _busy_per_iteration(lk)
    busy = float(busy_i.mean()) if len(busy_i) else 0.0
    for c in ("start_ns", "end_ns"):  # no step below reads them: 128 MB at 8M launches,
        del lk[c]  # gone before the label and slot sums (the profile's peak)
    release_memory()
    if light is not None:
        light.set()
    # the overheads read the API table's columns (decoding and I/O, mostly without the GIL)
    # on a thread while the labels and slots are summed here: 8M launches on 16 cores,
    # ~0.5 s of the profile's 3.2 s; each holds one API column and its scratch at a time
    with ThreadPoolExecutor(1) as beside:
        overheads = beside.submit(_overheads, report, iters, n, spans, busy_i, calls)
        by_class, by_prec, by_layer = _per_label(lk, dur, n)
        trace.mark("profile: by class, precision and layer")
        slots = _slots(lk, n)
        flat_slots = _slots(lk, n, by_layer=False)
        trace.mark("profile: slots")
        overheads = overheads.result()
    # the headline's iteration: the loop's median one (the budget's parts add up to the mean)
    wall = summary.get("wall_med_ns") or summary.get("wall_ns") or span_ns
    # how the iterations were found: the loop's words and code (one source for every command)
    return RunProfile(
        label=label, iterations=total, steady_iterations=n,
        iteration_source=summary.get("iteration_source", ""),
        iteration_how=summary.get("iteration_how", budget.HOW_NONE),
        median_ns=wall, mean_ns=summary.get("wall_ns") or span_ns, gpus=_gpu_names(report),
        batch=batch_of(report), drivers=report.drivers,
        kernel_ns=float(dur.sum()) / n, kernels=_count(len(lk) / n),
        busy_pct=budget.busy_pct(summary) if summary else (100.0 * busy / span_ns if span_ns else 0.0),
        gpu_span_ns=span_ns, budget=summary, outside_kernel_ns=all_kernels_ns - inside_ns,
        warnings=warnings, by_class=by_class, by_precision=by_prec, by_layer=by_layer,
        slots=slots, flat_slots=flat_slots, overheads=overheads,
        tensor_core=_tensor_core(report, lk, spans), latency=_latency(report, wall),
        main_median_ns=summary.get("main_med_ns") or wall, kinds=_kinds(report),
        runtimes=runtime.identify(report).to_dict("records"),
        settings=_ort_settings(report.source), machine=_machine(report, spans),
        **_work_and_pace(report, queued))


#: iteration times kept per run for intervals (the first ones of the loop)
MAX_WALLS = 20_000


def _work_and_pace(report: Report, queued: np.ndarray) -> dict:
    """The steady iterations' wall times (all, and the main kind's), the main kind's work
    (``analysis.work`` tokens of the budget's work table) and its pace: medians over the
    main kind's iterations of kernel time, host time (host work and launch idle), sync idle
    and ``queued`` time (``_queued``), first GPU."""
    import json

    lp = loop_of(report)
    it = lp.first_gpu() if lp else []
    if not len(it):
        return {}
    steady = it[it["kind"] != kinds.WARM_UP] if (it["kind"] != kinds.WARM_UP).any() else it
    main = steady[steady["kind"] == kinds.MAIN] if (steady["kind"] == kinds.MAIN).any() \
        else steady
    med = lambda c: benchmath.median(main[c], 0.0) if c in main else 0.0  # noqa: E731
    # the profile's iterations are the budget's steady ones (``_steady_iterations``)
    q = queued[(steady["kind"] == kinds.MAIN).to_numpy()] \
        if len(queued) == len(steady) and (steady["kind"] == kinds.MAIN).any() else queued
    pace = {"kernel_ns": med("kernels_ns"), "host_ns": med("idle_host_ns") + med("idle_launch_ns"),
            "idle_sync_ns": med("idle_sync_ns"), "queued_ns": benchmath.median(q, 0.0),
            # one process of several: its kernels waited for the others', which the trace holds
            "others_traced": of_one_process(report)}
    work, shapes = {}, {}
    wt = lp.work
    if len(wt) and "work" in main and str(wt["level"].iloc[0]) != "none":
        usual = int(main["work"].mode().iloc[0])
        row = wt[wt["work"] == usual]
        work = json.loads(row["tokens"].iloc[0]) if len(row) else {}
        same = main[main["work"] == usual]
        shapes = work_shapes(report, same["start_ns"].to_numpy(), same["end_ns"].to_numpy())
    return {"walls": [float(x) for x in steady["wall_ns"].to_numpy()[:MAX_WALLS]],
            "main_walls": [float(x) for x in main["wall_ns"].to_numpy()[:MAX_WALLS]],
            "main_kernel_walls": [float(x) for x in main["kernels_ns"].to_numpy()[:MAX_WALLS]],
            "work": work, "shapes": shapes, "pace": pace}


#: a kernel waits this long after its launch call returned before the wait counts (the
#: launch latency of an idle GPU is a few microseconds)
QUEUE_SLACK_NS = 20_000
#: kernels taken at a time for it (bounded scratch at 8M launches)
QUEUE_CHUNK = 1 << 20


def _queued(lk: pd.DataFrame, n: int) -> np.ndarray:
    """Per iteration: GPU time with no traced kernel running while a launched kernel waited
    to start (its call had returned ``QUEUE_SLACK_NS`` before): the GPU busy with work
    outside the trace (another process), or a stream waiting on an event. In start order,
    ``QUEUE_CHUNK`` kernels at a time (8M launches: no 8M-row temporaries)."""
    if not len(lk) or not n:
        return np.zeros(n)
    s_all = lk["start_ns"].to_numpy()
    order = None if np.all(s_all[1:] >= s_all[:-1]) else np.argsort(s_all, kind="stable")
    cols = [lk[c].to_numpy() for c in ("start_ns", "end_ns", "api_end_ns", "iter")]
    out = np.zeros(n)
    reached = np.iinfo(np.int64).min  # the latest end of the kernels before the chunk
    for a in range(0, len(s_all), QUEUE_CHUNK):
        rows = slice(a, a + QUEUE_CHUNK) if order is None else order[a:a + QUEUE_CHUNK]
        s, e, api_end, it = (c[rows] for c in cols)
        before = np.maximum.accumulate(np.concatenate([[reached], e[:-1]]))
        reached = max(reached, int(e.max()))
        wait = s - np.maximum(before, api_end + QUEUE_SLACK_NS)
        ok = (wait > 0) & (it >= 0) & (it < n)
        out += np.bincount(it[ok], weights=wait[ok].astype(np.float64), minlength=n)
    return out


def loop_of(report: Report) -> "loop.Loop | None":
    """The run's loop; None without GPU work."""
    try:
        return loop.of(report)
    except NoDataError:
        return None


def _kinds(report: Report) -> list[dict]:
    """The budget's kinds of iteration on the first GPU, as plain records (kind, pattern,
    which, iterations, med_ns, share_pct, verdict, cause)."""
    k = loop_of(report).first_gpu("kinds") if loop_of(report) else []
    if not len(k):
        return []
    cols = ["kind", "pattern", "which", "head", "iterations", "med_ns", "min_ns", "max_ns",
            "share_pct", "verdict", "cause"]
    return [{c: (v.item() if hasattr(v, "item") else v) for c, v in r.items()}
            for r in k[cols].to_dict("records")]


def iteration_walls(report: Report, with_phase: bool = False):
    """The wall-clock time (ns) of every iteration of the time budget, first GPU; empty when
    the report has no GPU work. ``with_phase``: (times, the kind of each: warm-up, main,
    B..., outlier; ``nsightlab.analysis.kinds``)."""
    it = loop_of(report).first_gpu() if loop_of(report) else pd.DataFrame({"wall_ns": [], "kind": []})
    w = it["wall_ns"].to_numpy(float)
    if not with_phase:
        return w
    return w, it["kind"].to_numpy(object) if "kind" in it else kinds.classify(w).label


def _latency(report: Report, mean_ns: float) -> dict:
    """``latency_stats`` of the wall-clock iterations (one iteration, the mean, when the
    budget has none)."""
    w, label = iteration_walls(report, with_phase=True)
    return latency_stats(w, label) if len(w) else latency_stats(np.array([mean_ns], float))


def latency_stats(w: np.ndarray, label: np.ndarray | None = None) -> dict:
    """Iteration times ``w`` (not empty) as benchmarks report them, over every iteration of the
    loop (after warm-up; outliers and every kind included, ``kinds.stats``): mean (total
    time / iterations: what throughput sees), p50, p95, p99, min and max (``*_ns``), CoV, and
    the counts behind them."""
    st = kinds.stats(w, kinds.classify(w).label if label is None else label)
    return {k: st[k] for k in ("mean_ns", "p50_ns", "p95_ns", "p99_ns", "min_ns", "max_ns",
                               "cov_pct", "steady_iterations", "warmup_iterations",
                               "outlier_iterations", "kinds")}


def _budget(report: Report) -> dict:
    """The loop's summary for the first GPU, as plain data (empty without GPU work)."""
    rows = loop_of(report).summary if loop_of(report) else []
    return {k: (v.item() if hasattr(v, "item") else v) for k, v in rows.iloc[0].items()} \
        if len(rows) else {}


def _assign_iterations(lk: pd.DataFrame, ranges: pd.DataFrame, iters: pd.DataFrame
                       ) -> tuple[pd.DataFrame, int]:
    """Give every launch its iteration (``iter``) and layer (``layer``, a categorical) from the
    NVTX iteration ranges and the ranges one level inside them (``_iteration_ranges``); ``lk``
    holds only launches inside the iterations (``_compute`` leaves the others out). Without
    iteration ranges, all launches are one iteration.

    Returns (launches, number of iterations).
    """
    if not lk["api_start_ns"].is_monotonic_increasing:
        lk = lk.sort_values("api_start_ns", kind="stable").reset_index(drop=True)
    api_start = lk["api_start_ns"].to_numpy()
    if len(iters) >= 1:
        it = _containing(iters["start_ns"].to_numpy(), iters["end_ns"].to_numpy(), api_start)
        depth = int(iters["depth"].min()) + 1
        layers = ranges[(ranges["depth"] == depth)].sort_values("start_ns")
        lay = _containing(layers["start_ns"].to_numpy(), layers["end_ns"].to_numpy(), api_start)
        # layer of each launch as a categorical built from codes (no 8M-string arrays)
        codes, names_u = pd.factorize(layers["name"].astype(str).map(layer_key))
        cats = [*map(str, names_u), OUTSIDE]
        lk["layer"] = pd.Categorical.from_codes(
            np.where(lay >= 0, codes[np.maximum(lay, 0)] if len(codes) else 0, len(cats) - 1),
            categories=cats)
        lk["iter"] = it.astype(np.int32)
        n = len(iters)
        del it, lay, codes
    else:
        lk["layer"] = pd.Categorical.from_codes(np.zeros(len(lk), np.int8), categories=[OUTSIDE])
        lk["iter"] = np.zeros(len(lk), np.int32)
        n = 1
    return lk, n


def _iteration_ranges(report: Report) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(the NVTX ranges, the iteration ranges in start order: the loop's, before their windows;
    ``iterations.nvtx_ranges``, else those found in the trace, the blocks found inside them
    as layers), without the ones the loop leaves out (``_uncut``)."""
    nvtx = report.nvtx(["name", "kind", "depth", "start_ns", "end_ns"])
    ranges = nvtx[nvtx["kind"] != "mark"].copy()
    ranges["end_ns"] = ranges["end_ns"].fillna(np.iinfo(np.int64).max).astype(np.int64)
    iters = iterations.nvtx_ranges(report)
    lp = loop_of(report)
    if len(iters) or lp is None or lp.how != budget.HOW_FOUND:
        return ranges, _uncut(report, iters)
    found = iterations.find(report)
    ranges = found.layers.assign(kind="range", depth=FOUND_DEPTH + 1)  # found layers, no NVTX ones
    return ranges, _uncut(report, found.ranges).assign(depth=FOUND_DEPTH)


def _uncut(report: Report, iters: pd.DataFrame) -> pd.DataFrame:
    """``iters`` without the last iteration the trace's end cut (the budget's ``cut`` table,
    ``analysis.ending``) and without a tail of ranges whose CUDA records nsys lost
    (``ending.untraced_tail``): the profile counts the iterations the budget counts."""
    if not len(iters) or not (gpu_work(report) or report.has_rows("memcpy")):
        return iters
    iters = ending.untraced_tail(report, iters)[0]  # as the budget leaves them out
    cut = loop_of(report).cut if loop_of(report) else []
    if not len(cut):
        return iters
    return iters[iters["start_ns"].to_numpy(np.int64) != int(cut["start_ns"].iloc[0])]


def _gpu_names(report: Report) -> list[str]:
    """The names of the GPUs that ran the run's kernels (of the report's GPU table)."""
    g = report.gpus
    if g.empty or "name" not in g:
        return []
    if len(g) == 1:
        return [str(g["name"].iloc[0])]
    used = set(completeness.kernel_devices(report)) or set(g["device_id"].astype(int))
    return sorted(str(n) for d, n in zip(g["device_id"], g["name"]) if int(d) in used)


def _counts(x: pd.Series) -> pd.Series:
    """Per-iteration counts as integers when every iteration has the same ones."""
    r = x.round()
    return r.astype(np.int64) if ((x - r).abs() < 1e-9).all() else x


def _count(x: float) -> int | float:
    """A per-iteration count as an int when every iteration has the same (129, not 129.0)."""
    return int(round(x)) if abs(x - round(x)) < 1e-9 else x


def _trace_gaps(report: Report, checked: list[dict]) -> list[dict]:
    """Completeness findings that need the iterations: iterations without any GPU work, a
    cut last iteration (``budget.trace_findings``, given ``completeness.check``'s findings
    ``checked``), a graph-level trace."""
    if not loop_of(report):
        return []
    found = [f for f in budget.trace_findings(report, loop_of(report), checked) if f["severity"] != "note"]
    return [*found, *filter(None, [_graph_level(report)])]


def _with_graph_execs(report: Report, lk: pd.DataFrame, iters: pd.DataFrame) -> pd.DataFrame:
    """The launch table plus the whole-graph executions of a graph-level trace (named
    "(CUDA graph N)", class "other" until classified), so that a run of graph replays is
    compared by the time of its graphs when their kernels were not recorded."""
    g = launches(report, "graph_execs", op_columns=("start_ns", "end_ns", "graph_id"),
                 api_columns=("start_ns", "end_ns")).drop(columns="pid")
    if len(iters):
        g = g[_containing(iters["start_ns"].to_numpy(), iters["end_ns"].to_numpy(),
                          g["api_start_ns"].to_numpy()) >= 0]
    def text_categories(c: pd.Categorical) -> pd.Categorical:  # one category dtype for both
        return pd.Categorical.from_codes(c.codes, pd.Index(c.categories.astype(str), dtype=object))

    graphs = pd.Categorical(("(CUDA graph " + g["graph_id"].astype(str) + ")").to_numpy(object))
    kernels = pd.Categorical(lk["name"])  # a categorical stays one: no string per launch
    names = union_categoricals([text_categories(kernels), text_categories(graphs)])
    both = pd.concat([lk.drop(columns="name"), g.drop(columns="graph_id")], ignore_index=True)
    both["name"] = names
    return both.sort_values("api_start_ns", kind="stable").reset_index(drop=True)


def _graph_level(report: Report) -> dict | None:
    """A warning on a graph-level trace: the graph replays are GPU work in the budget, but
    their kernels were not recorded, so per-kernel comparisons leave them out."""
    n = report.row_count("graph_execs")
    if not n:
        return None
    return {"check": "graph_level_trace", "severity": "warning",
            "message": f"{n:,} CUDA graph executions were traced as whole graphs (nsys's "
                       "default --cuda-graph-trace=graph): they count in the time budget, but "
                       "their kernels were not recorded, so kernel classes, precisions, layers "
                       "and kernel comparisons see each replay as one operation, '(CUDA graph "
                       "N)'; profile with --cuda-graph-trace=node to compare their kernels"}


def _steady_iterations(report: Report, iters: pd.DataFrame, n: int) -> np.ndarray | None:
    """Which of the ``n`` iterations are in the loop (after warm-up: every kind and outlier
    included, ``nsightlab.analysis.kinds``); None when all are, none is, or the budget has no
    kinds for these iterations (then every iteration counts)."""
    it = loop_of(report).first_gpu() if loop_of(report) else []
    if not len(it) or "phase" not in it:
        return None
    phase = it["phase"].to_numpy()
    if len(phase) != n or len(iters) != n:
        return None
    keep = phase != kinds.WARM_UP
    return None if keep.all() or not keep.any() else keep


def _steady_only(lk: pd.DataFrame, iters: pd.DataFrame, n: int, keep: np.ndarray | None
                 ) -> tuple[pd.DataFrame, pd.DataFrame, int]:
    """The launches, iteration ranges and count of the steady iterations only (``keep``:
    ``_steady_iterations``), renumbered; unchanged when ``keep`` is None. The kernel launches
    of other iterations were left out when lk was built; graph executions are left out
    here."""
    if keep is None:
        return lk, iters, n
    new = np.cumsum(keep) - 1
    rows = keep[lk["iter"].to_numpy()]
    if not rows.all():
        lk = pick_rows(lk, rows)
    lk["iter"] = new[lk["iter"].to_numpy()].astype(np.int32)
    return lk, iters[keep].reset_index(drop=True), int(keep.sum())


def _spans(lk: pd.DataFrame) -> pd.DataFrame:
    """First kernel start (``s``) and last kernel end (``e``) per iteration, indexed by
    ``iter``; launches in iteration order (as ``_assign_iterations`` leaves them) are reduced
    slice by slice, not grouped by a hash of 8M keys."""
    it = lk["iter"].to_numpy()
    if not len(it) or not np.all(it[1:] >= it[:-1]):
        return lk.groupby("iter", sort=True).agg(s=("start_ns", "min"), e=("end_ns", "max"))
    first = np.concatenate([[0], np.flatnonzero(it[1:] != it[:-1]) + 1])
    return pd.DataFrame({"s": np.minimum.reduceat(lk["start_ns"].to_numpy(), first),
                         "e": np.maximum.reduceat(lk["end_ns"].to_numpy(), first)},
                        index=pd.Index(it[first], name="iter"))


def _per_label(lk: pd.DataFrame, dur: np.ndarray, n: int):
    """(by_class, by_precision, by_layer): kernel time and count per iteration by kernel
    class, by (precision, class) and by layer with the precision of its math kernels; sums
    over the categorical codes (``np.bincount``), in the order pandas' groupby of the
    categories gives (float sums of integer nanoseconds: exact below 2**53)."""
    cls, prec, lay = (lk[c] for c in ("kernel_class", "precision", "layer"))
    cc, pc, lc = (c.cat.codes.to_numpy().astype(np.int32) for c in (cls, prec, lay))
    # bincount takes platform integers and float weights: converted once here, not inside
    # each call (each conversion a fresh 8M-row array: 0.1-0.2 s a call on 2 cores)
    dur_f = dur.astype(np.float64)

    def sums(codes: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        ok = codes >= 0  # a missing label is no group (groupby drops it)
        d, c = (dur_f[ok], codes[ok]) if not ok.all() else (dur_f, codes)
        c = c.astype(np.intp, copy=False)
        count = np.bincount(c, minlength=size)
        present = np.flatnonzero(count)
        return present, np.bincount(c, weights=d, minlength=size)[present], count[present]

    def cats(col: pd.Series, at: np.ndarray) -> np.ndarray:
        return np.asarray(col.cat.categories.astype(str), dtype=object)[at]

    k = len(cls.cat.categories)
    at, t, c = sums(cc, k)
    by_class = pd.DataFrame({"kernel_class": cats(cls, at), "time_ns": t / n, "count": c / n})
    by_class["count"] = _counts(by_class["count"])
    both = np.where((pc >= 0) & (cc >= 0), pc * k + cc, -1)
    at, t, _ = sums(both, len(prec.cat.categories) * k)
    by_prec = pd.DataFrame({"precision": cats(prec, at // k), "kernel_class": cats(cls, at % k),
                            "time_ns": t / n})
    at, t, c = sums(lc, len(lay.cat.categories))
    by_layer = pd.DataFrame({"layer": cats(lay, at), "time_ns": t / n, "count": c / n,
                             "se_ns": _layer_se(lc, lk["iter"].to_numpy(), dur_f, n)[at]})
    by_layer["count"] = _counts(by_layer["count"])
    by_layer = by_layer.iloc[sorted(range(len(by_layer)),  # block2 before block10
                                    key=lambda i: natural_key(by_layer["layer"].iat[i]))
                             ].reset_index(drop=True)
    # the precision a layer computes in: that of its GEMM / conv / attention kernels
    math = np.isin(cc, [i for i, name in enumerate(cls.cat.categories) if name in MATH])
    p_names = [*map(str, prec.cat.categories), "nan"]  # "nan": no precision (pandas' str)
    pairs = np.flatnonzero(np.bincount(  # the (layer, precision) pairs present
        lc[math] * len(p_names) + np.where(pc[math] >= 0, pc[math], len(p_names) - 1),
        minlength=len(lay.cat.categories) * len(p_names)))
    seen: dict[str, set] = {}
    for layer, p_code in zip(pairs // len(p_names), pairs % len(p_names)):
        seen.setdefault(str(lay.cat.categories[layer]), set()).add(p_names[p_code])
    by_layer["math_precision"] = [",".join(sorted(seen[x] - {"unknown"})) if x in seen else ""
                                  for x in by_layer["layer"]]
    return by_class, by_prec, by_layer


#: layers x iterations held for the layers' standard errors, at most
SE_CELLS = 20_000_000


def _layer_se(lc: np.ndarray, it: np.ndarray, dur: np.ndarray, n: int) -> np.ndarray:
    """Each layer code's standard error of its mean time per iteration (the spread of its
    per-iteration sums over sqrt(n)): a change per layer inside the noise is drawn as one;
    NaN under 3 iterations or beyond ``SE_CELLS``."""
    size = int(lc.max()) + 1 if len(lc) else 0
    if n < 3 or size * n > SE_CELLS:
        return np.full(size, np.nan)
    key = lc.astype(np.int64)  # one scratch array of the kernels' length, not four
    key *= n
    key += it
    ok = (lc >= 0) & (it >= 0) & (it < n)
    per = np.bincount(key if ok.all() else key[ok], weights=dur if ok.all() else dur[ok],
                      minlength=size * n).reshape(size, n)
    return per.std(axis=1, ddof=1) / np.sqrt(n)


def _busy_per_iteration(lk: pd.DataFrame) -> np.ndarray:
    """Time with at least one of an iteration's kernels running, per iteration (in iteration
    order); one small union per iteration instead of one over millions of kernels."""
    it = lk["iter"].to_numpy()
    order = None if np.all(it[1:] >= it[:-1]) else np.argsort(it, kind="stable")
    it_sorted = it if order is None else it[order]
    starts = lk["start_ns"].to_numpy() if order is None else lk["start_ns"].to_numpy()[order]
    ends = lk["end_ns"].to_numpy() if order is None else lk["end_ns"].to_numpy()[order]
    edges = np.searchsorted(it_sorted, np.arange(it_sorted.max() + 2 if len(it) else 1))
    return np.array([busy_time(starts[a:b], ends[a:b]) for a, b in zip(edges[:-1], edges[1:])
                     if b > a], dtype=float)


def _containing(starts: np.ndarray, ends: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Index of the (non-overlapping, sorted) range containing each t, or -1 (int32, found
    ``API_CHUNK`` at a time: 8M launches need one 32 MB array, not four of 64 MB)."""
    out = np.full(len(t), -1, np.int32)
    for a in range(0, len(t) if len(starts) else 0, API_CHUNK):
        c = t[a:a + API_CHUNK]
        i = np.searchsorted(starts, c, "right") - 1
        inside = (i >= 0) & (c <= ends[np.maximum(i, 0)])
        out[a:a + API_CHUNK] = np.where(inside, i, -1)
    return out


def _slots(lk: pd.DataFrame, n: int, by_layer: bool = True) -> pd.DataFrame:
    """Mean time of the k-th kernel of each class in each layer (k counted in launch order
    within one iteration), with the name and precision it had first. ``by_layer=False``
    counts within the whole iteration (layer ``(iteration)``). Integer keys throughout:
    8M kernels take one hash pass, not a three-column groupby."""
    # (layer, class) in one int32 (fewer than 64 classes; layers * 64 far below 2**31)
    group = lk["kernel_class"].cat.codes.to_numpy().astype(np.int32)
    if by_layer:
        group += lk["layer"].cat.codes.to_numpy().astype(np.int32) * 64
    it = lk["iter"].to_numpy()
    slot = _occurrence(group, it)
    wide = (int(group.max(initial=0)) + 1) * (int(slot.max(initial=0)) + 1) >= 2**31
    key = group.astype(np.int64) if wide else group  # 32-bit keys whenever they fit
    key *= int(slot.max(initial=0)) + 1
    key += slot
    del group
    codes, uniq = pd.factorize(key)
    del key
    first = first_rows(codes, len(uniq))  # first row of each slot

    def at_first(col: str) -> np.ndarray:
        c = lk[col]
        return np.asarray(c.cat.categories.astype(str))[c.cat.codes.to_numpy()[first]]

    out = pd.DataFrame({
        "layer": at_first("layer") if by_layer else ITERATION_LAYER,
        "kernel_class": at_first("kernel_class"), "slot": slot[first],
        "time_ns": np.bincount(codes, weights=lk["dur"].to_numpy(), minlength=len(uniq)) / n,
        "seen": np.bincount(codes, minlength=len(uniq)),
        "name": at_first("name"), "precision": at_first("precision")})
    return out


def _occurrence(group: np.ndarray, it: np.ndarray) -> np.ndarray:
    """For each row, how many earlier rows of the same iteration have the same group (rows in
    launch order, iterations non-decreasing): rows ordered by group with a stable sort (a
    radix sort of 16-bit codes when the groups present are fewer than 32768, where it was one
    pass per group or a sort of 64-bit keys: the profile's two calls at 8M launches on 2
    cores 0.58 -> 0.48 s), then counted within each run of one (group, iteration)."""
    slot = np.empty(len(group), np.int32)
    if not len(group):
        return slot
    codes = group
    if group.min() >= 0 and group.max() < 1 << 24:  # the groups present, numbered densely
        present = np.bincount(group) > 0
        if present.sum() < 1 << 15:
            codes = (np.cumsum(present) - 1).astype(np.int16)[group]
    order = np.argsort(codes, kind="stable")
    g, i = codes[order], it[order]
    new = np.empty(len(g), bool)
    new[0] = True
    np.not_equal(g[1:], g[:-1], out=new[1:])
    new[1:] |= i[1:] != i[:-1]
    pos = np.arange(len(g), dtype=np.int32 if len(g) < 2**31 else np.int64)  # 32 MB at 8M
    first = np.where(new, pos, 0)
    np.maximum.accumulate(first, out=first)  # each run's first position
    pos -= first
    del first
    slot[order] = pos
    return slot


#: API rows summed per pass in ``_overheads`` (scratch of a few MB per pass)
API_CHUNK = 1 << 21


def _launch_calls(lk: pd.DataFrame, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Per iteration: the time in launch calls and their number (a graph launch counts once).
    Launches in iteration order (as ``_assign_iterations`` leaves them) are summed slice by
    slice; else by bincounts."""
    once = first_of_call(lk["api_row"].to_numpy())
    it = lk["iter"].to_numpy()
    dur = lk["api_end_ns"].to_numpy() - lk["api_start_ns"].to_numpy()
    if not once.all():
        it, dur = it[once], dur[once]
    if len(it) and np.all(it[1:] >= it[:-1]) and it[0] >= 0 and it[-1] < n:
        edges = np.searchsorted(it, np.arange(n + 1))
        total = slice_reduce(np.add, dur, edges[:-1], edges[1:], 0).astype(np.float64)
        return total, np.diff(edges)
    return np.bincount(it, weights=dur, minlength=n), np.bincount(it, minlength=n)


def _overheads(report: Report, iters: pd.DataFrame, n: int,
               spans: pd.DataFrame, busy_i: np.ndarray, calls: tuple) -> dict:
    """Launch overhead, API time, sync waits, GPU idle and memcpy time per iteration, with the
    number of launch calls (``calls``: ``_launch_calls``), API calls, syncs and copies:
    medians over the iterations, so a one-off (the first graph instantiation, a lazy module
    load) does not stand for the steady state."""
    launch, launch_calls = calls
    api_ns = sync_ns = memcpy_ns = syncs = api_calls = memcpys = np.zeros(n)
    if len(iters):
        lo, hi = iters["start_ns"].to_numpy(), iters["end_ns"].to_numpy()
        api_ns, api_calls, sync_ns, syncs = _api_sums(report, lo, hi, n)
        if report.has("memcpy"):
            mc = report.memcpy(["start_ns", "duration_ns"])
            m_in = _containing(spans["s"].to_numpy(), spans["e"].to_numpy(), mc["start_ns"].to_numpy())
            inside = m_in >= 0
            memcpy_ns = np.bincount(m_in[inside], weights=mc["duration_ns"].to_numpy()[inside],
                                    minlength=n)
            memcpys = np.bincount(m_in[inside], minlength=n)
    idle = (spans["e"] - spans["s"]).to_numpy() - busy_i
    med = lambda a: benchmath.median(a, 0.0)  # noqa: E731
    return {"launch_overhead_ns": med(launch), "launch_calls": med(launch_calls),
            "api_ns": med(api_ns), "api_calls": med(api_calls),
            "host_in_syncs_ns": med(sync_ns), "syncs": med(syncs), "gpu_idle_ns": med(idle),
            "memcpy_ns": med(memcpy_ns), "memcpys": med(memcpys)}


def _api_sums(report: Report, lo: np.ndarray, hi: np.ndarray, n: int) -> tuple:
    """API time, API calls, sync time and syncs per iteration ([lo, hi] ranges, sorted; each
    call in the last one begun at or before it, ``_containing``). From the API table's cache
    a part at a time where it is cached (a few MB of scratch: the profile runs this beside
    its label and slot sums), else from its whole columns (``_api_sums_whole``)."""
    import pyarrow.parquet as pq

    from nsightlab.read.table_cache import READ

    files = report.cache.files(report.spec("cuda_api").name) if report.cache is not None \
        and report.has_rows("cuda_api") else None
    if files is None:
        return _api_sums_whole(report, lo, hi, n)
    sums = np.zeros((4, n + 1))  # api time, api calls, sync time, syncs; by iteration + 1
    for f in files:
        t = pq.ParquetFile(f, **READ).read(columns=["start_ns", "duration_ns", "name"])
        starts, d = t.column(0).to_numpy(), t.column(1).to_numpy()
        sync = np.concatenate([_sync_rows(c) for c in t.column(2).chunks]) \
            if t.num_rows else np.zeros(0, bool)
        edges = _slices(lo, hi, starts)
        if edges is not None:  # calls in start order: each iteration's are one slice
            sums[:, 1:] += np.stack(_sliced_sums(edges, d, sync, [True]))
            continue
        _add_sums(sums, _containing(lo, hi, starts).astype(np.intp) + 1, d.astype(np.float64),
                  sync)
    return tuple(row[1:] for row in sums)


def _add_sums(sums: np.ndarray, w: np.ndarray, d: np.ndarray, sync: np.ndarray) -> None:
    """Add calls to ``sums`` (API time, API calls, sync time, syncs; a column per iteration
    + 1, 0 for "outside"): ``w`` each call's column, ``d`` its duration, ``sync`` whether it
    synchronizes."""
    n1 = sums.shape[1]
    sums[0] += np.bincount(w, weights=d, minlength=n1)
    sums[1] += np.bincount(w, minlength=n1)
    sums[2] += np.bincount(w[sync], weights=d[sync], minlength=n1)
    sums[3] += np.bincount(w[sync], minlength=n1)


def _sync_rows(names) -> np.ndarray:
    """Which rows of an Arrow name column (dictionary-encoded, as the cache holds it) are
    synchronizing calls (``sync_kind``), classified once per distinct name."""
    import pyarrow.compute as pc

    if not hasattr(names, "indices"):  # plain strings
        names = pc.dictionary_encode(names)
    kinds = np.array([bool(sync_kind(str(v))) for v in names.dictionary.to_pylist()] + [False])
    return kinds[pc.fill_null(names.indices, len(kinds) - 1).to_numpy()]


def _api_sums_whole(report: Report, lo: np.ndarray, hi: np.ndarray, n: int) -> tuple:
    """``_api_sums`` from whole columns of the API table (read through or without a cache)."""
    # the API table is the biggest: one column at a time, summed in chunks (iteration
    # index + 1, 0 for "outside"), so no boolean-indexed copies of 16M-row columns
    starts = report.cuda_api(["start_ns"])["start_ns"].to_numpy()
    edges = _slices(lo, hi, starts)
    if edges is None:
        where = _containing(lo, hi, starts)
        where += 1
    del starts
    names = report.cuda_api(["name"])["name"]
    sync_codes = [i for i, c in enumerate(names.cat.categories) if sync_kind(str(c))]
    codes = names.cat.codes.to_numpy()
    del names
    dur = report.cuda_api(["duration_ns"])["duration_ns"].to_numpy()
    if edges is not None:  # calls in start order: each iteration's calls are one slice
        api_ns, api_calls, sync_ns, syncs = _sliced_sums(edges, dur, codes, sync_codes)
    else:
        sums = np.zeros((4, n + 1))  # api time, api calls, sync time, syncs
        for a in range(0, len(dur), API_CHUNK):
            _add_sums(sums, where[a:a + API_CHUNK], dur[a:a + API_CHUNK],
                      np.isin(codes[a:a + API_CHUNK], sync_codes))
        del where
        api_ns, api_calls, sync_ns, syncs = (row[1:] for row in sums)
    del dur, codes
    return api_ns, api_calls, sync_ns, syncs


def _slices(lo: np.ndarray, hi: np.ndarray, t: np.ndarray) -> np.ndarray | None:
    """For sorted, non-overlapping ranges [lo, hi] and times ``t`` in order: each range's
    rows of ``t`` as [edges[i, 0], edges[i, 1]); None when ``t`` is not sorted or the ranges
    overlap (``_containing`` then)."""
    if len(lo) > 1 and not np.all(lo[1:] > hi[:-1]):
        return None
    if len(t) > 1 and not np.all(t[1:] >= t[:-1]):
        return None
    return np.stack([np.searchsorted(t, lo, "left"), np.searchsorted(t, hi, "right")], axis=1)


def _sliced_sums(edges: np.ndarray, dur: np.ndarray, codes: np.ndarray, sync_codes: list
                 ) -> tuple[np.ndarray, ...]:
    """Per range (``_slices``): API time, calls, sync time and syncs, summed slice by slice
    (``API_CHUNK`` rows of scratch at a time), as floats like the bincounts they replace."""
    n = len(edges)
    out = np.zeros((4, n))
    out[1] = edges[:, 1] - edges[:, 0]
    for a in range(0, int(edges[:, 1].max(initial=0)), API_CHUNK):
        b = a + API_CHUNK
        lo, hi = np.clip(edges[:, 0], a, b) - a, np.clip(edges[:, 1], a, b) - a
        if not np.any(hi > lo):
            continue
        d = dur[a:b]
        sync = np.isin(codes[a:b], sync_codes)
        out[0] += slice_reduce(np.add, d, lo, hi, 0)
        out[2] += slice_reduce(np.add, np.where(sync, d, 0), lo, hi, 0)
        out[3] += slice_reduce(np.add, sync.astype(np.int64), lo, hi, 0)
    return out[0], out[1], out[2], out[3]


def _tensor_core(report: Report, lk: pd.DataFrame, spans: pd.DataFrame) -> dict:
    tc_time = lk.loc[lk["tensor_core"], "dur"].sum()
    out = {"source": "estimate", "tensor_kernel_time_pct": 100.0 * tc_time / max(lk["dur"].sum(), 1),
           "tensor_active_pct": float("nan")}
    samples = gm.samples(report, ("Tensor Active",))
    if samples is not None and len(spans):
        t, y = samples["timestamp_ns"].to_numpy(), samples["value"].to_numpy(float)
        vals, counts = gm.window_mean(t, y, spans["s"].to_numpy(), spans["e"].to_numpy())
        if counts.sum():
            out.update(source="gpu_metrics",
                       tensor_active_pct=float(np.nansum(vals * counts) / counts.sum()))
    return out


def _machine(report: Report, spans: pd.DataFrame) -> dict:
    """The machine's state: the capture's record around the run (``read.machine``) and, with
    GPU metrics, the SM clock inside the iterations (``trace_sm_mhz``) and the most it reached
    in the run (``trace_sm_mhz_max``)."""
    out = of_report(report.source)
    if len(spans):
        clock = gm.sm_clock(report, spans["s"].to_numpy(), spans["e"].to_numpy())
        if clock:
            out = {**out, "trace_sm_mhz": clock["sm_mhz"], "trace_sm_mhz_max": clock["sm_mhz_max"]}
    return out


def batch_of(report: Report) -> int | None:
    """Items per iteration from the capture manifest of ``report`` (its trtexec ``batch``, or
    the first dimension of its first ``shapes`` entry); None when it does not say."""
    preset = report.capture_manifest.get("preset") or {}
    if not isinstance(preset, dict):
        return None
    if preset.get("batch"):
        return int(preset["batch"])
    m = re.search(r":(\d+)x", str(preset.get("shapes") or ""))
    return int(m.group(1)) if m else None


def _ort_settings(source) -> dict:
    """What the ORT runner's record (an ``--ort`` capture's ``ort_run.json``) says of how the
    run was made: io_binding, cuda_graph, profiler_on; {} for any other run."""
    from nsightlab.run.remedies import ort_record
    from nsightlab.read.metadata import capture_manifest

    rec = ort_record(source)
    if rec:
        return {k: bool(rec[k]) for k in ("io_binding", "cuda_graph", "profiler_on") if k in rec}
    # the runner captured as a command (capture NAME -- python -m nsightlab.runners.ort ...)
    cmd = capture_manifest(source).get("command")
    cmd = [str(c) for c in cmd] if isinstance(cmd, list) else str(cmd or "").split()
    if not any("nsightlab.runners.ort" in c for c in cmd):
        return {}
    flags = {c.strip("',[]") for c in cmd}
    return {"io_binding": bool({"--io-binding", "--cuda-graph"} & flags),
            "cuda_graph": "--cuda-graph" in flags, "profiler_on": "--profile" in flags}
