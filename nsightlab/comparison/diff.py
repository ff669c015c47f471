"""``nsightlab.diff(a, b)``: where two runs differ, per iteration, and why.

Runs are lined up per iteration, kernel class, precision, layer and kernel slot (see
``nsightlab.run.model``). Kernels only in B are precision-conversion work when they convert:
kernels named for FP8/FP4/INT8, Q/DQ and quantize kernels anywhere; casts, abs/amax reductions
and scale multiplies/divides/clamps only in a layer whose math (GEMM, conv, attention) changed
precision (names alone cannot tell a divide-by-scale from any other divide, the context can).
Every other new kernel (a pooling or layout kernel) is "only in B", named. The verdict explains
the change of the wall-clock iteration by the time budget's parts (GPU work, copies, waits) and
names the kernels, layers or classes that make up >= 80% of a kernel-time change. Every time is
in ns per iteration; sections are DataFrames (``headline`` a dict).
"""
from __future__ import annotations

from pathlib import Path
import re
from dataclasses import asdict, dataclass, replace

import numpy as np
import pandas as pd

from nsightlab.analysis import budget, kinds, work
from nsightlab.analysis.budget_parts import COMM_PREFIX
from nsightlab.analysis.classify import MATH_CLASSES
from nsightlab.comparison import trt_layers
from nsightlab.run.model import ITERATION_LAYER, OUTSIDE, RunProfile, profile
from nsightlab.core.result import Result, json_records, json_value
from nsightlab.core.labels import run_labels
from nsightlab.core import benchmath
from nsightlab.core.units import fmt_ms as _ms, fmt_ratio, fmt_span, kernel_label
from nsightlab.read.opener import as_report
from nsightlab.read.report import Report
from nsightlab.renderers.words import Said

#: kernels that convert to or from a narrow format by what they are called: Q/DQ, FP8/FP4/INT8
_NARROW = re.compile(r"quantiz|qdq|float8|fp8|e4m3|e5m2|fp4|e2m1|(?<!u)int8|nvfp4|mxfp", re.I)
#: casts, abs-max reductions and scale arithmetic: conversion only where the math precision
#: changed (elsewhere a cast is a dtype change of the program, e.g. for .item())
_SCALE = re.compile(r"WithCast|(?<!broad)cast|convert|_to_copy|Abs|amax|absmax|MaxNanFunctor"
                    r"|MaxOps|max_all|DivFunctor|MulFunctor|\bdiv_|\bmul_|scale|clamp|saturat"
                    r"|reformat", re.I)
_SCALE_CLASSES = {"elementwise", "reduce", "reformat/copy"}


def is_conversion(name: str, kernel_class: str, math_changed: bool) -> bool:
    """Whether a kernel new in B converts precision (see the module docstring): a quantize or
    FP8/FP4/INT8 kernel anywhere; casts, abs/amax and scale arithmetic only in a layer whose
    math precision changed. A pooling or layout kernel never is."""
    if kernel_class == "quantize" or _NARROW.search(name):
        return True
    return math_changed and kernel_class in _SCALE_CLASSES and bool(_SCALE.search(name))


#: overhead rows of the diff: (name, time key, count key) in ``RunProfile.overheads``, each
#: the median per iteration. ``host_in_syncs`` is the host's time inside synchronizing calls
#: (a CPU figure); the GPU's idle after them is the budget's ``idle_sync`` (a mean, a GPU
#: figure): two different numbers, named apart
OVERHEADS = (("launch_overhead", "launch_overhead_ns", "launch_calls"),
             ("api", "api_ns", "api_calls"), ("host_in_syncs", "host_in_syncs_ns", "syncs"),
             ("gpu_idle", "gpu_idle_ns", None), ("memcpy", "memcpy_ns", "memcpys"))


@dataclass(repr=False)
class Diff(Result):
    """Run B against run A, per iteration. Sections (DataFrames, times in ns per iteration):

    - ``headline`` (a dict): labels, iterations and their source, ``a/b_median_ns`` (the
      loop's median iteration after warm-up), ``a/b_mean_ns`` (the loop's mean: the budget's
      parts add up to it), ``a/b_main_ns`` (the main kind's median), ``a/b_kinds``,
      ``a/b_steady_iterations``, ``speedup`` (of the medians; of the main kinds' medians when
      a run has several kinds of iteration), kernel time, busy %, kernels per iteration, ``gemm_change_pct``,
      ``conversion_overhead_ns``, ``layers_matched`` and the ``verdict`` sentence;
    - ``by_class``: kernel_class, a_ns, b_ns, delta_ns, a_count, b_count, delta_share_pct;
    - ``by_precision``: precision, kernel_class, a_ns, b_ns, delta_ns;
    - ``by_layer``: layer, b_layer (B's name for it when the names differ: TensorRT layers of
      another precision, ``trt_layers``), a_ns, b_ns, a_count, b_count, a/b_math_precision,
      math_precision_changed, status (matched / only_a / only_b), delta_ns;
    - ``kernels``: layer, kernel_class, slot, a/b_name, a/b_precision, a_ns, b_ns, status
      (matched / new / vanished), delta_ns;
    - ``conversion``: kernel_class, b_name, label, time_ns (precision-conversion work only in
      B: casts, Q/DQ, amax and scaling where the math precision changed);
    - ``only_b``: the other kernels only in B (kernel_class, b_name, label, time_ns);
    - ``overheads``: overhead, a_ns, b_ns, delta_ns, a_count, b_count (medians per iteration;
      counts are launch calls, API calls, syncs or copies; none for gpu_idle);
    - ``tensor_core``: run, source, tensor_kernel_time_pct, tensor_active_pct;
    - ``budget``: part, a_ns, b_ns, delta_ns, a_pct, b_pct: where each run's wall-clock
      iteration goes (``nsightlab.analysis.budget``; its verdicts are ``a_verdict``/``b_verdict`` in
      the headline, trace-completeness warnings ``a_warnings``/``b_warnings``).
    """

    a: RunProfile
    b: RunProfile
    headline: dict
    by_class: pd.DataFrame
    by_precision: pd.DataFrame
    by_layer: pd.DataFrame
    kernels: pd.DataFrame
    conversion: pd.DataFrame
    only_b: pd.DataFrame
    overheads: pd.DataFrame
    tensor_core: pd.DataFrame
    budget: pd.DataFrame

    SECTIONS = ("by_class", "by_precision", "by_layer", "kernels", "conversion", "only_b",
                "overheads", "tensor_core", "budget")

    def brief(self) -> str:
        return str(self.headline.get("verdict", ""))

    def tables(self) -> dict[str, pd.DataFrame]:
        """Every section as a DataFrame (the headline as a one-row frame)."""
        return {"headline": pd.DataFrame([self.headline]),
                **{s: getattr(self, s) for s in self.SECTIONS}}

    def manifest(self) -> dict:
        return {"kind": "diff", "a": str(self.headline["a"]), "b": str(self.headline["b"]),
                "headline": self.headline}

    def to_json(self) -> dict:
        """The headline as a dict, every other section as a list of records."""
        return {"headline": json_value(self.headline),
                **{s: json_records(getattr(self, s)) for s in self.SECTIONS}}


def runs_of(x) -> list:
    """The runs of one side: a list or tuple as given, 'A1,A2,A3' split, a capture made with
    ``--repeat`` as its runs (``runs/N/report.sqlite`` after the first), else ``[x]``."""
    if isinstance(x, (list, tuple)):
        return list(x)
    if isinstance(x, str) and "," in x and not Path(x).exists():
        return [y for y in x.split(",") if y]
    if not isinstance(x, Report):
        from nsightlab.read.locate import default_store
        from nsightlab.read.machine import runs_in

        for folder in (Path(x), default_store() / str(x)):
            runs = runs_in(folder) if folder.is_dir() else None
            if runs is not None:
                more = [folder / str(r.get("sqlite")) for r in runs[1:]
                        if (folder / str(r.get("sqlite"))).is_file()]
                return [x, *more]
    return [x]


