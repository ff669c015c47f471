"""Any result as one self-contained HTML page: verdict, tables and Altair charts.

The Vega JavaScript is inlined (through vl-convert), so a page opens with the network off.
"""
from __future__ import annotations

import html
from functools import singledispatch

import numpy as np
import pandas as pd

from nsightlab.analysis.budget import parts_table
from nsightlab.comparison.diff import Diff, runs_note, slot_labels
from nsightlab.comparison.lineup import Lineup
from nsightlab.run.report import RunReport
from nsightlab.comparison.trt_layers import LayerMatch
from nsightlab.core.units import kernel_label, ms_columns
from nsightlab.kernels.report import KernelDiff, KernelReport
from nsightlab.recipe_runner import RunResult
from nsightlab.renderers import charts

#: the page's CSS. A table wider than the page (many columns, kernel names) scrolls inside
#: its own box (``.scroll``) instead of running past the page's right edge; short text keeps
#: to one line, and a cell of long text (``.long``) wraps at a paragraph's width, not into a
#: tall, narrow column.
STYLE = ("<style>body{font-family:system-ui,sans-serif;margin:2em;max-width:1100px}"
         ".scroll{max-width:100%;overflow-x:auto}"
         "table{border-collapse:collapse;font-size:13px;margin:0.5em 0}"
         "td,th{border:1px solid #ddd;padding:3px 8px;text-align:right}"
         "th{background:#f4f4f4}td:first-child,th:first-child,td.t{text-align:left}"
         "td.t{white-space:nowrap}td.long{white-space:normal;min-width:24em}"
         ".verdict{font-size:1.15em;background:#fff8e1;padding:0.8em;border-left:4px solid #f0a000}"
         "</style>")


def page(title: str, sections: list[tuple[str, str]], chart_list: list, lead: int = 1) -> str:
    """One self-contained HTML page: a title, the first ``lead`` sections (the verdict), the
    charts, then the other sections (tables a reader looks up)."""
    body = [f"<h1>{html.escape(title)}</h1>"]
    tail = []
    for i, (heading, content) in enumerate(sections):
        (body if i < lead else tail).append(f"<h2>{html.escape(heading)}</h2>\n{content}")
    if not chart_list:
        return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}"
                f"</title>{STYLE}</head><body>" + "\n".join(body + tail) + "</body></html>")
    import altair as alt

    doc = alt.vconcat(*chart_list).resolve_scale(color="independent").to_html(inline=True)
    doc = doc.replace("<head>", f"<head>\n<title>{html.escape(title)}</title>\n{STYLE}", 1)
    at = doc.rfind("<body>") + len("<body>")  # the last one: the inlined JS mentions "<body>" too
    end = doc.rfind("</body>")
    return (doc[:at] + "\n" + "\n".join(body) + "\n<h2>Charts</h2>" + doc[at:end]
            + "\n".join(tail) + doc[end:])


def table_html(df: pd.DataFrame, max_rows: int = 15) -> str:
    """A DataFrame as a compact HTML table (times in ms, whole numbers without decimals,
    booleans as yes/no, long names cut at the end with the full name in the cell's title);
    rows past ``max_rows`` behind a fold (all of them are in the Parquet output). Each table
    sits in a box that scrolls sideways when it is wider than the page (``STYLE``)."""
    if not len(df):
        return "<p>none</p>"
    show = ms_columns(df)
    cols = [str(c) for c in show.columns]
    head = "".join(f"<th>{html.escape(c)}</th>" for c in cols)

    def table(frame) -> str:  # in a box of the page's width that scrolls sideways
        body = "".join("<tr>" + "".join(_td(v, c) for v, c in zip(r, cols)) + "</tr>"
                       for r in frame.itertuples(index=False, name=None))
        return (f"<div class='scroll'><table><thead><tr>{head}</tr></thead><tbody>{body}"
                "</tbody></table></div>")
    out = table(show.head(max_rows))
    if len(show) > max_rows:
        out += (f"<details><summary>{len(show) - max_rows} more rows</summary>"
                f"{table(show.iloc[max_rows:max_rows + 500])}</details>")
    return out


#: characters from which a cell's text is a sentence or a long name (``td.long``)
LONG_TEXT = 40


