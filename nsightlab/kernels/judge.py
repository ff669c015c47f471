"""Each profiled kernel judged from its Nsight Compute metrics: ``of(store)``.

- **Limiter**, from Speed of Light as ncu states it: compute throughput
  (``sm__throughput``) against memory throughput (``gpu__compute_memory_throughput``). The
  higher one limits when it reaches ``HIGH`` (60%, the line under which ncu's own
  SOLBottleneck rule calls a workload latency-bound); both high and within ``BALANCED``
  points of each other, the kernel is balanced (ncu's rule again). The unit is the largest
  part of ncu's breakdown of the higher figure (``breakdown:...``: a pipe, or DRAM / L2 /
  L1). Below ``HIGH`` on both sides the kernel is latency-bound, and ``why`` says what the
  report shows: a grid smaller than the GPU, low occupancy, the warps' top stall.
- **Roofline**: the FLOPs it ran by precision (Tensor Core and CUDA core), the DRAM bytes it
  moved and the share of them it used (ncu's L2 sector counters for global accesses: excess
  sectors are bytes moved and not used), the ceilings (``peaks``). The time the work needs at
  the ceilings is ``t_min``; ``headroom_pct`` = 1 - t_min / duration is the most the kernel
  can gain.
- **Occupancy**: achieved and theoretical, what limits the theoretical one, waves per SM.
- **NVIDIA's rule results**, kept as ncu states them (``rules``), each estimate capped at the
  headroom (``capped_pct``), those about the limiting unit first.

Durations and figures are ncu's: clocks locked to base, caches flushed. The trace gives the
kernel's time in the loop (``join``); the headroom is a share, so it carries over.
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from nsightlab.kernels import peaks
from nsightlab.renderers import words

#: ncu's line (SOLBottleneck) under which neither compute nor memory limits: latency
HIGH = 60.0
#: ncu's SOLBottleneck: compute and memory within 10 points of each other (both high) are
#: balanced; further apart, the higher one limits
BALANCED = 10.0
#: achieved occupancy under which a latency-bound kernel is said to lack warps
LOW_OCCUPANCY = 30.0
SOL = {"duration_ns": "gpu__time_duration.sum",
       "compute_pct": "sm__throughput.avg.pct_of_peak_sustained_elapsed",
       "memory_pct": "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
       "dram_pct": "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
       "l2_pct": "lts__throughput.avg.pct_of_peak_sustained_elapsed",
       "l1_pct": "l1tex__throughput.avg.pct_of_peak_sustained_active",
       "achieved_occupancy_pct": "sm__warps_active.avg.pct_of_peak_sustained_active",
       "theoretical_occupancy_pct": "sm__maximum_warps_per_active_cycle_pct",
       "waves": "launch__waves_per_multiprocessor", "grid_size": "launch__grid_size",
       "block_size": "launch__block_size", "sms": "launch__sm_count",
       "registers": "launch__registers_per_thread",
       "excess_sectors": "derived__memory_l2_theoretical_sectors_global_excessive",
       "global_sectors": "memory_l2_theoretical_sectors_global",
       "ideal_sectors": "memory_l2_theoretical_sectors_global_ideal"}
_DRAM_OLD = "dram__throughput.avg.pct_of_peak_sustained_elapsed"
BREAKDOWN = {"compute": "breakdown:sm__throughput.avg.pct_of_peak_sustained_elapsed",
             "memory": "breakdown:gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"}
_LIMITS = {"registers": "launch__occupancy_limit_registers",
           "shared memory": "launch__occupancy_limit_shared_mem",
           "block size": "launch__occupancy_limit_warps",
           "blocks per SM": "launch__occupancy_limit_blocks",
           "barriers": "launch__occupancy_limit_barriers"}
_STALL = re.compile(r"^smsp__average_warps_issue_stalled_(\w+)_per_issue_active\.ratio$")
_PIPE = re.compile(r"^sm__(?:pipe_(\w+?)_cycles_active|inst_executed_pipe_(\w+?))"
                   r"(?:_pred_on_any)?\.avg\.pct_of_peak_sustained_(?:active|elapsed)$")
#: a breakdown metric's unit, by its prefix (first match)
UNITS = (("sm__pipe_tensor", "Tensor"), ("sm__inst_executed_pipe_tensor", "Tensor"),
         ("sm__pipe_fmaheavy", "FMA"), ("sm__pipe_fma", "FMA"),
         ("sm__inst_executed_pipe_fma", "FMA"),
         ("sm__pipe_alu", "ALU"), ("sm__inst_executed_pipe_alu", "ALU"),
         ("sm__pipe_fp64", "FP64"), ("sm__inst_executed_pipe_fp64", "FP64"),
         ("sm__inst_executed_pipe_xu", "XU (transcendentals, conversions)"),
         ("sm__inst_executed_pipe_lsu", "LSU (load/store)"),
         ("sm__pipe_shared", "FP16+Tensor shared pipe"),
         ("sm__inst_executed_pipe_adu", "ADU"), ("sm__inst_executed_pipe_cbu", "CBU (branches)"),
         ("sm__inst_executed_pipe_uniform", "uniform pipe"), ("sm__pipe_tma", "TMA"),
         ("sm__inst_executed_pipe_tma", "TMA"), ("sm__inst_executed_pipe_tex", "TEX"),
         ("sm__inst_executed_pipe_ipa", "IPA"),
         ("sm__mio", "MIO (shared memory, special functions)"),
         ("sm__inst_executed", "instruction issue"), ("sm__issue_active", "instruction issue"),
         ("sm__instruction_throughput", "instruction issue"), ("idc__", "constant cache"),
         ("dram__", "DRAM"), ("fbpa__", "DRAM"), ("lts__", "L2"), ("l1tex__", "L1/shared"),
         ("sm__memory_throughput", "L1/shared"), ("gpu__compute_memory", "memory pipeline"))
#: which unit to name when parts of a breakdown tie (the most specific first)
_RANK = {u: i for i, u in enumerate((
    "Tensor", "FMA", "ALU", "FP64", "XU (transcendentals, conversions)", "LSU (load/store)",
    "DRAM", "L2", "L1/shared"))}
#: ncu sections by the unit they are about: a rule of the limiter's kind comes first
SECTIONS = {"compute": ("ComputeWorkloadAnalysis", "InstructionStats", "SchedulerStats",
                        "WarpStateStats", "SpeedOfLight"),
            "memory": ("MemoryWorkloadAnalysis", "SpeedOfLight", "SourceCounters"),
            "latency": ("Occupancy", "LaunchStats", "SchedulerStats", "WarpStateStats",
                        "SpeedOfLight")}


class Judged:
    """The judgement of one report's kernels: ``kernels`` (one row per profiled kernel:
    identity, Speed of Light, limiter, roofline, headroom, occupancy), ``rules`` (NVIDIA's
    results, judged), ``missing`` (what could not be judged, and why), ``findings(kernel)``
    (records)."""

    def __init__(self, kernels: pd.DataFrame, rules: pd.DataFrame, missing: list[str]):
        self.kernels, self.rules, self.missing = kernels, rules, missing

    def findings(self, kernel: int) -> list[words.Said]:
        """The findings about one kernel, as records: its limiter, its headroom, then NVIDIA's
        rules with an estimate (on the limiting unit first)."""
        k = self.kernels.loc[kernel]
        out = [limiter_said(k)]
        if k["headroom_pct"] == k["headroom_pct"]:
            out.append(words.say("kernel_headroom", about=k["function"], **_roof_values(k)))
        for r in self.rules[(self.rules["kernel"] == kernel)
                            & self.rules["capped_pct"].notna()].itertuples():
            out.append(words.say("kernel_rule", about=k["function"], rule=r.rule, title=r.title
                                 or r.name, estimate_pct=r.speedup_pct, capped_pct=r.capped_pct,
                                 capped=bool(r.capped), on_limiter=bool(r.on_limiter),
                                 message=r.message))
        return out


def needed(names: list[str]) -> list[str]:
    """The metrics of a report that the judgement reads."""
    want = set(SOL.values()) | set(BREAKDOWN.values()) | set(_LIMITS.values()) | {_DRAM_OLD}
    out = {n for n in names if n in want or _STALL.match(n) or _PIPE.match(n)}
    return sorted(out | set(peaks.metric_names(names)))


def of(store) -> Judged:
    """Judge every kernel of ``store`` (``read.ncu_store.NcuStore``)."""
    ident = store.kernels()
    names = store.metric_names()
    texts = store.metrics([n for n in BREAKDOWN.values() if n in names])
    parts = {kind: _components(texts, n) for kind, n in BREAKDOWN.items()}
    comp = sorted({c for p in parts.values() for cs in p.values() for c in cs} & set(names))
    v = store.values(sorted(set(needed(names)) | set(comp)))
    missing = _missing(names)
    k = ident[["kernel", "range", "id", "name", "function", "nvtx", "device"]].copy()
    k["grid"] = _dims(ident, "grid")
    k["block"] = _dims(ident, "block")
    for col, metric in SOL.items():
        k[col] = v[metric].to_numpy() if metric in v else np.nan
    k["duration_ns"] = k["duration_ns"].where(k["duration_ns"] > 0)  # no time: nothing to judge
    if k["dram_pct"].isna().all() and _DRAM_OLD in v:
        k["dram_pct"] = v[_DRAM_OLD].to_numpy()
    k["limiter"], k["unit"], k["unit_pct"] = _limiters(k, v, parts)
    k["top_pipe"], k["top_pipe_pct"] = _top_pipe(v)
    k["tensor_pct"] = ident["tensor_active_pct"].to_numpy()
    k["tensor_precision"] = ident["tensor_precision"].to_numpy()
    k["occupancy_limit"] = _occupancy_limit(v)
    k["top_stall"], k["top_stall_ratio"] = _top_stall(v)
    k["why"] = [_why(r) for r in k.itertuples()]
    k = pd.concat([k, _roofline(v, k)], axis=1)
    k = k.set_index("kernel", drop=False)
    return Judged(k, _rules(store.rules(), k), missing)


def limiter_said(k) -> words.Said:
    """The limiter of kernel row ``k`` as a record (``kernel_compute`` / ``kernel_memory`` /
    ``kernel_latency`` / ``kernel_unjudged``)."""
    values = {"compute_pct": k["compute_pct"], "memory_pct": k["memory_pct"],
              "unit": k["unit"], "unit_pct": k["unit_pct"], "dram_pct": k["dram_pct"],
              "tensor_pct": k["tensor_pct"], "duration_ns": k["duration_ns"]}
    if k["limiter"] == "latency":
        return words.say("kernel_latency", about=k["function"], why=k["why"], **values)
    if k["limiter"] in ("compute", "memory", "balanced"):
        return words.say(f"kernel_{k['limiter']}", about=k["function"], **values)
    return words.say("kernel_unjudged", about=k["function"], duration_ns=k["duration_ns"])


def _roof_values(k) -> dict:
    return {"headroom_pct": k["headroom_pct"], "t_min_ns": k["t_min_ns"],
            "duration_ns": k["duration_ns"], "roof": k["roof"], "used_pct": k["used_pct"],
            "flops": k["flops"], "dram_bytes": k["dram_bytes"], "precision": k["precision"],
            "peak_source": k["peak_source"]}


def _components(texts: pd.DataFrame, metric: str) -> dict[int, list[str]]:
    rows = texts[texts["metric"] == metric] if len(texts) else texts
    return {int(r.kernel): [c for c in str(r.text).split(",") if c]
            for r in rows.itertuples() if isinstance(r.text, str)}


def _dims(ident: pd.DataFrame, what: str) -> list[str]:
    cols = [f"launch__{what}_dim_{a}" for a in "xyz"]
    return ["x".join(str(int(x)) if x == x else "?" for x in row)
            for row in ident[cols].itertuples(index=False)]


def _unit(metric: str) -> str:
    return next((u for prefix, u in UNITS if metric.startswith(prefix)), metric.split("__")[0])


def _limiters(k: pd.DataFrame, v: pd.DataFrame, parts: dict) -> tuple[list, list, list]:
    """Per kernel: (limiter, unit, the unit's % of peak) from Speed of Light and its
    breakdown."""
    lim, unit, pct = [], [], []
    for i, row in enumerate(k.itertuples()):
        c, m = row.compute_pct, row.memory_pct
        if not (c == c and m == m):
            lim.append("unknown"), unit.append(None), pct.append(np.nan)
            continue
        kind = "latency" if max(c, m) < HIGH else "balanced" if min(c, m) >= HIGH and \
            abs(c - m) < BALANCED else ("compute" if c >= m else "memory")
        side = "compute" if c >= m else "memory"
        top, top_pct = _top_part(v, int(row.kernel), parts[side])
        if kind == "balanced":
            other, _ = _top_part(v, int(row.kernel), parts["memory" if side == "compute" else
                                                            "compute"])
            top = " and ".join(x for x in (top, other) if x)
        lim.append(kind)
        unit.append(top)
        pct.append(top_pct)
    return lim, unit, pct


def _top_part(v: pd.DataFrame, kernel: int, parts: dict) -> tuple[str | None, float]:
    """(unit, % of peak) of the largest part of a Speed of Light breakdown; of the parts within
    half a point of it, the most specific unit (``_RANK``)."""
    comps = [x for x in parts.get(kernel, []) if x in v]
    vals = v.loc[kernel, comps].dropna() if comps else pd.Series(dtype=float)
    if not len(vals):
        return None, np.nan
    near = vals[vals >= vals.max() - 0.5]
    top = min(near.index, key=lambda x: _RANK.get(_unit(x), len(_RANK)))
    return _unit(top), float(vals[top])


def _top_pipe(v: pd.DataFrame) -> tuple[list, list]:
    cols = [c for c in v.columns if _PIPE.match(c) and c.endswith("_active")]
    if not cols:
        return [None] * len(v), [np.nan] * len(v)
    sub = v[cols]
    top = _argmax(sub)
    return ([_unit(t) if isinstance(t, str) else None for t in top],
            [float(sub.at[i, t]) if isinstance(t, str) else np.nan for i, t in top.items()])


def _argmax(sub: pd.DataFrame) -> pd.Series:
    """Per row, the column of its largest value (None for a row with no value)."""
    top = sub.fillna(-np.inf).idxmax(axis=1)
    return top.where(sub.notna().any(axis=1), None)


def _occupancy_limit(v: pd.DataFrame) -> list:
    cols = {name: m for name, m in _LIMITS.items() if m in v}
    if not cols:
        return [None] * len(v)
    sub = v[list(cols.values())]
    out = []
    for i in v.index:
        row = sub.loc[i]
        if row.isna().all():
            out.append(None)
            continue
        low = row.min()
        out.append(" and ".join(n for n, m in cols.items() if row[m] == low))
    return out


def _top_stall(v: pd.DataFrame) -> tuple[list, list]:
    cols = [c for c in v.columns if _STALL.match(c) and "selected" not in c]
    if not cols:
        return [None] * len(v), [np.nan] * len(v)
    sub = v[cols]
    top = _argmax(sub)
    return ([_STALL.match(t).group(1).replace("_", " ") if isinstance(t, str) else None
             for t in top],
            [float(sub.at[i, t]) if isinstance(t, str) else np.nan for i, t in top.items()])


def _why(r) -> str | None:
    """Why a latency-bound kernel is: what the report shows, most telling first."""
    if r.limiter != "latency":
        return None
    out = []
    if r.grid_size == r.grid_size and r.sms == r.sms and r.grid_size < r.sms:
        out.append(f"a grid of {int(r.grid_size)} blocks for {int(r.sms)} SMs")
    if r.achieved_occupancy_pct == r.achieved_occupancy_pct and \
            r.achieved_occupancy_pct < LOW_OCCUPANCY:
        lim = f", limited by {r.occupancy_limit}" if r.occupancy_limit else ""
        out.append(f"{r.achieved_occupancy_pct:.0f}% achieved occupancy{lim}")
    if r.top_stall:
        out.append(f"warps mostly stalled on {r.top_stall} ({r.top_stall_ratio:.1f} cycles per "
                   "issue)")
    return "; ".join(out) or "neither compute nor memory is busy"


def _roofline(v: pd.DataFrame, k: pd.DataFrame) -> pd.DataFrame:
    """FLOPs by precision, DRAM bytes moved and used, ceilings, the time the work needs at
    them (``t_min_ns``) and the headroom (% of the kernel's duration)."""
    f = peaks.flops(v)
    ceil = peaks.ceilings(v)
    out = pd.DataFrame(index=v.index)
    dram = (v["dram__bytes_read.sum"] + v["dram__bytes_write.sum"]
            if {"dram__bytes_read.sum", "dram__bytes_write.sum"} <= set(v.columns)
            else pd.Series(np.nan, index=v.index))
    # the bytes it uses, never above what it moved: the ideal sectors of its global accesses
    # (what its threads ask for) where they are fewer (re-reads that hit in L2 never reach
    # DRAM), but no fewer than the moved bytes less the excess sectors (loads by TMA or
    # LDGSTS are not in those counters: a GEMM's bytes stay used)
    moved = dram.to_numpy(dtype=float)
    ideal = k["ideal_sectors"].to_numpy(dtype=float) * 32
    excess = np.nan_to_num(k["excess_sectors"].to_numpy(dtype=float)) * 32
    with np.errstate(invalid="ignore", divide="ignore"):
        need = np.maximum(np.fmin(ideal, moved), moved - excess)
        used = np.where(moved > 0, np.clip(need / moved, 0, 1), 1.0)
    used = np.where(np.isnan(used), 1.0, used)
    out["flops"] = f.sum(axis=1) if len(f.columns) else np.nan
    out["precision"] = [(_main(f.loc[i]) or None) if len(f.columns) else None for i in v.index]
    out["dram_bytes"] = dram
    out["used_pct"] = used * 100
    out["intensity"] = out["flops"] / dram.replace(0, np.nan)
    t_min, roof, source, achieved = [], [], [], []
    dur = k["duration_ns"].to_numpy()
    for n, i in enumerate(v.index):
        times, src = {}, set()
        for col in f.columns:
            work = f.at[i, col]
            if not work > 0:
                continue
            peak, where = _peak(ceil, i, f"peak_{col}", k["device"].iloc[n])
            if peak is None:
                times = None
                break
            times[col] = work / peak * 1e9
            src.add(where)
        if times is None:
            t_min.append(np.nan), roof.append(None), source.append(None), achieved.append(np.nan)
            continue
        if dram.iloc[n] == dram.iloc[n]:
            peak, where = _peak(ceil, i, "peak_dram", k["device"].iloc[n])
            if peak is not None:
                times["dram"] = dram.iloc[n] * used[n] / peak * 1e9
                src.add(where)
        if not times:
            t_min.append(np.nan), roof.append(None), source.append(None), achieved.append(np.nan)
            continue
        # each pipe is a ceiling of its own, and they run at once: the slowest bounds the work
        compute = max((t for c, t in times.items() if c != "dram"), default=0.0)
        need = max(compute, times.get("dram", 0.0))
        t_min.append(need)
        roof.append("compute" if compute >= times.get("dram", 0.0) else "memory")
        source.append(" and ".join(sorted(src)))
        achieved.append(out["flops"].iloc[n] / (dur[n] * 1e-9) if dur[n] > 0 else np.nan)
    out["t_min_ns"] = t_min
    out["roof"] = roof
    out["peak_source"] = source
    out["flops_per_s"] = achieved
    with np.errstate(invalid="ignore", divide="ignore"):
        room = 100 * (1 - np.asarray(t_min, float) / dur)
    # a kernel faster than its ceilings allow: a ceiling too low (a datasheet at boost clocks
    # against ncu's base clocks); said, not hidden at 0
    out["over_roof"] = room < -1
    out["headroom_pct"] = np.clip(room, 0, 100)
    for col in [c for c in ceil.columns if c.startswith("peak_")]:
        out[col] = ceil[col]
    return out.reset_index(drop=True).set_axis(k.index)


def _main(f_row: pd.Series) -> str:
    """The precision with the most FLOPs ("fp16 (Tensor)", "fp32 (CUDA core)")."""
    top = f_row[f_row > 0]
    if top.empty:
        return ""
    col = top.idxmax()
    where, prec = col.split("_", 1)
    return f"{prec} ({'Tensor' if where == 'tensor' else 'CUDA core'})"


def _peak(ceil: pd.DataFrame, i, col: str, device) -> tuple[float | None, str | None]:
    if col in ceil and ceil.at[i, col] == ceil.at[i, col] and ceil.at[i, col] > 0:
        return float(ceil.at[i, col]), "the report's peaks"
    sheet = peaks.datasheet(device, col)
    return sheet if sheet is not None else (None, None)


def _rules(rules: pd.DataFrame, k: pd.DataFrame) -> pd.DataFrame:
    """NVIDIA's rule results as ncu states them, with: on_limiter (the rule's section is about
    the kernel's limiting kind), capped_pct (the estimate, never above the headroom; NaN
    without an estimate), capped (whether it was cut)."""
    r = rules.copy()
    lim = r["kernel"].map(k["limiter"])
    room = r["kernel"].map(k["headroom_pct"])
    r["on_limiter"] = [isinstance(s, str) and isinstance(li, str) and
                       any(s.startswith(x) for x in SECTIONS.get(li, ()))
                       for s, li in zip(r["section"], lim)]
    est = r["speedup_pct"]
    r["capped_pct"] = np.where(room.notna(), np.minimum(est, room), est)
    r["capped"] = room.notna() & (est > room)
    r = r.sort_values(["kernel", "on_limiter", "capped_pct"], ascending=[True, False, False],
                      na_position="last", kind="stable")
    return r.reset_index(drop=True)


def _missing(names: list[str]) -> list[str]:
    """What the report lacks for a full judgement, and the ncu section that collects it."""
    have = set(names)
    out = []
    if SOL["compute_pct"] not in have:
        out.append("the limiter: no Speed of Light figures (profile with --section SpeedOfLight)")
    if BREAKDOWN["compute"] not in have:
        out.append("which unit limits: no Speed of Light breakdown (profile with --set full)")
    if not any(peaks._TENSOR_DONE.match(n) for n in have):
        out.append("the roofline: no FLOP counters by precision (profile with --set full, or "
                   "--section SpeedOfLight_HierarchicalTensorRooflineChart)")
    if SOL["excess_sectors"] not in have:
        out.append("the bytes used: no excess-sector counters (profile with --section "
                   "MemoryWorkloadAnalysis_Tables)")
    if not any(_STALL.match(n) for n in have):
        out.append("stall reasons (profile with --section WarpStateStats)")
    return out