def diff(a, b, a_process: int | None = None, b_process: int | None = None,
         **open_options) -> Diff:
    """Compare run B against run A: Reports, or anything ``nsightlab.open`` takes (opened
    with ``open_options``: cache, cache_dir, nsys, progress). Runs are labelled by their
    capture name or file stem (``core.labels``); the headline keeps their paths.

    A side may be several runs of the same code (a list, 'A1,A2', or a capture made with
    ``--repeat``): every table is of the first run, and the headline's interval holds the
    spread between the runs (``benchmath.runs_comparison``).

    A report of several CUDA processes is one run per process: ``a_process``/``b_process``
    (pids) pick them; else A's busiest process, and on B the same rank where both hold ranks,
    else the process of the same name and place among that name's processes (pid order: as
    launched), else B's busiest; a workload warning says which."""
    open_options = {"prefetch": ("kernels", "cuda_api"), **open_options}
    (a, *more_a), (b, *more_b) = runs_of(a), runs_of(b)
    ra, rb = as_report(a, **open_options), as_report(b, **open_options)
    la, lb = run_labels([str(r.source) if isinstance(r, Report) else str(r) for r in (a, b)])
    if la == lb and str(a) != str(b):
        la, lb = str(a), str(b)
    ra, la, wa, like = pick_process(ra, la, a_process, "A")
    if like is None:  # one rank's own report (rank_%q{RANK}): its rank from its name
        from nsightlab.analysis.processes import RANK_IN_NAME
        named = RANK_IN_NAME.search(Path(str(ra.source)).name)
        like = {"rank": int(named.group(1))} if named else None
    rb, lb, wb, _ = pick_process(rb, lb, b_process, "B", like)
    pa_, pb_ = profile(ra, la), profile(rb, lb)
    extra = [more_runs(xs, side, like, open_options)
             for xs, side in ((more_a, "A"), (more_b, "B"))]
    d = of_profiles(pa_, pb_, *extra)
    d.headline["workload_warnings"] = [*wa, *wb, *d.headline["workload_warnings"]]
    d.headline["a_path"], d.headline["b_path"] = str(ra.source), str(rb.source)
    return d


def more_runs(xs: list, side: str, like: dict | None, open_options: dict) -> list[RunProfile]:
    """The profiles of a side's further runs (``runs_of``), each the process ``like`` the
    first run's (``pick_process``), labelled by its path: the runs whose spread goes into the
    interval."""
    return [profile(*pick_process(as_report(x, **open_options), _run_label(x), None, side,
                                like)[:2]) for x in xs]


def _run_label(x) -> str:
    """A further run as people name it: its file's stem, or 'NAME run N' for a run of a
    capture made with --repeat (captures/NAME/runs/N/report.sqlite)."""
    p = Path(str(x))
    if p.parent.parent.name == "runs":
        return f"{p.parent.parent.parent.name} run {p.parent.name}"
    return p.name.split(".")[0] if p.suffix in (".sqlite", ".nsys-rep", ".xz") else str(x)


def runs_note(headline: dict) -> str:
    """Which runs the tables are of, where a side has several: '' with one run a side."""
    a, b = headline.get("a_runs") or [], headline.get("b_runs") or []
    if len(a) < 2 and len(b) < 2:
        return ""
    said = lambda runs: f"{len(runs)} run{'s' if len(runs) > 1 else ''} (" + ", ".join(  # noqa: E731
        map(str, runs)) + ")"
    return (f"several runs: A {said(a)}, B {said(b)}. The headline's first words (times, ratio "
            "and interval) are over all of them: the geometric mean of each side's run "
            "medians, the spread between runs in the interval. The rest of the headline, and "
            "every line and table below, is of the first run of each side alone (A "
            f"{headline['a']}, B {headline['b']})")


def pick_process(r: Report, label: str, pid: int | None, side: str, like: dict | None = None,
               hint: str = "", base: str = "A"):
    """(the report of one process, its label, warnings, how to line it up): ``pid`` when
    given; for a report of several CUDA processes, the one like ``like`` (the other side's
    pick, as this returns it: ``{"rank": N}``, or ``{"name": ..., "order": k}``, the k-th
    process of that name by pid, as launched), else the busiest (most kernel time), said in
    a warning; ``r`` itself otherwise (None to line up by)."""
    from nsightlab.analysis import processes
    from nsightlab.read import split

    if pid is None and len(processes.cuda_pids(r)) < 2:
        return r, label, [], None
    procs = processes.table(r)

    def key(row) -> dict:
        if row["rank"] is not None and row["rank"] == row["rank"]:  # not None, not NaN
            return {"rank": int(row["rank"])}
        same = list(procs.loc[procs["name"] == row["name"], "pid"])
        return {"name": row["name"], "order": same.index(row["pid"])}

    if pid is not None:
        if int(pid) not in set(procs["pid"]):
            from nsightlab.errors import UsageError
            have = ", ".join(str(p) for p in procs["pid"]) or "none"
            raise UsageError(f"{r.source}: no CUDA process {pid}; its CUDA processes: {have}")
        row = procs[procs["pid"] == int(pid)].iloc[0]
        return split.of_process(r, int(pid)), f"{label} (pid {pid})", [], key(row)
    if len(procs) < 2:
        return r, label, [], None
    like = like or {}
    hit = procs.iloc[0:0]
    if "rank" in like:
        hit, how = procs[procs["rank"] == like["rank"]], f"rank {like['rank']}, as on {base}"
    elif "name" in like:
        same = procs[procs["name"] == like["name"]]
        if like["order"] < len(same):
            hit = same.iloc[[like["order"]]]
        how = (f"the {kinds.ordinal(like['order'] + 1)} {like['name']} process by pid, as on {base}"
               if len(same) > 1 else f"the {like['name']} process, as on {base}")
    row = hit.iloc[0] if len(hit) else procs.loc[procs["kernel_ns"].idxmax()]
    if not len(hit):
        how = "the busiest"
    ranked = row["rank"] is not None and row["rank"] == row["rank"]
    rank_said = f", rank {int(row['rank'])}" if ranked else ""
    said = (f"{side} holds {len(procs)} CUDA processes (pids "
            f"{', '.join(str(p) for p in procs['pid'])}): compared pid {row['pid']} "
            f"({row['name']}{rank_said}; {how}); "
            + (hint or f"--{side.lower()}-process PID picks another, nsightlab report shows each"))
    return split.of_process(r, int(row["pid"])), f"{label} (pid {row['pid']})", [said], key(row)


