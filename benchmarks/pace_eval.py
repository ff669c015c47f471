"""How well nsightlab tells work from pace, measured rather than tuned (issue 56):

    python benchmarks/pace_eval.py [--loops 1200] [--pairs 1000] [--grid-pairs 400]
                                   [--candidates] [DIR ...]

1. **Synthetic loops** (``--loops``), each with its truth: noise from models fitted to the
   main-kind iterations of real captures (AR(1) with Student-t innovations: the captures'
   own autocorrelation and heavy tails; tests/data/pace and DIRs),
   with, on top, one of: nothing (pure noise), a slower start (warm-up), a slower stretch (a
   change of pace), scattered stalls, a trend, a step change of the clocks, a cycle of work
   whose time barely differs (gradient accumulation), two isolated spikes. Reported per
   scenario: how often the thing is found (in all loops, and in those where it is "clear":
   3 robust noise sigmas or more), how often something is invented (kinds, a trend, a
   warm-up on pure noise), and the precision and recall of the iterations labelled.
2. **Synthetic pairs** (``--pairs``): A and B from the same noise model, B slower by a known
   factor (1 half the time); how often the diff's 95% interval holds it (nominal: 95%), and
   how often "no measurable difference" is wrong either way.
3. **The grid** (``--grid-pairs`` per cell, issue 61): loops of 10, 30, 100 and 300
   iterations a side, B slower by 0, 5, 10, 25 or 50%, the same draws as the pairs above
   otherwise: per cell the interval's coverage and the share of pairs found different (the
   power; at 0% the false claims). ``--candidates``: the same grid (the same draws) for the
   other methods weighed for ``benchmath.comparison`` (``CANDIDATES``; the bootstrap takes
   minutes).
4. **Real pairs**: every pair listed in PAIRS whose captures and truth are in the folders
   given (tests/data/pace by default): the interval against the truth's ratio of medians (the
   workloads' own events, start to start, after nsightlab's warm-up), and the first words.

Nothing here is a pass/fail test: docs/iterations.md quotes its figures.
"""
from __future__ import annotations

import argparse
import json
import lzma
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np

from nsightlab.analysis import kinds
from nsightlab.core import benchmath

HERE = Path(__file__).resolve().parent.parent
#: (A, B, what): pairs of captures with truth, by stem without the h200- prefix
PAIRS = [("aa_vits25_a", "aa_vits25_b", "A/A"), ("aa_vits200_a", "aa_vits200_b", "A/A"),
         ("aa_resnet60_a", "aa_resnet60_b", "A/A"), ("aa_gemm300_a", "aa_gemm300_b", "A/A"),
         ("aa_deit100_a", "aa_deit100_b", "A/A"),
         ("host_vits100_a", "host_vits100_b", "A/A, B's host loaded"),
         ("aa_vits25_a", "gpubusy_vits200", "A/A, B beside a GPU process"),
         ("aa_vits200_a", "gpubusy_vits200", "A/A, B beside a GPU process"),
         ("prec_vits_fp16", "prec_vits_bf16", "fp16/bf16, launch-bound"),
         ("prec_gemm_fp16", "prec_gemm_bf16", "fp16/bf16 GEMMs"),
         ("prec_gemm_fp16", "prec_gemm_fp32", "fp16/fp32 GEMMs")]


def find(dirs: list[Path], stem: str) -> tuple[Path, Path] | None:
    """(capture, truth) of ``stem`` in any of ``dirs`` (NAME.sqlite[.xz], nsys/, truth/)."""
    for d in dirs:
        for name in (stem, f"h200-{stem}"):
            for sq in (d / f"{name}.sqlite", d / f"{name}.sqlite.xz",
                       d / "nsys" / f"{name}.sqlite.xz"):
                for tr in (d / f"{name}.truth.json", d / "truth" / f"{name}.truth.json"):
                    if sq.exists() and tr.exists():
                        return sq, tr
    return None


