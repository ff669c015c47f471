"""Altair charts of the documented result tables (a diff, a lineup of runs, a run report).

Analyses never plot; these functions take their outputs. ``nsightlab.renderers.html`` puts
them into self-contained pages; ``save_pngs`` renders them as PNG (both through vl-convert,
no network).
"""
from __future__ import annotations

import os
import re
from functools import singledispatch
from pathlib import Path

import altair as alt
import numpy as np
import pandas as pd

from nsightlab.analysis.classify import CLASSES
from nsightlab.comparison.diff import Diff
from nsightlab.comparison.lineup import Lineup
from nsightlab.kernels import peaks
from nsightlab.kernels.report import KernelDiff, KernelReport
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


#: the ceiling always drawn, whatever the kernels ran: the CUDA cores' fp32 FMA peak
BASE_PRECISION = "fp32 (CUDA core)"
#: colours of the precisions on a roofline (Tableau 10), in the order the precisions come
PRECISION_COLOURS = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948",
                     "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac")
DRAM_COLOUR = "#555555"


def _peak_column(precision: str) -> str | None:
    """The judged table's ceiling column of a precision label ("fp16 (Tensor)" ->
    ``peak_tensor_fp16``, "fp32 (CUDA core)" -> ``peak_core_fp32``)."""
    m = re.match(r"^(\S+) \((Tensor|CUDA core)\)$", str(precision))
    return None if m is None else f"peak_{'tensor' if m[2] == 'Tensor' else 'core'}_{m[1]}"


def _rate(v: float, unit: str) -> str:
    """A peak in tera-units with three significant figures ("712 TFLOP/s", "4.81 TB/s")."""
    t = v / 1e12
    return f"{t:.0f} T{unit}" if t >= 100 else f"{t:.1f} T{unit}" if t >= 10 else f"{t:.3g} T{unit}"


def _median_peak(frames: list[pd.DataFrame], col: str) -> float | None:
    """The median over the kernels of ``frames`` of ceiling ``col``; where the reports have
    none, the datasheet's figure for their device; else None."""
    vals = pd.concat([f[col] for f in frames if col in f], ignore_index=True) \
        if any(col in f for f in frames) else pd.Series(dtype=float)
    vals = pd.to_numeric(vals, errors="coerce")
    vals = vals[np.isfinite(vals) & (vals > 0)]
    if len(vals):
        return float(vals.median())
    for f in frames:
        for device in (f["device"].dropna().unique() if "device" in f else []):
            got = peaks.datasheet(str(device), col)
            if got is not None:
                return float(got[0])
    return None


def roofline_ceilings(frames: list[pd.DataFrame], precisions) -> tuple[list[dict], float | None]:
    """([{precision, label, peak}] for each of ``precisions`` (and ``BASE_PRECISION``) that has
    a ceiling, highest first; the DRAM bandwidth, bytes/s, or None) over the judged kernels of
    ``frames`` (the median of each ceiling: they are at each kernel's own clocks)."""
    want = list(dict.fromkeys([p for p in precisions if isinstance(p, str)] + [BASE_PRECISION]))
    out = []
    for prec in want:
        col = _peak_column(prec)
        peak = _median_peak(frames, col) if col else None
        if peak is not None:
            out.append({"precision": prec, "peak": peak,
                        "label": f"{prec.replace('(', '').replace(')', '')} {_rate(peak, 'FLOP/s')}"})
    return sorted(out, key=lambda c: -c["peak"]), _median_peak(frames, "peak_dram")


def _on_roofline(k: pd.DataFrame) -> pd.Series:
    """The kernels that have a point on a roofline: FLOPs, DRAM bytes and a duration."""
    flops = pd.to_numeric(k["flops"], errors="coerce")
    moved = pd.to_numeric(k["dram_bytes"], errors="coerce")
    dur = pd.to_numeric(k["duration_ns"], errors="coerce")
    return (flops > 0) & (moved > 0) & (dur > 0)


