"""``nsightlab report``: everything about one run on one page, with the findings that matter.

Builds on the run profile (per iteration) and the recipes: top kernels (kernel_sum), the
launch-vs-compute verdict (launch_compute), host syncs and GPU gaps (sync_gaps), Tensor Core
activity (tensor_core) and the layer table. Each finding carries the numbers behind it.
"""
from __future__ import annotations

import html
from dataclasses import dataclass

import altair as alt
import pandas as pd

from . import recipes
from .charts import WIDTH, page, table_html
from .profile import RunProfile, profile
from .report import Report, open as open_report
from .render import fmt_ms as _ms, table_text


@dataclass
class RunReport:
    profile: RunProfile
    findings: list[str]
    top_kernels: pd.DataFrame
    launch: pd.DataFrame
    syncs: pd.DataFrame
    gaps: pd.DataFrame
    tensor_core: pd.DataFrame


def build(report: Report | str) -> RunReport:
    r = report if isinstance(report, Report) else open_report(report)
    p = profile(r, None if isinstance(report, Report) else str(report))
    ks = recipes.run("kernel_sum", r)["kernel_sum"]
    lc = recipes.run("launch_compute", r)["summary"]
    sg = recipes.run("sync_gaps", r)
    tc = recipes.run("tensor_core", r)["summary"]
    return RunReport(p, findings(p, ks, lc, sg, tc), ks.head(15), lc, sg["by_api"], sg["gaps"].head(15), tc)


def findings(p: RunProfile, ks, lc, sg, tc) -> list[str]:
    out = []
    it = p.iteration_ns or 1.0
    if len(lc):
        s = lc.iloc[0]
        if s["verdict"] == "launch-bound":
            out.append(f"launch-bound: {s['evidence']} — try CUDA graphs (or fewer, larger kernels)")
        elif s["verdict"] == "compute-bound":
            out.append(f"compute-bound: {s['evidence']}")
        else:
            out.append(f"mixed launch/compute: {s['evidence']}")
    o = p.overheads
    if o["sync_wait_ns"] > 0.05 * it:
        out.append(f"host syncs: {o['syncs']:.0f} per iteration wait {_ms(o['sync_wait_ns'])} "
                   f"({100 * o['sync_wait_ns'] / it:.0f}% of the iteration) — remove .item() / "
                   "synchronize calls from the loop")
    if o["gpu_idle_ns"] > 0.1 * it:
        out.append(f"GPU idle {_ms(o['gpu_idle_ns'])} per iteration ({100 * o['gpu_idle_ns'] / it:.0f}% "
                   "of its span): the host does not keep the GPU fed")
    if len(ks):
        top = ks.iloc[0]
        out.append(f"top kernel: {top['kernel_class']} {top['precision']} takes {top['time_pct']:.0f}% of "
                   f"GPU time ({str(top['name'])[:80]})")
        fp32 = ks[(ks["precision"] == "fp32") & ks["kernel_class"].isin(["gemm", "attention", "conv"])]
        if len(fp32) and fp32["time_pct"].sum() > 5:
            out.append(f"FP32 math left over: {fp32['time_pct'].sum():.0f}% of GPU time in FP32 "
                       "GEMM/attention/conv kernels")
    conv = p.by_class.set_index("kernel_class")["time_ns"].get("quantize", 0.0)
    if conv > 0.05 * it:
        out.append(f"quantize/cast kernels take {_ms(conv)} per iteration "
                   f"({100 * conv / it:.0f}%): precision conversion is not free")
    if p.tensor_core.get("source") == "gpu_metrics":
        out.append(f"Tensor Active {p.tensor_core['tensor_active_pct']:.0f}% on average inside the "
                   f"iterations ({tc.iloc[0]['tensor_active_avg_pct']:.0f}% over all GPU activity)")
    elif len(tc):
        t = tc.iloc[0]
        if t["source"] == "gpu_metrics":
            out.append(f"Tensor Active {t['tensor_active_avg_pct']:.0f}% on average over the run "
                       f"(SMs Active {t['sm_active_avg_pct']:.0f}%)")
        else:
            out.append(f"{t['tensor_kernel_time_pct']:.0f}% of kernel time is in Tensor-Core-capable "
                       "GEMM/attention/conv kernels (estimate from names; capture with --gpu-metrics "
                       "to measure)")
    return out


def text(rr: RunReport) -> str:
    p = rr.profile
    lines = [f"{p.label}: {p.iterations} iteration(s) ({p.iteration_source})",
             f"  iteration {_ms(p.iteration_ns)} GPU span, {_ms(p.kernel_ns)} kernel time, "
             f"{p.kernels:.0f} kernels, GPU busy {p.busy_pct:.0f}%", "", "findings:"]
    lines += [f"  - {f}" for f in rr.findings]
    lines += ["", "time per iteration by class:",
              table_text(p.by_class.assign(ms=p.by_class["time_ns"] / 1e6).drop(columns="time_ns")
                         .sort_values("ms", ascending=False))]
    top = rr.top_kernels[["name", "instances", "total_ns", "time_pct", "kernel_class", "precision"]]
    lines += ["top kernels:", table_text(top.head(8))]
    if len(rr.syncs):
        lines += ["host syncs:", table_text(rr.syncs)]
    return "\n".join(lines)


def html_page(rr: RunReport) -> str:
    p = rr.profile
    by_class = p.by_class.assign(ms=p.by_class["time_ns"] / 1e6)
    chart = alt.Chart(by_class, title="GPU time per iteration by kernel class").mark_bar().encode(
        x=alt.X("ms:Q", title="ms per iteration"), y=alt.Y("kernel_class:N", sort="-x", title=None),
        color="kernel_class:N", tooltip=["kernel_class", alt.Tooltip("ms:Q", format=".3f"), "count"],
    ).properties(width=WIDTH)
    layers = p.by_layer.assign(ms=p.by_layer["time_ns"] / 1e6)
    layer_chart = alt.Chart(layers, title="GPU time per iteration by layer").mark_bar().encode(
        x=alt.X("ms:Q"), y=alt.Y("layer:N", sort="-x", title=None), tooltip=["layer", "ms", "count"],
    ).properties(width=WIDTH)
    items = "".join(f"<li>{html.escape(f)}</li>" for f in rr.findings)
    sections = [
        ("Findings", f"<p>{html.escape(p.iteration_source)}; iteration {_ms(p.iteration_ns)}, "
                     f"GPU busy {p.busy_pct:.0f}%, {p.kernels:.0f} kernels</p><ul>{items}</ul>"),
        ("Top kernels", table_html(rr.top_kernels)),
        ("Launch vs compute", table_html(rr.launch)),
        ("Host syncs", table_html(rr.syncs)), ("Longest GPU gaps", table_html(rr.gaps)),
        ("Tensor Core activity", table_html(rr.tensor_core)),
        ("Layers (per iteration)", table_html(p.by_layer)),
    ]
    return page(f"nsightlab report: {p.label}", sections, [chart, layer_chart])
