"""The steady state: warm-up and outlier iterations set apart, by a robust rule over the
iterations' wall-clock times, so that no answer is an average the first iterations decide.

- **Warm-up** is the leading run of iterations slower than the steady band (compilation,
  autotuning, allocation, library initialisation make the first iterations slow; a count
  fixed in advance would be wrong for most runs);
- **outliers** are later iterations outside the band (a slow step: a sync, host work, a
  recompile; or one much faster: cut short);
- the band is the median of the iterations after the first quarter's slow ones, plus or minus
  ``BAND_SIGMAS`` robust standard deviations (1.4826 x the median absolute deviation), and at
  least ``BAND_MIN`` of the median: a 3% wobble is the steady state, not an outlier.

Statistics are reported as benchmarking tools report them: median, p95 and p99, and the
coefficient of variation of the steady iterations (trtexec warns above 2.5%, torch.utils.
benchmark above 10% IQR/median; nsightlab warns above ``UNSTABLE_COV_PCT``).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

BAND_SIGMAS = 3.0
BAND_MIN = 0.10  # of the median, above it (a slow iteration)
BAND_MIN_FAST = 0.25  # of the median, below it (a much faster iteration: cut short?)
UNSTABLE_COV_PCT = 10.0
#: the mean and median of the steady iterations differ by more than this: said
MEAN_MEDIAN_PCT = 5.0
WARM_UP, STEADY, OUTLIER = "warm-up", "steady", "outlier"


def phases(wall: np.ndarray) -> np.ndarray:
    """``WARM_UP``, ``STEADY`` or ``OUTLIER`` for each iteration of wall times ``wall`` (in
    order). Fewer than 4 iterations are all steady: too few to tell."""
    wall = np.asarray(wall, dtype=float)
    n = len(wall)
    out = np.full(n, STEADY, dtype=object)
    if n < 4:
        return out
    med = float(np.median(wall))
    sigma = 1.4826 * float(np.median(np.abs(wall - med)))
    slow = wall > med + max(BAND_SIGMAS * sigma, BAND_MIN * med)
    fast = wall < med - max(BAND_SIGMAS * sigma, BAND_MIN_FAST * med)
    lead = int(np.argmin(slow)) if not slow.all() else n  # leading slow run
    lead = min(lead, n // 2)
    out[:lead] = WARM_UP
    out[lead:][slow[lead:] | fast[lead:]] = OUTLIER
    if (out == STEADY).sum() < 3:  # no band to speak of: everything after warm-up
        out[lead:] = STEADY
    return out


def stats(wall: np.ndarray, phase: np.ndarray) -> dict:
    """Iteration statistics: ``iterations``, ``steady_iterations``, ``warmup_iterations``,
    ``outlier_iterations``; of the steady ones ``mean_ns``, ``p50_ns``, ``cov_pct``,
    ``iqr_ns``; of every iteration after warm-up ``p95_ns``, ``p99_ns``, ``max_ns``,
    ``min_ns``."""
    wall = np.asarray(wall, dtype=float)
    phase = np.asarray(phase, dtype=object)
    steady = wall[phase == STEADY]
    after = wall[phase != WARM_UP]
    if not len(steady):
        steady = after if len(after) else wall
    if not len(after):
        after = wall
    q25, q50, q75 = np.percentile(steady, [25, 50, 75]) if len(steady) else (0.0, 0.0, 0.0)
    mean = float(steady.mean()) if len(steady) else 0.0
    p95, p99 = np.percentile(after, [95, 99]) if len(after) else (0.0, 0.0)
    return {"iterations": int(len(wall)), "steady_iterations": int((phase == STEADY).sum()),
            "warmup_iterations": int((phase == WARM_UP).sum()),
            "outlier_iterations": int((phase == OUTLIER).sum()),
            "mean_ns": mean, "p50_ns": float(q50), "iqr_ns": float(q75 - q25),
            "cov_pct": float(100 * steady.std() / mean) if mean and len(steady) > 1 else 0.0,
            "p95_ns": float(p95), "p99_ns": float(p99),
            "min_ns": float(after.min()) if len(after) else 0.0,
            "max_ns": float(after.max()) if len(after) else 0.0}


#: budget parts, grouped as causes of a slow iteration are named
CAUSES = {"kernels_ns": "more GPU work (kernels)", "idle_host_ns": "host work with the GPU idle",
          "idle_sync_ns": "waits on host syncs", "idle_launch_ns": "launch overhead",
          "idle_unattributed_ns": "GPU idle (no cause known)"}


def explain(table: pd.DataFrame) -> pd.DataFrame:
    """The warm-up and outlier iterations of one GPU's budget ``table`` (with ``phase``): their
    wall time, how much slower than the steady median, and the part of the budget that grew
    most against the steady iterations' median (``why``)."""
    steady = table[table["phase"] == STEADY]
    odd = table[table["phase"] != STEADY]
    if odd.empty or steady.empty:
        return pd.DataFrame(columns=["iteration", "phase", "wall_ns", "excess_ns", "why"])
    med = steady[list(CAUSES) + ["wall_ns"]].median()
    copies = [c for c in table.columns if c.endswith("_ns") and (c.startswith(("h2d", "d2h",
                                                                               "d2d", "peer",
                                                                               "copy", "memset")))]
    rows = []
    for _, r in odd.iterrows():
        grow = {CAUSES[c]: float(r[c] - med[c]) for c in CAUSES}
        grow["copies"] = float(sum(r[c] for c in copies) - steady[copies].sum(axis=1).median())
        cause = max(grow, key=grow.get)
        excess = float(r["wall_ns"] - med["wall_ns"])
        why = (f"{cause} +{grow[cause] / 1e6:.2f} ms" if excess > 0 and grow[cause] > 0
               else "faster than the steady iterations: cut short?" if excess < 0 else "")
        rows.append({"iteration": int(r["iteration"]), "phase": r["phase"],
                     "wall_ns": float(r["wall_ns"]), "excess_ns": excess, "why": why})
    return pd.DataFrame(rows)