def _roofline_layers(ceilings: list[dict], dram: float | None, xs, ys,
                     colour: alt.Color) -> tuple[list, dict]:
    """The ceilings' layers (lines named ``ceilings``, their labels ``ceiling_labels``) over
    the points' range ``xs`` / ``ys``, and the axes' scales (log, holding the points, the
    ridge points and the ceilings)."""
    xs = np.asarray([x for x in xs if np.isfinite(x) and x > 0], float)
    ys = np.asarray([y for y in ys if np.isfinite(y) and y > 0], float)
    ridges = [c["peak"] / dram for c in ceilings] if dram else []
    pool_x = list(xs) + ridges
    lo = min(pool_x) / 4 if pool_x else 0.1
    hi = max(pool_x) * 4 if pool_x else 1e4
    if len(xs) == 0 and ridges:
        lo, hi = min(ridges) / 100, max(ridges) * 10
    lines, labels = [], []
    for c in ceilings:
        start = max(c["peak"] / dram, lo) if dram else lo
        lines += [{"ceiling": c["label"], "precision": c["precision"], "x": start, "y": c["peak"]},
                  {"ceiling": c["label"], "precision": c["precision"], "x": hi, "y": c["peak"]}]
        labels.append({"ceiling": c["label"], "precision": c["precision"], "x": hi,
                       "y": c["peak"]})
    top = max((c["peak"] for c in ceilings), default=None)
    slope = []
    if dram:
        end = min(top / dram, hi) if top else hi
        slope = [{"ceiling": f"DRAM {_rate(dram, 'B/s')}", "x": lo, "y": dram * lo},
                 {"ceiling": f"DRAM {_rate(dram, 'B/s')}", "x": end, "y": dram * end}]
    pool_y = list(ys) + [c["peak"] for c in ceilings] + [r["y"] for r in slope]
    ylo = min(pool_y) / 3 if pool_y else 1e9
    yhi = max(pool_y) * 3 if pool_y else 1e15
    if slope and slope[0]["y"] < ylo * 3:  # the slope starts where the axis does
        x0 = ylo / dram
        slope[0].update(x=x0, y=ylo)
    x = alt.X("x:Q", scale=alt.Scale(type="log", domain=[lo, hi]),
              title="arithmetic intensity (FLOP per DRAM byte)")
    y = alt.Y("y:Q", scale=alt.Scale(type="log", domain=[ylo, yhi]), title="achieved FLOP/s",
              axis=alt.Axis(format="~s"))
    layers = []
    if lines:
        layers.append(alt.Chart(pd.DataFrame(lines)).mark_line(strokeWidth=2, opacity=0.7).encode(
            x=x, y=y, detail="ceiling:N", color=colour,
            tooltip=["ceiling:N"]).properties(name="ceilings"))
        layers.append(alt.Chart(pd.DataFrame(labels)).mark_text(
            align="right", baseline="bottom", dy=-3, fontSize=11).encode(
            x=x, y=y, text="ceiling:N", color=colour)
            .properties(name="ceiling_labels"))
    if slope:
        data = pd.DataFrame(slope)
        layers.append(alt.Chart(data).mark_line(strokeWidth=2, color=DRAM_COLOUR, opacity=0.7)
                      .encode(x=x, y=y, tooltip=["ceiling:N"]).properties(name="dram"))
        layers.append(alt.Chart(data.head(1)).mark_text(
            align="left", baseline="top", dx=4, dy=4, fontSize=11, color=DRAM_COLOUR).encode(
            x=x, y=y, text="ceiling:N").properties(name="dram_label"))
    return layers, {"x": x, "y": y}


def _precision_colour(precisions: list[str]) -> alt.Color:
    return alt.Color("precision:N", title="precision", scale=alt.Scale(
        domain=precisions, range=[PRECISION_COLOURS[i % len(PRECISION_COLOURS)]
                                  for i in range(len(precisions))]))