def of_profiles(pa: RunProfile, pb: RunProfile, more_a: list | None = None,
            more_b: list | None = None) -> Diff:
    """The diff of two run profiles (see ``Diff`` for the sections); ``more_a``/``more_b``:
    the profiles of more runs of each side, for the interval."""
    warnings = workload_warnings(pa, pb)  # on the layer names as recorded
    pb = _align_layers(pa, pb)
    by_class = _side_by_side(pa.by_class, pb.by_class, "kernel_class")
    total_delta = by_class["delta_ns"].sum()
    by_class["delta_share_pct"] = 100.0 * by_class["delta_ns"] / total_delta if total_delta else 0.0
    by_class = by_class.sort_values("delta_ns", key=abs, ascending=False, kind="stable")
    by_precision = _side_by_side(pa.by_precision, pb.by_precision, ["precision", "kernel_class"])
    by_layer = _layers(pa, pb)
    real = (by_layer["status"] == "matched") & (by_layer["layer"] != OUTSIDE)
    if real.any():
        kernels = _match_slots(pa.slots, pb.slots)
    else:  # no layers in common (e.g. a CUDA graph replay has no per-layer ranges, or blocks
        # were found in one run only): per iteration, and no per-layer change to show
        kernels = _match_slots(pa.flat_slots, pb.flat_slots)
        by_layer = _layers(_one_layer(pa), _one_layer(pb))
    changed = set(by_layer.loc[by_layer["math_precision_changed"], "layer"])
    ma, mb = _math_precisions(pa), _math_precisions(pb)
    if ma and mb and ma != mb:  # kernels outside layers, or runs without layers
        changed |= {OUTSIDE, ITERATION_LAYER}
    new = kernels[kernels["status"] == "new"]
    conv_mask = np.array([is_conversion(str(n), c, lay in changed) for n, c, lay in
                          zip(new["b_name"], new["kernel_class"], new["layer"])], dtype=bool)
    conversion, only_b = _new_kernels(new[conv_mask]), _new_kernels(new[~conv_mask])
    overheads = _overheads(pa.overheads, pb.overheads)
    tensor_core = pd.DataFrame([{"run": "a", **pa.tensor_core}, {"run": "b", **pb.tensor_core}])
    budget_parts = _budget(pa.budget, pb.budget)
    headline = _headline(pa, pb, by_class, conversion["time_ns"].sum(), by_layer, kernels,
                         warnings, more_a or [], more_b or [])
    if not headline["kernel_interval"]["significant"]:  # no shares of a change in the noise
        by_class["delta_share_pct"] = np.nan
    if graph_level_side(pa, pb):  # one side's kernels are hidden in graph executions
        by_class["delta_ns"] = by_class["delta_share_pct"] = np.nan
    return Diff(pa, pb, headline, by_class.reset_index(drop=True), by_precision, by_layer,
                kernels, conversion, only_b, overheads, tensor_core, budget_parts)


def graph_level_side(pa: RunProfile, pb: RunProfile) -> str:
    """'A' or 'B' when that run alone was traced at graph level (its graph replays recorded
    as whole executions, their kernels hidden): kernel classes, precisions and layers of the
    two do not compare; '' otherwise."""
    level = [any(w.get("check") == "graph_level_trace" for w in p.warnings) for p in (pa, pb)]
    return "" if level[0] == level[1] else "A" if level[0] else "B"


def _one_layer(p: RunProfile) -> RunProfile:
    """``p`` with all its layers as one, ``OUTSIDE``: for a diff whose runs share no layer."""
    bl = p.by_layer
    precisions = sorted({x for m in bl["math_precision"] for x in str(m).split(",") if x})
    walls = np.asarray(p.main_kernel_walls, float)  # the kernels' time, iteration by iteration
    row = {"layer": OUTSIDE, "time_ns": float(bl["time_ns"].sum()),
           "count": bl["count"].sum(), "math_precision": ",".join(precisions),
           "se_ns": float(walls.std(ddof=1) / np.sqrt(len(walls))) if len(walls) > 2 else np.nan}
    if "b_layer" in bl:
        row["b_layer"] = OUTSIDE
    return replace(p, by_layer=pd.DataFrame([row]))


def _align_layers(pa: RunProfile, pb: RunProfile) -> RunProfile:
    """``pb`` with its layers renamed to A's where the names differ but the layers are the same
    (TensorRT engines of different precisions: Q/DQ tokens, weight names, Myelin suffixes,
    renumbered ONNX nodes; ``trt_layers.match``); the B name stays in ``by_layer.b_layer``."""
    la = pa.by_layer[~pa.by_layer["layer"].isin(pb.by_layer["layer"]) & (pa.by_layer["layer"] != OUTSIDE)]
    lb = pb.by_layer[~pb.by_layer["layer"].isin(pa.by_layer["layer"]) & (pb.by_layer["layer"] != OUTSIDE)]
    by_layer = pb.by_layer.assign(b_layer=pb.by_layer["layer"])
    if len(la) and len(lb):
        m = trt_layers.match(la.rename(columns={"layer": "name"}).assign(ms=la["time_ns"] / 1e6),
                             lb.rename(columns={"layer": "name"}).assign(ms=lb["time_ns"] / 1e6))
        pairs = m.layers[m.layers["how"].isin(["name", "signature"])]
        mapping = dict(zip(pairs["b_layer"], pairs["a_layer"]))
        if mapping:
            by_layer["layer"] = by_layer["layer"].replace(mapping)
            return replace(pb, by_layer=by_layer,
                           slots=pb.slots.assign(layer=pb.slots["layer"].replace(mapping)))
    return replace(pb, by_layer=by_layer)


def _math_precisions(p: RunProfile) -> set:
    return set(p.by_precision.loc[p.by_precision["kernel_class"].isin(MATH_CLASSES)
                                  & (p.by_precision["time_ns"] > 0), "precision"]) - {"unknown"}


def _new_kernels(new: pd.DataFrame) -> pd.DataFrame:
    """New kernels per (class, name), largest first: kernel_class, b_name, label, time_ns."""
    out = (new.groupby(["kernel_class", "b_name"], sort=False)["b_ns"].sum().rename("time_ns")
           .reset_index().sort_values("time_ns", ascending=False).reset_index(drop=True))
    out.insert(2, "label", [kernel_label(n) for n in out["b_name"]])
    return out


def _budget(a: dict, b: dict) -> pd.DataFrame:
    """Both runs' time budgets side by side, per iteration (parts with time in either)."""
    rows = []
    for part in budget.PARTS:
        an, bn = a.get(f"{part}_ns", 0.0), b.get(f"{part}_ns", 0.0)
        if an or bn:
            rows.append({"part": part, "a_ns": an, "b_ns": bn, "delta_ns": bn - an,
                         "a_pct": a.get(f"{part}_pct", 0.0), "b_pct": b.get(f"{part}_pct", 0.0)})
    return pd.DataFrame(rows, columns=["part", "a_ns", "b_ns", "delta_ns", "a_pct", "b_pct"])


def _overheads(a: dict, b: dict) -> pd.DataFrame:
    nan = float("nan")
    out = pd.DataFrame([
        {"overhead": name, "a_ns": a[t], "b_ns": b[t], "delta_ns": b[t] - a[t],
         "a_count": a[c] if c else nan, "b_count": b[c] if c else nan}
        for name, t, c in OVERHEADS])
    for c in ("a_count", "b_count"):  # whole numbers (none for gpu_idle)
        out[c] = out[c].round().astype("Int64")
    return out


def _side_by_side(a: pd.DataFrame, b: pd.DataFrame, keys) -> pd.DataFrame:
    keys = [keys] if isinstance(keys, str) else keys
    cols = [c for c in ("time_ns", "count") if c in a.columns]
    m = a[keys + cols].merge(b[keys + cols], on=keys, how="outer", suffixes=("_a", "_b")).fillna(0)
    out = m[keys].copy()
    out["a_ns"], out["b_ns"] = m["time_ns_a"], m["time_ns_b"]
    out["delta_ns"] = out["b_ns"] - out["a_ns"]
    if "count" in cols:  # kernels per iteration, as whole numbers
        out[["a_count", "b_count"]] = m[["count_a", "count_b"]].round().astype("int64").to_numpy()
    return out


