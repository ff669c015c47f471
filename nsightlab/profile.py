"""One run, summarized per iteration: the common ground on which two runs are compared.

FP16 and FP8/NVFP4 engines run *different* kernels, so runs are lined up where they agree:
per iteration (NVTX ranges named ``iterN`` / ``iteration N`` / ``stepN``, in any domain), per
layer (the NVTX ranges one level inside an iteration: TensorRT layers, ``blockN``), per kernel
class and precision, and per kernel *slot*: the k-th kernel of a class inside a layer. A slot's
kernel may change name between runs (an FP16 GEMM becomes an FP8 one); the slot stays.

Without iteration ranges the whole span of GPU activity counts as one iteration, and
``iteration_source`` says so.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from . import gpu_metrics as gm
from .classify import annotate, sync_kind
from .launches import first_of_call, launches
from .report import Report
from .timeline import covered, union

ITERATION = re.compile(r"(?i)^(iter|iteration|step|batch)[ _-]?\d+$")
OUTSIDE = "(outside layers)"
ITERATION_LAYER = "(iteration)"
MATH = {"gemm", "attention", "conv"}


def base_name(name: str) -> str:
    """NVTX range name without its domain prefix, trimmed ('nsightlab:iter3' -> 'iter3')."""
    return str(name).split(":", 1)[-1].strip() if ":" in str(name) else str(name).strip()


def layer_key(name: str) -> str:
    """Layer names as they line up between runs: domain, case and spacing do not matter."""
    return re.sub(r"\s+", " ", base_name(name)).lower()


@dataclass
class RunProfile:
    """Per-iteration summary of one report (see module docstring). Times are ns/iteration."""

    label: str
    iterations: int
    iteration_source: str
    iteration_ns: float          # mean GPU span of an iteration (first kernel start to last end)
    kernel_ns: float             # kernel time per iteration
    kernels: float               # kernels per iteration
    busy_pct: float
    by_class: pd.DataFrame       # kernel_class, time_ns, count
    by_precision: pd.DataFrame   # precision, kernel_class, time_ns
    by_layer: pd.DataFrame       # layer, time_ns, count, gemm_precision
    slots: pd.DataFrame          # layer, kernel_class, slot, name, precision, time_ns
    flat_slots: pd.DataFrame     # the same with layers ignored (layer = "(iteration)")
    overheads: dict = field(default_factory=dict)
    tensor_core: dict = field(default_factory=dict)


def profile(report: Report, label: str | None = None) -> RunProfile:
    """Summarize ``report`` per iteration."""
    label = label or report.source.name
    lk = launches(report, op_columns=("start_ns", "end_ns", "name"),
                  api_columns=("start_ns", "end_ns", "tid"))
    if lk.empty:
        from .errors import NsightlabError

        raise NsightlabError(f"{report.path}: no kernel launches to compare "
                             f"({report.missing_hint('kernels') or 'profile with --trace=cuda'})")
    nvtx = report.nvtx(["name", "kind", "depth", "start_ns", "end_ns"])
    ranges = nvtx[nvtx["kind"] != "mark"]
    names = ranges["name"].astype(str).map(base_name)
    iters = ranges[names.str.match(ITERATION)].sort_values("start_ns")
    if not lk["api_start_ns"].is_monotonic_increasing:
        lk = lk.sort_values("api_start_ns", kind="stable").reset_index(drop=True)
    api_start = lk["api_start_ns"].to_numpy()
    if len(iters) >= 1:
        it = _containing(iters["start_ns"].to_numpy(), iters["end_ns"].to_numpy(), api_start)
        source = f"{len(iters)} NVTX iteration ranges ({base_name(iters['name'].iloc[0])}...)"
        depth = int(iters["depth"].min()) + 1
        layers = ranges[(ranges["depth"] == depth)].sort_values("start_ns")
        lay = _containing(layers["start_ns"].to_numpy(), layers["end_ns"].to_numpy(), api_start)
        layer_names = layers["name"].astype(str).map(layer_key).to_numpy()
        lk["layer"] = np.where(lay >= 0, layer_names[np.maximum(lay, 0)] if len(layers) else OUTSIDE,
                               OUTSIDE)
        lk["iter"] = it
        lk = lk[lk["iter"] >= 0].reset_index(drop=True)
        n = len(iters)
    else:
        source = "no NVTX iteration ranges: all GPU activity as one iteration"
        lk["layer"] = OUTSIDE
        lk["iter"] = 0
        n = 1
    lk["layer"] = lk["layer"].astype("category")
    lk = annotate(lk)
    dur = (lk["end_ns"] - lk["start_ns"]).to_numpy()
    lk["dur"] = dur
    # GPU span per iteration, and the time inside it with a kernel running
    spans = lk.groupby("iter", sort=True).agg(s=("start_ns", "min"), e=("end_ns", "max"))
    span_ns = float((spans["e"] - spans["s"]).mean()) if len(spans) else 0.0
    ms, me = union(lk["start_ns"].to_numpy(), lk["end_ns"].to_numpy())
    busy_i = covered(ms, me, spans["s"].to_numpy(), spans["e"].to_numpy())
    del ms, me
    busy = float(busy_i.mean()) if len(busy_i) else 0.0
    by_class = (lk.groupby("kernel_class", observed=True)["dur"].agg(["sum", "size"])
                .rename(columns={"sum": "time_ns", "size": "count"}) / n).reset_index()
    by_class["kernel_class"] = by_class["kernel_class"].astype(str)
    by_prec = (lk.groupby(["precision", "kernel_class"], observed=True)["dur"].sum() / n
               ).rename("time_ns").reset_index()
    by_prec[["precision", "kernel_class"]] = by_prec[["precision", "kernel_class"]].astype(str)
    by_layer = (lk.groupby("layer", observed=True)["dur"].agg(["sum", "size"])
                .rename(columns={"sum": "time_ns", "size": "count"}) / n).reset_index()
    by_layer["layer"] = by_layer["layer"].astype(str)
    gemm = lk[lk["kernel_class"].astype(str) == "gemm"]
    gp = gemm.groupby("layer", observed=True)["precision"].agg(
        lambda s: ",".join(sorted(set(map(str, s)))))
    by_layer["gemm_precision"] = by_layer["layer"].map(gp).fillna("")
    slots = _slots(lk, n)
    flat_slots = _slots(lk.assign(layer=pd.Categorical([ITERATION_LAYER] * len(lk))), n)
    return RunProfile(
        label=label, iterations=n, iteration_source=source, iteration_ns=span_ns,
        kernel_ns=float(dur.sum()) / n, kernels=len(lk) / n,
        busy_pct=100.0 * busy / span_ns if span_ns else float("nan"),
        by_class=by_class, by_precision=by_prec, by_layer=by_layer, slots=slots,
        flat_slots=flat_slots,
        overheads=_overheads(report, lk, iters, n, spans, busy_i),
        tensor_core=_tensor_core(report, lk, spans))


def _containing(starts: np.ndarray, ends: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Index of the (non-overlapping, sorted) range containing each t, or -1."""
    if len(starts) == 0:
        return np.full(len(t), -1)
    i = np.searchsorted(starts, t, "right") - 1
    inside = (i >= 0) & (t <= ends[np.maximum(i, 0)])
    return np.where(inside, i, -1)


