"""How fast the same work ran, with its uncertainty.

Iteration times are autocorrelated (the host's pace moves in stretches, clocks ramp), so an
interval cannot treat them as independent. nsightlab uses **batch medians**, the batch-means
method of simulation output analysis: each run's iterations in K consecutive batches
(4-12, each at least 3 autocorrelation times long, from the loop's own lag-1 autocorrelation
of the log times), the spread of the batches' log medians gives the standard error of the
run's log median, and a Welch t interval (``scipy.special.stdtrit``) bounds the log ratio.
On 1,000 synthetic pairs with noise models fitted to real captures (``benchmarks/pace_eval.py``)
it held the true ratio 94.4% of the time at 95%; on 1,500 pairs of AR(1) noise (phi 0-0.8,
Gaussian and t3 tails, 25-500 iterations) 93%, where the moving-block bootstrap of the medians
(``scipy.stats.bootstrap`` over blocks, percentile) held it 89%, 81% at phi 0.8: too few
blocks for a percentile interval.

A ratio of medians (B against A) whose interval holds 1 is "no measurable difference", as
benchstat prints "~"; the Welch t test of the same log ratio is given beside it (its p-value).
Only ``scipy.special`` is imported: ``scipy.stats`` costs a command about a second.
Within one run the interval holds only that run's noise: the spread
between runs (5-37% for the same code on a shared machine) needs several runs per side.
"""
from __future__ import annotations

import numpy as np

#: the intervals' confidence level
LEVEL = 0.95
#: batches per run: at least, at most
MIN_BATCHES, MAX_BATCHES = 4, 12
#: a batch is at least this many autocorrelation times long (and 5 iterations)
BATCH_TAUS = 3.0