def _layers(pa: RunProfile, pb: RunProfile) -> pd.DataFrame:
    la = pa.by_layer.set_index("layer")
    lb = pb.by_layer.set_index("layer")
    names = list(dict.fromkeys([*la.index, *lb.index]))
    rows = []
    for n in names:
        ina, inb = n in la.index, n in lb.index
        ga = la.loc[n, "math_precision"] if ina else ""
        gb = lb.loc[n, "math_precision"] if inb else ""
        rows.append({"layer": n, "b_layer": lb.loc[n, "b_layer"] if inb and "b_layer" in lb else n,
                     "a_ns": la.loc[n, "time_ns"] if ina else 0.0,
                     "b_ns": lb.loc[n, "time_ns"] if inb else 0.0,
                     "a_se_ns": la.loc[n, "se_ns"] if ina and "se_ns" in la else np.nan,
                     "b_se_ns": lb.loc[n, "se_ns"] if inb and "se_ns" in lb else np.nan,
                     "a_count": la.loc[n, "count"] if ina else 0.0,
                     "b_count": lb.loc[n, "count"] if inb else 0.0,
                     "a_math_precision": ga, "b_math_precision": gb,
                     "math_precision_changed": bool(ina and inb and ga and gb and ga != gb),
                     "status": "matched" if ina and inb else ("only_a" if ina else "only_b")})
    out = pd.DataFrame(rows)
    out["delta_ns"] = out["b_ns"] - out["a_ns"]
    # the change's 95% noise band from each side's standard error per iteration (a layer on
    # one side only has no noise: it is there or not)
    se = np.sqrt(out["a_se_ns"].fillna(0) ** 2 + out["b_se_ns"].fillna(0) ** 2)
    out["noise_ns"] = np.where(out["status"] == "matched", 1.96 * se, 0.0)
    out.loc[(out["status"] == "matched") & out[["a_se_ns", "b_se_ns"]].isna().any(axis=1),
            "noise_ns"] = np.nan
    out["within_noise"] = out["delta_ns"].abs() <= out["noise_ns"]
    out[["a_count", "b_count"]] = out[["a_count", "b_count"]].round().astype("int64")
    return out.sort_values("delta_ns", key=abs, ascending=False, kind="stable").reset_index(drop=True)


def _match_slots(a: pd.DataFrame, b: pd.DataFrame) -> pd.DataFrame:
    """Line kernels up within each (layer, class): same name first, then the remaining ones in
    launch order (so an FP16 GEMM meets the FP8 GEMM that replaced it); the rest are new or
    vanished."""
    rows = []
    keys = ["layer", "kernel_class"]
    ga = dict(tuple(a.groupby(keys, sort=False)))
    gb = dict(tuple(b.groupby(keys, sort=False)))
    for key in dict.fromkeys([*ga, *gb]):
        sa = ga.get(key, a.iloc[0:0]).sort_values("slot")
        sb = gb.get(key, b.iloc[0:0]).sort_values("slot")
        left_a = list(sa.itertuples(index=False))
        left_b = list(sb.itertuples(index=False))
        pairs = []
        for kb in list(left_b):  # same name
            hit = next((ka for ka in left_a if ka.name == kb.name), None)
            if hit is not None:
                pairs.append((hit, kb))
                left_a.remove(hit)
                left_b.remove(kb)
        pairs += list(zip(left_a, left_b))  # then by position
        n = min(len(left_a), len(left_b))
        pairs += [(ka, None) for ka in left_a[n:]] + [(None, kb) for kb in left_b[n:]]
        for ka, kb in pairs:
            rows.append({
                "layer": key[0], "kernel_class": key[1],
                "slot": (ka or kb).slot,
                "a_name": ka.name if ka else None, "b_name": kb.name if kb else None,
                "a_precision": ka.precision if ka else None, "b_precision": kb.precision if kb else None,
                "a_ns": ka.time_ns if ka else 0.0, "b_ns": kb.time_ns if kb else 0.0,
                "status": "matched" if ka and kb else ("vanished" if ka else "new")})
    out = pd.DataFrame(rows)
    out["delta_ns"] = out["b_ns"] - out["a_ns"]
    return out.sort_values("delta_ns", key=abs, ascending=False, kind="stable").reset_index(drop=True)


#: the wall-clock part that a launch-bound run grows (its kernel counts are said with it)
LAUNCH_IDLE = "GPU idle waiting for launches"

#: the time budget's parts as the verdict names them (copies are one part)
_WALL_PARTS = (("GPU work", ("kernels",)), ("exposed communication (NCCL)", ("communication",)),
               ("copies", budget.COPY_PARTS), ("memsets", ("memset",)),
               ("waits on host syncs", ("idle_sync",)),
               (LAUNCH_IDLE, ("idle_launch",)),
               ("host work between launches", ("idle_host",)),
               ("other GPU idle", ("idle_unattributed",)))


def explaining(deltas: pd.Series, target: float, share: float = 0.8, most: int = 3) -> list | None:
    """The index labels of at most ``most`` rows of ``deltas`` that together make up
    >= ``share`` of ``target`` (rows moving the same way as ``target``, largest first);
    None when more rows would be needed."""
    if not target:
        return None
    same = deltas[np.sign(deltas) == np.sign(target)].abs().sort_values(ascending=False)
    got = 0.0
    for i, (key, v) in enumerate(same.items()):
        got += v
        if got >= share * abs(target):
            return list(same.index[:i + 1]) if i < most else None
    return None


def slot_labels(kernels: pd.DataFrame, width: int = 72) -> list[str]:
    """``units.kernel_label`` of each row of a diff's ``kernels``: B's kernel, else A's."""
    return [kernel_label(b if isinstance(b, str) else a, width)
            for a, b in zip(kernels["a_name"], kernels["b_name"])]


def pair_labels(kernels: pd.DataFrame, width: int = 72) -> list[str]:
    """Each row's kernel as the headline names it: both names where a matched slot changed
    kernel ("A's -> B's": A's time is never shown under B's name), else the one it has."""
    out = []
    for a, b in zip(kernels["a_name"], kernels["b_name"]):
        a, b = (x if isinstance(x, str) else None for x in (a, b))
        if a and b and a != b:
            out.append(f"{kernel_label(a, width)} -> {kernel_label(b, width)}")
        else:
            out.append(kernel_label(b or a or "", width))
    return out


def _kernel_reason(kernels: pd.DataFrame, by_layer: pd.DataFrame, by_class: pd.DataFrame,
                   target: float) -> tuple[str, list[str]]:
    """Which kernels, layers or classes make up >= 80% of a kernel-time change ``target``
    (the finest grain that needs at most three rows); when gains and losses cancel, the
    largest of each. In words, and the rows named."""
    where = {OUTSIDE: " (outside layers)", ITERATION_LAYER: ""}
    k = kernels.assign(key=[f"{label}{where.get(lay, f' ({lay})')}" for label, lay in
                            zip(pair_labels(kernels, 56), kernels["layer"])])
    grains = [(k.groupby("key", sort=False)[["a_ns", "b_ns", "delta_ns"]].sum(), "kernel"),
              (by_layer.set_index("layer")[["a_ns", "b_ns", "delta_ns"]], "layer"),
              (by_class.set_index("kernel_class")[["a_ns", "b_ns", "delta_ns"]], "class")]
    gross = by_class["delta_ns"].abs().sum()
    ab = lambda t, r: f"{r} {_ms(t.loc[r, 'a_ns'])} -> {_ms(t.loc[r, 'b_ns'])}"  # noqa: E731
    for table, grain in grains:
        if grain == "layer" and (len(table) <= 1 or set(table.index) <= {OUTSIDE}):
            continue
        if abs(target) >= 0.5 * gross:
            rows = explaining(table["delta_ns"], target)
            if rows:
                return ", ".join(ab(table, r) for r in rows), [str(r) for r in rows]
    if abs(target) >= 0.5 * gross:  # one way, but spread over many rows: the largest classes
        table = grains[2][0]
        top = table["delta_ns"][np.sign(table["delta_ns"]) == np.sign(target)].abs().nlargest(3)
        return (f"spread over many kernels ({100 * top.sum() / abs(target):.0f}% in "
                + ", ".join(ab(table, r) for r in top.index) + ")"), [str(r) for r in top.index]
    table = grains[0][0]
    up, down = table["delta_ns"].idxmax(), table["delta_ns"].idxmin()
    return (f"gains and losses cancel: largest gain {ab(table, down)}, largest loss "
            f"{ab(table, up)}"), [str(down), str(up)]