def _slots(lk: pd.DataFrame, n: int) -> pd.DataFrame:
    """Mean time of the k-th kernel of each class in each layer (k counted in launch order
    within one iteration), with the name and precision it had most often."""
    keys = ["iter", "layer", "kernel_class"]
    lk = lk.assign(slot=lk.groupby(keys, observed=True, sort=False).cumcount())
    g = lk.groupby(["layer", "kernel_class", "slot"], observed=True, sort=False)
    out = g.agg(time_ns=("dur", "sum"), seen=("dur", "size"),
                name=("name", "first"), precision=("precision", "first")).reset_index()
    out["time_ns"] = out["time_ns"] / n
    for c in ("layer", "kernel_class", "name", "precision"):
        out[c] = out[c].astype(str)
    return out


def _overheads(report: Report, lk: pd.DataFrame, iters: pd.DataFrame, n: int,
               spans: pd.DataFrame, busy_i: np.ndarray) -> dict:
    """Launch overhead, API time, sync waits (and count), GPU idle and memcpy time per
    iteration: medians over the iterations, so a one-off (the first graph instantiation, a
    lazy module load) does not stand for the steady state."""
    once = first_of_call(lk["api_row"].to_numpy())
    it = lk["iter"].to_numpy()
    per = lambda idx, w: np.bincount(idx, weights=w, minlength=n)  # noqa: E731
    launch = per(it[once], (lk["api_end_ns"] - lk["api_start_ns"]).to_numpy()[once])
    api_ns = sync_ns = memcpy_ns = syncs = np.zeros(n)
    if len(iters):
        lo, hi = iters["start_ns"].to_numpy(), iters["end_ns"].to_numpy()
        api = report.cuda_api(["name", "start_ns", "duration_ns"])
        where = _containing(lo, hi, api["start_ns"].to_numpy())
        inside = where >= 0
        dur = api["duration_ns"].to_numpy()
        api_ns = per(where[inside], dur[inside])
        kinds = {c: sync_kind(str(c)) for c in api["name"].cat.categories}
        is_sync = api["name"].map(kinds).notna().to_numpy() & inside
        sync_ns = per(where[is_sync], dur[is_sync])
        syncs = np.bincount(where[is_sync], minlength=n).astype(float)
        if report.has("memcpy"):
            mc = report.memcpy(["start_ns", "duration_ns"])
            m_in = _containing(spans["s"].to_numpy(), spans["e"].to_numpy(), mc["start_ns"].to_numpy())
            memcpy_ns = per(m_in[m_in >= 0], mc["duration_ns"].to_numpy()[m_in >= 0])
    idle = (spans["e"] - spans["s"]).to_numpy() - busy_i
    med = lambda a: float(np.median(a)) if len(a) else 0.0  # noqa: E731
    return {"launch_overhead_ns": med(launch), "api_ns": med(api_ns), "sync_wait_ns": med(sync_ns),
            "syncs": med(syncs), "gpu_idle_ns": med(idle), "memcpy_ns": med(memcpy_ns)}


def _tensor_core(report: Report, lk: pd.DataFrame, spans: pd.DataFrame) -> dict:
    tc_time = lk.loc[lk["kernel_class"].astype(str).isin(MATH)
                     & ~lk["precision"].astype(str).isin(["fp32", "fp64", "unknown"]), "dur"].sum()
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