def batches(x: np.ndarray) -> np.ndarray:
    """The log medians of ``x``'s consecutive batches (``MIN_BATCHES``-``MAX_BATCHES`` of
    them; fewer where neighbours are alike), the last incomplete batch dropped."""
    y = np.log(np.maximum(np.asarray(x, float), 1.0))
    n = len(y)
    d = y - np.median(y)
    r = float(np.corrcoef(d[:-1], d[1:])[0, 1]) if n > 3 and d[:-1].std() and d[1:].std() \
        else 0.0
    r = min(max(r, 0.0), 0.95)
    k = int(np.clip(n // max(5.0, BATCH_TAUS * (1 + r) / (1 - r)), MIN_BATCHES, MAX_BATCHES))
    m = n // k
    return np.median(y[:k * m].reshape(k, m), axis=1)


def _log_median(x: np.ndarray) -> tuple[float, float, int]:
    """(log median, variance of the log median, batches) of iteration times ``x``."""
    b = batches(x)
    return float(np.log(np.median(x))), float(b.var(ddof=1) / len(b)), len(b)


def median_interval(x, level: float = LEVEL) -> tuple[float, float, float]:
    """(median, low, high) of iteration times ``x``; NaN bounds under 8 iterations."""
    from scipy.special import stdtrit

    x = np.asarray(x, float)
    if len(x) < 2 * MIN_BATCHES:
        return (float(np.median(x)) if len(x) else float("nan")), float("nan"), float("nan")
    m, v, k = _log_median(x)
    q = float(stdtrit(k - 1, 0.5 + level / 2)) * np.sqrt(v)
    return float(np.exp(m)), float(np.exp(m - q)), float(np.exp(m + q))


def ratio(a, b, level: float = LEVEL) -> dict:
    """B's median iteration against A's (``ratio``: B / A, above 1 B is slower), its
    ``low``/``high`` interval at ``level`` (batch medians, Welch t), ``p_value``
    (the Welch t test of the log ratio, two-sided), ``significant`` (the interval
    leaves out 1) and ``method``. Under 8 iterations on a side: no interval (NaN), not
    significant."""
    from scipy.special import stdtr, stdtrit

    a, b = np.asarray(a, float), np.asarray(b, float)
    out = {"ratio": float(np.median(b) / np.median(a)) if len(a) and len(b) and np.median(a)
           else float("nan"), "low": float("nan"), "high": float("nan"), "level": level,
           "p_value": float("nan"), "significant": False, "a_n": int(len(a)),
           "b_n": int(len(b)), "method": "too few iterations for an interval", "runs": 1}
    if min(len(a), len(b)) < 2 * MIN_BATCHES or not np.isfinite(out["ratio"]):
        return out
    (ma, va, ka), (mb, vb, kb) = _log_median(a), _log_median(b)
    se2 = va + vb
    df = se2 ** 2 / (va ** 2 / (ka - 1) + vb ** 2 / (kb - 1)) if va and vb else ka + kb - 2
    q = float(stdtrit(df, 0.5 + level / 2)) * np.sqrt(se2)
    d = mb - ma
    p = 2 * float(stdtr(df, -abs(d) / np.sqrt(se2))) if se2 > 0 else float(d == 0)
    out.update(low=float(np.exp(d - q)), high=float(np.exp(d + q)), p_value=p,
               significant=bool(d - q > 0 or d + q < 0),
               method=(f"batch medians ({ka} batches of A's {len(a)} iterations, {kb} of B's "
                       f"{len(b)}), Welch t interval and test on the log ratio"))
    return out


def x(v: float) -> str:
    """A ratio as people read it: three decimals near 1 (1.012), two elsewhere (1.37)."""
    return f"{v:.3f}" if abs(v - 1) < 0.1 else f"{v:.2f}"


def span(lo: float, hi: float) -> str:
    """An interval of ratios, both ends to the same decimals: '0.918-1.103', '2.01-2.19'."""
    d = 3 if min(abs(lo - 1), abs(hi - 1)) < 0.1 else 2
    return f"{lo:.{d}f}-{hi:.{d}f}"


def runs_ratio(a_runs: list, b_runs: list, level: float = LEVEL) -> dict:
    """``ratio`` over several runs per side (lists of each run's iteration times): the
    ratio of the sides' medians of run medians, with the spread **between runs** in the
    interval (Welch t on the runs' log medians; where one side has a single run, the other
    side's between-run variance stands for both: the same machine). With one run per side it
    is ``ratio`` of the two runs (their within-run noise only), ``runs`` 1."""
    from scipy.special import stdtrit

    a_runs = [np.asarray(r, float) for r in a_runs if len(r)]
    b_runs = [np.asarray(r, float) for r in b_runs if len(r)]
    if not a_runs or not b_runs:
        return ratio([], [], level)
    if len(a_runs) == 1 and len(b_runs) == 1:
        return ratio(a_runs[0], b_runs[0], level)
    la = np.log([np.median(r) for r in a_runs])
    lb = np.log([np.median(r) for r in b_runs])
    va = la.var(ddof=1) if len(la) > 1 else None
    vb = lb.var(ddof=1) if len(lb) > 1 else None
    if va is None or vb is None:  # the other side's spread stands for both
        v = va if vb is None else vb
        se2, df = v / len(la) + v / len(lb), max(len(la), len(lb)) - 1
    else:
        se2 = va / len(la) + vb / len(lb)
        df = se2 ** 2 / ((va / len(la)) ** 2 / (len(la) - 1) + (vb / len(lb)) ** 2 /
                         (len(lb) - 1)) if va and vb else len(la) + len(lb) - 2
    # never narrower than the within-run noise of the runs' pooled iterations
    within = ratio(np.concatenate(a_runs), np.concatenate(b_runs), level)
    d = float(np.mean(lb) - np.mean(la))
    q = float(stdtrit(max(df, 1), 0.5 + level / 2)) * np.sqrt(se2)
    lo, hi = np.exp(d - q), np.exp(d + q)
    if np.isfinite(within["low"]):
        lo, hi = min(lo, within["low"]), max(hi, within["high"])
    return {"ratio": float(np.exp(d)), "low": float(lo), "high": float(hi), "level": level,
            "p_value": within["p_value"], "significant": bool(lo > 1 or hi < 1),
            "a_n": int(sum(map(len, a_runs))), "b_n": int(sum(map(len, b_runs))),
            "runs": min(len(a_runs), len(b_runs)), "a_runs": len(a_runs), "b_runs": len(b_runs),
            "a_run_medians": [float(np.exp(x)) for x in la],
            "b_run_medians": [float(np.exp(x)) for x in lb],
            "method": (f"{len(a_runs)} run{'s' if len(a_runs) > 1 else ''} of A, {len(b_runs)} "
                       f"of B: Welch t on the runs' log "
                       "medians (the spread between runs), never narrower than the pooled "
                       "iterations' batch-median interval")}