def _td(v, column: str = "") -> str:
    """One cell, formatted by its unit as the terminal text does (shares to 0.1)."""
    if isinstance(v, (bool, np.bool_)):
        return f"<td class='t'>{'yes' if v else 'no'}</td>"
    if isinstance(v, float) and column.endswith(("_pct", "%")) and not pd.isna(v):
        return f"<td>{v:.1f}</td>"
    if isinstance(v, float):
        text = "" if pd.isna(v) else (f"{v:.0f}" if v == int(v) or abs(v) >= 1000
                                      else f"{v:.1f}" if abs(v) >= 100 else f"{v:.3f}")
        return f"<td>{text}</td>"
    if isinstance(v, (int, np.integer)):
        return f"<td>{v}</td>"
    s = "" if v is None or (not isinstance(v, str) and pd.isna(v)) else str(v)
    kind = "t long" if len(s) > LONG_TEXT else "t"  # text reads left-aligned; numbers right
    if len(s) > 90:
        return (f"<td class='{kind}' title='{html.escape(s, quote=True)}'>"
                f"{html.escape(s[:89])}…</td>")
    return f"<td class='{kind}'>{html.escape(s)}</td>"


@singledispatch
def render(obj) -> str:
    """``obj`` as a self-contained HTML page."""
    raise TypeError(f"no HTML renderer for {type(obj).__name__}")


@render.register
def _(d: Diff) -> str:
    h = d.headline
    summary = pd.DataFrame([
        {"": "median iteration (wall clock), ms", "A": h["a_median_ns"] / 1e6,
         "B": h["b_median_ns"] / 1e6},
        {"": "kernel time, ms", "A": h["a_kernel_ns"] / 1e6, "B": h["b_kernel_ns"] / 1e6},
        {"": "kernels", "A": h["a_kernels"], "B": h["b_kernels"]},
        {"": "GPU busy %", "A": h["a_busy_pct"], "B": h["b_busy_pct"]},
    ])
    iv = h.get("interval") or {}
    if iv and pd.notna(iv.get("low")):
        summary = summary.astype(object)  # a text row below numbers
        summary.loc[len(summary)] = {
            "": f"B / A, median iteration ({100 * iv['level']:.0f}% interval)", "A": "",
            "B": f"{iv['ratio']:.3f} ({iv['low']:.3f}-{iv['high']:.3f})"
                 + ("" if iv["significant"] else ", no measurable difference")}
    several = runs_note(h)
    sections = [
        ("Verdict", "".join(f"<p class='verdict'>warning (workload): {html.escape(w)}</p>"
                            for w in h.get("workload_warnings", []))
                    + "".join(f"<p class='verdict'>warning ({side.upper()}): {html.escape(w)}</p>"
                              for side in ("a", "b") for w in h[f"{side}_warnings"])
                    + f"<p class='verdict'>{html.escape(h['verdict'])}</p>"
                    f"<p>A: {html.escape(str(h['a']))} ({html.escape(h['a_iteration_source'])}; "
                    f"{html.escape(h['a_verdict'])})<br>"
                    f"B: {html.escape(str(h['b']))} ({html.escape(h['b_iteration_source'])}; "
                    f"{html.escape(h['b_verdict'])})</p>"
                    + (f"<p><b>{html.escape(several)}</b></p>" if several else "")
                    + table_html(summary)),
        ("By kernel class (per iteration)", table_html(d.by_class)),
        ("By precision (per iteration)", table_html(d.by_precision)),
        ("By layer (per iteration)", table_html(d.by_layer)),
        ("Precision-conversion kernels (only in B)",
         table_html(d.conversion[["kernel_class", "label", "time_ns"]])),
        ("Other kernels only in B", table_html(d.only_b[["kernel_class", "label", "time_ns"]])),
        ("Where an iteration's time goes (mean per iteration)", table_html(d.budget)),
        ("Overheads (median per iteration)", table_html(d.overheads)),
        ("Tensor Core activity", table_html(d.tensor_core)),
        ("Kernels (matched by layer, class and position)",
         table_html(d.kernels.assign(kernel=slot_labels(d.kernels))
                    [["layer", "kernel_class", "kernel", "a_precision", "b_precision", "a_ns",
                      "b_ns", "delta_ns", "status"]])),
    ]
    return page(f"nsightlab diff: {h['a']} vs {h['b']}", sections,
                list(charts.diff_charts(d).values()))


@render.register
def _(l: Lineup) -> str:
    s = l.summary
    verdicts = "".join(
        "".join(f"<p class='verdict'>warning (workload, {html.escape(d.b.label)}): "
                f"{html.escape(w)}</p>" for w in d.headline["workload_warnings"])
        + f"<p><b>{html.escape(d.b.label)}</b> against {html.escape(d.a.label)}: "
        f"{html.escape(d.headline['verdict'])}</p>" for d in l.diffs)
    summary = s.drop(columns=["iteration_source"])
    sections = [
        ("Verdict", verdicts + table_html(summary[["run", "latency_mean_ns", "latency_p50_ns",
                                                   "latency_p95_ns", "speedup", "verdict"]])),
        ("Runs (per iteration; latency over the wall-clock iterations)", table_html(summary)),
        ("By kernel class (ms per iteration)", table_html(l.wide_ms("by_class"))),
        ("By precision (ms per iteration)", table_html(l.wide_ms("by_precision"))),
    ]
    return page(f"nsightlab compare: {', '.join(l.runs)}", sections,
                list(charts.lineup_charts(l).values()))


