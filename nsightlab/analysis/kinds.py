"""Kinds of iteration: what a loop's iterations are, from their wall-clock times alone.

A loop is rarely one kind of iteration. Slow iterations are often the answer (every 4th one
logs an activation to the host; the loop slows down after the cache fills), so nothing is
set apart as an "outlier" because it is slow. The rules, each with a worked example in
``docs/iterations.md``:

- **Warm-up** is a prefix, found by change point: the split of the sequence (log times) into a
  leading part and the rest that fits best, kept when the leading part is slower, then cut back
  to its last iteration slower than what its place in the loop predicts (compilation,
  autotuning, allocation; a recurring slow iteration that happens to come first is the loop's).
- **The loop** is every iteration after warm-up. Its statistics (mean, median, percentiles,
  CoV) are over all of them, never after trimming; the mean is what throughput sees.
- **Kinds**: the loop's times (divided by a trend line where there is one) are split into
  groups by value at their largest gaps. A split holds when the groups' medians differ by at
  least max(``KIND_MIN_PCT``, ``KIND_SIGMAS`` robust sigma of the larger group) and do not
  touch. The largest group is the main kind; another group is a kind when it has at least
  ``MIN_KIND`` iterations, named by its pattern: *recurring* (every Nth), a *phase* (the loop
  changes speed after iteration K, or before it), a *cluster* (iterations a-b), or
  *scattered*.
- **Trend**: a gradual slowdown or speed-up (bins of iterations rise or fall together, a line
  fits them better than one step, and the line moves at least ``TREND_MIN_PCT``) is said with
  its size, and is not split into kinds.
- **Outliers** are only isolated, rare iterations with no pattern: groups too small to be a
  kind, or scattered ones, together at most ``OUTLIER_MAX_PCT`` of the loop.
"""
from __future__ import annotations

import contextvars
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

from nsightlab.core import benchmath

WARM_UP, LOOP = "warm-up", "loop"
MAIN, OUTLIER = "main", "outlier"
#: a kind holds at least this many iterations
MIN_KIND = 3
#: a kind's median differs from the main kind's by at least this much (%), and by
#: ``KIND_SIGMAS`` robust standard deviations of the main kind
KIND_MIN_PCT = 10.0
KIND_SIGMAS = 3.0
#: scattered odd iterations are outliers while they are at most this share of the loop (%)
OUTLIER_MAX_PCT = 5.0
#: a trend moves the loop's time by at least this much (%), first bin to last
TREND_MIN_PCT = 10.0
#: at most this many kinds (main included)
MAX_KINDS = 4
#: the steady iterations vary more than this (CoV, %): unstable
UNSTABLE_COV_PCT = 10.0
#: the loop's mean and median differ by more than this (%): said
MEAN_MEDIAN_PCT = 5.0
#: the warm-up is looked for in the first this many iterations; kinds by position (every
#: Nth) in loops of at most this many (longer ones: by value only): 1M iterations in ~1 s
WARMUP_SEARCH = 20_000
MAX_PERIODIC_N = 100_000
#: names of the kinds after the main one
NAMES = "BCDEFGH"


@dataclass
class Kind:
    """One kind of iteration: ``rows`` (iteration numbers, in order), ``pattern`` (recurring,
    phase, cluster, scattered or main), ``period`` (recurring kinds), ``words`` (which
    iterations, as a person says it) and ``head`` (the same without their count)."""

    name: str
    rows: np.ndarray
    pattern: str
    words: str
    period: int | None = None
    head: str = ""
    basis: str = "pace"  # "work": it runs other work than the main kind; "pace": the same


@dataclass
class Loop:
    """A loop's iterations sorted out (``classify``): ``label`` per iteration (``WARM_UP``,
    a kind's name or ``OUTLIER``), the kinds (the main one first), the warm-up length and the
    trend, if any (first_ns / last_ns: medians of the first and last quarter of the loop,
    change_pct)."""

    label: np.ndarray
    warmup: int
    kinds: list[Kind] = field(default_factory=list)
    trend: dict | None = None
    cycle: int | None = None  # iterations per unit where the work repeats in a cycle

    @property
    def outliers(self) -> np.ndarray:
        return np.flatnonzero(self.label == OUTLIER)

    @property
    def phase(self) -> np.ndarray:
        return np.where(self.label == WARM_UP, WARM_UP, LOOP)


def classify(wall, cycle: int = 0, work=None) -> Loop:
    """Warm-up, kinds, trend and outliers of iterations with wall times ``wall`` (in order),
    work first where ``work`` (one id per iteration, equal ids equal work:
    ``nsightlab.analysis.work``) is given:

    - the warm-up is first the leading iterations whose work does not come back (compile,
      autotune, lazy initialisation: each one-off within ``WORK_WARMUP_GAP`` of the last),
      then, within the main kind of work, a slower start only where it is significant;
    - every other work that recurs is a kind of work, with its pattern (every Nth, a cycle,
      a phase, scattered); work seen once or twice is judged by its pace with the main kind;
    - the pace of the main kind of work is sorted out by time (``_by_time``: kinds of pace,
      a trend, outliers), and only there.

    Without ``work`` (or with one kind of work) it is ``_by_time`` alone."""
    w = np.maximum(np.asarray(wall, dtype=float), 1.0)
    n = len(w)
    ids = None if work is None else np.asarray(work, dtype=np.int64)
    if ids is None or len(ids) != n or n < 4 or len(np.unique(ids)) == 1:
        return _by_time(w, cycle)
    k = _work_warm_up(ids)
    loop_ids = ids[k:]
    if len(loop_ids) < 4 or len(np.unique(loop_ids)) == 1:
        return _pace_of_main(w, np.arange(k, n), k, [], cycle, None)
    uniq, cnt = np.unique(loop_ids, return_counts=True)
    time_of = np.array([w[k:][loop_ids == u].sum() for u in uniq])
    main_id = uniq[np.lexsort((time_of, cnt))[-1]]
    from nsightlab.analysis.work import cycle as work_cycle
    unit = work_cycle(loop_ids)
    work_kinds, with_main = [], [ids == main_id]
    for u, c in zip(uniq, cnt):
        if u == main_id:
            continue
        rows = np.flatnonzero(ids == u)
        rows = rows[rows >= k]
        if c >= MIN_KIND:
            work_kinds.append(rows)
        else:  # work seen once or twice (a sync the last iteration skips): judged by its pace
            with_main.append(ids == u)
    main_rows = np.flatnonzero(np.logical_or.reduce(with_main))
    main_rows = main_rows[main_rows >= k]
    return _pace_of_main(w, main_rows, k, work_kinds, cycle, unit)