def _left_out(n: int, what: str = "kernels") -> list[str]:
    one = what[:-1] if n == 1 else what
    return [f"{n} {one} without FLOPs or DRAM bytes not shown"] if n else []


def kernel_charts(result: KernelReport) -> dict[str, alt.Chart]:
    """One ncu report's roofline: each kernel with FLOPs and DRAM bytes at its arithmetic
    intensity and achieved FLOP/s, sized by its time per iteration in the loop (joined) or
    by its ncu duration, coloured by precision; under the ceilings of the precisions the
    kernels ran (and fp32 on the CUDA cores), each cut by the DRAM slope."""
    k = result.judged.kernels
    shown_mask = _on_roofline(k)
    pts = k[shown_mask].copy()
    pts["x"] = pts["flops"] / pts["dram_bytes"]
    pts["y"] = pts["flops"] / (pts["duration_ns"] * 1e-9)
    pts["precision"] = pts["precision"].fillna("unknown").astype(str)
    pts["ncu_us"] = pts["duration_ns"] / 1e3
    pts["tflops"] = pts["y"] / 1e12
    tips = [alt.Tooltip("function:N"), alt.Tooltip("ncu_us:Q", format=".1f",
                                                   title="ncu time (µs)")]
    if result.joined is not None and len(result.joined.kernels):
        j = result.joined.kernels.dropna(subset=["ncu_kernel"])
        loop = j.groupby(j["ncu_kernel"].astype(int))["time_ns"].sum()
        pts["loop_us"] = pts.index.map(lambda i: loop.get(int(i), 0.0)).astype(float) / 1e3
        size_field, size_title = "loop_us", "µs per iteration (loop)"
        tips.append(alt.Tooltip("loop_us:Q", format=".1f", title="time per iteration (µs)"))
        how = "point size: time per iteration in the loop (kernels not in it smallest)"
    else:
        size_field, size_title = "ncu_us", "ncu time (µs)"
        how = "point size: ncu duration"
    tips += ["limiter:N", alt.Tooltip("headroom_pct:Q", format=".0f", title="headroom %"),
             "precision:N", alt.Tooltip("x:Q", format=".3g", title="FLOP/byte"),
             alt.Tooltip("tflops:Q", format=".3g", title="TFLOP/s")]
    ceilings, dram = roofline_ceilings([k], k["precision"].dropna().unique())
    precisions = list(dict.fromkeys([c["precision"] for c in ceilings] + list(pts["precision"])))
    colour = _precision_colour(precisions)
    layers, enc = _roofline_layers(ceilings, dram, pts["x"], pts["y"], colour)
    keep = [c for c in ("function", "limiter", "headroom_pct", "precision", "x", "y", "ncu_us",
                        "tflops", "loop_us") if c in pts]
    points = alt.Chart(pts[keep].reset_index(drop=True)).mark_circle(opacity=0.75).encode(
        x=enc["x"], y=enc["y"], color=colour,
        size=alt.Size(f"{size_field}:Q", title=size_title, scale=alt.Scale(range=[20, 600])),
        tooltip=tips).properties(name="kernels")
    subtitle = _left_out(int((~shown_mask).sum())) + [
        how + "; ceilings: the median over the kernels, at their own clocks"]
    title = alt.TitleParams(f"Roofline: {len(pts)} of {len(k)} kernels", subtitle=subtitle)
    chart = alt.layer(*layers, points, title=title).resolve_scale(color="shared")
    return {"roofline": chart.properties(width=WIDTH, height=400)}