def _overlap_note(pa: RunProfile, pb: RunProfile) -> str:
    """Said when a run's kernel times add up to more than its GPU busy time (kernels on
    several streams at once): per-kernel figures then overlap, the budget's do not."""
    over = [r for r, p in (("A", pa), ("B", pb)) if p.budget.get("kernels_ns")
            and p.kernel_ns > 1.05 * p.budget["kernels_ns"]]
    if not over:
        return ""
    return (f" (kernel times overlap across streams in {' and '.join(over)}: they add up to "
            "more than the GPU work above)")


def _several(p: RunProfile) -> list[dict]:
    """The kinds of iteration of a run other than its main one (outliers and warm-up apart)."""
    return [k for k in p.kinds if k["kind"] not in (kinds.MAIN, kinds.OUTLIER, kinds.WARM_UP)]


def kinds_note(pa: RunProfile, pb: RunProfile, mains: bool = True) -> str:
    """Said when a run's loop holds several kinds of iteration: the headline compares the
    main kinds (the same kind in both runs), and each run's other kinds with their share."""
    if not _several(pa) and not _several(pb):
        return ""
    def said(r: str, p: RunProfile) -> str:
        other = _several(p)
        if not other:
            return f"{r} has one kind"
        return f"{r} also has " + ", ".join(
            f"{k['head']} ({k['iterations']}, median {_ms(k['med_ns'])}, "
            f"{k['share_pct']:.0f}% of its loop's time)" for k in other)
    which = (f"the main kinds' medians (A {_ms(pa.main_median_ns)}, B {_ms(pb.main_median_ns)})" if mains
             else "the loops' medians (a main kind holds less than 60% of its loop)")
    return (f"the runs' kinds of iteration differ: {said('A', pa)}; {said('B', pb)}; the times "
            f"above are {which}; the loops' means: A {_ms(pa.mean_ns)}, B {_ms(pb.mean_ns)}")


def _same_kind(p: RunProfile, both: bool) -> tuple[float, list, bool]:
    """The iteration a headline compares, the iterations behind it, and whether they are the
    main kind's: the main kind's
    median when a run has several kinds (``both``: either run has) and its main kind holds
    60% of its loop or more, else the loop's median (two kinds of about as many iterations:
    which one is "main" is a coin toss, and comparing them across runs could compare
    different kinds)."""
    main = next((k for k in p.kinds if k["kind"] == kinds.MAIN), None)
    held = main["iterations"] / max(p.steady_iterations, 1) if main else 1.0
    if both and held >= 0.6 and p.main_median_ns:
        return p.main_median_ns, p.main_walls or p.walls, True
    return p.median_ns, p.walls, False


def _said(c: benchmath.Comparison) -> dict:
    """A comparison as the headline keeps it: its figures and how they were found, in words."""
    d = {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(c).items()
         if v is not None and "n_eff" not in k and (c.a_runs or k != "runs")}
    if c.a_runs:
        return {**d, "method": f"{c.a_runs} run{'s' if c.a_runs > 1 else ''} of A, {c.b_runs} of "
                "B: Welch t on the runs' log medians (the spread between runs), never narrower "
                "than the pooled iterations' interval"}
    return {**d, "method": "too few iterations for an interval" if np.isnan(c.a_n_eff) else
            f"log medians, each with the spread of its iterations (MAD) over its effective "
            f"iterations (A's {c.a_n} worth {c.a_n_eff:.0f} independent ones, B's {c.b_n} "
            f"{c.b_n_eff:.0f}, from their autocorrelation), Welch t interval and test on the "
            "log ratio", "runs": 1}


def _times(a_ns: float, b_ns: float, interval: dict, real: bool, same: str) -> Said:
    """The headline's first words: B's iteration against A's, with the interval; ``same``:
    the work both run, in words, where it is the same."""
    ci = (f"; {100 * interval['level']:.0f}% CI {fmt_span(interval['low'], interval['high'])}x"
          " of A's time" if np.isfinite(interval["low"]) else "")
    speedup, vs = a_ns / b_ns if b_ns else float("nan"), f"{_ms(b_ns)} vs {_ms(a_ns)}{ci}"
    times = {"a_ns": a_ns, "b_ns": b_ns, "speedup": speedup, "low": interval["low"],
             "high": interval["high"], "level": interval["level"]}
    if same:
        return Said(f"The same work in A and B ({same} per iteration): " + (
            f"B takes {fmt_ratio(b_ns / a_ns)}x A's time per iteration ({vs}), the machine's "
            "pace, not a change" if real else f"no measurable difference per iteration ({vs})"),
            "same_work_pace" if real else "same_work_no_difference", values=times)
    if not real:
        return Said(f"No measurable difference per iteration ({vs})", "no_difference", values=times)
    if abs(speedup - 1) < 0.02:
        return Said(f"B runs an iteration in the same time as A ({vs})", "same_time", values=times)
    word = f"{speedup:.2f}x faster" if speedup > 1 else f"{1 / speedup:.2f}x slower"
    return Said(f"B is {word} per iteration ({vs})", "faster" if speedup > 1 else "slower",
                values=times)


def _moved(pa, pb, parts: list, delta: float, base: float, real: bool, outside: str,
           more_kernels: bool) -> list | None:
    """The parts of the time budget whose change explains the wall-clock change (90% of the
    change of the steady mean, at most four; the largest gain and loss where they cancel),
    each said in ``parts``; a launch-idle change is a cause only in a run the budget calls
    launch-bound or where the kernel count moved (else it is queue back-pressure)."""
    wall = {name: tuple(sum(p.budget.get(f"{x}_ns", 0.0) for x in parts) for p in (pa, pb))
            for name, parts in _WALL_PARTS}
    bound = {r for r, p in (("A", pa), ("B", pb)) if p.budget.get("verdict_code") == "launch"}
    if LAUNCH_IDLE in wall and not bound and not more_kernels:
        wall.pop(LAUNCH_IDLE)
    deltas = pd.Series({n: b - a for n, (a, b) in wall.items()})
    # the parts add up to the change of the steady mean: they explain that one, to 90%
    mean_delta = (pb.mean_ns - pa.mean_ns) if pa.mean_ns and pb.mean_ns else delta
    if outside:  # the idle is the GPU's time elsewhere, not launches or the host
        for n in (LAUNCH_IDLE, "other GPU idle"):
            deltas = deltas.drop(n, errors="ignore")
    named = explaining(deltas, mean_delta, share=0.9, most=4) if abs(delta) >= 0.02 * base \
        and real else None
    if real and len(deltas) and (named is None or deltas.abs().sum() > 2 * abs(mean_delta)) \
            and deltas.abs().max() >= 0.02 * base:
        # gains and losses cancel (or the change is small): the largest of each way
        named = sorted({deltas.idxmin(), deltas.idxmax()}, key=lambda n: -deltas[n] * np.sign(delta or 1))
    for n in named or []:
        a, b = wall[n]
        if abs(b - a) < 0.02 * base:
            continue
        text = f"{n} {'rose' if b > a else 'fell'} {_ms(a)} -> {_ms(b)}"
        if n == LAUNCH_IDLE:
            r = "B" if b > a else "A"
            p = pb if r == "B" else pa
            if r in bound:
                text += (f" ({r} is launch-bound: {p.kernels:.0f} kernels per iteration, "
                         f"{_ms(p.overheads.get('api_ns', 0.0))} in CUDA API calls)")
            else:
                text += (f" (B launches {pb.kernels:.0f} kernels per iteration, A "
                         f"{pa.kernels:.0f})")
        parts.append(Said(text, "part_moved", about=n, values={"a_ns": a, "b_ns": b}))
    return named