#: a leading iteration of one-off work extends the warm-up while it comes within this many
#: iterations of the warm-up's end (the first optimizer step after 3 micro-batches)
WORK_WARMUP_GAP = 4


def _work_warm_up(ids: np.ndarray) -> int:
    """The warm-up by work: leading iterations whose work never comes back, each within
    ``WORK_WARMUP_GAP`` of the last (a one-off later in the loop is not warm-up), in the
    first half of the run."""
    _, inverse, count = np.unique(ids, return_inverse=True, return_counts=True)
    once = count[inverse.reshape(-1)] == 1
    k = 0
    for i in range(min(len(ids) // 2, WARMUP_SEARCH)):
        if i > k + WORK_WARMUP_GAP - 1:
            break
        if once[i]:
            k = i + 1
    return k


def _pace_of_main(w: np.ndarray, main_rows: np.ndarray, k: int, work_kinds: list,
                  cycle: int, unit: int | None) -> Loop:
    """The loop's labels: warm-up ``k`` by work, then the kinds of work ``work_kinds`` (rows),
    then the main kind of work's own pace (``_by_time`` over its iterations, in order: its
    slower start is warm-up too, its kinds of pace and outliers are the loop's)."""
    n = len(w)
    label = np.full(n, MAIN, dtype=object)
    label[:k] = WARM_UP
    pace = _by_time(w[main_rows], cycle if not work_kinds else 0)
    if pace.warmup:  # a slower start of the main work: the loop's warm-up goes that far
        k = max(k, int(main_rows[pace.warmup - 1]) + 1)
        label[:k] = WARM_UP
    kinds: list[Kind] = []
    for rows in work_kinds:
        rows = rows[rows >= k]
        if len(rows) >= MIN_KIND:
            kinds.append(Kind("", rows, *_pattern(rows, k, n), basis="work"))
    for x in pace.kinds[1:]:
        rows = main_rows[x.rows]
        rows = rows[rows >= k]
        if len(rows) >= MIN_KIND:  # what warm-up left of it: a kind still, or the main's
            kinds.append(Kind("", rows, *_pattern(rows, k, n)))
    kinds.sort(key=lambda x: (x.basis != "work", x.rows[0]))
    for name, x in zip(NAMES, kinds):
        x.name = name
        label[x.rows] = name
    odd = main_rows[pace.outliers]
    label[odd[odd >= k]] = OUTLIER
    kinds = [x for x in kinds if x.name]
    out = [Kind(MAIN, np.flatnonzero(label == MAIN), MAIN, "")] + kinds
    out[0].words = out[0].head = _main_words(out[0].rows, k, n, len(out) > 1)
    return Loop(label, k, out, pace.trend, unit)


def _by_time(wall, cycle: int = 0) -> Loop:
    """Warm-up, kinds, trend and outliers of iterations with wall times ``wall`` (in order),
    from their times alone (the pace of one kind of work: ``classify``).
    Fewer than 4 iterations are one kind: too few to tell. ``cycle``: iterations per outer
    unit where the trace shows one (decode steps per ``generate()`` call), a period tried
    first, counted from the first iteration, with 2 cycles in the loop enough."""
    w = np.maximum(np.asarray(wall, dtype=float), 1.0)
    n = len(w)
    label = np.full(n, MAIN, dtype=object)
    if n < 4:
        return Loop(label, 0, [Kind(MAIN, np.arange(n), MAIN, "every iteration")])
    k = _warm_up(w)
    fit = _trend_line(w[k:])
    x = w[k:] / fit if fit is not None else w[k:]
    cycle = _periodic(x, cycle, k) if len(x) <= MAX_PERIODIC_N else None
    groups = cycle[0] if cycle else _merged(_groups(x), x)
    groups = sorted(groups, key=lambda g: (len(g), x[g].sum()), reverse=True)  # main: largest
    main = groups[0] + k
    kinds, odd = [], []
    if cycle:
        odd += [r + k for r in cycle[1]]
    for g in groups[1:]:
        rows = g + k
        if len(rows) < MIN_KIND:
            odd.append(rows)
            continue
        stray = _strays(rows, _pattern(rows, k, n)[0])
        if len(stray):  # a stretch's odd iterations elsewhere in the loop: outliers
            odd.append(stray)
            rows = np.setdiff1d(rows, stray)
        if len(rows) >= MIN_KIND:
            kinds.append(Kind("", rows, *_pattern(rows, k, n)))
        else:
            odd.append(rows)
    # scattered odd iterations on one side of the main kind are outliers while rare
    limit = OUTLIER_MAX_PCT / 100 * (n - k)
    scattered = [x for x in kinds if x.pattern == "scattered"]
    if scattered and sum(len(x.rows) for x in scattered) + sum(map(len, odd)) <= max(limit, 1):
        odd += [x.rows for x in scattered]
        kinds = [x for x in kinds if x.pattern != "scattered"]
    elif odd and sum(map(len, odd)) > max(limit, 1):  # not rare: a kind, each side, if alike
        m = float(np.median(w[main]))
        rest = []
        for side in (w[np.concatenate(odd)] > m, w[np.concatenate(odd)] <= m):
            rows = np.sort(np.concatenate(odd)[side])
            alike = len(rows) >= MIN_KIND and not _splits(np.sort(w[rows]))[1]
            if alike:  # of one level (three 30 ms stalls, not a stall and a stray)
                kinds.append(Kind("", rows, *_pattern(rows, k, n)))
            else:
                rest.append(rows)
        odd = rest
    kinds = [x for x in kinds if _held(w, x, main)]
    kinds, odd = _capped(w, kinds, odd, main, k, n)
    if fit is None and not cycle:  # stretches of another pace the value gaps missed
        taken = np.concatenate([x.rows for x in kinds] + odd + [np.arange(k)]) \
            if kinds or odd or k else np.empty(0, np.int64)
        rest = np.setdiff1d(np.arange(n), taken)
        for rows in _stretches(w, rest):
            kinds.append(Kind("", rows, *_pattern(rows, k, n)))
    kinds.sort(key=lambda x: x.rows[0])
    for name, x in zip(NAMES, kinds):
        x.name = name
        label[x.rows] = name
    for rows in odd:
        label[rows] = OUTLIER
    label[:k] = WARM_UP
    k = _give_back(w, label, k, main, kinds)
    kinds = [x for x in kinds if (label == x.name).any()]
    out = [Kind(MAIN, np.flatnonzero(label == MAIN), MAIN, "")]
    for x in kinds:
        rows = np.flatnonzero(label == x.name)
        out.append(Kind(x.name, rows, *_pattern(rows, k, n)))
    out[0].words = out[0].head = _main_words(out[0].rows, k, n, len(out) > 1)
    trend = _trend_words(w[k:], label[k:]) if fit is not None else None
    return Loop(label, k, out, trend)


def describe(wall, label, work=None) -> Loop:
    """The ``Loop`` of iterations already labelled (``classify``'s labels, as the budget's
    iterations table keeps them): each kind's pattern and words, and the trend, from the
    labels and times alone (not classified again); with ``work`` (the iterations' work ids)
    also which kinds run other work than the main kind, and the cycle of work."""
    w = np.maximum(np.asarray(wall, dtype=float), 1.0)
    label = np.asarray(label, dtype=object)
    n = len(w)
    k = int((label == WARM_UP).sum())
    names = [MAIN] + sorted({x for x in label if x not in (MAIN, WARM_UP, OUTLIER)})
    ids = None if work is None or len(work) != n else np.asarray(work, np.int64)
    main_id = usual_work(ids, label == MAIN) if ids is not None else None
    out = []
    for name in names:
        rows = np.flatnonzero(label == name)
        if name == MAIN:
            out.append(Kind(MAIN, rows, MAIN, _main_words(rows, k, n, len(names) > 1)))
        elif len(rows):
            basis = "work" if main_id is not None and usual_work(ids, rows) != main_id \
                else "pace"
            out.append(Kind(name, rows, *_pattern(rows, k, n), basis=basis))
    fit = _trend_line(w[k:]) if n >= 4 else None
    trend = _trend_words(w[k:], label[k:]) if fit is not None else None
    unit = None
    if ids is not None and len(np.unique(ids[k:])) > 1:
        from nsightlab.analysis.work import cycle as work_cycle
        unit = work_cycle(ids[k:])
    return Loop(label, k, out, trend, unit)


def usual_work(ids: np.ndarray, rows) -> int | None:
    """The most common work id of iterations ``rows`` (positions or a mask); None for
    none."""
    got = ids[rows]
    if not len(got):
        return None
    v, c = np.unique(got, return_counts=True)
    return int(v[c.argmax()])


def _l1(x: np.ndarray) -> float:
    return float(np.abs(x - np.median(x)).sum()) if len(x) else 0.0


def _sigma(x: np.ndarray) -> float:
    """Robust standard deviation (1.4826 x the median absolute deviation)."""
    return 1.4826 * float(np.median(np.abs(x - np.median(x)))) if len(x) else 0.0


def _candidates(limit: int) -> np.ndarray:
    """Warm-up lengths tried: every one up to 64, then ~100 more spread geometrically."""
    small = np.arange(1, min(limit, 64) + 1)
    if limit <= 64:
        return small
    return np.unique(np.concatenate([small, np.geomspace(65, limit, 100).astype(int)]))


def _warm_up(w: np.ndarray) -> int:
    """The warm-up's length: the change point of the log times (the best split into a
    leading part and the rest, by absolute deviations from each part's median) among splits
    whose leading part is at least ``KIND_MIN_PCT`` slower; 0 when none fits better than no
    split. ``_give_back`` cuts it back once the loop's kinds are known."""
    x = np.log(w[:WARMUP_SEARCH])  # warm-up is at the start: a long run's head is enough
    n = len(x)
    best, best_cost = 0, _l1(x)
    slower = np.log1p(KIND_MIN_PCT / 100)
    if x[0] - np.median(x) < slower:  # a warm-up starts slow
        return 0
    for k in _candidates(n // 2):
        head, rest = x[:k], x[k:]
        # the prefix slower by 10% and by 3 robust sigma of the rest (noise alone, a
        # heavy-tailed loop, has prefixes 10% slower by chance)
        # noise: the rest's spread, or twice its faster half's where smaller (a slow kind in
        # the loop, every 2nd iteration 4x slower, is no noise)
        m = np.median(rest)
        noise = min(_sigma(rest), 2 * _sigma(rest[rest <= m]))
        if np.median(head) - m < max(slower, KIND_SIGMAS * noise) or not _stands_out(head, rest):
            continue
        cost = _l1(head) + _l1(rest)
        if cost < best_cost:
            best, best_cost = int(k), cost
    return best


#: a kind of pace holds when noise would part its iterations from the main kind's this
#: rarely (Mann-Whitney U, two-sided: the search over periods, stretches and splits tries
#: many partitions of one loop)
KIND_ALPHA = 1e-4
#: scattered iterations are a kind of pace only when they are this many robust sigmas from
#: the main kind (their median; each at least 3: data-loader stalls, not the tail of a
#: heavy-tailed loop)
SCATTERED_SIGMAS = 5.0
#: and only in loops of this many iterations or more (in fewer, a heavy tail's few slow
#: iterations look the same)
SCATTERED_MIN_LOOP = 40


def _held(w: np.ndarray, kind: "Kind", main: np.ndarray) -> bool:
    """Whether a kind of pace stands out against the loop's own noise (``KIND_ALPHA``;
    scattered ones also ``SCATTERED_SIGMAS`` away each): otherwise its iterations are the
    main kind's."""
    x, m = np.log(w[kind.rows]), np.log(w[main])
    if not len(m) or not apart(x, m, KIND_ALPHA):
        return False
    if kind.pattern == "scattered":
        if len(w) < SCATTERED_MIN_LOOP:
            return False
        s = max(_sigma(m), 1e-3)
        d = np.abs(x - np.median(m))
        return bool(np.median(d) > SCATTERED_SIGMAS * s and np.all(d > 3 * s))
    return True


#: change points are looked for in at most this many points (longer loops: bin medians)
CP_POINTS = 120
#: PELT's penalty per change point: this many times the noise variance times log(points)
#: (BIC's 2, raised so that autocorrelated wander is not cut into stretches; every stretch
#: must then stand out by ``benchmath.comparison`` too)
CP_BETA = 6.0
#: a stretch holds when it stands out at this confidence (PELT chose it as the most unlike
#: stretch of the loop: a plain 95% would pass noise often)
STRETCH_LEVEL = 0.9999


def pelt(y: np.ndarray, pen: float, min_size: int = 3) -> list[int]:
    """Change points of ``y`` by PELT (Killick, Fearnhead and Eckley 2012) with the
    least-squares cost: the ends of the segments, the last one ``len(y)``. The same search,
    step for step, as ``ruptures.Pelt(model="l2", min_size, jump=1)`` (the tests hold it to
    ruptures' answers), on cumulative sums: importing ruptures (and the scipy.stats it
    loads) cost a command 1-1.4 s, the search itself on the 120 points it gets ~10 ms."""
    n = len(y)
    c1 = np.concatenate([[0.0], np.cumsum(y)])
    c2 = np.concatenate([[0.0], np.cumsum(y * y)])

    def err(a: int, b: int) -> float:  # sum of squared deviations of y[a:b] from its mean
        return float(c2[b] - c2[a] - (c1[b] - c1[a]) ** 2 / (b - a))

    best: dict[int, tuple[float, list[int]]] = {0: (0.0, [])}
    admissible: list[int] = []
    for end in [k for k in range(n) if k >= min_size] + [n]:
        admissible.append(end - min_size)
        tries = [(best[t][0] + err(t, end) + pen, t) for t in admissible if t in best]
        if not tries:
            continue
        total, t = min(tries, key=lambda x: x[0])
        best[end] = (total, best[t][1] + [end])
        admissible = [u for cost, u in tries if cost <= total + pen]
    return best[n][1] if n in best else [n]


def _stretches(w: np.ndarray, rows: np.ndarray) -> list[np.ndarray]:
    """Stretches of another pace among iterations ``rows`` (in order, one kind of work):
    change points of the log times (PELT, ``pelt``, least squares, on bin medians of at most
    ``CP_POINTS`` points), each stretch at least 10% from the loop's median and apart
    from the rest beyond both runs' noise (``benchmath.comparison``: effective iterations,
    autocorrelation kept); the slower ones as one set, the faster as another."""
    x = np.log(w[rows])
    n = len(x)
    if n < 20 or not _drifts(x):
        return []
    b = int(np.ceil(n / CP_POINTS))
    nb = n // b
    y = np.median(x[:nb * b].reshape(nb, b), axis=1)
    s = max(_step_sigma(y), 1e-4)
    ends = pelt(y, CP_BETA * s * s * np.log(nb))
    edges = [0] + [e * b for e in ends[:-1]] + [n]
    base = float(np.median(x))
    out: dict[bool, list] = {True: [], False: []}
    for a, z in zip(edges[:-1], edges[1:]):
        seg = np.arange(a, z)
        shift = float(np.median(x[seg])) - base
        if abs(shift) < np.log1p(KIND_MIN_PCT / 100) or len(seg) < benchmath.MIN_ITERATIONS:
            continue
        other = np.setdiff1d(np.arange(n), seg)
        if benchmath.comparison(np.exp(x[other]), np.exp(x[seg]), STRETCH_LEVEL).significant:
            out[shift > 0].append(seg)
    return [rows[np.concatenate(v)] for v in out.values() if v]


#: the CUSUM of a loop with no change of level stays under this many sigma sqrt(n) (the
#: Kolmogorov 1% point of a Brownian bridge is 1.63): above it, change points are looked for
CUSUM_GATE = 1.0


def _step_sigma(x: np.ndarray) -> float:
    """The noise of a series from its neighbour differences (robust sigma / sqrt 2): a change
    of level moves one difference, not the spread."""
    return _sigma(np.diff(x)) / np.sqrt(2)


def _drifts(x: np.ndarray) -> bool:
    """Whether log times ``x`` may change level at all: the largest excursion of their
    cumulative sum around the median, against the noise of neighbour differences (robust
    to a change of level); a stationary loop skips the change-point search and its import."""
    s = _step_sigma(x)
    if s <= 0:
        return bool(np.ptp(x) > 0)
    c = np.cumsum(x - np.median(x))
    return bool(np.ptp(c) > CUSUM_GATE * s * np.sqrt(len(x)))


#: a trend holds when its first and last quarters are apart beyond this (one line tried)
TREND_ALPHA = 1e-3
def _capped(w: np.ndarray, kinds: list, odd: list, main: np.ndarray, k: int, n: int
            ) -> tuple[list, list]:
    """Outliers are never more than ``OUTLIER_MAX_PCT`` of the loop: beyond it the slow odd
    iterations that stand out (``SCATTERED_SIGMAS``) are one kind of pace, scattered (with
    the short slow stretches of the same level: three stalls in a row), and the rest are the
    main kind's."""
    rows = np.sort(np.concatenate(odd)) if odd else np.empty(0, np.int64)
    cap = max(OUTLIER_MAX_PCT / 100 * (n - k), 1)
    if len(rows) <= cap:
        return kinds, odd
    m = np.log(w[main])
    far = np.abs(np.log(w[rows]) - np.median(m)) > SCATTERED_SIGMAS * max(_sigma(m), 1e-3)
    if far.sum() <= cap:  # the extreme ones are the outliers, the others the main kind's
        return kinds, _most_extreme(w, rows[far], m, cap)
    slow = rows[far & (w[rows] > np.exp(np.median(m)))]
    # and apart from the rest by a gap of 10% at least (stalls, not a heavy tail's end)
    rest = np.setdiff1d(np.arange(k, n), slow)
    if len(slow) < MIN_KIND or not len(rest):
        return kinds, _most_extreme(w, rows[far], m, cap)
    top = np.log(w[rest]).max()
    apart = np.log(w[slow]) - top >= np.log1p(KIND_MIN_PCT / 100)
    if apart.sum() < MIN_KIND and np.sort(np.log(w[slow]))[0] - top < np.log1p(KIND_MIN_PCT / 100):
        gaps = np.diff(np.sort(np.log(w[np.concatenate([rest, slow])])))
        upper = np.sort(np.log(w[np.concatenate([rest, slow])]))[1:]
        cut = upper[np.argmax(np.where(upper > np.median(m), gaps, -1))]
        slow = slow[np.log(w[slow]) >= cut]
        if len(slow) < MIN_KIND or gaps.max() < np.log1p(KIND_MIN_PCT / 100):
            return kinds, _most_extreme(w, rows[far], m, cap)
    level = np.median(np.log(w[slow]))
    keep = []
    for x in kinds:  # short slow stretches at the stalls' level join them
        if len(x.rows) < 2 * MIN_KIND and abs(np.median(np.log(w[x.rows])) - level) < \
                np.log(1 + KIND_MIN_PCT / 100) + 3 * max(_sigma(np.log(w[slow])), 1e-3):
            slow = np.union1d(slow, x.rows)
        else:
            keep.append(x)
    return keep + [Kind("", slow, *_pattern(slow, k, n))], []


def _most_extreme(w: np.ndarray, rows: np.ndarray, m: np.ndarray, cap: float) -> list:
    """The ``cap`` iterations of ``rows`` farthest from the main kind's median (log times
    ``m``), as the outliers: never more than ``OUTLIER_MAX_PCT`` of the loop."""
    if not len(rows):
        return []
    far = np.argsort(-np.abs(np.log(w[rows]) - np.median(m)), kind="stable")
    return [np.sort(rows[far[:int(cap)]])]


def apart(x: np.ndarray, y: np.ndarray, alpha: float, alternative: str = "two-sided") -> bool:
    """Whether Mann-Whitney U parts ``x`` from ``y`` (``x`` above ``y`` for "greater") at
    ``alpha``. Samples that do not overlap at all are decided without SciPy, by the exact
    chance of that order (1 or 2 in C(n, k): what ``mannwhitneyu`` computes for them), so
    most reports never import ``scipy.stats`` (~1 s of a command)."""
    from math import comb

    lo_x, hi_x, lo_y, hi_y = x.min(), x.max(), y.min(), y.max()
    if lo_x > hi_y or (alternative == "two-sided" and hi_x < lo_y):
        chance = (1 if alternative == "greater" else 2) / comb(len(x) + len(y), len(x))
        return chance < alpha
    if alternative == "greater" and hi_x < lo_y:
        return False
    from scipy.stats import mannwhitneyu

    return bool(mannwhitneyu(x, y, alternative=alternative).pvalue < alpha)


#: a slower start whose every iteration is slower than every later one is warm-up when
#: noise puts the slowest k first less than once in this many loops (or it is 2x slower)
WARMUP_ORDER = 100
#: a slower start is warm-up only when noise would make it this rarely (one-sided)
WARMUP_ALPHA = 1e-3


def _stands_out(head: np.ndarray, rest: np.ndarray) -> bool:
    """Whether a slower start ``head`` (log times) stands out against the rest's own noise:
    every one of its iterations is slower than every later one, by a margin noise rarely
    gives (a chance below 1 in ``WARMUP_ORDER`` that the slowest k come first, or 2x
    slower), or
    Mann-Whitney U says its iterations are slower than the rest's (one-sided, p below
    ``WARMUP_ALPHA``; 3 iterations at least). The first needs no SciPy: a real warm-up
    usually decides there."""
    from math import comb

    if head.min() > rest.max():  # the slowest k came first: 1 in C(n, k) by chance
        n = len(head) + len(rest)
        if comb(n, len(head)) >= WARMUP_ORDER or \
                np.median(head) - np.median(rest) >= np.log(2):
            return True
    return len(head) >= 3 and apart(head, rest, WARMUP_ALPHA, "greater")


def _give_back(w: np.ndarray, label: np.ndarray, k: int, main: np.ndarray,
               kinds: list[Kind]) -> int:
    """The warm-up cut back to its last iteration slower than its place in the loop predicts
    (a recurring kind's median where the iteration falls on its period, else the main
    kind's); the iterations given back take that kind. Returns the new warm-up length."""
    if not k:
        return 0
    ref = w[main] if len(main) else w[k:]
    m, s = float(np.median(ref)), _sigma(ref)
    expect = np.full(k, m)
    owner = np.full(k, MAIN, dtype=object)
    for x in kinds:
        if x.pattern == "recurring" and x.period:
            on = (np.arange(k) - x.rows[0]) % x.period == 0
            expect[on], owner[on] = float(np.median(w[x.rows])), x.name
    slow = w[:k] > expect + np.maximum(KIND_MIN_PCT / 100 * expect, KIND_SIGMAS * s)
    new = int(np.flatnonzero(slow)[-1]) + 1 if slow.any() else 0
    label[new:k] = owner[new:k]
    while new == k and k < len(label) and label[k] == OUTLIER:  # the warm-up's slow tail
        label[k] = WARM_UP
        new = k = k + 1
    return new


def _splits(x: np.ndarray) -> tuple[int, bool]:
    """Where sorted values ``x`` split at their largest gap (the index of the first value of
    the upper group), and whether the split holds: the two groups' medians differ by at least
    max(``KIND_MIN_PCT``, ``KIND_SIGMAS`` robust sigma of the larger group), and the gap is
    wider than two of those sigmas (the groups do not touch)."""
    gaps = np.diff(np.log(x))
    j = int(np.argmax(gaps)) + 1
    lo, hi = x[:j], x[j:]
    big, small = (lo, hi) if len(lo) >= len(hi) else (hi, lo)
    m = float(np.median(big))
    s = max(_sigma(big), 0.002 * m)
    d = abs(float(np.median(small)) - m)
    return j, d >= max(KIND_MIN_PCT / 100 * m, KIND_SIGMAS * s) and x[j] - x[j - 1] > 2 * s


def _groups(v: np.ndarray) -> list[np.ndarray]:
    """Positions of ``v`` in groups by value (``_splits``), the largest first (ties: the one
    with more time). The main group is split again and again; another group again only into
    parts of ``MIN_KIND`` or more."""
    order = np.argsort(v, kind="stable")
    x = v[order]
    main, others = (0, len(x)), []
    while len(others) + 1 < MAX_KINDS and main[1] - main[0] >= 2:
        a, b = main
        j, ok = _splits(x[a:b])
        if not ok:
            break
        lo, hi = (a, a + j), (a + j, b)
        main, other = (lo, hi) if (j, x[a:a + j].sum()) >= (b - a - j, x[a + j:b].sum()) \
            else (hi, lo)
        others.append(other)
    done = []
    for a, b in others:  # two kinds apart from the main one (an eval step, a checkpoint)
        if b - a >= 2 * MIN_KIND:
            j, ok = _splits(x[a:b])
            lo, hi = x[a:a + j], x[a + j:b]
            if ok and min(len(lo), len(hi)) >= MIN_KIND and \
                    hi[0] - lo[-1] > KIND_SIGMAS * max(_sigma(lo), _sigma(hi)):
                done += [(a, a + j), (a + j, b)]
                continue
        done.append((a, b))
    out = [np.sort(order[main[0]:main[1]])] + [np.sort(order[a:b]) for a, b in done]
    return [out[0]] + sorted(out[1:], key=len, reverse=True)


#: periods looked for (every 2nd ... every ``MAX_PERIOD``th iteration)
MAX_PERIOD = 12


def _periodic(x: np.ndarray, outer: int = 0, start: int = 0
              ) -> tuple[list[np.ndarray], list[np.ndarray]] | None:
    """Kinds that recur with a period, found by position rather than by value: the loop's
    iterations in classes by their place in a cycle of p (2..``MAX_PERIOD``), for the
    shortest p whose classes are each of one level (no class splits in two by ``_splits``,
    but for a few odd members) and whose levels differ by at least max(``KIND_MIN_PCT``,
    ``KIND_SIGMAS`` sigma of a class). A kind that drifts, or whose times overlap another's at
    the edges, is still found (two shapes alternating). Returns (groups of positions, the
    largest first; the odd iterations: more than max(``ODD_PCT``, 5 sigma) from their class's
    median, while rare) or None."""
    n = len(x)
    tries = [outer] if 2 <= outer and 2 * outer <= n else []
    for p in tries + list(range(2, min(MAX_PERIOD, n // 4) + 1)):  # 4 cycles at least
        cls = (np.arange(n) + (start if p == outer else 0)) % p
        parts = [x[cls == j] for j in range(p)]
        if any(_two_levels(c) for c in parts):
            continue
        med = np.array([np.median(c) for c in parts])
        sig = np.array([max(_sigma(c), 0.002 * m) for c, m in zip(parts, med)])
        order = np.argsort(med)  # classes in levels: a new level where medians jump
        jump = np.diff(med[order]) >= np.maximum(KIND_MIN_PCT / 100 * med[order][:-1],
                                                 KIND_SIGMAS * np.median(sig))
        if not jump.any():
            continue
        levels = np.split(order, np.flatnonzero(jump) + 1)
        odd = np.abs(x - med[cls]) > np.maximum(ODD_PCT / 100 * med[cls], 5 * sig[cls])
        if odd.sum() > OUTLIER_MAX_PCT / 100 * n + 1:  # not rare: they stay in their class
            odd[:] = False
        groups = [np.flatnonzero(np.isin(cls, lv) & ~odd) for lv in levels]
        groups.sort(key=lambda g: (len(g), x[g].sum()), reverse=True)
        # an odd member at the main kind's level is the main kind's (a step of the usual
        # time where its class is usually slow), not an outlier
        m0 = float(np.median(x[groups[0]]))
        home = odd & (np.abs(x - m0) <= max(KIND_MIN_PCT / 100 * m0, KIND_SIGMAS * np.median(sig)))
        if home.any():
            groups[0] = np.sort(np.concatenate([groups[0], np.flatnonzero(home)]))
            odd &= ~home
        if len(groups[1]) < MIN_KIND:
            continue
        return groups, ([np.flatnonzero(odd)] if odd.any() else [])
    return None


#: a member of a recurring kind this far from its kind's median (%) is an outlier
ODD_PCT = 25.0


def _two_levels(c: np.ndarray) -> bool:
    """Whether values ``c`` hold two levels (``_splits``), each of at least 2 members and a
    quarter of them: a class that mixes two kinds, not one with an odd member."""
    if len(c) < 4:
        return False
    x = np.sort(c)
    j, ok = _splits(x)
    return ok and min(j, len(x) - j) >= max(2, len(x) // 4)


def _merged(groups: list[np.ndarray], x: np.ndarray) -> list[np.ndarray]:
    """The groups after the main one, with the kinds on one side of it (slower, or faster)
    merged into one unless each has a pattern of its own: two kinds of slow iteration need
    more than a gap between their times."""
    m = float(np.median(x[groups[0]]))
    out = []
    for side in (True, False):
        mine = [g for g in groups[1:] if (float(np.median(x[g])) > m) == side]
        big = [g for g in mine if len(g) >= MIN_KIND]
        patterned = [g for g in big if _pattern(g, 0, len(x))[0] != "scattered"]
        if len(big) > 1 and len(patterned) < len(big):
            mine = [np.sort(np.concatenate(big))] + [g for g in mine if len(g) < MIN_KIND]
        out += mine
    return [groups[0]] + sorted(out, key=len, reverse=True)


def ordinal(n: int) -> str:
    """1st, 2nd, 3rd, 4th, ... 11th, 12th, 13th, ... 21st."""
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


#: the user's number of each iteration (its NVTX range's: iter8 -> 8) while words are made
#: (``numbered``); None: nsightlab's own (the position in the run, from 0)
_NUMBERS = contextvars.ContextVar("iteration_numbers", default=None)


def user_numbers(names) -> np.ndarray | None:
    """The numbers the user's iteration ranges carry (``iter5`` ... ``iter84`` -> 5 ... 84)
    where every name is one prefix and a number, the numbers increase, and they are not
    nsightlab's own positions (0, 1, 2, ...); else None."""
    names = [str(n) for n in names]
    heads = [n.rstrip("0123456789") for n in names]  # linear, whatever the name
    digits = [n[len(h):] for n, h in zip(names, heads)]
    if not names or len(set(heads)) != 1 or not all(0 < len(d) <= 18 for d in digits):
        return None  # (an int64 holds 18 digits)
    nums = np.array([int(d) for d in digits], dtype=np.int64)
    if (len(nums) > 1 and (np.diff(nums) <= 0).any()) or \
            np.array_equal(nums, np.arange(len(nums))):
        return None
    return nums


@contextmanager
def numbered(numbers):
    """Words made inside say iterations by ``numbers`` (one per iteration: the user's own,
    ``user_numbers``) instead of their positions."""
    token = _NUMBERS.set(None if numbers is None else np.asarray(numbers))
    try:
        yield
    finally:
        _NUMBERS.reset(token)


def number(r) -> int:
    """The number iteration ``r`` (its position) goes by in words: the user's where
    ``numbered`` gave them, else ``r``."""
    nums = _NUMBERS.get()
    return int(nums[int(r)]) if nums is not None and 0 <= int(r) < len(nums) else int(r)


def listed(rows: np.ndarray, most: int = 6) -> str:
    """Iteration numbers as a person lists them: the first ``most``, then '... last'."""
    shown = ", ".join(str(number(r)) for r in rows[:most])
    return shown + (f", ... {number(rows[-1])}" if len(rows) > most else "")


def _runs(rows: np.ndarray) -> list[np.ndarray]:
    """``rows`` (sorted) in runs of iterations at most 2 apart (one odd iteration inside a
    stretch does not break it)."""
    return np.split(rows, np.flatnonzero(np.diff(rows) > 2) + 1) if len(rows) else []


def _pattern(rows: np.ndarray, k: int, n: int) -> tuple[str, str, int | None, str]:
    """(pattern, words, period, head: the words without the count) of iterations ``rows`` of
    a loop from ``k`` to ``n``: recurring every Nth, a phase (one stretch that reaches the
    loop's start or end), a cluster (up to 3 stretches), or scattered."""
    of = f"{len(rows)} of {n - k}"
    if len(rows) >= MIN_KIND:
        d = np.diff(rows)
        p = int(np.bincount(d).argmax())
        if p >= 2 and (d % p == 0).all() and (d == p).mean() >= 0.7:
            head = f"every {ordinal(p)} iteration"
            return "recurring", f"{head} ({of}: iterations {listed(rows)})", p, head
        for q in range(3, MAX_PERIOD + 1):  # several places in a cycle: 2 of every 4
            places = np.unique(rows % q)
            if len(places) < q - 1 and (len(rows) >= 2 * q or len(places) == 1) and \
                    np.isin(np.arange(rows[0], rows[-1] + 1) % q, places).sum() <= len(rows) + 2:
                head = f"{len(places)} of every {q} iterations"
                return "recurring", f"{head} ({of}: iterations {listed(rows)})", q, head
    runs = _bulk(rows)
    if sum(map(len, runs)) < 0.8 * len(rows):  # most of them alone: scattered
        runs = []
    if len(runs) == 1 and runs[0][-1] >= n - 2:
        pattern, head = "phase", f"from iteration {number(runs[0][0])} on"
    elif len(runs) == 1 and runs[0][0] <= k + 1:
        pattern, head = "phase", f"until iteration {number(runs[0][-1])}"
    elif 1 <= len(runs) <= 3:
        pattern = "cluster"
        head = "iterations " + ", ".join(f"{number(r[0])}-{number(r[-1])}" for r in runs)
    else:
        words = f"{of}, no pattern: iterations {listed(rows)}"
        return "scattered", words, None, words
    return pattern, f"{head} ({of})", None, head


def _bulk(rows: np.ndarray) -> list[np.ndarray]:
    """The stretches that hold a kind (``_runs`` of at least 2 iterations and 5% of its
    iterations), while they hold 80% of them: a slower stretch of 120 iterations with a few
    slow strays elsewhere is a stretch; else every run of 2 or more."""
    runs = [r for r in _runs(rows) if len(r) >= 2]
    big = [r for r in runs if len(r) >= max(2, 0.05 * len(rows))]
    if big and len(big) < len(runs) and sum(map(len, big)) >= 0.8 * len(rows):
        return big
    return runs


def _strays(rows: np.ndarray, pattern: str) -> np.ndarray:
    """The iterations of a phase or cluster kind outside its stretches (``_bulk``)."""
    if pattern not in ("phase", "cluster"):
        return np.empty(0, rows.dtype)
    held = np.concatenate(_bulk(rows) or [np.empty(0, rows.dtype)])
    return np.setdiff1d(rows, held)


def _main_words(rows: np.ndarray, k: int, n: int, others: bool) -> str:
    return f"the other {len(rows)} of {n - k}" if others else \
        f"every iteration after warm-up ({len(rows)})"


def _bins(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(bin centres, bin medians) of a loop's times, in bins of 3-5 iterations (more on long
    loops: at most ~40 bins), so that a recurring iteration does not move a bin's median."""
    size = 3 if len(x) < 40 else max(5, len(x) // 40)
    nb = len(x) // size
    b = x[:nb * size].reshape(nb, size)
    return np.arange(nb) * size + (size - 1) / 2, np.median(b, axis=1)


def _spearman(y: np.ndarray) -> float:
    r = np.argsort(np.argsort(y)).astype(float)
    t = np.arange(len(y), dtype=float)
    if r.std() == 0:
        return 0.0
    return float(np.corrcoef(t, r)[0, 1])


def _trend_line(x: np.ndarray) -> np.ndarray | None:
    """A trend line through the loop's times ``x`` (one value per iteration), or None: the bin
    medians rise or fall together (rank correlation >= 0.8), a line fits them better than one
    step does, and it moves at least ``TREND_MIN_PCT`` from the first bin to the last."""
    if len(x) < 18:
        return None
    t, y = _bins(x)
    if len(y) < 6 or abs(_spearman(y)) < 0.8:
        return None
    i, j = np.triu_indices(len(t), 1)  # Theil-Sen: the median of the pairwise slopes
    slope = float(np.median((y[j] - y[i]) / (t[j] - t[i])))
    icpt = float(np.median(y - slope * t))
    line = icpt + slope * t
    if line.min() <= 0 or abs(line[-1] / line[0] - 1) < TREND_MIN_PCT / 100:
        return None
    step = min(_l1(y[:j]) + _l1(y[j:]) for j in range(2, len(y) - 1))
    if step < np.abs(y - line).sum():
        return None  # one step explains it better: a phase, found as a kind
    q = len(x) // 4  # the first and last quarters apart beyond the loop's wander
    if not apart(x[:q], x[-q:], TREND_ALPHA):
        return None
    fit = icpt + slope * np.arange(len(x))
    return fit if fit.min() > 0 else None


def kernel_trend(kernel_ns) -> dict | None:
    """A trend in the kernel time of iterations that run the same work (one value per
    iteration, in order): the same kernels taking longer (or less) each iteration, a growing
    input (a KV cache, a sequence that lengthens). The test of a trend in wall time
    (``_trend_line``) on the kernel time, which the host's noise does not reach; its size as
    ``_trend_words`` (first_ns / last_ns: medians of the first and last quarter); None when
    there is none. Its rate on pure noise: ``benchmarks/trend_eval.py``."""
    x = np.maximum(np.asarray(kernel_ns, dtype=float), 1.0)
    if _trend_line(x) is None:
        return None
    return _trend_words(x, np.full(len(x), MAIN, dtype=object))


def _trend_words(x: np.ndarray, label: np.ndarray) -> dict:
    """The trend's size: medians of the first and last quarter of the loop's main-kind
    iterations."""
    q = max(len(x) // 4, 1)
    first, last = x[:q][label[:q] == MAIN], x[-q:][label[-q:] == MAIN]
    first = first if len(first) else x[:q]
    last = last if len(last) else x[-q:]
    a, b = float(np.median(first)), float(np.median(last))
    return {"first_ns": a, "last_ns": b, "change_pct": 100 * (b / a - 1) if a else 0.0,
            "quarter": q}


def cov_pct(w: np.ndarray) -> float:
    """Coefficient of variation of times ``w`` (%); 0 for fewer than 2 or a zero mean."""
    mean = float(w.mean()) if len(w) else 0.0
    return float(100 * w.std() / mean) if mean and len(w) > 1 else 0.0


def stats(wall, label) -> dict:
    """The loop's statistics, over every iteration after warm-up (outliers and every kind
    included, never trimmed): ``iterations``, ``steady_iterations`` (after warm-up),
    ``warmup_iterations``, ``outlier_iterations``, ``kinds``; ``mean_ns`` (total time /
    iterations: what throughput sees), ``p50_ns``, ``p95_ns``, ``p99_ns``, ``min_ns``,
    ``max_ns``, ``iqr_ns``, ``cov_pct``; ``warmup_ns`` (the warm-up's total time)."""
    w = np.asarray(wall, dtype=float)
    label = np.asarray(label, dtype=object)
    after = w[label != WARM_UP]
    if not len(after):
        after = w
    q = np.percentile(after, [25, 50, 75, 95, 99]) if len(after) else np.zeros(5)
    mean = float(after.mean()) if len(after) else 0.0
    return {"iterations": int(len(w)), "steady_iterations": int((label != WARM_UP).sum()),
            "warmup_iterations": int((label == WARM_UP).sum()),
            "outlier_iterations": int((label == OUTLIER).sum()),
            "kinds": int(len({x for x in label if x not in (WARM_UP, OUTLIER)})),
            "mean_ns": mean, "p50_ns": float(q[1]), "iqr_ns": float(q[2] - q[0]),
            "cov_pct": cov_pct(after),
            "p95_ns": float(q[3]), "p99_ns": float(q[4]),
            "min_ns": float(after.min()) if len(after) else 0.0,
            "max_ns": float(after.max()) if len(after) else 0.0,
            "warmup_ns": float(w[label == WARM_UP].sum())}
