"""Altair charts of the documented result tables (a diff, a lineup of runs, a run report).

Analyses never plot; these functions take their outputs. ``nsightlab.renderers.html`` puts
them into self-contained pages; ``save_pngs`` renders them as PNG (both through vl-convert,
no network).
"""
from __future__ import annotations

import os
from functools import singledispatch
from pathlib import Path

import altair as alt
import numpy as np
import pandas as pd

from nsightlab.analysis.classify import CLASSES
from nsightlab.comparison.diff import Diff
from nsightlab.comparison.lineup import Lineup
from nsightlab.run.report import RunReport

alt.data_transformers.disable_max_rows()
WIDTH = 560
#: one colour per kernel class on every chart of every page (Tableau 20, class order), and the
#: graph rows of a graph-level trace in grey
CLASS_COLOURS = dict(zip((*CLASSES, "cuda graph"), (
    "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
    "#9c755f", "#bab0ac", "#86bcb6", "#d37295", "#79706e")))
def class_colour(data: pd.DataFrame) -> alt.Color:
    """Colour by kernel class on the one fixed scale (``CLASS_COLOURS``), the legend listing
    only the classes ``data`` holds."""
    present = [c for c in CLASS_COLOURS if c in set(data["kernel_class"].astype(str))]
    return alt.Color("kernel_class:N", title="class", legend=alt.Legend(values=present),
                     scale=alt.Scale(domain=list(CLASS_COLOURS), range=list(CLASS_COLOURS.values())))


def class_chart(d: Diff) -> alt.Chart:
    """Stacked time per iteration by kernel class, A and B side by side."""
    rows = []
    for _, r in d.by_class.iterrows():
        rows += [{"run": f"A: {d.headline['a']}", "kernel_class": r["kernel_class"], "ms": r["a_ns"] / 1e6},
                 {"run": f"B: {d.headline['b']}", "kernel_class": r["kernel_class"], "ms": r["b_ns"] / 1e6}]
    data = pd.DataFrame(rows)
    return alt.Chart(data, title="GPU time per iteration by kernel class").mark_bar().encode(
        x=alt.X("ms:Q", title="ms per iteration"), y=alt.Y("run:N", title=None),
        color=class_colour(data),
        tooltip=["run", "kernel_class", alt.Tooltip("ms:Q", format=".3f")],
    ).properties(width=WIDTH)


def layer_chart(d: Diff) -> alt.Chart:
    """Per-layer change of time per iteration (B - A), largest first, with its 95% noise band
    (each side's standard error per iteration): a change inside the band gets no bar, only
    its band in grey; the axis holds the bands and 2% of the largest layer either way, so a
    tiny change is never drawn full-width."""
    df = d.by_layer.head(40)
    noise = df["noise_ns"] if "noise_ns" in df else pd.Series(np.nan, index=df.index)
    inside = df["within_noise"].fillna(False).astype(bool) if "within_noise" in df else \
        pd.Series(False, index=df.index)
    df = df.assign(delta_ms=np.where(inside, 0.0, df["delta_ns"]) / 1e6,
                   change_ms=df["delta_ns"] / 1e6, low_ms=-noise.fillna(0) / 1e6,
                   high_ms=noise.fillna(0) / 1e6,
                   reading=np.where(inside, "inside the noise", np.where(
                       df["delta_ns"] > 0, "slower", "faster")))
    # the axis holds at least 2% of the largest layer's time either way: a change far below
    # the layers' size is drawn small, not stretched to the chart's width
    reach = max(float(df["change_ms"].abs().max()) if len(df) else 0.0,
                float(df["high_ms"].max()) if len(df) else 0.0,
                0.02 * float(df[["a_ns", "b_ns"]].to_numpy().max()) / 1e6 if len(df) else 0.0)
    base = alt.Chart(df, title="Change per layer (B - A), grey: the 95% noise band")
    order = alt.Y("layer:N", sort=alt.EncodingSortField("change_ms", op="max", order="descending"),
                  title=None)
    band = base.mark_bar(color="#cccccc", opacity=0.6).encode(
        x=alt.X("low_ms:Q", title="ms per iteration",
                scale=alt.Scale(domain=[-reach, reach]) if reach > 0 else alt.Undefined),
        x2="high_ms:Q", y=order)
    bars = base.mark_bar().encode(
        x="delta_ms:Q", y=order,
        color=alt.Color("reading:N", scale=alt.Scale(
            domain=["slower", "faster", "inside the noise"],
            range=["#d62728", "#2ca02c", "#999999"]), title=None),
        tooltip=["layer", "status", "reading", alt.Tooltip("change_ms:Q", format=".4f"),
                 alt.Tooltip("high_ms:Q", format=".4f", title="noise (+/- ms)"),
                 "a_math_precision", "b_math_precision"])
    return (band + bars).properties(width=WIDTH)


