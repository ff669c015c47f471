"""Interval helpers against brute force on random intervals."""
import numpy as np
import pytest

from nsightlab.analysis.timeline import busy_time, covered, gaps, slice_reduce, union


@pytest.mark.parametrize("seed", range(5))
def test_union_busy_time_covered_and_gaps_match_brute_force(seed):
    rng = np.random.default_rng(seed)
    s = rng.integers(0, 1000, 200)
    e = s + rng.integers(0, 30, 200)
    grid = np.zeros(1100, bool)
    for a, b in zip(s, e):
        grid[a:b] = True
    ms, me = union(s, e)
    assert (me - ms).sum() == grid.sum() == busy_time(s, e, chunk=17)
    a, b = np.array([0, 100, 500]), np.array([100, 600, 1100])
    assert list(covered(ms, me, a, b)) == [grid[x:y].sum() for x, y in zip(a, b)]
    gs, ge = gaps(s, e)
    for x, y in zip(gs, ge):  # every reported gap is idle, and bounded by activity
        assert not grid[x:y].any() and x < y
    assert sum(ge - gs) == (~grid[s.min():max(e)]).sum()


def test_slice_reduce():
    v = np.array([5, 3, 8, 1, 9])
    lo, hi = np.array([0, 1, 3, 2]), np.array([2, 4, 5, 2])
    assert list(slice_reduce(np.minimum, v, lo, hi, -1)) == [3, 1, 1, -1]
    assert list(slice_reduce(np.maximum, v, lo, hi, -1)) == [5, 8, 9, -1]


def test_union_in_order_first_positions_are_where_a_search_finds_each_start():
    """The streamed budget takes the operation that ends each idle gap from
    ``union_in_order``'s first positions instead of searching the batch's starts: for
    intervals in start order without negative lengths (ties, zero lengths, nesting) they
    are the first operation with each merged interval's start, as ``searchsorted`` 'left'
    found it; and the union is ``union``'s."""
    from nsightlab.analysis.timeline import union_in_order

    rng = np.random.default_rng(11)
    for _ in range(500):
        n = int(rng.integers(1, 300))
        s = np.sort(rng.integers(0, int(rng.integers(1, 2000)), n)).astype(np.int64)
        e = s + rng.integers(0, 50, n) * (rng.random(n) < 0.8)
        us, ue, first = union_in_order(s, e)
        np.testing.assert_array_equal(first, np.searchsorted(s, us, "left"))
        ref_s, ref_e = union(s, e)
        np.testing.assert_array_equal(us, ref_s)
        np.testing.assert_array_equal(ue, ref_e)
