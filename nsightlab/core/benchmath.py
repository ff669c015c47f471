"""How fast the same work ran, with its uncertainty: one small statistics package, in the
manner of Go's benchmath, with no I/O and no words: ``summary`` of a loop's iteration times
(``Summary``: the median and its interval), ``comparison`` of two loops (``Comparison``: the ratio
of their medians, its interval and test) and ``runs_comparison`` of several runs a side.

Iteration times are autocorrelated (the host's pace moves in stretches, clocks ramp and step)
and heavy-tailed (stalls): the interval is on the **log median**, of variance pi/2 sigma^2 /
n_eff, sigma the robust spread (1.4826 x the MAD of the log times), n_eff = n / tau the
**effective iterations**, tau the integrated autocorrelation time of the signs about the
median (the larger of an AR(1) model's and Geyer's); a Welch t interval and test bound the
log ratio. An interval that holds 1 is "no measurable difference", as benchstat prints "~".
It holds one run's noise: the spread between runs (5-37% for the same code on a shared
machine) needs several runs a side. How it was chosen, measured: docs/iterations.md (issue
61, ``benchmarks/pace_eval.py``). Only ``scipy.special`` is imported (``scipy.stats``: ~1 s).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: the intervals' confidence level
LEVEL = 0.95
#: fewer iterations than this on a side: no interval
MIN_ITERATIONS = 8
#: the lag-1 autocorrelation is taken at most this high
MAX_PHI = 0.95
#: a side's t has at least this many degrees of freedom (at 1 or 2, 12.7 or 4.3 sigma: bounds
#: far outside every iteration of a short loop that drifts; the batch means' floor was 4)
MIN_DF = 3.0


@dataclass(frozen=True)
class Summary:
    """A sample's median (``centre``), its interval at ``level`` (NaN: too few), n, n_eff."""
    centre: float
    low: float
    high: float
    n: int
    n_eff: float
    level: float


@dataclass(frozen=True)
class Comparison:
    """B against A: the ``ratio`` of their medians (above 1 B is slower), its ``low``/``high``
    interval at ``level``, ``p_value`` and ``significant`` (it leaves out 1); iterations and
    effective ones a side; over several runs (``runs_comparison``), runs and medians a side."""
    ratio: float
    low: float = np.nan
    high: float = np.nan
    level: float = LEVEL
    p_value: float = np.nan
    significant: bool = False
    a_n: int = 0
    b_n: int = 0
    runs: int = 1
    a_runs: int | None = None
    b_runs: int | None = None
    a_run_medians: tuple | None = None
    b_run_medians: tuple | None = None
    a_n_eff: float = np.nan
    b_n_eff: float = np.nan


def median(x, empty: float = np.nan) -> float:
    """The median of ``x``, ``empty`` where it holds nothing (the one median of the package)."""
    return float(np.median(x)) if len(x) else empty


def _logs(x) -> np.ndarray:
    """Log iteration times (1 ns at least: a log of 0 is no time)."""
    return np.log(np.maximum(np.asarray(x, float), 1.0))


def _sigma(y: np.ndarray) -> float:
    """The robust spread of log times ``y``: 1.4826 x their MAD (a Gaussian's sigma; stalls do
    not move it); over half of them equal (MAD 0): 1.2533 x the mean absolute deviation."""
    d = np.abs(y - median(y))
    mad = median(d)
    return 1.4826 * mad if mad > 0 else 1.2533 * float(d.mean())


def _autocorrelation(c: np.ndarray) -> np.ndarray:
    """The sample autocorrelation of ``c`` at lags 0 to n-1 (divisor n; by FFT: cheap)."""
    c = c - c.mean()
    n = len(c)
    f = np.fft.rfft(c, 2 * n)
    cov = np.fft.irfft(f * np.conj(f), 2 * n)[:n]
    if cov[0] <= 0:
        return np.concatenate([[1.0], np.zeros(n - 1)])
    return cov / cov[0]


def _phi(y: np.ndarray, s: float) -> float:
    """The lag-1 autocorrelation of log times ``y`` (clipped at 3 sigma ``s``: a stall is no
    autocorrelation) less Kendall's bias (E r = phi - (1 + 3 phi) / n), in 0 to ``MAX_PHI``."""
    n = len(y)
    if n < 4 or s <= 0:
        return 0.0
    r = float(_autocorrelation(np.clip(y - median(y), -3 * s, 3 * s))[1])
    return float(np.clip((n * r + 1) / (n - 3), 0.0, MAX_PHI))


def _tau_ar1(phi: float, n: int) -> float:
    """The integrated autocorrelation time of the signs about the median of n iterations of
    a Gaussian AR(1) of lag-1 ``phi`` (signs correlate 2/pi asin(phi^k) at lag k)."""
    k = np.arange(1, n)
    return 1.0 + 2.0 * float(np.sum((1 - k / n) * (2 / np.pi) * np.arcsin(phi ** k)))


