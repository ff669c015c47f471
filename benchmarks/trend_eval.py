"""How often nsightlab's trend test (``kinds.kernel_trend``, the wall-time test
``kinds._trend_line`` on per-iteration kernel time) names a trend in loops that have none, and
how often it finds one that is there:

    python benchmarks/trend_eval.py [--loops 2000] [--seed 0]

Pure noise: lognormal per-iteration times (CoV 1-30%), independent or AR(1)-correlated
(phi 0.3-0.9: a GPU whose clocks wander), with and without rare spikes, loops of 18-400
iterations. Trends: the same noise times a line that grows 10-150% over the loop. Prints the
false-trend rate per noise model and the share of real trends found."""
import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from nsightlab.analysis import kinds  # noqa: E402


def noise(rng, n: int, cov: float, phi: float, spikes: bool) -> np.ndarray:
    e = rng.normal(0, 1, n)
    if phi:
        for i in range(1, n):
            e[i] = phi * e[i - 1] + np.sqrt(1 - phi * phi) * e[i]
    x = np.exp(cov * e)
    if spikes:
        hit = rng.random(n) < 0.03
        x[hit] *= 1 + rng.uniform(0.5, 3, hit.sum())
    return 2e6 * x


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--loops", type=int, default=2000, help="loops per noise model")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    rng = np.random.default_rng(a.seed)
    models = [(cov, phi, sp) for cov in (0.01, 0.05, 0.15, 0.30) for phi in (0.0, 0.5, 0.9)
              for sp in (False, True)]
    worst, total, found, real = 0.0, 0, 0, 0
    print("cov   phi  spikes  false trends")
    for cov, phi, sp in models:
        hits = 0
        for _ in range(a.loops):
            n = int(rng.integers(18, 401))
            hits += kinds.kernel_trend(noise(rng, n, cov, phi, sp)) is not None
        rate = hits / a.loops
        worst, total = max(worst, rate), total + hits
        print(f"{cov:4.2f}  {phi:3.1f}  {str(sp):6s}  {100 * rate:5.2f}%")
        for _ in range(a.loops // 4):
            n = int(rng.integers(18, 401))
            grow = rng.uniform(0.10, 1.50)
            x = noise(rng, n, cov, phi, sp) * (1 + grow * np.arange(n) / (n - 1))
            real += 1
            found += kinds.kernel_trend(x) is not None
    print(f"pure noise: {100 * total / (a.loops * len(models)):.2f}% of loops named a trend "
          f"(worst model {100 * worst:.2f}%); trends of 10-150% found in "
          f"{100 * found / real:.1f}% of {real} loops")


if __name__ == "__main__":
    main()