def _headline(pa, pb, by_class, conversion_ns, by_layer, kernels, warnings, more_a=(),
              more_b=()) -> dict:
    several = bool(_several(pa) or _several(pb))
    (a_ns, a_walls, a_main), (b_ns, b_walls, b_main) = _same_kind(pa, several), \
        _same_kind(pb, several)
    speedup = a_ns / b_ns if b_ns else float("nan")
    delta = b_ns - a_ns
    cls = by_class.set_index("kernel_class")
    gemm_a, gemm_b = cls["a_ns"].get("gemm", 0.0), cls["b_ns"].get("gemm", 0.0)
    gemm_change = 100.0 * (gemm_b - gemm_a) / gemm_a if gemm_a else float("nan")
    base = max(a_ns, 1.0)
    parts = []
    walls = lambda p, main: (p.main_walls or p.walls) if main else p.walls  # noqa: E731
    interval = _said(benchmath.runs_comparison([a_walls] + [walls(p, a_main) for p in more_a],
                                            [b_walls] + [walls(p, b_main) for p in more_b]))
    runs = interval["runs"] > 1 or len(more_a) or len(more_b)
    if runs and interval.get("a_run_medians") and interval.get("b_run_medians"):
        # several runs a side: the headline's times are the runs' (geometric mean of their
        # medians, as the interval's ratio), not the first run's
        a_ns, b_ns = (float(np.exp(np.mean(np.log(interval[f"{s}_run_medians"]))))
                      for s in ("a", "b"))
        speedup, delta = a_ns / b_ns, b_ns - a_ns
    real = interval["significant"] or not np.isfinite(interval["low"])
    moved = work.reshaped(pa.shapes, pb.shapes) if pa.work and pb.work else []
    same = bool(pa.work) and pa.work == pb.work and not moved
    parts.append(_times(a_ns, b_ns, interval, real, work.summary(pa.work) if same else ""))
    touched = _touched(kernels, {c["token"] for c in moved if c["kind"] == "kernel"})
    gpu = _said(benchmath.comparison(pa.main_kernel_walls, pb.main_kernel_walls))
    if not np.isfinite(gpu["low"]):  # too few iterations for an interval: 2% is a change
        gpu["significant"] = abs(pb.kernel_ns - pa.kernel_ns) >= 0.02 * max(pa.kernel_ns, 1.0)
    hidden = graph_level_side(pa, pb)
    change = "; ".join(w for w in (
        work.difference(pa.work, pb.work, a_shapes=pa.shapes, b_shapes=pb.shapes)
        if pa.work != pb.work else "", work.reshape_words(moved)) if w) \
        if not same and pa.work and pb.work else ""
    if hidden:  # one side's kernels are hidden in whole-graph executions: no kernel compare
        change = ""
        parts.append(Said(
            f"{hidden} replays a CUDA graph whose kernels were not recorded one by one (traced "
            f"at graph level), so its kernels cannot be compared with "
            f"{'A' if hidden == 'B' else 'B'}'s; what compares: the iteration time, the launches "
            f"({pa.kernels:.0f} -> {pb.kernels:.0f} per iteration: kernels or whole graphs) and "
            f"the host's time; to compare kernels, profile {hidden} with "
            "--cuda-graph-trace=node", "graph_level", about=hidden))
    if change:
        text = "the work changed: " + change
        if touched["kernels"]:
            ta, tb = touched["a_ns"], touched["b_ns"]
            text += (f"; the kernels it touched take {_ms(ta)} -> {_ms(tb)} per iteration"
                     + (" (no measurable change of GPU time" +
                        (": the difference per iteration is the machine's pace)" if real
                         else ")") if not gpu["significant"] else ""))
        parts.append(Said(text, "work_changed", values={
            "touched_kernels": touched["kernels"], "touched_a_ns": touched["a_ns"],
            "touched_b_ns": touched["b_ns"]}))
    outside = _outside_work(pa, pb, delta, base) if real else ""
    if outside:
        parts.append(Said(outside, "busy_outside_trace"))
    gpu_pace = touched["same_ratio"]
    if real and np.isfinite(gpu_pace) and abs(gpu_pace - 1) >= 0.03 and touched["same_ns"] \
            > 0.1 * base and gpu["significant"]:
        parts.append(Said(f"identical kernels take {fmt_ratio(gpu_pace)}x as long in B "
                          f"({_ms(touched['same_a_ns'])} -> {_ms(touched['same_b_ns'])} per "
                          "iteration): the GPU's pace (clocks, power, other processes)",
                          "gpu_pace", values={"ratio": gpu_pace, "a_ns": touched["same_a_ns"],
                                              "b_ns": touched["same_b_ns"]}))
    skewed = [p for p in (pa, pb) if p.mean_ns and p.median_ns
              and abs(p.mean_ns - p.median_ns) > kinds.MEAN_MEDIAN_PCT / 100 * p.median_ns]
    if several:
        parts[0] = parts[0].more(" (" + kinds_note(pa, pb, a_main and b_main) + ")")
    elif skewed:  # the headline's times are medians; the parts below add up to the means
        parts[0] = parts[0].more(f" (medians of the loops' iterations after warm-up; their "
                                 f"means, to which the parts add up: A {_ms(pa.mean_ns)}, B "
                                 f"{_ms(pb.mean_ns)})")
    more_kernels = abs(pb.kernels - pa.kernels) > 0.1 * max(pa.kernels, 1)
    named = _moved(pa, pb, parts, delta, base, real, outside, more_kernels)
    kernel_delta = pb.kernel_ns - pa.kernel_ns
    if not hidden and (abs(kernel_delta) >= 0.05 * base or (named and "GPU work" in named)):
        reason, rows = _kernel_reason(kernels, by_layer, by_class, kernel_delta)
        parts.append(Said("kernel time: " + reason + _overlap_note(pa, pb), "kernel_time",
                          values={"delta_ns": kernel_delta, "rows": rows}))
        if gemm_a and abs(gemm_change) >= 5 and not any("gemm" in r for r in rows):
            parts.append(Said(f"its GEMMs take {abs(gemm_change):.0f}% "  # what a precision is for
                              f"{'less' if gemm_change < 0 else 'more'} time ({_ms(gemm_a)} -> "
                              f"{_ms(gemm_b)})", "gemm_time", values={
                                  "change_pct": gemm_change, "a_ns": gemm_a, "b_ns": gemm_b}))
    if conversion_ns > 0.05 * base and not hidden:
        tail = ""
        if delta > 0:
            tail = (", more than the whole regression" if conversion_ns > delta
                    else f", {100 * conversion_ns / delta:.0f}% of the regression")
        parts.append(Said(f"precision-conversion kernels only in B (casts, scaling, amax) add "
                          f"{_ms(conversion_ns)}{tail}", "conversion",
                          values={"conversion_ns": conversion_ns}))
    # the kernel counts said already (the same work, the work's change, a launch-idle part)
    said = any(t.code in ("work_changed", "same_work_pace", "same_work_no_difference")
               or (t.code == "part_moved" and t.about == LAUNCH_IDLE) for t in parts)
    if more_kernels and not said and len(parts) > 1:  # kernels added or removed: how many
        parts.append(Said(f"B launches {pb.kernels:.0f} kernels per iteration, A "
                          f"{pa.kernels:.0f}", "kernel_count",
                          values={"a": pa.kernels, "b": pb.kernels}))
    if same and real and not named and not outside:
        parts.append(Said(_pace_where(pa, pb), "pace_where"))
    if len(parts) == 1 and real:
        parts.append(Said("no part of the iteration changes by more than 2% of it", "no_part"))
    if runs:
        parts.append(Said(f"{1 + len(more_a)} run{'s' if more_a else ''} of A and "
                          f"{1 + len(more_b)} of B: the interval holds the spread between runs "
                          f"(run medians {_spread(interval.get('a_run_medians'))} in A, "
                          f"{_spread(interval.get('b_run_medians'))} in B)", "runs"))
    elif same or not real or not interval["ratio"] > 0 \
            or abs(np.log(interval["ratio"])) < np.log(1.4):
        parts.append(Said("one run per side cannot show the run-to-run variance (the same code "
                          "differs by 5-37% between runs on a shared machine): capture each "
                          "side several times (nsightlab capture --repeat N), alternating A and "
                          "B, with the GPU otherwise idle", "one_run"))
    parts += [Said(t, "machine") for t in _machine_words(pa, pb)]
    verdict = parts[0] + ("; " + "; ".join(parts[1:]) if len(parts) > 1 else "") + "."
    return {
        "a": pa.label, "b": pb.label, "a_iterations": pa.iterations, "b_iterations": pb.iterations,
        "a_iteration_source": pa.iteration_source, "b_iteration_source": pb.iteration_source,
        "a_median_ns": pa.median_ns, "b_median_ns": pb.median_ns,
        "a_mean_ns": pa.mean_ns, "b_mean_ns": pb.mean_ns,
        "a_steady_iterations": pa.steady_iterations, "b_steady_iterations": pb.steady_iterations,
        "a_main_ns": pa.main_median_ns, "b_main_ns": pb.main_median_ns,
        "a_kinds": len(pa.kinds) and 1 + len(_several(pa)), "b_kinds": len(pb.kinds) and 1 + len(_several(pb)),
        "speedup": speedup, "a_kernel_ns": pa.kernel_ns, "b_kernel_ns": pb.kernel_ns,
        "a_busy_pct": pa.busy_pct, "b_busy_pct": pb.busy_pct,
        "a_kernels": pa.kernels, "b_kernels": pb.kernels,
        "gemm_change_pct": gemm_change, "conversion_overhead_ns": float(conversion_ns),
        "layers_matched": int((by_layer["status"] == "matched").sum()
                              - (OUTSIDE in set(by_layer["layer"]))),
        "verdict": verdict, "parts": [p.record() for p in parts],
        "a_verdict": _run_verdict(pa), "b_verdict": _run_verdict(pb),
        "a_outside_kernel_ns": pa.outside_kernel_ns, "b_outside_kernel_ns": pb.outside_kernel_ns,
        "a_warnings": [w["message"] for w in pa.warnings],
        "b_warnings": [w["message"] for w in pb.warnings],
        "workload_warnings": warnings,
        "a_runtime": pa.runtime, "b_runtime": pb.runtime,
        "runtime_change": _runtime_change(pa, pb),
        "runtime_causes": runtime_causes(pa, pb),
        "interval": interval, "kernel_interval": gpu, "same_work": same,
        "work_change": change, "reshaped": moved,
        "touched_a_ns": touched["a_ns"], "touched_b_ns": touched["b_ns"],
        "identical_kernel_ratio": gpu_pace,
        "a_queued_ns": pa.pace.get("queued_ns", float("nan")),
        "b_queued_ns": pb.pace.get("queued_ns", float("nan")),
        "run_to_run": "in the interval" if runs else "unknown: one run per side",
        "a_runs": [pa.label, *(p.label for p in more_a)],
        "b_runs": [pb.label, *(p.label for p in more_b)],
        "a_machine": pa.machine or None, "b_machine": pb.machine or None,
    }


