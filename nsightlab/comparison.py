"""``nsightlab.diff(a, b)``: where two runs differ, per iteration, and why.

Runs are lined up per iteration, kernel class, precision, layer and kernel slot (see
``nsightlab.profile``). Kernels that exist only in B and sit in a layer whose math (GEMM, conv,
attention) changed precision are precision-conversion work (amax/abs reductions,
divide-by-scale, casts to and from FP8/FP4, Q/DQ, reformats): names alone cannot tell a
divide-by-scale from any other divide, the context can. Every time is in ns per iteration;
sections are DataFrames (``headline`` a dict).
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import pandas as pd

from . import budget
from .profile import OUTSIDE, RunProfile, profile
from .report import Report, as_report
from .result import Result, json_records, json_value
from .units import fmt_ms as _ms

CONVERSION_CLASSES = {"quantize", "elementwise", "reduce", "reformat/copy"}


#: overhead rows of the diff: (name, time key, count key) in ``RunProfile.overheads``
OVERHEADS = (("launch_overhead", "launch_overhead_ns", "launch_calls"),
             ("api", "api_ns", "api_calls"), ("sync_wait", "sync_wait_ns", "syncs"),
             ("gpu_idle", "gpu_idle_ns", None), ("memcpy", "memcpy_ns", "memcpys"))


@dataclass
class Diff(Result):
    """Run B against run A, per iteration. Sections (DataFrames, times in ns per iteration):

    - ``headline`` (a dict): labels, iterations and their source, ``a/b_iteration_ns``,
      ``speedup``, kernel time, busy %, kernels per iteration, ``gemm_change_pct``,
      ``conversion_overhead_ns``, ``layers_matched`` and the ``verdict`` sentence;
    - ``by_class``: kernel_class, a_ns, b_ns, delta_ns, a_count, b_count, delta_share_pct;
    - ``by_precision``: precision, kernel_class, a_ns, b_ns, delta_ns;
    - ``by_layer``: layer, a_ns, b_ns, a_count, b_count, a/b_math_precision,
      math_precision_changed, status (matched / only_a / only_b), delta_ns;
    - ``kernels``: layer, kernel_class, slot, a/b_name, a/b_precision, a_ns, b_ns, status
      (matched / new / vanished), delta_ns;
    - ``conversion``: kernel_class, b_name, time_ns (precision-conversion work only in B);
    - ``overheads``: overhead, a_ns, b_ns, delta_ns, a_count, b_count (medians per iteration;
      counts are launch calls, API calls, syncs or copies; none for gpu_idle);
    - ``tensor_core``: run, source, tensor_kernel_time_pct, tensor_active_pct;
    - ``budget``: part, a_ns, b_ns, delta_ns, a_pct, b_pct: where each run's wall-clock
      iteration goes (``nsightlab.budget``; its verdicts are ``a_verdict``/``b_verdict`` in
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
    overheads: pd.DataFrame
    tensor_core: pd.DataFrame
    budget: pd.DataFrame

    SECTIONS = ("by_class", "by_precision", "by_layer", "kernels", "conversion", "overheads",
                "tensor_core", "budget")

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


def diff(a: Report | str | os.PathLike, b: Report | str | os.PathLike, **open_options) -> Diff:
    """Compare run B against run A: Reports, or anything ``nsightlab.open`` takes (opened
    with ``open_options``: cache, cache_dir, nsys, progress). Runs are labelled as given."""
    ra, rb = as_report(a, **open_options), as_report(b, **open_options)
    pa_ = profile(ra, None if isinstance(a, Report) else str(a))
    pb_ = profile(rb, None if isinstance(b, Report) else str(b))
    return compare(pa_, pb_)


def compare(pa: RunProfile, pb: RunProfile) -> Diff:
    """The diff of two run profiles (see ``Diff`` for the sections)."""
    by_class = _side_by_side(pa.by_class, pb.by_class, "kernel_class")
    total_delta = by_class["delta_ns"].sum()
    by_class["delta_share_pct"] = 100.0 * by_class["delta_ns"] / total_delta if total_delta else 0.0
    by_class = by_class.sort_values("delta_ns", key=abs, ascending=False, kind="stable")
    by_precision = _side_by_side(pa.by_precision, pb.by_precision, ["precision", "kernel_class"])
    by_layer = _layers(pa, pb)
    real = (by_layer["status"] == "matched") & (by_layer["layer"] != OUTSIDE)
    if real.any():
        kernels = _match_slots(pa.slots, pb.slots)
    else:  # no layers in common (e.g. a CUDA graph replay has no per-layer ranges): per iteration
        kernels = _match_slots(pa.flat_slots, pb.flat_slots)
    changed = set(by_layer.loc[by_layer["math_precision_changed"], "layer"])
    conv = kernels[(kernels["status"] == "new") & kernels["kernel_class"].isin(CONVERSION_CLASSES)
                   & kernels["layer"].isin(changed)]
    conversion = (conv.groupby(["kernel_class", "b_name"], sort=False)["b_ns"].sum()
                  .rename("time_ns").reset_index().sort_values("time_ns", ascending=False)
                  .reset_index(drop=True))
    overheads = _overheads(pa.overheads, pb.overheads)
    tensor_core = pd.DataFrame([{"run": "a", **pa.tensor_core}, {"run": "b", **pb.tensor_core}])
    headline = _headline(pa, pb, by_class, conversion["time_ns"].sum(), by_layer, overheads)
    return Diff(pa, pb, headline, by_class.reset_index(drop=True), by_precision, by_layer,
                kernels, conversion, overheads, tensor_core, _budget(pa.budget, pb.budget))


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
    return pd.DataFrame([
        {"overhead": name, "a_ns": a[t], "b_ns": b[t], "delta_ns": b[t] - a[t],
         "a_count": a[c] if c else nan, "b_count": b[c] if c else nan}
        for name, t, c in OVERHEADS])


def _side_by_side(a: pd.DataFrame, b: pd.DataFrame, keys) -> pd.DataFrame:
    keys = [keys] if isinstance(keys, str) else keys
    cols = [c for c in ("time_ns", "count") if c in a.columns]
    m = a[keys + cols].merge(b[keys + cols], on=keys, how="outer", suffixes=("_a", "_b")).fillna(0)
    out = m[keys].copy()
    out["a_ns"], out["b_ns"] = m["time_ns_a"], m["time_ns_b"]
    out["delta_ns"] = out["b_ns"] - out["a_ns"]
    if "count" in cols:
        out["a_count"], out["b_count"] = m["count_a"], m["count_b"]
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
        rows.append({"layer": n, "a_ns": la.loc[n, "time_ns"] if ina else 0.0,
                     "b_ns": lb.loc[n, "time_ns"] if inb else 0.0,
                     "a_count": la.loc[n, "count"] if ina else 0.0,
                     "b_count": lb.loc[n, "count"] if inb else 0.0,
                     "a_math_precision": ga, "b_math_precision": gb,
                     "math_precision_changed": bool(ina and inb and ga and gb and ga != gb),
                     "status": "matched" if ina and inb else ("only_a" if ina else "only_b")})
    out = pd.DataFrame(rows)
    out["delta_ns"] = out["b_ns"] - out["a_ns"]
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


def _headline(pa, pb, by_class, conversion_ns, by_layer, overheads) -> dict:
    speedup = pa.iteration_ns / pb.iteration_ns if pb.iteration_ns else float("nan")
    delta = pb.iteration_ns - pa.iteration_ns
    cls = by_class.set_index("kernel_class")
    gemm_a = cls["a_ns"].get("gemm", 0.0)
    gemm_b = cls["b_ns"].get("gemm", 0.0)
    gemm_change = 100.0 * (gemm_b - gemm_a) / gemm_a if gemm_a else float("nan")
    parts = []
    if abs(speedup - 1) < 0.02:
        parts.append(f"B runs an iteration in the same time as A ({_ms(pb.iteration_ns)} vs "
                     f"{_ms(pa.iteration_ns)})")
    else:
        word = f"{speedup:.2f}x faster" if speedup > 1 else f"{1 / speedup:.2f}x slower"
        parts.append(f"B is {word} per iteration ({_ms(pb.iteration_ns)} vs {_ms(pa.iteration_ns)})")
    if gemm_a and abs(gemm_change) >= 5:
        parts.append(f"its GEMMs take {abs(gemm_change):.0f}% {'less' if gemm_change < 0 else 'more'} "
                     f"time ({_ms(gemm_a)} -> {_ms(gemm_b)})")
    if conversion_ns > 0.05 * max(pa.iteration_ns, 1):
        tail = ""
        if delta > 0:
            tail = (", more than the whole regression" if conversion_ns > delta
                    else f", {100 * conversion_ns / delta:.0f}% of the regression")
        parts.append(f"precision-conversion kernels only in B (casts, scaling, amax) add "
                     f"{_ms(conversion_ns)}{tail}")
    ov = overheads.set_index("overhead")
    la, lb = ov.loc["launch_overhead", "a_ns"], ov.loc["launch_overhead", "b_ns"]
    if la and lb < 0.5 * la and not (conversion_ns > 0.05 * pa.iteration_ns):
        parts.append(f"launch overhead per iteration fell from {_ms(la)} to {_ms(lb)}")
    if len(parts) == 1 and len(cls):
        top = cls["delta_ns"].abs().idxmax()
        if abs(cls.loc[top, "delta_ns"]) < 0.02 * max(pa.iteration_ns, 1):
            parts.append("no kernel class changes by more than 2% of an iteration")
        else:
            parts.append(f"the biggest change is {top} ({_ms(cls.loc[top, 'a_ns'])} -> "
                         f"{_ms(cls.loc[top, 'b_ns'])})")
    verdict = parts[0] + ("; " + "; ".join(parts[1:]) if len(parts) > 1 else "") + "."
    return {
        "a": pa.label, "b": pb.label, "a_iterations": pa.iterations, "b_iterations": pb.iterations,
        "a_iteration_source": pa.iteration_source, "b_iteration_source": pb.iteration_source,
        "a_iteration_ns": pa.iteration_ns, "b_iteration_ns": pb.iteration_ns,
        "speedup": speedup, "a_kernel_ns": pa.kernel_ns, "b_kernel_ns": pb.kernel_ns,
        "a_busy_pct": pa.busy_pct, "b_busy_pct": pb.busy_pct,
        "a_kernels": pa.kernels, "b_kernels": pb.kernels,
        "gemm_change_pct": gemm_change, "conversion_overhead_ns": float(conversion_ns),
        "layers_matched": int((by_layer["status"] == "matched").sum()
                              - (OUTSIDE in set(by_layer["layer"]))),
        "verdict": verdict,
        "a_verdict": _run_verdict(pa), "b_verdict": _run_verdict(pb),
        "a_outside_kernel_ns": pa.outside_kernel_ns, "b_outside_kernel_ns": pb.outside_kernel_ns,
        "a_warnings": [w["message"] for w in pa.warnings],
        "b_warnings": [w["message"] for w in pb.warnings],
    }


def _run_verdict(p: RunProfile) -> str:
    """A run's budget verdict, unless its trace is partial."""
    if any(w["severity"] == "partial" for w in p.warnings):
        return "withheld: partial trace"
    return str(p.budget.get("verdict", ""))
