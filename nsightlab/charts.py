"""Altair charts of the documented DataFrames, and self-contained HTML pages around them.

Analyses never plot; these functions take their outputs. HTML pages inline the Vega JavaScript
(through vl-convert), so a report opens with the network off. PNGs are rendered the same way.
"""
from __future__ import annotations

import html
from pathlib import Path

import altair as alt
import pandas as pd

from .diff import Diff

alt.data_transformers.disable_max_rows()
WIDTH = 560


def class_chart(d: Diff) -> alt.Chart:
    """Stacked time per iteration by kernel class, A and B side by side."""
    rows = []
    for _, r in d.by_class.iterrows():
        rows += [{"run": f"A: {d.headline['a']}", "kernel_class": r["kernel_class"], "ms": r["a_ns"] / 1e6},
                 {"run": f"B: {d.headline['b']}", "kernel_class": r["kernel_class"], "ms": r["b_ns"] / 1e6}]
    return alt.Chart(pd.DataFrame(rows), title="GPU time per iteration by kernel class").mark_bar().encode(
        x=alt.X("ms:Q", title="ms per iteration"), y=alt.Y("run:N", title=None),
        color=alt.Color("kernel_class:N", title="class"),
        tooltip=["run", "kernel_class", alt.Tooltip("ms:Q", format=".3f")],
    ).properties(width=WIDTH)


def layer_chart(d: Diff) -> alt.Chart:
    """Per-layer change of time per iteration (B - A), largest first."""
    df = d.by_layer.assign(delta_ms=d.by_layer["delta_ns"] / 1e6).head(40)
    return alt.Chart(df, title="Change per layer (B - A)").mark_bar().encode(
        x=alt.X("delta_ms:Q", title="ms per iteration"),
        y=alt.Y("layer:N", sort="-x", title=None),
        color=alt.condition("datum.delta_ms > 0", alt.value("#d62728"), alt.value("#2ca02c")),
        tooltip=["layer", "status", alt.Tooltip("delta_ms:Q", format=".3f"), "a_math_precision",
                 "b_math_precision"],
    ).properties(width=WIDTH)


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
        color=alt.Color("kernel_class:N", title="class"),
        tooltip=["layer", "kernel_class", "a_name", "b_name", "a_precision", "b_precision",
                 alt.Tooltip("a_us:Q", format=".1f"), alt.Tooltip("b_us:Q", format=".1f")],
    )
    return (diag + points).properties(width=WIDTH, height=360)


def diff_charts(d: Diff) -> dict[str, alt.Chart]:
    return {"classes": class_chart(d), "layers": layer_chart(d), "kernels": kernel_scatter(d)}


def save_pngs(charts: dict[str, alt.Chart], folder: str | Path) -> list[Path]:
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for name, chart in charts.items():
        path = folder / f"{name}.png"
        chart.save(str(path), format="png", scale_factor=2)
        out.append(path)
    return out


def page(title: str, sections: list[tuple[str, str]], charts: list[alt.Chart]) -> str:
    """One self-contained HTML page: a title, HTML sections (heading, body) and the charts."""
    combined = alt.vconcat(*charts).resolve_scale(color="independent") if charts else None
    body = [f"<h1>{html.escape(title)}</h1>"]
    for heading, content in sections:
        body.append(f"<h2>{html.escape(heading)}</h2>\n{content}")
    style = ("<style>body{font-family:system-ui,sans-serif;margin:2em;max-width:1100px}"
             "table{border-collapse:collapse;font-size:13px;margin:0.5em 0}"
             "td,th{border:1px solid #ddd;padding:3px 8px;text-align:right}"
             "th{background:#f4f4f4}td:first-child,th:first-child{text-align:left}"
             ".verdict{font-size:1.15em;background:#fff8e1;padding:0.8em;border-left:4px solid #f0a000}"
             "</style>")
    if combined is None:
        return f"<!DOCTYPE html><html><head><meta charset='utf-8'>{style}</head><body>" \
               + "\n".join(body) + "</body></html>"
    doc = combined.to_html(inline=True)
    doc = doc.replace("<head>", f"<head>\n<title>{html.escape(title)}</title>\n{style}", 1)
    at = doc.rfind("<body>") + len("<body>")  # the last one: the inlined JS mentions "<body>" too
    return doc[:at] + "\n" + "\n".join(body) + "\n<h2>Charts</h2>" + doc[at:]


def table_html(df: pd.DataFrame, max_rows: int = 40) -> str:
    """A DataFrame as a compact HTML table (times in ms, long names shortened)."""
    show = df.head(max_rows).copy()
    for c in show.columns:
        if c.endswith("_ns"):
            show[c.replace("_ns", "_ms")] = show.pop(c) / 1e6
        elif show[c].dtype == object:
            show[c] = show[c].map(lambda v: v if not isinstance(v, str) or len(v) < 90
                                  else v[:44] + "…" + v[-44:])
    return show.to_html(index=False, float_format=lambda v: f"{v:.3f}", na_rep="", border=0)


def diff_page(d: Diff) -> str:
    h = d.headline
    summary = pd.DataFrame([
        {"": "iteration (GPU span)", "A": h["a_iteration_ns"] / 1e6, "B": h["b_iteration_ns"] / 1e6},
        {"": "kernel time", "A": h["a_kernel_ns"] / 1e6, "B": h["b_kernel_ns"] / 1e6},
        {"": "kernels", "A": h["a_kernels"], "B": h["b_kernels"]},
        {"": "GPU busy %", "A": h["a_busy_pct"], "B": h["b_busy_pct"]},
    ])
    sections = [
        ("Verdict", f"<p class='verdict'>{html.escape(h['verdict'])}</p>"
                    f"<p>A: {html.escape(str(h['a']))} ({html.escape(h['a_iteration_source'])})<br>"
                    f"B: {html.escape(str(h['b']))} ({html.escape(h['b_iteration_source'])})</p>"
                    + summary.to_html(index=False, float_format=lambda v: f"{v:.3f}", border=0)),
        ("By kernel class (per iteration)", table_html(d.by_class)),
        ("By precision (per iteration)", table_html(d.by_precision)),
        ("By layer (per iteration)", table_html(d.by_layer)),
        ("Precision-conversion kernels (only in B, in layers whose math changed precision)",
         table_html(d.conversion)),
        ("Overheads (median per iteration)", table_html(d.overheads)),
        ("Tensor Core activity", table_html(d.tensor_core)),
        ("Kernels (matched by layer, class and position)", table_html(d.kernels, 60)),
    ]
    return page(f"nsightlab diff: {h['a']} vs {h['b']}", sections, list(diff_charts(d).values()))