def _tau_signs(y: np.ndarray) -> float:
    """The integrated autocorrelation time of ``y``'s signs about its median by Geyer's initial
    positive sequence (no model: a wander that the lag-1 autocorrelation does not show counts)."""
    rho = _autocorrelation(np.sign(y - median(y)))[:max(2, len(y) // 2) + 1]
    m = len(rho) // 2
    sums = rho[0:2 * m:2] + rho[1:2 * m:2]
    stop = int(np.argmax(sums <= 0)) if (sums <= 0).any() else m
    return max(-1.0 + 2.0 * float(sums[:stop].sum()), 1.0)


def _n_eff(y: np.ndarray, s: float) -> float:
    """How many independent iterations the log times ``y`` (robust spread ``s``) are worth for
    their median: n / tau, tau the larger of ``_tau_ar1`` and ``_tau_signs``, at least 2."""
    n = len(y)
    return max(n / max(_tau_ar1(_phi(y, s), n), _tau_signs(y)), 2.0)


def _log_median(x) -> tuple[float, float, float, float]:
    """(log median, its variance pi/2 sigma^2 / n_eff, its degrees of freedom n_eff - 1 or
    ``MIN_DF``, effective iterations n_eff) of iteration times ``x``."""
    y = _logs(x)
    s = _sigma(y)
    n_eff = _n_eff(y, s)
    return float(np.log(max(median(x), 1.0))), np.pi / 2 * s * s / n_eff, \
        max(n_eff - 1.0, MIN_DF), n_eff


def welch(d: float, va: float, vb: float, dfa: float, dfb: float,
          level: float = LEVEL) -> tuple[float, float, float]:
    """(low, high, p-value) of a difference ``d`` of estimates of variances ``va``, ``vb`` (of
    ``dfa``, ``dfb`` degrees of freedom): Welch's t, Satterthwaite's df, two-sided."""
    from scipy.special import stdtr, stdtrit

    se2 = va + vb
    df = se2 ** 2 / (va ** 2 / dfa + vb ** 2 / dfb) if va > 0 and vb > 0 else dfa + dfb
    q = float(stdtrit(df, 0.5 + level / 2)) * np.sqrt(se2)
    p = 2 * float(stdtr(df, -abs(d) / np.sqrt(se2))) if se2 > 0 else float(d == 0)
    return d - q, d + q, p


def summary(x, level: float = LEVEL) -> Summary:
    """Iteration times ``x``: their median and its interval (the log median's t interval,
    ``_log_median``); no interval (NaN) under ``MIN_ITERATIONS`` iterations."""
    if len(x) < MIN_ITERATIONS:
        return Summary(median(x), np.nan, np.nan, len(x), np.nan, level)
    m, v, df, n_eff = _log_median(x)
    lo, hi, _ = welch(m, v, 0.0, df, 0.0, level)  # one estimate: the t interval of its own
    with np.errstate(over="ignore"):  # a bound past 1e308 is unbounded
        return Summary(median(x), float(np.exp(lo)), float(np.exp(hi)), len(x), n_eff, level)


def comparison(a, b, level: float = LEVEL) -> Comparison:
    """B's iteration times against A's (Welch's t on the log medians, ``_log_median``); under
    ``MIN_ITERATIONS`` on a side no interval (NaN), not significant."""
    r = median(b) / (median(a) or np.nan)
    if min(len(a), len(b)) < MIN_ITERATIONS or not np.isfinite(r):
        return Comparison(r, level=level, a_n=len(a), b_n=len(b))
    (ma, va, da, ea), (mb, vb, db, eb) = _log_median(a), _log_median(b)
    lo, hi, p = welch(mb - ma, va, vb, da, db, level)
    with np.errstate(over="ignore"):  # a bound past 1e308 is unbounded
        return Comparison(r, float(np.exp(lo)), float(np.exp(hi)), level, p,
                          bool(lo > 0 or hi < 0), len(a), len(b), a_n_eff=ea, b_n_eff=eb)


def runs_comparison(a_runs: list, b_runs: list, level: float = LEVEL) -> Comparison:
    """``comparison`` over several runs per side (lists of each run's iteration times): the
    ratio of the sides' geometric means of run medians, the spread **between runs** in the
    interval (Welch t on the runs' log medians; a side of one run takes the other's spread),
    never narrower than the pooled iterations'. One run a side: ``comparison`` of the two."""
    a_runs, b_runs = ([np.asarray(r, float) for r in x if len(r)] for x in (a_runs, b_runs))
    if not a_runs or not b_runs:
        return comparison([], [], level)
    if len(a_runs) == 1 and len(b_runs) == 1:
        return comparison(a_runs[0], b_runs[0], level)
    la, lb = (np.log([median(r) for r in x]) for x in (a_runs, b_runs))
    na, nb, d = len(la), len(lb), float(np.mean(lb) - np.mean(la))
    if na == 1 or nb == 1:  # the other side's spread stands for both: one estimate
        v = (la if na > 1 else lb).var(ddof=1)
        lo, hi, _ = welch(d, v / na + v / nb, 0.0, max(na, nb) - 1, 0.0, level)
    else:
        lo, hi, _ = welch(d, la.var(ddof=1) / na, lb.var(ddof=1) / nb, na - 1, nb - 1, level)
    lo, hi = np.exp(lo), np.exp(hi)
    within = comparison(np.concatenate(a_runs), np.concatenate(b_runs), level)
    if np.isfinite(within.low):  # never narrower than the pooled iterations' within-run noise
        lo, hi = min(lo, within.low), max(hi, within.high)
    return Comparison(float(np.exp(d)), float(lo), float(hi), level, within.p_value,
                      bool(lo > 1 or hi < 1), int(sum(map(len, a_runs))),
                      int(sum(map(len, b_runs))), min(na, nb), na, nb,
                      tuple(float(np.exp(x)) for x in la), tuple(float(np.exp(x)) for x in lb))
