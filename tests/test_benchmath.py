"""The statistics package (``nsightlab.core.benchmath``, issue 63): one median, one interval,
one test, checked against what they estimate (the true median, the order statistics' interval,
scipy's Welch t) and on loops whose answer is known."""
from __future__ import annotations

import numpy as np
import pytest

from nsightlab.core import benchmath as bm


def ar1(rng, n: int, phi: float = 0.7, scale: float = 1.0, sd: float = 0.05) -> np.ndarray:
    """``n`` iteration times about 4 ms, their log an AR(1) of lag-1 ``phi``, times ``scale``."""
    a = np.zeros(n)
    for j in range(1, n):
        a[j] = phi * a[j - 1] + rng.normal(0, sd)
    return scale * 4e6 * np.exp(a)


def test_the_one_median():
    x = np.array([5.0, 1.0, 4.0, 2.0])
    assert bm.median(x) == np.median(x) == 3.0
    assert np.isnan(bm.median([])) and bm.median([], 0.0) == 0.0
    assert bm.summary(x).centre == bm.median(x)


def test_the_interval_holds_the_true_median_as_often_as_it_says():
    """Loops of 100 iterations whose true median is 4 ms, independent (log-normal) and
    autocorrelated (AR(1), lag-1 0.7): the 95% interval holds it 92-98% of 300 loops."""
    rng = np.random.default_rng(1)
    for draw in (lambda: 4e6 * np.exp(rng.normal(0, 0.1, 100)), lambda: ar1(rng, 100)):
        held = [bm.summary(draw()) for _ in range(300)]
        assert 0.92 <= np.mean([s.low <= 4e6 <= s.high for s in held]) <= 0.98


def test_the_interval_of_independent_iterations_is_the_order_statistics_one():
    """Independent iterations: about as many effective iterations as iterations, and the
    median's interval as wide as the distribution-free one (the order statistics a binomial
    puts around the median, scipy) within 20% on average over 20 loops."""
    from scipy import stats

    rng = np.random.default_rng(1)
    n, widths = 400, []
    j = int(stats.binom.ppf(0.025, n, 0.5))
    for _ in range(20):
        x = 4e6 * np.exp(rng.normal(0, 0.1, n))
        s, y = bm.summary(x), np.sort(x)
        assert s.n == n and 0.6 * n <= s.n_eff <= n and s.low < s.centre < s.high
        widths.append(np.log(s.high / s.low) / np.log(y[n - j] / y[j - 1]))
    assert np.mean(widths) == pytest.approx(1.0, abs=0.2)
    wide = bm.summary(x, 0.99)
    assert wide.low < s.low and wide.high > s.high and wide.level == 0.99


def test_autocorrelated_iterations_are_worth_fewer():
    """An AR(1) loop of lag-1 0.8: far fewer effective iterations than iterations, and a wider
    interval than the same values shuffled (their order, not their spread, makes it wider)."""
    rng = np.random.default_rng(2)
    x = ar1(rng, 300, phi=0.8)
    s, shuffled = bm.summary(x), bm.summary(rng.permutation(x))
    assert s.n_eff < s.n / 3
    assert shuffled.n_eff > s.n_eff
    assert s.high / s.low > shuffled.high / shuffled.low


def test_too_few_iterations_have_no_interval():
    s = bm.summary([1.0, 2.0, 3.0])
    assert s.centre == 2.0 and np.isnan(s.low) and np.isnan(s.high) and s.n == 3
    c = bm.comparison([1.0, 2.0, 3.0], [1.0, 2.0, 3.0])
    assert c.ratio == 1.0 and np.isnan(c.low) and np.isnan(c.p_value) and not c.significant
    assert (c.a_n, c.b_n) == (3, 3)
    assert np.isnan(bm.comparison([], []).ratio)


def test_the_same_iterations_are_no_difference():
    """A loop against itself: ratio 1, inside its interval, p 1."""
    x = ar1(np.random.default_rng(3), 100)
    c = bm.comparison(x, x)
    assert c.ratio == 1.0 and c.low < 1 < c.high and c.p_value == pytest.approx(1.0)
    assert not c.significant and c.a_n_eff == c.b_n_eff


