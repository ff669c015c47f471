"""Two Nsight Compute reports compared at the counter level: ``of(a, b)``.

Each report's distinct launches are paired (``_distinct``: a launch configuration and its work
once, with the median of its durations: two reports rarely hold as many repetitions of a
block). Kernels pair first where nothing changed (the same function, grid and block), then by
role: the same innermost NVTX range (when the two reports share range names), the same class
(``analysis.classify``: gemm, attention, elementwise, ...), the same order of first launch;
so the fp16 GEMM pairs with the fp8 GEMM that replaced it. The totals count each distinct
launch once. Each pair gives the time ratio
(A's duration over B's: above 1, B is faster), the limiter on each side, the FLOPs and bytes,
and the ratio the roofline expects: A's ``t_min`` over B's (``judge``), which is the ratio of
the Tensor peaks when both are compute-bound and the ratio of the bytes when both are
memory-bound. Kernels on one side only (casts, quantize, amax) are listed with their limiter
and time. Durations are ncu's (base clocks, caches flushed): like for like on both sides.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from nsightlab.analysis import classify
from nsightlab.kernels.judge import Judged
from nsightlab.renderers import words

_KEEP = ["kernel", "function", "nvtx", "grid", "block", "duration_ns", "limiter", "unit",
         "unit_pct", "compute_pct", "memory_pct", "dram_pct", "precision", "flops", "dram_bytes",
         "used_pct", "t_min_ns", "roof", "headroom_pct", "tensor_pct"]


class Paired:
    """``pairs`` (one row per pair: ``_a`` and ``_b`` columns, ratio, expected, why code),
    ``only_a`` / ``only_b`` (kernels on one side), ``a_ns`` / ``b_ns`` (all of each side),
    ``findings()`` (records: the headline, then each pair)."""

    def __init__(self, pairs, only_a, only_b, a_ns, b_ns, names):
        self.pairs, self.only_a, self.only_b = pairs, only_a, only_b
        self.a_ns, self.b_ns, self.names = a_ns, b_ns, names

    def findings(self) -> list[words.Said]:
        a, b = self.names
        out = [words.say("pair_total", about=f"{a} -> {b}", a_ns=self.a_ns, b_ns=self.b_ns,
                         ratio=self.a_ns / self.b_ns if self.b_ns else np.nan,
                         only_b_ns=float(self.only_b["duration_ns"].sum()),
                         only_b_pct=100 * float(self.only_b["duration_ns"].sum()) / self.b_ns
                         if self.b_ns else np.nan, only_b=len(self.only_b))]
        for r in self.pairs.itertuples():
            out.append(words.say(r.why, about=r.function_b, a_ns=r.duration_ns_a,
                                 b_ns=r.duration_ns_b, ratio=r.ratio, expected=r.expected,
                                 bytes_ratio=r.bytes_ratio, dram_a=r.dram_pct_a,
                                 dram_b=r.dram_pct_b, limiter_a=r.limiter_a,
                                 limiter_b=r.limiter_b, precision_a=r.precision_a,
                                 precision_b=r.precision_b, function_a=r.function_a))
        for side, only in (("A", self.only_a), ("B", self.only_b)):
            for r in only.itertuples():
                out.append(words.say("pair_only", about=r.function, side=side,
                                     duration_ns=r.duration_ns, limiter=r.limiter, unit=r.unit,
                                     unit_pct=r.unit_pct))
        return out


def of(a: Judged, b: Judged, names: tuple[str, str] = ("A", "B")) -> Paired:
    """Pair the kernels of ``a`` and ``b`` by role and compare each pair."""
    ka, kb = _distinct(_roles(a.kernels)), _distinct(_roles(b.kernels))
    shared = set(ka["nvtx_key"]) & set(kb["nvtx_key"]) - {""}
    for k in (ka, kb):
        k["nvtx_key"] = k["nvtx_key"].where(k["nvtx_key"].isin(shared), "")
    # first the kernels that did not change (same function, grid and block), then by role
    same = ["nvtx_key", "class", "function", "grid", "block"]
    both, ka, kb = _match(ka, kb, same)
    role, ka, kb = _match(ka, kb, ["nvtx_key", "class"])
    both = pd.concat([both, role], ignore_index=True)
    only_a, only_b = (_side(k, "").sort_values("duration_ns", ascending=False, kind="stable")
                      .reset_index(drop=True) for k in (ka, kb))
    both["ratio"] = both["duration_ns_a"] / both["duration_ns_b"]
    both["expected"] = both["t_min_ns_a"] / both["t_min_ns_b"]
    both["bytes_ratio"] = both["dram_bytes_a"] / both["dram_bytes_b"]
    both["why"] = [_why(r) for r in both.itertuples()]
    both = both.sort_values("duration_ns_a", ascending=False).reset_index(drop=True)
    return Paired(both, only_a, only_b, float(pd.concat([both["duration_ns_a"], only_a[
        "duration_ns"]]).sum()), float(pd.concat([both["duration_ns_b"], only_b["duration_ns"]])
                                       .sum()), names)


def _distinct(k: pd.DataFrame) -> pd.DataFrame:
    """One row per distinct launch of a report: the same innermost NVTX range, function, grid,
    block and work (its FLOPs), in the order of its first launch, with the median of its
    durations and ``n``, how many times ncu profiled it. A report may hold several
    repetitions of a block or an iteration (ncu's --nvtx-include matched each), and two
    reports rarely hold as many: pairs are made between distinct launches."""
    k = k.copy()
    k["nvtx_key"] = [str(x).rsplit("/", 1)[-1] if isinstance(x, str) else "" for x in k["nvtx"]]
    work = k["flops"].fillna(-1).map(lambda x: float(f"{x:.4g}"))
    key = [k["nvtx_key"], k["function"], k["grid"], k["block"], work]
    g = k.groupby(key, sort=False, dropna=False)
    first = g.head(1).copy()
    first["duration_ns"] = g["duration_ns"].transform("median").loc[first.index]
    first["n"] = g["duration_ns"].transform("size").loc[first.index]
    return first.reset_index(drop=True)


def _match(ka: pd.DataFrame, kb: pd.DataFrame, key: list[str]):
    """(pairs of ``ka`` and ``kb`` with the same ``key``, in order within it; what is left of
    each)."""
    ka = ka.assign(order=ka.groupby(key).cumcount())
    kb = kb.assign(order=kb.groupby(key).cumcount())
    m = ka.merge(kb, on=key + ["order"], how="inner", suffixes=("_a", "_b"))
    for c in key:  # the key's columns on both sides, as the other columns are
        m[f"{c}_a"] = m[f"{c}_b"] = m[c]
    left_a = ka[~ka["kernel"].isin(m["kernel_a"])].drop(columns="order")
    left_b = kb[~kb["kernel"].isin(m["kernel_b"])].drop(columns="order")
    return m, left_a, left_b


def _roles(k: pd.DataFrame) -> pd.DataFrame:
    out = k[[c for c in _KEEP if c in k]].copy().reset_index(drop=True)
    out["class"] = [classify.kernel_class(n) for n in k["name"]]
    return out


def _side(rows: pd.DataFrame, suffix: str) -> pd.DataFrame:
    return rows.drop(columns=["nvtx_key"], errors="ignore").reset_index(drop=True)


def _bound(limiter, roof) -> str:
    if limiter in ("compute", "memory"):
        return limiter
    if limiter == "balanced":
        return "compute"
    return f"latency-{roof}" if isinstance(roof, str) else "latency"


def _why(r) -> str:
    """The code of a pair's headline: both compute-bound (the ratio of the peaks), both
    memory-bound (the bytes), or anything else (the roofline's ratio)."""
    a, b = _bound(r.limiter_a, r.roof_a), _bound(r.limiter_b, r.roof_b)
    if not (r.expected == r.expected):
        return "pair_unjudged"
    if a == b == "compute":
        return "pair_compute"
    if a == b == "memory":
        return "pair_memory"
    return "pair_mixed"