def kernel_diff_charts(result: KernelDiff) -> dict[str, alt.Chart]:
    """Two ncu reports' roofline: each pair of kernels (``kernels.pairs``) with FLOPs and DRAM
    bytes on both sides, an arrow from A's point (circle) to B's (triangle), under the
    ceilings of the precisions both sides ran (medians over both reports' kernels)."""
    p = result.paired.pairs
    ok = pd.Series(True, index=p.index)
    for side in ("a", "b"):
        ok &= _on_roofline(p[[f"flops_{side}", f"dram_bytes_{side}", f"duration_ns_{side}"]]
                           .set_axis(["flops", "dram_bytes", "duration_ns"], axis=1))
    rows = []
    for pair, r in p[ok].iterrows():
        for side in ("a", "b"):
            prec = r[f"precision_{side}"]
            rows.append({"pair": int(pair), "side": side.upper(),
                         "function": r[f"function_{side}"],
                         "x": r[f"flops_{side}"] / r[f"dram_bytes_{side}"],
                         "y": r[f"flops_{side}"] / (r[f"duration_ns_{side}"] * 1e-9),
                         "precision": prec if isinstance(prec, str) else "unknown",
                         "limiter": r[f"limiter_{side}"],
                         "headroom_pct": r[f"headroom_pct_{side}"],
                         "us": r[f"duration_ns_{side}"] / 1e3, "ratio": r["ratio"]})
    data = pd.DataFrame(rows, columns=["pair", "side", "function", "x", "y", "precision",
                                       "limiter", "headroom_pct", "us", "ratio"])
    data["tflops"] = data["y"] / 1e12
    present = pd.concat([p["precision_a"], p["precision_b"]]).dropna().unique()
    ceilings, dram = roofline_ceilings([j.kernels for j in result.judged], present)
    precisions = list(dict.fromkeys([c["precision"] for c in ceilings] + list(data["precision"])))
    colour = _precision_colour(precisions)
    layers, enc = _roofline_layers(ceilings, dram, data["x"], data["y"], colour)
    tips = ["side:N", "function:N", alt.Tooltip("us:Q", format=".1f", title="ncu time (µs)"),
            alt.Tooltip("ratio:Q", format=".2f", title="A / B time"), "limiter:N",
            alt.Tooltip("headroom_pct:Q", format=".0f", title="headroom %"), "precision:N",
            alt.Tooltip("x:Q", format=".3g", title="FLOP/byte"),
            alt.Tooltip("tflops:Q", format=".3g", title="TFLOP/s")]
    arrows = alt.Chart(data).mark_line(color="#888888", strokeWidth=1.5).encode(
        x=enc["x"], y=enc["y"], detail="pair:N", order="side:N",
        tooltip=tips).properties(name="arrows")
    a = alt.Chart(data[data["side"] == "A"]).mark_circle(size=70, opacity=0.8).encode(
        x=enc["x"], y=enc["y"], color=colour, tooltip=tips).properties(name="a")
    b = alt.Chart(data[data["side"] == "B"]).mark_point(
        shape="triangle", filled=True, size=110, opacity=0.9).encode(
        x=enc["x"], y=enc["y"], color=colour, tooltip=tips).properties(name="b")
    a_name, b_name = result.paired.names
    sides = (f"circle: {a_name} (A), triangle: {b_name} (B)" if a_name != b_name
             else "circle: A, triangle: B")
    subtitle = _left_out(int((~ok).sum()), "pairs") + [
        f"{sides}; ceilings: the median over both reports' kernels, at their own clocks"]
    title = alt.TitleParams(f"Roofline: {int(ok.sum())} of {len(p)} kernel pairs, A -> B",
                            subtitle=subtitle)
    chart = alt.layer(*layers, arrows, a, b, title=title).resolve_scale(color="shared")
    return {"roofline": chart.properties(width=WIDTH, height=400)}


@singledispatch
def charts_for(result) -> dict[str, alt.Chart]:
    """The charts of any result that has some, by name."""
    raise TypeError(f"no charts for {type(result).__name__}")


charts_for.register(Diff, diff_charts)
charts_for.register(RunReport, report_charts)
charts_for.register(Lineup, lineup_charts)
charts_for.register(KernelReport, kernel_charts)
charts_for.register(KernelDiff, kernel_diff_charts)


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
