"""How fast the same work ran, with its uncertainty.

Iteration times are autocorrelated (the host's pace moves in stretches, clocks ramp and step)
and heavy-tailed (stalls), so an interval can neither treat them as independent nor use their
variance. nsightlab compares the runs' **log medians**, each with a standard error from the
loop's robust spread (sigma: 1.4826 x the median absolute deviation of the log times; a
median's variance pi/2 sigma^2 / n) and its **effective iterations** n_eff = n / tau, tau the
integrated autocorrelation time of the iterations' signs about the median (what a median's
variance depends on): the larger of an AR(1) model's (signs correlate 2/pi asin(phi^k) at lag
k, phi the lag-1 autocorrelation with Kendall's small-sample bias taken out) and Geyer's
initial positive sequence over the signs themselves (a slow wander that lag 1 does not show).
A Welch t interval and test bound the log ratio, n_eff - 1 degrees of freedom a side (3 at
least: fewer put a short drifting loop's bounds far outside all its iterations).

Measured, not tuned (``benchmarks/pace_eval.py``, issue 61): on 1,000 pairs a cell from noise
models fitted to real captures, from 30 iterations a side on the 95% interval held the true
ratio 93.8-97.0% of the time, claimed a difference where there was none 3.5-6.2%, and found a
25% change at 30 iterations 97.2% (at 10 iterations: 91.6-92.9%, false claims 8.4%). The
batch medians used before (4-12 batches, Welch t on their spread) held it 90.6-95.3% with
false claims 9.4% at 30 iterations and 15.3% at 10; batch counts from the integrated
autocorrelation time and a rank test on batch medians did no better; a stationary block
bootstrap held it 84.4-92.1%; the AR(1) model alone did as well on that noise but held 54% of
A/A pairs of a slow wander it does not model (this interval 60-89%).

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
#: fewer iterations than this on a side: no interval
MIN_ITERATIONS = 8
#: the lag-1 autocorrelation is taken at most this high
MAX_PHI = 0.95
#: a side's t has at least this many degrees of freedom (the batch-means method's floor of 4
#: batches): at 1 or 2 its quantile (12.7, 4.3) puts the bounds far outside every iteration
#: of a short loop that drifts
MIN_DF = 3.0


def _logs(x) -> np.ndarray:
    """Log iteration times (1 ns at least: a log of 0 is no time)."""
    return np.log(np.maximum(np.asarray(x, float), 1.0))


def _sigma(y: np.ndarray) -> float:
    """The robust spread of log times ``y``: 1.4826 x their median absolute deviation (a
    Gaussian's sigma; stalls do not move it); where over half of them are equal (MAD 0),
    1.2533 x the mean absolute deviation; 0 where all are."""
    d = np.abs(y - np.median(y))
    mad = float(np.median(d))
    return 1.4826 * mad if mad > 0 else 1.2533 * float(d.mean())


def _autocorrelation(c: np.ndarray) -> np.ndarray:
    """The sample autocorrelation of ``c`` at lags 0 to n-1 (divisor n, by FFT: a loop of
    thousands of iterations costs no more than a few)."""
    c = c - c.mean()
    n = len(c)
    f = np.fft.rfft(c, 2 * n)
    cov = np.fft.irfft(f * np.conj(f), 2 * n)[:n]
    if cov[0] <= 0:
        return np.concatenate([[1.0], np.zeros(n - 1)])
    return cov / cov[0]


def _phi(y: np.ndarray, s: float) -> float:
    """The lag-1 autocorrelation of log times ``y`` (deviations clipped at 3 sigma ``s``: a
    stall does not make the loop look autocorrelated), with Kendall's small-sample bias
    (E r = phi - (1 + 3 phi) / n) taken out, in 0 to ``MAX_PHI``."""
    n = len(y)
    if n < 4 or s <= 0:
        return 0.0
    r = float(_autocorrelation(np.clip(y - np.median(y), -3 * s, 3 * s))[1])
    return float(np.clip((n * r + 1) / (n - 3), 0.0, MAX_PHI))


def _tau_ar1(phi: float, n: int) -> float:
    """The integrated autocorrelation time of the signs about the median of n iterations of
    a Gaussian AR(1) of lag-1 ``phi`` (signs correlate 2/pi asin(phi^k) at lag k)."""
    k = np.arange(1, n)
    return 1.0 + 2.0 * float(np.sum((1 - k / n) * (2 / np.pi) * np.arcsin(phi ** k)))


def _tau_signs(y: np.ndarray) -> float:
    """The integrated autocorrelation time of ``y``'s signs about its median by Geyer's
    initial positive sequence (sums of neighbouring autocorrelations, up to lag n/2, while
    positive): no model, so a wander that the lag-1 autocorrelation does not show counts."""
    rho = _autocorrelation(np.sign(y - np.median(y)))[:max(2, len(y) // 2) + 1]
    m = len(rho) // 2
    sums = rho[0:2 * m:2] + rho[1:2 * m:2]
    stop = int(np.argmax(sums <= 0)) if (sums <= 0).any() else m
    return max(-1.0 + 2.0 * float(sums[:stop].sum()), 1.0)


def _n_eff(y: np.ndarray, s: float) -> float:
    """How many independent iterations the log times ``y`` (robust spread ``s``) are worth
    for their median: n / tau, tau the larger of the AR(1) model's and Geyer's
    (``_tau_ar1``, ``_tau_signs``), at least 2."""
    n = len(y)
    return max(n / max(_tau_ar1(_phi(y, s), n), _tau_signs(y)), 2.0)


def _log_median(x) -> tuple[float, float, float, float]:
    """(log median, variance of the log median, its degrees of freedom, effective
    iterations) of iteration times ``x``: pi/2 sigma^2 / n_eff (the variance of a median
    of n_eff independent Gaussian draws), n_eff - 1 degrees of freedom (``MIN_DF`` at
    least)."""
    y = _logs(x)
    s = _sigma(y)
    n_eff = _n_eff(y, s)
    return (float(np.log(max(np.median(x), 1.0))), np.pi / 2 * s * s / n_eff,
            max(n_eff - 1.0, MIN_DF),
            n_eff)


def welch(d: float, va: float, vb: float, dfa: float, dfb: float,
          level: float = LEVEL) -> tuple[float, float, float]:
    """(low, high, p-value) of a difference ``d`` of two estimates of variances ``va``,
    ``vb`` with ``dfa``, ``dfb`` degrees of freedom: Welch's t, Satterthwaite's degrees of
    freedom, two-sided."""
    from scipy.special import stdtr, stdtrit

    se2 = va + vb
    df = se2 ** 2 / (va ** 2 / dfa + vb ** 2 / dfb) if va > 0 and vb > 0 else dfa + dfb
    q = float(stdtrit(df, 0.5 + level / 2)) * np.sqrt(se2)
    p = 2 * float(stdtr(df, -abs(d) / np.sqrt(se2))) if se2 > 0 else float(d == 0)
    return d - q, d + q, p


def median_interval(x, level: float = LEVEL) -> tuple[float, float, float]:
    """(median, low, high) of iteration times ``x`` (the log median's t interval,
    ``_log_median``); NaN bounds under ``MIN_ITERATIONS`` iterations."""
    from scipy.special import stdtrit

    x = np.asarray(x, float)
    if len(x) < MIN_ITERATIONS:
        return (float(np.median(x)) if len(x) else float("nan")), float("nan"), float("nan")
    m, v, df, _ = _log_median(x)
    q = float(stdtrit(df, 0.5 + level / 2)) * np.sqrt(v)
    with np.errstate(over="ignore"):  # a bound past 1e308 is unbounded
        return float(np.exp(m)), float(np.exp(m - q)), float(np.exp(m + q))


def ratio(a, b, level: float = LEVEL) -> dict:
    """B's median iteration against A's (``ratio``: B / A, above 1 B is slower), its
    ``low``/``high`` interval at ``level`` and ``p_value`` (Welch's t on the log medians,
    each side's variance from its robust spread and effective iterations, ``_log_median``),
    ``significant`` (the interval leaves out 1) and ``method``. Under ``MIN_ITERATIONS``
    on a side: no interval (NaN), not significant."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    out = {"ratio": float(np.median(b) / np.median(a)) if len(a) and len(b) and np.median(a)
           else float("nan"), "low": float("nan"), "high": float("nan"), "level": level,
           "p_value": float("nan"), "significant": False, "a_n": int(len(a)),
           "b_n": int(len(b)), "method": "too few iterations for an interval", "runs": 1}
    if min(len(a), len(b)) < MIN_ITERATIONS or not np.isfinite(out["ratio"]):
        return out
    (ma, va, da, ea), (mb, vb, db, eb) = _log_median(a), _log_median(b)
    lo, hi, p = welch(mb - ma, va, vb, da, db, level)
    with np.errstate(over="ignore"):  # a bound past 1e308 is unbounded
        low, high = float(np.exp(lo)), float(np.exp(hi))
    out.update(low=low, high=high, p_value=p,
               significant=bool(lo > 0 or hi < 0),
               method=(f"log medians, each with the spread of its iterations (MAD) over its "
                       f"effective iterations (A's {len(a)} worth {ea:.0f} independent ones, "
                       f"B's {len(b)} {eb:.0f}, from their autocorrelation), Welch t interval "
                       "and test on the log ratio"))
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
                       "iterations' interval")}