@render.register
def _(m: LayerMatch) -> str:
    sections = [("Summary (ms per inference)", table_html(m.summary)),
                ("Layers, matched across the engines", table_html(m.layers, 60)),
                ("Standalone Q/DQ and reformat layers", table_html(m.conversion, 40))]
    return page("nsightlab layers", sections, [])


@render.register
def _(rr: RunReport) -> str:
    run = rr.run_row()
    warn = "".join(f"<li><b>{html.escape(w['severity'])}</b>: {html.escape(w['message'])}</li>"
                   for w in rr.warnings if w["severity"] != "note")
    items = "".join(f"<li>{html.escape(f)}</li>" for f in rr.findings)
    head = html.escape(str(run["iteration_source"]))
    if run["mean_ns"] is not None:
        head += (f"; iteration {run['mean_ns'] / 1e6:.2f} ms wall clock (the loop's mean), "
                 f"median {run['wall_med_ns'] / 1e6:.2f} ms, GPU busy {run['busy_pct']:.0f}%")
    sections = [("Findings", f"<p>{head}</p>" + (f"<ul class='verdict'>{warn}</ul>" if warn else "")
                 + f"<ul>{items}</ul>")]
    if len(rr.budget):
        if len(rr.kinds) and ((~rr.kinds["kind"].isin(["main", "warm-up"])).any()
                              or (rr.kinds["pattern"] == "trend").any()):
            sections.append(("Kinds of iteration", table_html(rr.kinds[
                ["kind", "which", "iterations", "med_ns", "min_ns", "max_ns", "share_pct",
                 "verdict", "cause"]])))
        sections.append(("Where an iteration's time goes (mean per iteration of the loop)",
                         table_html(parts_table(rr.budget))))
    top = rr.top_kernels
    if len(top):  # labelled as diff labels kernels
        top = top.assign(name=[kernel_label(n, 90) for n in top["name"]])
    sections += [("Top kernels", table_html(top)),
                 ("Launch vs compute", table_html(rr.launch)),
                 ("Host syncs", table_html(rr.syncs)), ("Longest GPU gaps", table_html(rr.gaps)),
                 ("Tensor Core activity", table_html(rr.tensor_core)),
                 ("CUDA API time", table_html(rr.api)), ("NVTX ranges", table_html(rr.ranges))]
    if rr.profile is not None:
        sections.append(("Layers (per iteration)", table_html(rr.profile.by_layer)))
    return page(f"nsightlab report: {rr.label}", sections, list(charts.report_charts(rr).values()))


@render.register
def _(result: RunResult) -> str:
    sections = [(t, table_html(df)) for t, df in result.tables().items()]
    return page(f"nsightlab recipe {result.recipe}", sections, [])


#: headings of the kernel-level results' tables (else the table's name)
KERNEL_TABLES = {"kernels": "Kernels (as ncu ran them: base clocks, caches flushed)",
                 "rules": "NVIDIA's rule results", "saves": "What each kernel could save per "
                 "iteration of the loop", "unprofiled": "Kernels of the loop not profiled",
                 "pairs": "Kernel pairs (A and B)", "only_a": "Kernels only in A",
                 "only_b": "Kernels only in B", "findings": "Findings, as records"}


def _kernel_page(title: str, result, notes: list[str], chart_map: dict) -> str:
    """A kernel-level result's page: its findings (after ``notes``: warnings, what could not
    be judged) as the verdict, the roofline, then each of its tables."""
    warn = "".join(f"<p class='verdict'>warning: {html.escape(str(w))}</p>" for w in notes)
    items = "".join(f"<li>{html.escape(str(f))}</li>" for f in result.findings())
    sections = [("Findings", warn + f"<p>{html.escape(result.brief())}</p>"
                 + (f"<ul>{items}</ul>" if items else "<p>none</p>"))]
    for name, df in result.tables().items():
        if name == "findings":  # the sentences are above; their numbers are in the JSON output
            df = df.drop(columns=["values"], errors="ignore")
        sections.append((KERNEL_TABLES.get(name, name.replace("_", " ").capitalize()),
                         table_html(df)))
    return page(title, sections, list(chart_map.values()))


@render.register
def _(result: KernelReport) -> str:
    notes = list(result.warnings) + [f"not judged: {m}" for m in result.judged.missing]
    return _kernel_page(f"nsightlab kernels: {result.source}", result, notes,
                        charts.kernel_charts(result))


@render.register
def _(result: KernelDiff) -> str:
    return _kernel_page(f"nsightlab kernel diff: {result.a} vs {result.b}", result, [],
                        charts.kernel_diff_charts(result))
