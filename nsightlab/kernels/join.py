"""Profiled kernels joined to the trace's loop: what each could save per iteration.

The trace's kernels inside the loop's main iterations (``analysis.loop``; every iteration of
the loop when it has no main kind), on its first GPU, are grouped by launch (name, grid,
block): their time per iteration and share of the loop. Each group is matched to the ncu
kernel of the same demangled name, grid and block (else the same function name, grid and
block; never by name alone: PyTorch's elementwise ops share one): one ncu kernel stands for
every launch of its configuration (ncu's durations are not the loop's: the trace gives the time, ncu the why).

- ``saves``: the ranked list: time per iteration x headroom (``judge``), in ms and in % of
  the loop; a group counted once, so the list sums to no more than the loop's kernel time.
  NVIDIA's best estimate for the kernel is weighed the same way (``rule_saves_ns``).
- ``unprofiled``: groups in the top ``SHARE`` of the loop's kernel time with no ncu kernel.
- ``tensor_idle``: kernels the trace's name rules call Tensor-Core-capable whose tensor pipe
  was idle under ncu (``IDLE_TENSOR_PCT``).
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from nsightlab.analysis import classify, loop as loops
from nsightlab.kernels.judge import Judged
from nsightlab.renderers import words

#: the share of the loop's kernel time whose kernels should be profiled (``capture --ncu auto``)
SHARE = 0.8
#: kernels under this share of the loop: its verdict (launches, syncs, host) comes first
KERNELS_FIRST_PCT = 50.0
#: a tensor pipe this idle (% of active cycles) runs no Tensor Core math to speak of
IDLE_TENSOR_PCT = 1.0


class Joined:
    """The join of one report's judged kernels to a trace's loop (see the module docstring):
    ``kernels`` (one row per launch configuration in the loop), ``saves`` (ranked),
    ``unprofiled``, ``loop_ns`` (median-free: mean wall per iteration), ``iterations``,
    ``findings`` (records), ``unmatched`` (ncu kernels not in the loop)."""

    def __init__(self, kernels: pd.DataFrame, loop_ns: float, iterations: int,
                 unmatched: pd.DataFrame):
        self.kernels, self.loop_ns, self.iterations, self.unmatched = \
            kernels, loop_ns, iterations, unmatched

    @property
    def saves(self) -> pd.DataFrame:
        k = self.kernels[self.kernels["ncu_kernel"].notna()]
        return k.sort_values("saves_ns", ascending=False).reset_index(drop=True)

    @property
    def unprofiled(self) -> pd.DataFrame:
        k = self.kernels
        return k[k["top"] & k["ncu_kernel"].isna()].reset_index(drop=True)

    @property
    def kernel_share_pct(self) -> float:
        """The loop's kernel time, in % of its wall time per iteration."""
        return 100 * float(self.kernels["time_ns"].sum()) / self.loop_ns if self.loop_ns else 0.0

    def findings(self, limit: int = 10) -> list[words.Said]:
        out = []
        if self.kernel_share_pct < KERNELS_FIRST_PCT:
            out.append(words.say("kernel_share", share_pct=self.kernel_share_pct,
                                 loop_ns=self.loop_ns))
        out += [words.say("kernel_saves", about=r.function, time_ns=r.time_ns,
                         share_pct=r.share_pct, limiter=r.limiter, headroom_pct=r.headroom_pct,
                         saves_ns=r.saves_ns, saves_pct=r.saves_pct)
               for r in self.saves.head(limit).itertuples()]
        for r in self.kernels[self.kernels["tensor_idle"]].itertuples():
            out.append(words.say("kernel_tensor_idle", about=r.function, tensor_pct=r.tensor_pct,
                                 share_pct=r.share_pct))
        kernels_ns = float(self.kernels["time_ns"].sum())
        for r in self.unprofiled.itertuples():
            out.append(words.say("kernel_unprofiled", about=r.function,
                                 share_pct=100 * r.time_ns / kernels_ns if kernels_ns else 0.0))
        return out


