"""GPU metrics samples (Tensor Active, SMs Active...) lined up with kernels.

nsys samples device-wide counters at a fixed frequency; a sample stamped t describes the
interval [t, t + period] (on the fixture, SMs Active correlates 0.997 with kernel busy time
over [t, t + period] and worst at any other lag). Windows are longer than many kernels, so a
sample mixes several of them. ``per_kernel`` separates them by least squares: each window's
value is the sum over kernels of (share of the window the kernel ran) x (its activity), solved
for one activity per kernel name. On the FP16 ViT fixture this gives 79% Tensor Active for the
big cuBLAS GEMM and 0% for layer norm and GELU, where naive "sample inside kernel" attribution
gave 42%, 53% and 59%.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from nsightlab.read.report import Report


def samples(report: Report, prefixes: tuple[str, ...]) -> pd.DataFrame | None:
    """Samples of the first metric whose base name starts with one of ``prefixes``:
    timestamp_ns, gpu, value (sorted); None if the report has no such metric."""
    if not report.has("gpu_metrics"):
        return None
    g = report.gpu_metrics()
    # 'Tensor Active [Throughput %]' -> 'Tensor Active' (names drift between versions)
    names = {str(n): str(n).split(" [", 1)[0] for n in g["metric"].cat.categories}
    for prefix in prefixes:
        match = [n for n, b in names.items() if b.startswith(prefix)]
        if match:
            s = g[g["metric"].astype(str) == match[0]][["timestamp_ns", "gpu", "value"]]
            return s.sort_values(["gpu", "timestamp_ns"], kind="stable").reset_index(drop=True)
    return None


def period_ns(t: np.ndarray) -> int:
    return int(np.median(np.diff(t))) if len(t) > 1 else 1


def window_mean(t: np.ndarray, values: np.ndarray, lo, hi) -> tuple[np.ndarray, np.ndarray]:
    """Mean of the samples whose interval centre lies in [lo, hi], and their count."""
    centre = t + period_ns(t) // 2
    cum = np.concatenate([[0.0], np.cumsum(values.astype(float))])
    a = np.searchsorted(centre, lo, "left")
    b = np.searchsorted(centre, hi, "right")
    n = b - a
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n > 0, (cum[b] - cum[a]) / np.maximum(n, 1), np.nan), n


def per_kernel(kernels: pd.DataFrame, t: np.ndarray, y: np.ndarray) -> pd.DataFrame:
    """Activity per kernel name (see module docstring) from one GPU's samples.

    ``kernels``: name (categorical), start_ns, end_ns of that GPU. Returns name,
    activity_pct (clipped to 0..100; NaN where the name ran in less than one window in all)
    and covered_ns (kernel time inside sampled windows).
    """
    names = kernels["name"].astype("category")
    cats = names.cat.categories
    out = pd.DataFrame({"name": cats, "activity_pct": np.nan, "covered_ns": 0})
    if len(t) < 2 or kernels.empty:
        return out
    period = period_ns(t)
    codes = names.cat.codes.to_numpy()
    ks, ke = kernels["start_ns"].to_numpy(np.int64), kernels["end_ns"].to_numpy(np.int64)
    keep = (t >= ks.min() - period) & (t <= ke.max())  # only windows where kernels ran
    t, y = t[keep], y[keep]
    a = np.searchsorted(t, ks, "right") - 1  # window holding the kernel's start
    b = np.searchsorted(t, ke, "right") - 1
    A = np.zeros((len(t), len(cats)))
    span = np.maximum(b - a, 0)
    for off in range(int(span.max()) + 1):
        m = (span >= off) & (a + off >= 0) & (a + off < len(t))
        w = a[m] + off
        overlap = np.minimum(ke[m], t[w] + period) - np.maximum(ks[m], t[w])
        np.add.at(A, (w, codes[m]), np.maximum(overlap, 0) / period)
    covered = A.sum(axis=0) * period
    used = covered >= period  # at least one window's worth of time: solvable
    x, *_ = np.linalg.lstsq(A[:, used], y.astype(float), rcond=None)
    act = np.full(len(cats), np.nan)
    act[used] = np.clip(x, 0, 100)
    out["activity_pct"] = act
    out["covered_ns"] = covered.astype(np.int64)
    return out


#: a clock inside the iterations this far (%) below the most the run reached is said
CLOCK_DROP_PCT = 10.0


def sm_clock(report: Report, lo: np.ndarray, hi: np.ndarray) -> dict:
    """The SM (GPC) clock from the trace's GPU metrics samples: its mean over the samples
    inside the windows [lo, hi] (the iterations) and the most it reached in the run, in MHz,
    of the GPU whose clock inside the windows is highest (the busy one); {} without samples.
    (nsys stores Hz under the metric's "[MHz]"; the read layer gives MHz.)"""
    s = samples(report, ("GPC Clock Frequency",))
    if s is None or not len(s) or not len(lo):
        return {}
    best = {}
    for _, g in s.groupby("gpu", sort=True):
        t, y = g["timestamp_ns"].to_numpy(), g["value"].to_numpy(float)
        vals, counts = window_mean(t, y, lo, hi)
        if not counts.sum():
            continue
        mean = float(np.nansum(vals * counts) / counts.sum())
        if mean > best.get("sm_mhz", -1):
            best = {"sm_mhz": mean, "sm_mhz_max": float(np.nanmax(y)), "samples": int(counts.sum())}
    return best
