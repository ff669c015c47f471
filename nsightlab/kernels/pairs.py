"""Two Nsight Compute reports compared at the counter level: ``of(a, b)``.

One repetition of each report's launches is paired (``_distinct``: where a report holds its
launches several times over, the first period, with the median durations). Kernels pair first
where nothing changed (the same function, grid, block and work), then the same launch with
other work, then by role: the same innermost NVTX range (when the two reports share range names), the same class
(``analysis.classify``: gemm, attention, elementwise, ...), the same order of first launch;
so the fp16 GEMM pairs with the fp8 GEMM that replaced it. The totals are of one repetition. Each pair gives the time ratio
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

    def __init__(self, pairs, only_a, only_b, a_ns, b_ns, names, repeats=(1, 1)):
        self.pairs, self.only_a, self.only_b = pairs, only_a, only_b
        self.a_ns, self.b_ns, self.names = a_ns, b_ns, names
        #: how many repetitions of its launches each report held (``_distinct``)
        self.repeats = repeats

    def findings(self) -> list[words.Said]:
        a, b = self.names
        out = [words.say("pair_total", about=f"{a} -> {b}", a_ns=self.a_ns, b_ns=self.b_ns,
                         repeats_a=self.repeats[0], repeats_b=self.repeats[1],
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
                                 precision_b=r.precision_b, function_a=r.function_a,
                                 work_ratio=r.flops_a / r.flops_b if r.flops_b else np.nan))
        for side, only in (("A", self.only_a), ("B", self.only_b)):
            for r in only.itertuples():
                out.append(words.say("pair_only", about=r.function, side=side,
                                     duration_ns=r.duration_ns, limiter=r.limiter, unit=r.unit,
                                     unit_pct=r.unit_pct))
        return out


def of(a: Judged, b: Judged, names: tuple[str, str] = ("A", "B")) -> Paired:
    """Pair the kernels of ``a`` and ``b`` by role and compare each pair."""
    ka, kb = _distinct(_roles(a.kernels)), _distinct(_roles(b.kernels))
    ka_n, kb_n = ka["n"], kb["n"]
    shared = set(ka["nvtx_key"]) & set(kb["nvtx_key"]) - {""}
    for k in (ka, kb):
        k["nvtx_key"] = k["nvtx_key"].where(k["nvtx_key"].isin(shared), "")
    # first the kernels that did not change (same function, grid, block and work), then the
    # same launch with other work, then by role
    same = ["nvtx_key", "class", "function", "grid", "block"]
    found = []
    for key in (same + ["work"], same, ["nvtx_key", "class"]):
        got, ka, kb = _match(ka, kb, key)
        found.append(got)
    both = pd.concat(found, ignore_index=True)
    only_a, only_b = (_side(k, "").sort_values("duration_ns", ascending=False, kind="stable")
                      .reset_index(drop=True) for k in (ka, kb))
    both["ratio"] = both["duration_ns_a"] / both["duration_ns_b"]
    both["expected"] = both["t_min_ns_a"] / both["t_min_ns_b"]
    both["bytes_ratio"] = both["dram_bytes_a"] / both["dram_bytes_b"]
    both["why"] = [_why(r) for r in both.itertuples()]
    both = both.sort_values("duration_ns_a", ascending=False).reset_index(drop=True)
    total = [float(pd.concat([both[f"duration_ns_{s}"], only["duration_ns"]]).sum(min_count=1))
             for s, only in (("a", only_a), ("b", only_b))]
    return Paired(both, only_a, only_b, total[0], total[1], names,
                  (int(ka_n.max()) if len(ka_n) else 1, int(kb_n.max()) if len(kb_n) else 1))


def _distinct(k: pd.DataFrame) -> pd.DataFrame:
    """One repetition of what a report profiled: where its launches (innermost NVTX range,
    function, grid, block) repeat with a period (ncu's --nvtx-include matched a block in
    every iteration), the first period, each launch with the median of its durations over
    the repetitions and ``n`` their count; otherwise every launch (n = 1). Two reports rarely
    hold as many repetitions: pairs are made within one."""
    k = k.copy()
    k["nvtx_key"] = [str(x).rsplit("/", 1)[-1] if isinstance(x, str) else "" for x in k["nvtx"]]
    k["work"] = k["flops"].map(lambda x: float(f"{x:.2g}") if x == x else -1.0)
    seq = list(zip(k["nvtx_key"], k["function"], k["grid"], k["block"]))
    n = len(seq)
    period = next((p for p in range(1, n // 2 + 1)
                   if all(seq[i] == seq[i + p] for i in range(n - p))), n)
    pos = np.arange(n) % period
    first = k.iloc[:period].copy()
    first["duration_ns"] = k.groupby(pos)["duration_ns"].median().to_numpy()
    first["n"] = np.bincount(pos, minlength=period)
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
