"""Summary statistics the way ``nsys stats`` computes them, for any grouping.

NVIDIA's summaries report count, total, mean, median (the mean of the two middle values for
an even count), min, max and the *sample* standard deviation (0 for a single instance); the
recipes use this one function so that every summary rounds and agrees the same way.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

STATS = ("count", "total", "avg", "med", "min", "max", "stddev")


def describe(df: pd.DataFrame, by: list[str], value: str, prefix: str = "",
             suffix: str = "_ns") -> pd.DataFrame:
    """Group ``df`` by ``by`` and summarize column ``value``.

    Columns: the ``by`` keys, then ``{prefix}count`` and ``{prefix}{total,avg,med,min,max,
    stddev}{suffix}``. Null values are left out of every statistic (NVIDIA's SQL aggregates
    skip NULL too), so ``count`` is the number of non-null values.
    """
    g = df.groupby(by, observed=True, sort=False, dropna=False)[value]
    out = g.agg(["count", "sum", "mean", "median", "min", "max", "std"]).reset_index()
    out["std"] = out["std"].fillna(0.0)
    names = {"count": f"{prefix}count", "sum": f"{prefix}total{suffix}",
             "mean": f"{prefix}avg{suffix}", "median": f"{prefix}med{suffix}",
             "min": f"{prefix}min{suffix}", "max": f"{prefix}max{suffix}",
             "std": f"{prefix}stddev{suffix}"}
    out = out.rename(columns=names)
    for c in (f"{prefix}total{suffix}", f"{prefix}min{suffix}", f"{prefix}max{suffix}"):
        if out[c].notna().all():
            out[c] = out[c].astype(np.int64)
    return out