def in_loop(report) -> tuple[pd.DataFrame, float, int]:
    """(the trace's kernels of the loop grouped by launch: name, function, grid, block,
    launches, time_ns (per iteration), share_pct (of the loop's wall time), top (in the
    first ``SHARE`` of the loop's kernel time); wall per iteration (ns); iterations)."""
    it = loops.of(report).first_gpu()
    main = it[it["kind"] == "main"] if (it["kind"] == "main").any() else it
    if main.empty:
        raise ValueError("no iterations")
    k = report.kernels()
    k = k[k["device_id"] == main["device_id"].iloc[0]]
    starts, ends = main["start_ns"].to_numpy(), main["end_ns"].to_numpy()
    order = np.argsort(starts)
    starts, ends = starts[order], ends[order]
    pos = np.searchsorted(starts, k["start_ns"].to_numpy(), side="right") - 1
    inside = (pos >= 0) & (k["start_ns"].to_numpy() < ends[np.clip(pos, 0, None)])
    k = k[inside]
    n = len(main)
    wall = float(main["wall_ns"].sum()) / n
    g = k.assign(grid=_dims(k, "grid"), block=_dims(k, "block")).groupby(
        ["name", "grid", "block"], sort=False).agg(
        short_name=("short_name", "first"), launches=("duration_ns", "size"),
        total_ns=("duration_ns", "sum")).reset_index()
    g["function"] = g["short_name"].fillna(g["name"])
    g["time_ns"] = g["total_ns"] / n
    g["launches"] = g["launches"] / n
    g = g.sort_values("time_ns", ascending=False).reset_index(drop=True)
    g["share_pct"] = 100 * g["time_ns"] / wall
    before = g["time_ns"].cumsum().shift(fill_value=0)
    g["top"] = before < SHARE * g["time_ns"].sum()
    return g.drop(columns=["short_name", "total_ns"]), wall, n


def of(judged: Judged, report) -> Joined:
    """Join ``judged`` (one ncu report) to the loop of ``report`` (its nsys trace)."""
    g, wall, n = in_loop(report)
    nk = judged.kernels
    keys = {"full": {}, "function": {}}
    for r in nk.itertuples():  # the first profiled kernel of each key stands for it
        keys["full"].setdefault((_norm(r.name), r.grid, r.block), r.kernel)
        keys["function"].setdefault((r.function, r.grid, r.block), r.kernel)
    match, how = [], []
    for r in g.itertuples():
        for level, key in (("full", (_norm(r.name), r.grid, r.block)),
                           ("function", (r.function, r.grid, r.block))):
            if key in keys[level]:
                match.append(keys[level][key]), how.append(level)
                break
        else:
            match.append(np.nan), how.append(None)
    g["ncu_kernel"] = pd.array(match, dtype="Int64")
    g["matched_by"] = how
    cols = ["limiter", "unit", "unit_pct", "tensor_pct", "headroom_pct", "roof", "precision",
            "duration_ns"]
    for c in cols:
        g[c] = [nk.at[int(x), c] if x is not pd.NA else None for x in g["ncu_kernel"]]
    g = g.rename(columns={"duration_ns": "ncu_duration_ns"})
    g["headroom_pct"] = pd.to_numeric(g["headroom_pct"], errors="coerce")
    g["saves_ns"] = g["time_ns"] * g["headroom_pct"].fillna(0) / 100
    g["saves_pct"] = 100 * g["saves_ns"] / wall
    best = judged.rules.dropna(subset=["capped_pct"]).groupby("kernel")["capped_pct"].max()
    g["rule_pct"] = [best.get(int(x), np.nan) if x is not pd.NA else np.nan
                     for x in g["ncu_kernel"]]
    g["rule_saves_ns"] = g["time_ns"] * g["rule_pct"].fillna(0) / 100
    names = classify.classify_names(g["name"]).set_index("name")
    capable = g["name"].map(names["tensor_core"]).fillna(False).astype(bool)
    g["tensor_idle"] = capable & (pd.to_numeric(g["tensor_pct"], errors="coerce")
                                  < IDLE_TENSOR_PCT)
    used = set(int(x) for x in g["ncu_kernel"].dropna())
    unmatched = nk[~nk["kernel"].isin(used)][["kernel", "function", "grid", "block"]]
    return Joined(g, wall, n, unmatched.reset_index(drop=True))


def _dims(k: pd.DataFrame, what: str) -> list[str]:
    cols = [f"{what}_{a}" for a in "xyz"]
    return ["x".join(str(int(x)) for x in row) for row in k[cols].itertuples(index=False)]


_SPACE = re.compile(r"\s+")


def _norm(name: str) -> str:
    """A demangled name as nsys and ncu both spell it (they differ in spaces and in how an
    anonymous namespace reads)."""
    return _SPACE.sub("", str(name).replace("(anonymous namespace)", "<unnamed>"))