def kernel_scatter(d: Diff) -> alt.Chart:
    """Matched kernels: time in A against time in B (the diagonal is 'no change')."""
    m = d.kernels[d.kernels["status"] == "matched"].copy()
    m["a_us"], m["b_us"] = m["a_ns"] / 1e3, m["b_ns"] / 1e3
    m = m[(m["a_us"] > 0) & (m["b_us"] > 0)]
    lo = float(min(m["a_us"].min(), m["b_us"].min())) if len(m) else 0.1
    hi = float(max(m["a_us"].max(), m["b_us"].max())) if len(m) else 1.0
    diag = alt.Chart(pd.DataFrame({"a_us": [lo, hi], "b_us": [lo, hi]})).mark_line(
        color="gray", strokeDash=[4, 4]).encode(x="a_us:Q", y="b_us:Q")
    points = alt.Chart(m, title="Matched kernels: A vs B (µs per iteration)").mark_circle(size=60).encode(
        x=alt.X("a_us:Q", scale=alt.Scale(type="log"), title="A (µs)"),
        y=alt.Y("b_us:Q", scale=alt.Scale(type="log"), title="B (µs)"),
        color=class_colour(m),
        tooltip=["layer", "kernel_class", "a_name", "b_name", "a_precision", "b_precision",
                 alt.Tooltip("a_us:Q", format=".1f"), alt.Tooltip("b_us:Q", format=".1f")],
    )
    return (diag + points).properties(width=WIDTH, height=360)


def diff_charts(d: Diff) -> dict[str, alt.Chart]:
    """The diff's charts by name: classes, layers, kernels."""
    return {"classes": class_chart(d), "layers": layer_chart(d), "kernels": kernel_scatter(d)}


def report_charts(rr: RunReport) -> dict[str, alt.Chart]:
    """A run report's charts by name: time per iteration by kernel class and by layer (none
    for a run without kernels)."""
    p = rr.profile
    if p is None:
        return {}
    by_class = p.by_class.assign(ms=p.by_class["time_ns"] / 1e6)
    classes = alt.Chart(by_class, title="GPU time per iteration by kernel class").mark_bar().encode(
        x=alt.X("ms:Q", title="ms per iteration"), y=alt.Y("kernel_class:N", sort="-x", title=None),
        color=class_colour(by_class),
        tooltip=["kernel_class", alt.Tooltip("ms:Q", format=".3f"), "count"],
    ).properties(width=WIDTH)
    layers = p.by_layer.assign(ms=p.by_layer["time_ns"] / 1e6)
    layer = alt.Chart(layers, title="GPU time per iteration by layer").mark_bar().encode(
        x=alt.X("ms:Q"), y=alt.Y("layer:N", sort="-x", title=None), tooltip=["layer", "ms", "count"],
    ).properties(width=WIDTH)
    return {"classes": classes, "layers": layer}


def lineup_charts(l: Lineup) -> dict[str, alt.Chart]:
    """Several runs: the distribution of wall-clock iteration latency per run, GPU time per
    iteration by kernel class (stacked), and the change per layer of each run against the
    baseline."""
    order = list(l.runs)
    lat = l.latency.assign(ms=l.latency["wall_ns"] / 1e6)
    latency = alt.Chart(lat, title="Wall-clock iteration latency per run").mark_boxplot(
        extent="min-max").encode(
        x=alt.X("ms:Q", title="ms per iteration"), y=alt.Y("run:N", sort=order, title=None),
        color=alt.Color("run:N", sort=order, legend=None)).properties(width=WIDTH)
    cls = l.by_class.assign(ms=l.by_class["time_ns"] / 1e6)
    classes = alt.Chart(cls, title="GPU time per iteration by kernel class").mark_bar().encode(
        x=alt.X("ms:Q", title="ms per iteration"), y=alt.Y("run:N", sort=order, title=None),
        color=class_colour(cls),
        tooltip=["run", "kernel_class", alt.Tooltip("ms:Q", format=".3f")]).properties(width=WIDTH)
    layers = pd.concat([d.by_layer.assign(run=d.b.label, delta_ms=d.by_layer["delta_ns"] / 1e6)
                        for d in l.diffs], ignore_index=True)
    layer = alt.Chart(layers, title=f"Change per layer against {order[0]}").mark_bar().encode(
        x=alt.X("delta_ms:Q", title="ms per iteration"), y=alt.Y("layer:N", title=None),
        yOffset=alt.YOffset("run:N", sort=order), color=alt.Color("run:N", sort=order),
        tooltip=["run", "layer", "status", alt.Tooltip("delta_ms:Q", format=".3f")],
    ).properties(width=WIDTH)
    return {"latency": latency, "classes": classes, "layers": layer}


@singledispatch
def charts_for(result) -> dict[str, alt.Chart]:
    """The charts of any result that has some, by name."""
    raise TypeError(f"no charts for {type(result).__name__}")


charts_for.register(Diff, diff_charts)
charts_for.register(RunReport, report_charts)
charts_for.register(Lineup, lineup_charts)


def save_pngs(charts: dict[str, alt.Chart], folder: str | Path) -> list[Path]:
    """Each chart as ``<folder>/<name>.png`` (2x scale)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for name, chart in charts.items():
        path = folder / f"{name}.png"
        tmp = folder / f".{name}.{os.getpid()}.tmp.png"
        try:  # complete or absent, as every output
            chart.save(str(tmp), format="png", scale_factor=2)
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
        out.append(path)
    return out