_PACE_WORDS = (("kernel_ns", "kernel time (the GPU's pace)"),
               ("host_ns", "host work and launch gaps (the host's pace)"),
               ("idle_sync_ns", "GPU idle after host syncs"),
               ("queued_ns", "kernels waiting to start (work outside the trace)"))


def _pace_where(pa: RunProfile, pb: RunProfile) -> str:
    """Where the pace of the same work moved, from the main kinds' medians per iteration
    (``RunProfile.pace``): the part that moved most first."""
    moved = sorted(((pb.pace.get(k, 0.0) - pa.pace.get(k, 0.0), k, w) for k, w in _PACE_WORDS),
                   key=lambda t: -abs(t[0]))
    return "the main kinds' medians per iteration: " + ", ".join(
        f"{w} {_ms(pa.pace.get(k, 0.0))} -> {_ms(pb.pace.get(k, 0.0))}"
        for _, k, w in moved[:2])


def _spread(medians: list | None) -> str:
    if not medians:
        return "?"
    lo, hi = min(medians), max(medians)
    return _ms(lo) if lo == hi else f"{_ms(lo)}-{_ms(hi)}"


#: clocks this far apart (%) between the runs' machines are said
CLOCK_PCT = 5.0


def _machine_words(pa: RunProfile, pb: RunProfile) -> list[str]:
    """The machines' state where the captures recorded it (``read.machine``): SM clocks
    apart, other processes on the GPU, a loaded host."""
    ma, mb = pa.machine or {}, pb.machine or {}
    out = []
    a, b = ma.get("trace_sm_mhz"), mb.get("trace_sm_mhz")
    where = "inside its iterations (GPU metrics)"
    if not (a and b):  # else the capture's record around each run
        a, b, where = ma.get("sm_mhz"), mb.get("sm_mhz"), "around its run"
    if a and b and abs(b / a - 1) * 100 >= CLOCK_PCT:
        out.append(f"B's SM clock averaged {b:,.0f} MHz {where}, A's {a:,.0f} MHz")
    for r, m in (("A", ma), ("B", mb)):
        out += [f"{r}: {w}" for w in m.get("words", [])]
    return out


def _touched(kernels: pd.DataFrame, reshaped: set = frozenset()) -> dict:
    """The kernels the change of work touched (slots whose kernel was replaced by another
    name, added or removed, or whose kernel runs on other shapes: ``reshaped`` names) and
    the identical ones (the same name on the same shapes in the same slot): their time per
    iteration in A and B, and the identical ones' ratio (B / A): their common factor is the
    GPU's pace."""
    if not len(kernels):
        return {"kernels": 0, "a_ns": 0.0, "b_ns": 0.0, "same_ns": 0.0, "same_a_ns": 0.0,
                "same_b_ns": 0.0, "same_ratio": float("nan")}
    # NCCL's kernels spin until the last rank arrives: their time is waiting, neither
    # touched work nor the GPU's pace
    comm = kernels["a_name"].astype(str).str.startswith(COMM_PREFIX) \
        | kernels["b_name"].astype(str).str.startswith(COMM_PREFIX)
    kernels = kernels[~comm]
    same = (kernels["status"] == "matched") & (kernels["a_name"] == kernels["b_name"]) \
        & ~kernels["a_name"].isin(list(reshaped))
    t, k = kernels[~same], kernels[same]
    sa, sb = float(k["a_ns"].sum()), float(k["b_ns"].sum())
    return {"kernels": int(len(t)), "a_ns": float(t["a_ns"].sum()), "b_ns": float(t["b_ns"].sum()),
            "same_ns": max(sa, sb), "same_a_ns": sa, "same_b_ns": sb,
            "same_ratio": sb / sa if sa else float("nan")}


#: kernels waiting to start with the GPU idle in the trace: said when it grows by this share
#: of A's iteration and holds this share of the change
QUEUED_PCT, QUEUED_SHARE = 5.0, 0.3


def _outside_work(pa: RunProfile, pb: RunProfile, delta: float, base: float) -> str:
    """Words for a run whose kernels waited to start with the GPU idle in the trace, more than
    the other's (``RunProfile.pace`` queued_ns): the GPU was busy with work the trace does not
    hold (another process); "" otherwise."""
    if pa.pace.get("others_traced") or pb.pace.get("others_traced"):
        return ""  # their kernels waited for other processes' in the trace: not outside it
    qa, qb = pa.pace.get("queued_ns", 0.0), pb.pace.get("queued_ns", 0.0)
    d = qb - qa
    if abs(d) < QUEUED_PCT / 100 * base or abs(d) < QUEUED_SHARE * abs(delta):
        return ""
    r, more, less = ("B", qb, qa) if d > 0 else ("A", qa, qb)
    return (f"{r}'s kernels waited {_ms(more)} per iteration to start after their launches "
            f"with no traced GPU work running (the other run: {_ms(less)}): the GPU was busy "
            "with work outside the trace (another process on the same GPU), not idle")