def test_a_clear_difference_is_found_and_an_aa_pair_rarely():
    """B 1.5x slower: significant, the interval holds 1.5. A/A pairs of the same noise: a
    difference claimed about as often as the level allows (at most 4 of 40 at 95%)."""
    rng = np.random.default_rng(5)
    slower = bm.comparison(ar1(rng, 200), ar1(rng, 200, scale=1.5))
    assert slower.significant and slower.p_value < 1e-6
    assert slower.low <= 1.5 <= slower.high * 1.05 and slower.ratio > 1.3
    claimed, held = 0, 0
    for _ in range(40):
        c = bm.comparison(ar1(rng, 100), ar1(rng, 100))
        claimed += c.significant
        held += c.low <= 1 <= c.high
        assert c.significant == (c.p_value < 1 - c.level)
    assert claimed <= 4 and held == 40 - claimed


def test_the_test_is_welchs_t():
    """``welch`` gives scipy's Welch t interval and p-value for the same variances and degrees
    of freedom (as scipy.stats.ttest_ind_from_stats gets them from means, deviations and
    counts)."""
    from scipy import stats

    va, vb, na, nb, d = 0.004, 0.009, 12.0, 30.0, 0.05
    lo, hi, p = bm.welch(d, va, vb, na - 1, nb - 1)
    want = stats.ttest_ind_from_stats(0.0, np.sqrt(va * na), na, d, np.sqrt(vb * nb), nb,
                                      equal_var=False)
    assert p == pytest.approx(want.pvalue, rel=1e-9)
    df = (va + vb) ** 2 / (va ** 2 / (na - 1) + vb ** 2 / (nb - 1))
    q = stats.t.ppf(0.975, df) * np.sqrt(va + vb)
    assert (lo, hi) == pytest.approx((d - q, d + q), rel=1e-9)


def test_several_runs_put_the_spread_between_runs_in_the_interval():
    """Runs of different pace a side (the machine between runs): the ratio of the sides'
    geometric mean run medians, an interval no narrower than the pooled iterations', their
    run medians kept; one run a side is ``compare``."""
    rng = np.random.default_rng(7)
    a = [ar1(rng, 60, scale=s) for s in (1.0, 1.1, 0.95)]
    b = [ar1(rng, 60, scale=s) for s in (1.05, 0.9)]
    c = bm.runs_comparison(a, b)
    pooled = bm.comparison(np.concatenate(a), np.concatenate(b))
    assert (c.runs, c.a_runs, c.b_runs, c.a_n, c.b_n) == (2, 3, 2, 180, 120)
    assert c.a_run_medians == pytest.approx([np.median(r) for r in a])
    assert c.ratio == pytest.approx(np.exp(np.mean(np.log(c.b_run_medians))
                                           - np.mean(np.log(c.a_run_medians))))
    assert c.low <= pooled.low and c.high >= pooled.high and c.low < c.ratio < c.high
    assert bm.runs_comparison(a[:1], b[:1]) == bm.comparison(a[0], b[0])
    assert bm.runs_comparison(a[:1], b[:1]).a_runs is None
    assert np.isnan(bm.runs_comparison([], b).ratio)


def test_ratio_interval_holds_the_truth_and_says_no_difference_inside_the_noise():
    """(From tests/test_pace.py, where it checked ``pace.ratio``.)"""
    rng = np.random.default_rng(5)

    def loop(n, scale):
        a = np.zeros(n)
        for j in range(1, n):
            a[j] = 0.7 * a[j - 1] + rng.normal(0, 0.05)
        return scale * 4e6 * np.exp(a)

    same = bm.comparison(loop(200, 1.0), loop(200, 1.0))
    assert not same.significant or abs(same.ratio - 1) < 0.03
    assert same.low < same.ratio < same.high
    slower = bm.comparison(loop(200, 1.0), loop(200, 1.5))
    assert slower.significant and slower.low <= 1.5 <= slower.high * 1.05
    few = bm.comparison([1.0, 2.0, 3.0], [1.0, 2.0, 3.0])
    assert np.isnan(few.low) and not few.significant
    s = bm.summary(loop(100, 1.0))
    assert s.low < s.centre < s.high