def plain(path: Path, tmp: Path) -> Path:
    if path.suffix != ".xz":
        return path
    out = tmp / path.name.removesuffix(".xz")
    if not out.exists():
        out.write_bytes(lzma.decompress(path.read_bytes()))
    return out


def residuals(dirs: list[Path], tmp: Path) -> list[tuple]:
    """The noise models (``fit``) of the main kind's iterations of every capture with
    truth: the noise of real loops."""
    import nsightlab
    import nsightlab.recipe_runner as R

    out = []
    seen = set()
    for d in dirs:
        for tr in sorted(list(d.glob("*.truth.json")) + list(d.glob("truth/*.truth.json"))):
            stem = tr.name.removesuffix(".truth.json")
            got = find([d], stem)
            if not got or stem in seen:
                continue
            seen.add(stem)
            it = R.run("budget", nsightlab.open(plain(got[0], tmp)))["iterations"]
            it = it[it["device_id"] == it["device_id"].iloc[0]]
            w = it.loc[it["kind"] == "main", "wall_ns"].to_numpy(float)
            if len(w) >= 16:
                out.append(fit(np.log(w) - np.median(np.log(w))))
    return out


def fit(r: np.ndarray) -> tuple[float, float, float]:
    """A noise model of one real loop's log-time deviations ``r``: AR(1) with Student-t
    innovations, (phi, degrees of freedom, scale), fitted robustly (phi from the lag-1
    correlation of the series clipped at 3 robust sigma: a stall does not make the loop
    look autocorrelated; the innovations' t by ``scipy.stats.t.fit``)."""
    from scipy.stats import t

    s = 1.4826 * np.median(np.abs(r)) or 1e-3
    c = np.clip(r, -3 * s, 3 * s)
    phi = float(np.clip(np.corrcoef(c[:-1], c[1:])[0, 1], 0.0, 0.9)) if c.std() else 0.0
    df, _, scale = t.fit(r[1:] - phi * r[:-1], floc=0.0)
    return phi, float(np.clip(df, 1.5, 50)), float(scale)


def noise(pool: list[tuple], n: int, rng, scale: float = 1.0,
          model: tuple | None = None) -> np.ndarray:
    """``n`` log-time deviations from the noise model of one real loop (``fit``; ``model``,
    else one drawn from ``pool``), its scale times ``scale``: stationary, heavy-tailed,
    autocorrelated as that loop, with a population median of 0 (symmetric innovations; the
    sample's own median is not taken out: that would make a pair's sample ratio the true
    one)."""
    phi, df, sc = model or pool[rng.integers(len(pool))]
    e = sc * scale * rng.standard_t(df, n + 50)
    x = np.zeros(n + 50)
    for i in range(1, n + 50):
        x[i] = phi * x[i - 1] + e[i]
    return x[50:]


SCENARIOS = ("noise", "warm-up", "stretch", "stalls", "trend", "clock step", "work cycle",
             "spikes")