#: the settings of the ORT runner a diff names when they differ
SETTINGS = {"io_binding": "io_binding", "cuda_graph": "enable_cuda_graph",
            "profiler_on": "ONNX Runtime's profiler (it adds host time to every node)"}
MATH = ("gemm", "conv", "attention")
#: copies shorter than this per iteration are not named (a flag read back, a shape value)
COPY_NS = 5_000
#: a precision that takes this share of the math names it
PRECISION_SHARE = 0.2


def runtime_causes(pa: RunProfile, pb: RunProfile) -> list[str]:
    """What changed at the runtime's level, per iteration, when the runtimes or the ORT
    runner's settings differ: launches, CUDA API (host) time, host work with the GPU idle,
    copies, and the math's precision."""
    sa, sb = pa.settings, pb.settings
    # a setting both runs record, that differs; the profiler also against a run of another
    # runtime (whose host time has no profiler in it)
    changed = [f"{w}: {'on' if sb.get(k) else 'off'} in B, {'on' if sa.get(k) else 'off'} in A"
               for k, w in SETTINGS.items()
               if (k in sa and k in sb or k == "profiler_on") and bool(sa.get(k)) != bool(sb.get(k))]
    if not (_runtime_change(pa, pb) or changed):
        return []
    out = list(changed)
    oa, ob = pa.overheads, pb.overheads
    out.append(f"launches per iteration {oa.get('launch_calls', pa.kernels):.0f} -> "
               f"{ob.get('launch_calls', pb.kernels):.0f}, CUDA API time "
               f"{_ms(oa.get('api_ns', 0.0))} -> {_ms(ob.get('api_ns', 0.0))}, GPU idle while "
               f"the host works {_ms(pa.budget.get('idle_host_ns', 0.0))} -> "
               f"{_ms(pb.budget.get('idle_host_ns', 0.0))}")
    ca, cb = _copies(pa.budget), _copies(pb.budget)
    if ca or cb:
        out.append(f"copies per iteration: {ca or 'none'} -> {cb or 'none'}")
    ma, mb = _math_mix(pa), _math_mix(pb)
    if len(ma) and len(mb) and set(ma.index) != set(mb.index):
        said = [", ".join(f"{str(k).upper()} {_ms(v)}" for k, v in m.items()) for m in (ma, mb)]
        out.append(f"math (GEMM/conv/attention): {said[0]} -> {said[1]}")
    return out


def _copies(b: dict) -> str:
    """The iteration's copies by direction and memory, largest first ('' when none)."""
    parts = {"host-to-device from pageable": b.get("h2d_pageable_ns", 0.0),
             "host-to-device from pinned": b.get("h2d_pinned_ns", 0.0),
             "device-to-host to pageable": b.get("d2h_pageable_ns", 0.0),
             "device-to-host to pinned": b.get("d2h_pinned_ns", 0.0)}
    return ", ".join(f"{k} {_ms(v)}" for k, v in sorted(parts.items(), key=lambda kv: -kv[1])
                     if v >= COPY_NS)


def _math_mix(p: RunProfile) -> pd.Series:
    """The iteration's math time (GEMM/conv/attention) per precision that takes
    ``PRECISION_SHARE`` of it or more, largest first."""
    bp = p.by_precision
    if not len(bp):
        return pd.Series(dtype=float)
    m = bp[bp["kernel_class"].isin(MATH)].groupby("precision")["time_ns"].sum()
    return m[m >= PRECISION_SHARE * max(m.sum(), 1)].sort_values(ascending=False)


def _runtime_change(pa: RunProfile, pb: RunProfile) -> str:
    """"A -> B" when the two runs ran on different known runtimes (the comparison users make
    between deployments), else empty."""
    a, b = pa.runtime, pb.runtime
    return f"{a} -> {b}" if a != b and "unknown" not in (a, b) else ""


def workload_warnings(pa: RunProfile, pb: RunProfile) -> list[str]:
    """Signs that A and B are not the same workload, real differences first: other GPUs,
    different layers, iteration counts, whole-run pseudo-iterations of different lengths,
    different math kernels per iteration. A different kernel-class mix is not one: moving time
    between classes is what a precision change does."""
    out = []
    if pa.gpus and pb.gpus and sorted(pa.gpus) != sorted(pb.gpus):
        out.append(f"they ran on different GPUs (A: {', '.join(pa.gpus)}; B: "
                   f"{', '.join(pb.gpus)}): times compare the GPUs as well as the runs")
    for key, what in (("driver", "NVIDIA drivers"), ("cuda", "CUDA versions")):
        va, vb = pa.drivers.get(key), pb.drivers.get(key)
        if va and vb and va != vb:
            out.append(f"they ran on different {what} (A {va}, B {vb}): kernels and their "
                       "selection may differ for that reason alone")
    if pa.batch and pb.batch and pa.batch != pb.batch:
        out.append(f"their capture manifests give different batches (A {pa.batch}, B "
                   f"{pb.batch}): times are per iteration, not per item")
    la = set(pa.by_layer["layer"]) - {OUTSIDE, ITERATION_LAYER}
    lb = set(pb.by_layer["layer"]) - {OUTSIDE, ITERATION_LAYER}
    if la and lb and len(la & lb) < 0.5 * min(len(la), len(lb)) and not _runtime_change(pa, pb):
        out.append(f"the runs have different NVTX layers ({len(la & lb)} names in common of "
                   f"{len(la)} and {len(lb)}): are they the same model?")
    whole = [p for p in (pa, pb) if p.iteration_how not in budget.ITERATED]
    if whole:
        ratio = max(pa.median_ns, pb.median_ns) / max(min(pa.median_ns, pb.median_ns), 1)
        out.append(("neither run has" if len(whole) == 2 else f"{'A' if whole[0] is pa else 'B'} has no")
                   + " NVTX iteration ranges: whole runs are compared"
                   + (f", and they differ {ratio:.1f}x in length" if ratio > 1.5 else ""))
    elif pa.iterations != pb.iterations:
        out.append(f"A has {pa.iterations} iterations, B {pb.iterations}: times are per iteration")
    math = _math_counts(pa).to_frame("a").join(_math_counts(pb).to_frame("b"), how="outer")
    math = math.fillna(0)
    differs = math[(math.max(axis=1) > 1) & (math.max(axis=1) > 1.25 * math.min(axis=1))]
    if len(differs) and not _runtime_change(pa, pb) and not graph_level_side(pa, pb):
        # two runtimes launch the same math
        # differently (fusion, library choice): that is the comparison, not a sign of two
        # models; a graph-level trace hides its kernels in whole-graph executions
        counts = ", ".join(f"{c}: A {r.a:.0f}, B {r.b:.0f} per iteration"
                           for c, r in differs.iterrows())
        if any(c["kind"] == "kernel" for c in work.reshaped(pa.shapes, pb.shapes)):
            out.append(f"their math kernels differ ({counts}), and kernels of both run on "
                       "other grids: the shapes changed (a batch or an input size), and "
                       "libraries pick their kernels by shape")
        else:
            out.append(f"their math kernels differ ({counts}): are they the same model? (a "
                       "precision change replaces math kernels, it does not add or remove them)")
    return out


def _math_counts(p: RunProfile) -> pd.Series:
    """Math kernels (GEMM, conv, attention) per steady iteration, by class: what a precision
    change keeps (it adds conversion kernels and moves time between classes instead)."""
    t = p.by_class.set_index("kernel_class")["count"]
    return t[t.index.isin(MATH_CLASSES)].astype(float)


def _run_verdict(p: RunProfile) -> str:
    """A run's budget verdict, unless its trace is partial."""
    if any(w["severity"] == "partial" for w in p.warnings):
        return "withheld: partial trace"
    return str(p.budget.get("verdict", ""))
