"""``nsightlab report``: everything about one run, with the findings that matter.

Builds on the run profile (per iteration) and the recipes: top kernels (kernel_sum), the
launch-vs-compute verdict (launch_compute), host syncs and GPU gaps (sync_gaps), Tensor Core
activity (tensor_core) and the layer table. Each finding carries the numbers behind it.
Rendering (terminal text, HTML with charts) is ``nsightlab.renderers``' job.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import pandas as pd

from . import recipes
from .profile import RunProfile, profile
from .report import Report, as_report
from .result import Result, json_records, json_value
from .units import fmt_ms as _ms

#: rows kept of the longer tables
TOP_KERNELS = 15
LONGEST_GAPS = 15


@dataclass
class RunReport(Result):
    """One run on one page. Tables (times in ns):

    - ``run``: label, iterations, iteration_source, iteration_ns, kernel_ns, kernels, busy_pct
      (one row, per iteration);
    - ``findings``: finding (one sentence each, with its numbers);
    - ``by_class`` / ``by_layer``: the profile's time per iteration by kernel class / layer;
    - ``top_kernels``: kernel_sum's first rows; ``launch``: launch_compute's summary;
      ``syncs``: sync_gaps' by_api; ``gaps``: the longest GPU gaps; ``tensor_core``: its summary.
    """

    profile: RunProfile
    findings: list[str]
    top_kernels: pd.DataFrame
    launch: pd.DataFrame
    syncs: pd.DataFrame
    gaps: pd.DataFrame
    tensor_core: pd.DataFrame

    def run_row(self) -> dict:
        """The run's per-iteration summary as one dict."""
        p = self.profile
        return {"label": str(p.label), "iterations": p.iterations,
                "iteration_source": p.iteration_source, "iteration_ns": p.iteration_ns,
                "kernel_ns": p.kernel_ns, "kernels": p.kernels, "busy_pct": p.busy_pct}

    def tables(self) -> dict[str, pd.DataFrame]:
        return {"run": pd.DataFrame([self.run_row()]),
                "findings": pd.DataFrame({"finding": self.findings}, dtype=object),
                "by_class": self.profile.by_class, "by_layer": self.profile.by_layer,
                "top_kernels": self.top_kernels, "launch": self.launch, "syncs": self.syncs,
                "gaps": self.gaps, "tensor_core": self.tensor_core}

    def manifest(self) -> dict:
        return {"kind": "report", "report": str(self.profile.label), "run": self.run_row()}

    def to_json(self) -> dict:
        """The run summary and findings as plain data, every other table as records."""
        out = {"run": json_value(self.run_row()), "findings": list(self.findings)}
        out.update({t: json_records(df) for t, df in self.tables().items()
                    if t not in ("run", "findings")})
        return out


def build(report: Report | str | os.PathLike, **open_options) -> RunReport:
    """The report of one run: a Report, or anything ``nsightlab.open`` takes (opened with
    ``open_options``); the run is labelled as given."""
    r = as_report(report, **open_options)
    p = profile(r, None if isinstance(report, Report) else str(report))
    ks = recipes.run("kernel_sum", r)["kernel_sum"]
    lc = recipes.run("launch_compute", r)["summary"]
    sg = recipes.run("sync_gaps", r)
    tc = recipes.run("tensor_core", r)["summary"]
    return RunReport(p, findings(p, ks, lc, sg, tc), ks.head(TOP_KERNELS), lc, sg["by_api"],
                     sg["gaps"].head(LONGEST_GAPS), tc)


def findings(p: RunProfile, ks, lc, sg, tc) -> list[str]:
    """Sentences about the run, most important first, each with the numbers behind it:
    the launch/compute verdict, host syncs, GPU idle, the top kernel, FP32 math left,
    quantize cost and Tensor Core activity (measured or estimated)."""
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