def synthetic(kind: str, pool, rng) -> tuple[np.ndarray, np.ndarray | None, set, int, float]:
    """(times, work ids or None, the iterations truly other than main, the true warm-up, the
    effect in robust sigmas of the noise: 3 or more is "clear")."""
    n = int(rng.choice([30, 60, 120, 300, 1000]))
    base = rng.uniform(1e6, 40e6)
    x = noise(pool, n, rng, rng.uniform(0.5, 2.0))
    sigma = max(1.4826 * float(np.median(np.abs(x))), 1e-6)
    before = x.copy()
    odd: set = set()
    warm, ids = 0, None
    if kind == "warm-up":
        warm = int(rng.integers(1, 6))
        x[:warm] += np.log(rng.uniform(1.5, 4))
    elif kind == "stretch":
        length = int(rng.integers(max(5, n // 10), max(6, n // 3)))
        at = int(rng.integers(n // 10, n - length))
        x[at:at + length] += np.log(rng.uniform(1.3, 2.0))
        odd = set(range(at, at + length))
    elif kind == "stalls":
        k = max(3, int(rng.uniform(0.06, 0.15) * n))
        rows = rng.choice(np.arange(5, n), k, replace=False)
        x[rows] += np.log(rng.uniform(2.0, 4.0, k))
        odd = set(int(r) for r in rows)
    elif kind == "trend":
        x += np.linspace(0, np.log(rng.uniform(1.3, 2.0)), n)
    elif kind == "clock step":
        at = int(rng.integers(n // 4, 3 * n // 4))
        x[at:] += np.log(rng.uniform(1.2, 1.6))
        odd = set(range(at, n)) if n - at < at else set(range(at))
    elif kind == "work cycle":
        ids = np.array([1, 0, 0, 2] * (n // 4 + 1))[:n]
        x[ids == 2] += np.log(1.1)
        odd = set(int(i) for i in np.flatnonzero(ids != 0))
    elif kind == "spikes":
        rows = rng.choice(np.arange(5, n), 2, replace=False)
        x[rows] += np.log(rng.uniform(3, 6, 2))
        odd = set(int(r) for r in rows)
    moved = np.abs(x - before)
    effect = float(np.median(moved[moved > 0])) / sigma if (moved > 0).any() else 0.0
    return base * np.exp(x), ids, odd, warm, effect


def judge(kind: str, loop, odd: set, warm: int) -> dict:
    """Found, invented, and the labelled iterations' precision and recall."""
    other = {int(i) for i, lab in enumerate(loop.label)
             if lab not in (kinds.MAIN, kinds.WARM_UP, kinds.OUTLIER)}
    outl = set(int(i) for i in loop.outliers)
    if kind == "noise":
        return {"found": 1.0 - (len(loop.kinds) > 1 or loop.trend is not None),
                "invented_kind": float(len(loop.kinds) > 1 or loop.trend is not None),
                "invented_warmup": float(loop.warmup > 0)}
    if kind == "warm-up":
        return {"found": float(abs(loop.warmup - warm) <= 1),
                "invented_kind": float(len(loop.kinds) > 1)}
    if kind == "trend":
        return {"found": float(loop.trend is not None)}
    if kind == "spikes":
        return {"found": float(odd <= outl), "invented_kind": float(len(loop.kinds) > 1)}
    got = other if kind != "stalls" else other | outl
    tp = len(got & odd)
    return {"found": float(tp >= 0.8 * len(odd) and len(got - odd) <= 0.2 * max(len(got), 1)),
            "precision": tp / len(got) if got else float("nan"),
            "recall": tp / len(odd) if odd else float("nan"),
            "outliers_over_5pct": float(len(outl) > 0.05 * len(loop.label) + 1)}


def run_synthetic(pool, loops: int, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    out: dict = {k: [] for k in SCENARIOS}
    for i in range(loops):
        kind = SCENARIOS[1 + (i // 2) % (len(SCENARIOS) - 1)] if i % 2 else "noise"
        w, ids, odd, warm, effect = synthetic(kind, pool, rng)
        got = judge(kind, kinds.classify(w, work=ids), odd, warm)
        got["clear"] = effect >= 3 or kind in ("noise", "work cycle")
        out[kind].append(got)
    return out


def ratio(a, b) -> dict:
    """``benchmath.comparison`` of iteration times ``a``, ``b`` as a dict (as the candidates')."""
    return asdict(benchmath.comparison(a, b))


def run_pairs(pool, pairs: int, seed: int = 1) -> dict:
    rng = np.random.default_rng(seed)
    held, wrong_same, wrong_diff, n_same, n_diff = 0, 0, 0, 0, 0
    for _ in range(pairs):
        n_a, n_b = (int(rng.choice([25, 60, 120, 300])) for _ in range(2))
        r = 1.0 if rng.random() < 0.5 else float(rng.uniform(0.7, 1.4))
        s = rng.uniform(0.5, 2.0)
        model = pool[rng.integers(len(pool))]  # one machine: both runs' noise alike
        a = 5e6 * np.exp(noise(pool, n_a, rng, s, model))
        b = r * 5e6 * np.exp(noise(pool, n_b, rng, s, model))
        res = ratio(a, b)
        held += res["low"] <= r <= res["high"]
        if r == 1.0:
            n_same += 1
            wrong_same += res["significant"]
        elif abs(np.log(r)) > np.log(1.15):
            n_diff += 1
            wrong_diff += not res["significant"]
    return {"pairs": pairs, "coverage": held / pairs, "false_difference": wrong_same / n_same,
            "missed_15pct": wrong_diff / max(n_diff, 1)}


#: the grid's loop lengths (iterations a side) and true changes (B slower by this share)
GRID_N = (10, 30, 100, 300)
GRID_CHANGE = (0.0, 0.05, 0.10, 0.25, 0.50)


def run_grid(pool, pairs: int, method=ratio, seed: int = 2) -> dict:
    """{(n, change): (coverage, found)}: ``pairs`` pairs per cell, A and B of n iterations
    from the same noise model (one machine) at 0.5-2x its scale (as ``run_pairs``), B slower
    by the change; the share whose 95% interval (``method(a, b)``: low, high, significant)
    holds the true ratio, and the share found different. Each cell draws from its own seed:
    every method sees the same pairs."""
    out = {}
    for n in GRID_N:
        for c in GRID_CHANGE:
            rng = np.random.default_rng([seed, n, round(1000 * c)])
            held = found = 0
            for _ in range(pairs):
                s = rng.uniform(0.5, 2.0)
                model = pool[rng.integers(len(pool))]
                a = 5e6 * np.exp(noise(pool, n, rng, s, model))
                b = (1 + c) * 5e6 * np.exp(noise(pool, n, rng, s, model))
                res = method(a, b)
                held += res["low"] <= 1 + c <= res["high"]
                found += bool(res["significant"])
            out[(n, c)] = (held / pairs, found / pairs)
    return out


def print_grid(name: str, grid: dict, pairs: int, seconds: float) -> None:
    """The grid as a table (coverage / found, %), and the issue's criteria in one line."""
    print(f"\n{name}: {pairs} pairs a cell ({seconds:.0f} s); coverage of the 95% interval / "
          "found different (at 0%: false claims), %")
    print(f"{'n':>5} " + " ".join(f"{f'{100 * c:.0f}%':>11}" for c in GRID_CHANGE))
    for n in GRID_N:
        print(f"{n:>5} " + " ".join(f"{100 * grid[(n, c)][0]:5.1f}/{100 * grid[(n, c)][1]:<5.1f}"
                                    for c in GRID_CHANGE))
    cov = [grid[(n, c)][0] for n in GRID_N if n >= 30 for c in GRID_CHANGE]
    false = [grid[(n, 0.0)][1] for n in GRID_N if n >= 30]
    print(f"  n >= 30: coverage {100 * min(cov):.1f}-{100 * max(cov):.1f}%, false claims "
          f"{100 * min(false):.1f}-{100 * max(false):.1f}%; a 25% change at 30 iterations "
          f"found {100 * grid[(30, 0.25)][1]:.1f}%")


def wander(n: int, rng) -> np.ndarray:
    """``n`` log-time deviations unlike any fitted model: white t5 noise (scale 3%) beside a
    slow AR(1) wander (phi 0.95, sd 3%): the lag-1 autocorrelation understates how long the
    wander lasts. Stationary, median 0."""
    e = 0.03 * np.sqrt(1 - 0.95 ** 2) * rng.standard_normal(n + 200)
    x = np.zeros(n + 200)
    for i in range(1, n + 200):
        x[i] = 0.95 * x[i - 1] + e[i]
    return 0.03 * rng.standard_t(5, n) + x[200:]


def run_wander(pairs: int, method=ratio, seed: int = 4) -> dict:
    """{n: coverage} of ``method``'s 95% interval on A/A pairs of ``wander`` noise, 30, 100
    and 300 iterations a side: whether an interval holds when the noise is not AR(1)."""
    out = {}
    for n in (30, 100, 300):
        rng = np.random.default_rng([seed, n])
        held = 0
        for _ in range(pairs):
            res = method(5e6 * np.exp(wander(n, rng)), 5e6 * np.exp(wander(n, rng)))
            held += res["low"] <= 1 <= res["high"]
        out[n] = held / pairs
    return out


# ---- the candidates weighed for the interval (issue 61), each (a, b) -> low, high, significant

def _interval(lo: float, hi: float) -> dict:
    """A log-ratio interval as ``benchmath.comparison`` gives it."""
    return {"low": float(np.exp(lo)), "high": float(np.exp(hi)),
            "significant": bool(lo > 0 or hi < 0)}


def iact(y: np.ndarray) -> float:
    """The integrated autocorrelation time of log times ``y`` (clipped at 3 robust sigma),
    by Sokal's automatic window (the first lag M with M >= 5 tau(M))."""
    s = benchmath._sigma(y) or 1e-12
    rho = benchmath._autocorrelation(np.clip(y - np.median(y), -3 * s, 3 * s))
    tau = 1.0
    for m in range(1, max(2, len(y) // 3)):
        tau = 1 + 2 * float(rho[1:m + 1].sum())
        if m >= 5 * tau:
            break
    return max(tau, 1.0)


def _batch_medians(y: np.ndarray, tau: str, min_len: float) -> np.ndarray:
    """The log medians of 4-12 consecutive batches of ``y``, each ``min_len`` iterations and
    3 autocorrelation times long or more (``tau``: "lag-1", (1 + r) / (1 - r), as before
    issue 61; or "iact")."""
    n = len(y)
    if tau == "lag-1":
        d = y - np.median(y)
        r = float(np.corrcoef(d[:-1], d[1:])[0, 1]) if d[:-1].std() and d[1:].std() else 0.0
        t = (1 + min(max(r, 0.0), 0.95)) / (1 - min(max(r, 0.0), 0.95))
    else:
        t = iact(y)
    k = int(np.clip(n // max(min_len, 3.0 * t), 4, 12))
    m = n // k
    return np.median(y[:k * m].reshape(k, m), axis=1)


def batch_medians(a, b, tau: str = "lag-1", min_len: float = 5.0) -> dict:
    """Welch's t on the log medians, each one's variance from its batches' log medians
    (batch means): ``pace.ratio`` before issue 61 with the defaults."""
    ya, yb = np.log(a), np.log(b)
    ba, bb = _batch_medians(ya, tau, min_len), _batch_medians(yb, tau, min_len)
    lo, hi, _ = benchmath.welch(np.log(np.median(b) / np.median(a)), ba.var(ddof=1) / len(ba),
                           bb.var(ddof=1) / len(bb), len(ba) - 1, len(bb) - 1)
    return _interval(lo, hi)


def _u_counts(m: int, n: int) -> np.ndarray:
    """How many orderings of m and n distinct values give each Mann-Whitney U (0 to m n)."""
    prev = [np.ones(1)] * (n + 1)
    for i in range(1, m + 1):
        row = [np.ones(1)]
        for j in range(1, n + 1):
            c = np.zeros(i * j + 1)
            c[j:j + len(prev[j])] += prev[j]  # the largest value is the first sample's
            c[:len(row[j - 1])] += row[j - 1]
            row.append(c)
        prev = row
    return prev[n]


def rank_batches(a, b) -> dict:
    """The Mann-Whitney test on the batches' log medians (IACT batch count, 3 iterations a
    batch or more) and its Moses interval: the pairwise differences of the batch medians
    between the exact test's critical ranks."""
    ba = _batch_medians(np.log(a), "iact", 3.0)
    bb = _batch_medians(np.log(b), "iact", 3.0)
    m, n = len(ba), len(bb)
    diffs = np.sort((bb[:, None] - ba[None, :]).ravel())
    counts = _u_counts(m, n)
    cdf = np.cumsum(counts) / counts.sum()
    cut = int(np.searchsorted(cdf, 0.025 + 1e-12, side="right"))
    if cut == 0:
        return {"low": 0.0, "high": float("inf"), "significant": False}
    return _interval(diffs[cut - 1], diffs[m * n - cut])


def block_bootstrap(a, b, rng=np.random.default_rng(3), resamples: int = 1000) -> dict:
    """Politis and Romano's stationary bootstrap of each side's log median (blocks of
    geometric length, mean IACT; circular), the percentile interval of the difference (one
    generator for the whole run: the figures repeat)."""
    def medians(y: np.ndarray) -> np.ndarray:
        n = len(y)
        new = rng.random((resamples, n)) < 1.0 / max(iact(y), 1.0)
        new[:, 0] = True
        head = np.maximum.accumulate(np.where(new, np.arange(n), 0), axis=1)
        start = np.take_along_axis(rng.integers(0, n, (resamples, n)), head, axis=1)
        return np.median(y[(start + np.arange(n) - head) % n], axis=1)

    d = medians(np.log(b)) - medians(np.log(a))
    return _interval(*np.quantile(d, [0.025, 0.975]))


def ar1_only(a, b) -> dict:
    """``benchmath.comparison`` with the AR(1) model's effective iterations alone (no Geyer
    term)."""
    def side(x) -> tuple[float, float, float]:
        y = benchmath._logs(x)
        s = benchmath._sigma(y)
        n_eff = max(len(y) / benchmath._tau_ar1(benchmath._phi(y, s), len(y)), 2.0)
        return float(np.log(np.median(x))), np.pi / 2 * s * s / n_eff, \
            max(n_eff - 1, benchmath.MIN_DF)
    (ma, va, da), (mb, vb, db) = side(a), side(b)
    lo, hi, _ = benchmath.welch(mb - ma, va, vb, da, db)
    return _interval(lo, hi)


def _at_least(method, n: int = benchmath.MIN_ITERATIONS):
    """``method`` where both sides have ``n`` iterations, else no interval (as
    ``benchmath.comparison``)."""
    def run(a, b) -> dict:
        if min(len(a), len(b)) < n:
            return {"low": float("nan"), "high": float("nan"), "significant": False}
        return method(a, b)
    return run


CANDIDATES = {
    "batch medians, lag-1 batch count (pace.ratio before issue 61)": _at_least(batch_medians),
    "batch medians, batch count from the IACT, 3+ iterations a batch":
        _at_least(lambda a, b: batch_medians(a, b, "iact", 3.0)),
    "rank test on batch medians (Mann-Whitney, Moses interval)": _at_least(rank_batches),
    "stationary block bootstrap of the medians (percentile)": _at_least(block_bootstrap),
    "effective iterations from the AR(1) model alone": _at_least(ar1_only),
}


def run_real(dirs: list[Path], tmp: Path) -> list[dict]:
    import nsightlab

    rows = []
    for a, b, what in PAIRS:
        fa, fb = find(dirs, a), find(dirs, b)
        if not fa or not fb:
            continue
        d = nsightlab.diff(plain(fa[0], tmp), plain(fb[0], tmp))
        h = d.headline
        per = []
        for (_, tr), n, k in ((fa, h["a_iterations"], h["a_steady_iterations"]),
                              (fb, h["b_iterations"], h["b_steady_iterations"])):
            t = json.loads(tr.read_text())
            s = np.array([x["host_start_ns"] for x in t["windows"]], float)
            per.append(np.median(np.diff(s)[n - k:]))
        true = per[1] / per[0]
        iv = h["interval"]
        rows.append({"a": a, "b": b, "what": what, "truth": true, "ratio": iv["ratio"],
                     "low": iv["low"], "high": iv["high"],
                     "holds": bool(iv["low"] <= true <= iv["high"]),
                     "same_work": h["same_work"], "first": h["verdict"][:160]})
    return rows


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dirs", nargs="*", default=[str(HERE / "tests" / "data" / "pace")])
    ap.add_argument("--loops", type=int, default=1200)
    ap.add_argument("--pairs", type=int, default=1000)
    ap.add_argument("--grid-pairs", type=int, default=400, help="pairs per cell (0: no grid)")
    ap.add_argument("--candidates", action="store_true",
                    help="the grid for the other methods weighed too (minutes)")
    args = ap.parse_args(argv)
    dirs = [Path(d) for d in args.dirs]
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.time()
        pool = residuals(dirs, Path(tmp))
        print(f"noise models of {len(pool)} real loops: AR(1) phi "
              f"{min(p[0] for p in pool):.2f}-{max(p[0] for p in pool):.2f}, t innovations "
              f"df {min(p[1] for p in pool):.1f}-{max(p[1] for p in pool):.1f}, scale "
              f"{min(p[2] for p in pool):.3f}-{max(p[2] for p in pool):.3f}")
        syn = run_synthetic(pool, args.loops)
        print(f"\nsynthetic loops: {args.loops} ({time.time() - t0:.0f} s)")
        print(f"{'scenario':<12} {'loops':>5} {'found':>6} {'clear':>5} {'found':>6} "
              f"{'invented':>8} {'warm-up':>8} {'precision':>9} {'recall':>6} {'outl>5%':>7}")
        for k, v in syn.items():
            clear = [x for x in v if x["clear"]]
            found_clear = np.mean([x["found"] for x in clear]) if clear else float("nan")
            def col(c: str, v=v) -> float:
                got = [x[c] for x in v if c in x and np.isfinite(x[c])]
                return float(np.mean(got)) if got else float("nan")
            print(f"{k:<12} {len(v):>5} {col('found'):>6.3f} {len(clear):>5} "
                  f"{found_clear:>6.3f} {col('invented_kind'):>8.3f} "
                  f"{col('invented_warmup'):>8.3f} {col('precision'):>9.3f} "
                  f"{col('recall'):>6.3f} {col('outliers_over_5pct'):>7.3f}")
        pr = run_pairs(pool, args.pairs)
        print(f"\nsynthetic pairs: {pr['pairs']}: the 95% interval holds the true ratio "
              f"{100 * pr['coverage']:.1f}%; a difference claimed where there is none "
              f"{100 * pr['false_difference']:.1f}%; a 15%+ difference missed "
              f"{100 * pr['missed_15pct']:.1f}%")
        methods = {"benchmath.comparison": ratio, **(CANDIDATES if args.candidates else {})}
        for name, method in methods.items() if args.grid_pairs else ():
            t1 = time.time()
            print_grid(name, run_grid(pool, args.grid_pairs, method), args.grid_pairs,
                       time.time() - t1)
            w = run_wander(args.grid_pairs // 2, method)
            print("  A/A under a slow wander beside white noise (not AR(1)): coverage "
                  + ", ".join(f"{100 * v:.1f}% at {n}" for n, v in w.items()))
        real = run_real(dirs, Path(tmp))
        if real:
            print(f"\nreal pairs: {sum(r['holds'] for r in real)} of {len(real)} intervals "
                  "hold the truth's ratio of medians")
            for r in real:
                print(f"  {r['a']} vs {r['b']} ({r['what']}): truth {r['truth']:.3f}, "
                      f"nsightlab {r['ratio']:.3f} [{r['low']:.3f}, {r['high']:.3f}] "
                      f"{'holds' if r['holds'] else 'MISSES'}; "
                      f"{'same work' if r['same_work'] else 'work changed'}")
                print(f"    {r['first']}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
