"""Any result as terminal text: aligned tables, times in ms, verdicts first.

``render(obj)`` knows every result type (a DataFrame, a recipe run, a diff, a run report,
report infos); models never format themselves. Long cells (kernel names) are cut at the
end, so what a kernel *is* stays readable; machine-readable output (CSV, JSON, Parquet)
always keeps the full text.
"""
from __future__ import annotations

import io
import re
from functools import singledispatch

import numpy as np
import pandas as pd

from nsightlab.analysis.budget import parts_table
from nsightlab.comparison.diff import Diff, runs_note, slot_labels
from nsightlab.comparison.lineup import Lineup
from nsightlab.comparison.ort_placement import Placement
from nsightlab.run.model import OUTSIDE
from nsightlab.run.report import ProcessesReport, RunReport
from nsightlab.comparison.trt_layers import LayerMatch
from nsightlab.core.units import fmt_bytes, fmt_span, fmt_time, kernel_label, ms_columns
from nsightlab.kernels.report import KernelDiff, KernelLineup, KernelReport
from nsightlab.read.metadata import ReportInfos
from nsightlab.recipe_runner import RunResult

_NUMBER = re.compile(r"^-?\d+(\.\d+)?$|^$")
#: widest cell before it is cut (with "…")
MAX_CELL = 60


def cell(v, max_width: int = MAX_CELL, column: str = "") -> str:
    """One value as table text, by its unit: shares (``*_pct``, ``*%``) to 0.1; other whole
    numbers without decimals; times to 0.1 from 100 up and to 0.001 below; missing values
    blank; long text cut at the end."""
    if isinstance(v, float) and not pd.isna(v):
        if column.endswith(("_pct", "%")):
            return f"{v:.1f}"
        return f"{v:.0f}" if v == int(v) else (f"{v:.1f}" if abs(v) >= 100 else f"{v:.3f}")
    s = "" if v is None or (not isinstance(v, str) and pd.isna(v)) else str(v)
    return s if len(s) <= max_width else s[: max_width - 1] + "…"


def table_text(df: pd.DataFrame, max_width: int = MAX_CELL) -> str:
    """Aligned plain-text table (numbers right-aligned)."""
    if df.empty:
        return "(no rows)\n" if len(df.columns) == 0 else "  ".join(map(str, df.columns)) + "\n(no rows)\n"
    cols = [str(c) for c in df.columns]
    rows = [[cell(v, max_width, c) for v, c in zip(r, cols)]
            for r in df.itertuples(index=False, name=None)]
    numeric = [(pd.api.types.is_numeric_dtype(df[c]) and not pd.api.types.is_bool_dtype(df[c]))
               or all(_NUMBER.match(r[i]) for r in rows) for i, c in enumerate(df.columns)]
    widths = [max([len(c)] + [len(r[i]) for r in rows]) for i, c in enumerate(cols)]
    buf = io.StringIO()

    def line(vals: list[str]) -> None:
        parts = [v.rjust(w) if num else v.ljust(w) for v, w, num in zip(vals, widths, numeric)]
        buf.write("  ".join(parts).rstrip() + "\n")

    line(cols)
    line(["-" * w for w in widths])
    for r in rows:
        line(r)
    return buf.getvalue()


def ms_table(df: pd.DataFrame, cols: list[str] | None = None) -> str:
    """``table_text`` of ``cols`` with every ``*_ns`` column shown as ``*_ms``."""
    return table_text(ms_columns(df[cols] if cols else df))


@singledispatch
def render(obj, limit: int | None = None) -> str:
    """``obj`` as terminal text (``limit``: rows per table where a result has many)."""
    raise TypeError(f"no text renderer for {type(obj).__name__}")


@render.register
def _(df: pd.DataFrame, limit: int | None = None) -> str:
    return table_text(df if limit is None else df.head(limit))


@render.register
def _(result: RunResult, limit: int | None = 25) -> str:
    out = []
    for t, df in result.tables().items():
        more = f" (first {limit} of {len(df)})" if limit is not None and len(df) > limit else ""
        out += [f"== {t}{more} ==", table_text(df if limit is None else df.head(limit))]
    return "\n".join(out)


@render.register
def _(d: Diff, limit: int | None = 12) -> str:
    h = d.headline
    # the reports' own data warnings are said once, on stderr (``cli.options.say_warnings``);
    # that the two runs are not the same workload is part of the answer
    warn = [f"WARNING (workload): {w}" for w in h.get("workload_warnings", [])]
    change = [f"runtime change: {h['runtime_change']}"] if h.get("runtime_change") else \
        ["the runtime's settings differ:"] if h.get("runtime_causes") else []
    change += [f"  - {c}" for c in h.get("runtime_causes") or []]
    several = runs_note(h)
    lines = [*warn, *([""] if warn else []), *change, h["verdict"], "",
             *([several, ""] if several else []),
             *[f"{x.upper()} {h[x]}: {h[x + '_iterations']} iterations "
               f"({h[x + '_iteration_source']}); {h[x + '_verdict']}" for x in "ab"],
             f"per iteration (median): {h['a_median_ns'] / 1e6:.3f} ms -> "
             f"{h['b_median_ns'] / 1e6:.3f} ms "
             f"(speedup {h['a_median_ns'] / h['b_median_ns']:.2f}x), kernels {h['a_kernels']:.0f} -> {h['b_kernels']:.0f}, "
             f"GPU busy {h['a_busy_pct']:.0f}% -> {h['b_busy_pct']:.0f}%, "
             f"conversion overhead {h['conversion_overhead_ns'] / 1e6:.3f} ms",
             *([f"outside the iterations (warm-up, compile; not in the numbers below): kernels "
                f"{h['a_outside_kernel_ns'] / 1e6:.2f} ms in A, {h['b_outside_kernel_ns'] / 1e6:.2f} "
                "ms in B"] if h["a_outside_kernel_ns"] or h["b_outside_kernel_ns"] else []), "",
             "by kernel class (ms per iteration):",
             ms_table(d.by_class, ["kernel_class", "a_ns", "b_ns", "delta_ns", "a_count", "b_count"])]
    if (d.by_layer["layer"] != OUTSIDE).any():
        lines += ["by layer (largest changes):",
                  ms_table(d.by_layer.head(limit), ["layer", "a_ns", "b_ns", "delta_ns",
                                                    "a_math_precision", "b_math_precision"])]
    k = d.kernels.assign(kernel=slot_labels(d.kernels))
    top = (k.groupby(["kernel", "status"], sort=False)
           .agg(layers=("layer", "nunique"), a_ns=("a_ns", "sum"), b_ns=("b_ns", "sum"),
                delta_ns=("delta_ns", "sum")).reset_index())
    top = top[top["delta_ns"].abs() > 0].sort_values("delta_ns", key=abs, ascending=False).head(limit)
    if len(top):
        lines += ["kernels (largest changes, summed over layers; full names in --json / -o):",
                  ms_table(top, ["kernel", "status", "layers", "a_ns", "b_ns", "delta_ns"])]
    if len(d.conversion):
        lines += ["precision-conversion kernels (only in B):",
                  ms_table(d.conversion.head(8), ["kernel_class", "label", "time_ns"])]
    if len(d.only_b):
        lines += ["other kernels only in B (not conversion):",
                  ms_table(d.only_b.head(8), ["kernel_class", "label", "time_ns"])]
    lines += ["where an iteration's time goes (mean per iteration):", ms_table(d.budget),
              "overheads (median per iteration):",
              ms_table(d.overheads, ["overhead", "a_ns", "b_ns", "a_count", "b_count"])]
    return "\n".join(lines)


@render.register
def _(m: LayerMatch, limit: int | None = 40) -> str:
    s = m.summary.set_index("run")
    lines = [*[f"{x.upper()}: {s.loc[x, 'layers']} compute layers, {s.loc[x, 'compute_ms']:.3f} "
               f"ms; {s.loc[x, 'matched_pct']:.0f}% of it in matched layers; Q/DQ "
               f"{s.loc[x, 'qdq_ms']:.3f} ms, reformats {s.loc[x, 'reformat_ms']:.3f} ms"
               for x in "ab"],
             "(ms per inference)", "",
             table_text(m.layers[["a_layer", "b_layer", "how", "a_ms", "b_ms", "delta_ms",
                                  "a_precision", "b_precision"]].head(limit), max_width=44)]
    conv = m.conversion[m.conversion["ms"] > 0].sort_values("ms", ascending=False)
    if len(conv):
        lines += ["standalone Q/DQ and reformat layers (conversion and layout work):",
                  table_text(conv.head(limit), max_width=60)]
    return "\n".join(lines)


@render.register
def _(p: Placement, limit: int | None = 15) -> str:
    r = p.run
    lines = [f"requested: {r.get('requested')}; providers that ran nodes: "
             f"{', '.join(r.get('providers_seen') or []) or '(none)'}"]
    if r.get("session_fallback"):
        lines.append(f"WARNING: {r.get('requested')} was not available in this onnxruntime build "
                     f"(available: {', '.join(r.get('providers_available') or [])}): the whole "
                     "session ran on the CPU")
    if len(p.assignment):
        lines.append("placed by ORT at session creation: " + ", ".join(
            f"{a.provider} {a.nodes} node(s)" for a in p.assignment.itertuples()))
    if r.get("fallback_time_pct"):
        lines.append(f"fallbacks: {len(p.fallbacks)} node(s) ran on the CPU EP while a GPU EP "
                     f"was requested, {r['fallback_time_pct']:.1f}% of node time")
    if len(p.memcpy):
        lines.append(f"memcpy nodes between providers: {int(p.memcpy['executions'].sum())} "
                     f"executions, {p.memcpy['time_ns'].sum() / 1e6:.3f} ms, "
                     f"{p.memcpy['time_pct'].sum():.1f}% of node time")
    if len(p.trt_subgraphs):
        lines.append(f"TensorRT EP subgraphs: {len(p.trt_subgraphs)}, "
                     f"{p.trt_subgraphs['time_pct'].sum():.1f}% of node time")
    lines += ["", "session and runs:", ms_table(p.phases), "by execution provider:",
              ms_table(p.by_provider)]
    for title, df in (("fallback nodes (CPU EP):", p.fallbacks), ("memcpy nodes:", p.memcpy),
                      ("TensorRT EP subgraphs:", p.trt_subgraphs)):
        if len(df):
            lines += [title, ms_table(df.head(limit))]
    if p.timeline is not None:
        lines += _timeline(p.timeline, limit)
    elif p.timeline_note:
        lines += ["", f"not joined to the capture's timeline: {p.timeline_note}"]
    return "\n".join(lines)


def _timeline(t, limit: int | None) -> list[str]:
    """The profile on the trace: where each run's host time goes and what it launched."""
    a, runs = t.alignment, t.runs
    wall = float(runs["wall_ns"].mean()) if len(runs) else 0.0
    host = float(runs["host_in_nodes_ns"].mean()) if len(runs) else 0.0
    bp = t.by_provider
    lines = ["", f"on the timeline ({a['runs']} timed runs; aligned by {a['method']}: "
                 f"{a['calls_in_nodes_pct']:.0f}% of {a['calls']:,} launch/copy calls amid the "
                 "nodes fall in a node's span):",
             f"  per run: {wall / 1e6:.3f} ms (model_run), {host / 1e6:.3f} ms of it in nodes "
             f"on the host; {bp['launch_calls'].sum():.0f} launch/copy calls "
             f"({bp['launch_call_ns'].sum() / 1e6:.3f} ms in the calls), kernels "
             f"{bp['kernel_ns'].sum() / 1e6:.3f} ms on the GPU (ORT's profiler was on: its own "
             "host time is in these numbers; time the runs without it for their wall time)"]
    cpu = t.provider_cost("CPUExecutionProvider")
    if cpu["nodes"] and len(bp) > 1:
        lines.append(f"  CPU EP nodes: {cpu['nodes']:.0f}, {cpu['host_ns'] / 1e6:.3f} ms of host "
                     "time per run, no GPU work (they keep enable_cuda_graph from being used)")
    mc = t.memcpy_cost()
    if mc["executions"]:
        lines.append(f"  Memcpy nodes: {mc['executions']:.0f} per run, {mc['host_ns'] / 1e6:.3f} ms "
                     f"host, {mc['copies']:.0f} cop{'y' if round(mc['copies']) == 1 else 'ies'} of "
                     f"{fmt_bytes(mc['copy_bytes'])} "
                     f"({mc['copy_ns'] / 1e6:.3f} ms on the GPU)")
    outside = float(runs["copies_outside_nodes"].mean()) if len(runs) else 0.0
    if outside >= 1:
        lines.append(f"  outside every node: {outside:.0f} cop{'y' if round(outside) == 1 else 'ies'}"
                     " per run: the session's own input and output copies (io_binding with "
                     "inputs and outputs on the device removes them)")
    show = t.by_op.rename(columns={"launch_calls": "launches"})
    cols = ["op_type", "provider", "nodes", "host_ns", "launches", "launch_call_ns", "kernels",
            "kernel_ns", "copies"]
    return lines + ["by op type (per run):", ms_table(show.head(limit), cols)]


def _one(v: float) -> str:
    """A share or rate to one decimal ('' when missing)."""
    return "" if pd.isna(v) else f"{v:.1f}"


def _speedup_ci(s: pd.DataFrame) -> list[str]:
    """Each run's speed-up interval; '~' where it holds 1 (no measurable difference, as
    benchstat prints it); the baseline and runs too short for an interval blank."""
    return ["" if i == 0 or not (np.isfinite(lo) and np.isfinite(hi))
            else fmt_span(lo, hi) + (" ~" if lo <= 1 <= hi else "")
            for i, (lo, hi) in enumerate(zip(s["speedup_low"], s["speedup_high"]))]


@render.register
def _(l: Lineup, limit: int | None = 12) -> str:
    s = l.summary
    table = pd.DataFrame({
        "run": s["run"], **({"runtime": s["runtime"]} if "runtime" in s and  # when they differ
                            s["runtime"].nunique() > 1 else {}),
        "iters": s["iterations"], "mean_ms": s["latency_mean_ns"] / 1e6, "p50_ms": s["latency_p50_ns"] / 1e6,
        "p95_ms": s["latency_p95_ns"] / 1e6, "p99_ms": s["latency_p99_ns"] / 1e6,
        "min_ms": s["latency_min_ns"] / 1e6, "max_ms": s["latency_max_ns"] / 1e6,
        "iter/s": s["iterations_per_s"].map(_one), **({"items/s": s["items_per_s"]}
                                           if s["items_per_s"].notna().any() else {}),
        "speedup": s["speedup"].round(3), **({"95% CI": _speedup_ci(s)} if "speedup_low" in s
                                             else {}),
        **({"reports": s["reports"]} if "reports" in s and (s["reports"] > 1).any() else {}),
        "kernel_ms": s["kernel_ns"] / 1e6, "busy_%": s["busy_pct"].map(_one),
        "conversion_ms": s["conversion_ns"] / 1e6, "copies_ms": s["copies_ns"] / 1e6,
        "tensor_%": s["tensor_active_pct"].fillna(s["tensor_kernel_time_pct"]).map(_one),
        "verdict": s["verdict"]})
    lines = [f"{len(l.runs)} runs, baseline {l.runs[0]} (latency: wall-clock iterations; "
             "times per iteration; tensor_%: Tensor Active, else share of kernel time on Tensor Cores)",
             table_text(table),
             "GPU time by kernel class (ms per iteration):",
             table_text(l.wide_ms("by_class")),
             "GPU time by precision (ms per iteration):",
             table_text(l.wide_ms("by_precision"))]
    lines[1:1] = [f"NOTE: {n}" for n in getattr(l, "notes", [])]
    ort = s[s["execution_providers"].astype(str) != ""]
    if len(ort):
        lines.append("ONNX Runtime placement (node time; nsightlab ort RUN for the nodes):")
        lines += [f"  {r.run}: {r.execution_providers}; CPU fallbacks {r.ort_fallback_pct:.1f}%, "
                  f"memcpy nodes {r.ort_memcpy_pct:.1f}%" for r in ort.itertuples()]
    runner = s[s["ort_settings"].astype(str) != ""] if "ort_settings" in s else s.iloc[0:0]
    if len(runner):
        lines.append("ONNX Runtime runner settings:")
        lines += [f"  {r.run}: {r.ort_settings}" for r in runner.itertuples()]
    for r in l.pairs.itertuples():
        warn = [w for w in str(r.workload_warnings).split("; ") if w]
        causes = [c for c in str(getattr(r, "runtime_causes", "") or "").split("; ") if c]
        head = f"runtime change: {r.runtime_change}" if getattr(r, "runtime_change", "") else \
            "the runtime's settings differ:" if causes else ""
        lines += [f"{r.run} against {r.baseline} (B = {r.run}):",
                  *[f"  WARNING (workload): {w}" for w in warn],
                  *([f"  {head}"] if head else []), *[f"    - {c}" for c in causes],
                  f"  {r.verdict}"]
    return "\n".join(lines) + "\n"


def _comm_verdict(pr, pid: int, run: dict) -> str:
    """A rank whose exposed NCCL time is a large part of its iteration waits more than it
    computes: said with the wait the collectives' matching measured, before the budget's own
    verdict (whose communication part is exposed NCCL time, waiting and transfer together)."""
    c = pr.collectives
    if not c or "ranks" not in c or not run.get("mean_ns"):
        return ""
    t = c["ranks"].set_index("pid")
    if pid not in t.index or t.loc[pid, "exposed_ns"] < COMM_BOUND_PCT / 100 * run["mean_ns"]:
        return ""
    r = t.loc[pid]
    return (f"communication-bound: NCCL exposed {r['exposed_ns'] / 1e6:.2f} ms of its "
            f"{run['mean_ns'] / 1e6:.2f} ms iteration, {r['exposed_wait_ns'] / 1e6:.2f} ms "
            f"of it waiting for peers (its budget: {run['verdict'] or 'no verdict'})")


#: kernels of unknown length alone (share of the iteration, %) that make a stretch a lower bound
GUESSED_PCT = 10.0

#: exposed NCCL time (share of the iteration, %) that makes a rank communication-bound
COMM_BOUND_PCT = 25.0


@render.register
def _(pr: ProcessesReport, limit: int | None = 8) -> str:
    n = len(pr.runs)
    lines = [f"{pr.label}: {n} CUDA processes, each its own run (details below):"]
    for p, rr in zip(pr.processes.itertuples(), pr.runs):
        run = rr.run_row()
        gpus = ", ".join(map(str, p.gpus))
        rank = f", rank {p.rank}" if p.rank is not None and p.rank == p.rank else ""
        it = (f"{run['iterations']} iterations, median {run['wall_med_ns'] / 1e6:.2f} ms"
              if run.get("wall_med_ns") else f"{run['iterations'] or 0} iterations")
        nccl = (f", NCCL {100 * p.nccl_ns / max(p.kernel_ns, 1):.0f}% of its kernel time"
                if p.nccl_kernels else "")
        lines.append(f"  pid {p.pid} {p.name}{rank}: GPU {gpus}, {p.runtime}; {it}; "
                     f"{_comm_verdict(pr, p.pid, run) or run['verdict'] or 'no verdict'}{nccl}")
    for sh in pr.sharing.itertuples():
        lines.append(f"  GPU {sh.device_id} is shared by pids {', '.join(map(str, sh.pids))}: "
                     f"{sh.mode} ({sh.evidence})")
        st = getattr(pr, "stretch", None)
        for x in (st[st["device_id"] == sh.device_id].itertuples() if st is not None and len(st)
                  else ()):
            pct = 100 * x.stretch_ns / max(x.alone_ns, 1)
            lines.append(f"    pid {x.pid}: the sharing stretched its iterations by "
                         f"{x.stretch_ns / 1e6:.2f} ms ({pct:+.0f}%): median of the "
                         f"{x.iterations} replayed iterations that shared the GPU "
                         f"{x.wall_ns / 1e6:.2f} ms, replayed alone {x.alone_ns / 1e6:.2f} ms"
                         + (f" (a lower bound: {x.guessed_ns / 1e6:.2f} ms of its kernels per "
                            "iteration shared the GPU and never ran alone at their place, so "
                            "their length alone is not known)"
                            if x.guessed_ns > GUESSED_PCT / 100 * x.wall_ns else ""))
    if getattr(pr, "clocks", ""):
        lines.append(f"  {pr.clocks}")
    c = pr.collectives
    if c and "ranks" in c:
        t = c["ranks"]
        lines.append("  communication per iteration (NCCL, exposed = no compute of that GPU "
                     "overlaps it): " + "; ".join(
                         f"rank {r.rank} {r.exposed_ns / 1e6:.2f} ms exposed ({r.exposed_wait_ns / 1e6:.2f} "
                         f"waiting for peers, {r.exposed_transfer_ns / 1e6:.2f} transfer; "
                         f"overlap with compute {r.overlap_pct:.0f}%), arrived last to {r.last} of "
                         f"{r.collectives}" for r in t.itertuples()))
    elif c and "mismatch" in c:
        lines.append("  collectives not matched across ranks: their NCCL kernel counts differ ("
                     + ", ".join(f"pid {p}: {n}" for p, n in c["mismatch"].items()) + ")")
    if pr.straggler:
        lines.append(f"  {pr.straggler}")
    elif c and "ranks" in c:
        lines.append("  no straggler: no rank caused most of the waiting in the collectives "
                     "(or the waits are under 10% of an iteration)")
    for p, rr in zip(pr.processes.itertuples(), pr.runs):
        lines += ["", f"== pid {p.pid} ({p.name}) ==", render(rr, limit)]
    return "\n".join(lines)


@render.register
def _(rr: RunReport, limit: int | None = 8) -> str:
    run = rr.run_row()
    lines = [f"{rr.label}: {run['iterations'] or 0} iteration(s) ({run['iteration_source']})"]
    lines += runtime_lines(rr.profile.runtimes if rr.profile is not None else [])
    if run["mean_ns"] is not None:
        kernel = f", {run['kernel_ns'] / 1e6:.2f} ms kernel time, {run['kernels']:.0f} kernels" \
            if run["kernel_ns"] is not None else ""
        lines.append(f"  iteration {run['mean_ns'] / 1e6:.2f} ms wall clock (the loop's "
                     f"mean: what throughput sees){kernel}, GPU busy {run['busy_pct']:.0f}%")
        if (run.get("iterations") or 0) >= 4 and run.get("steady_iterations") is not None:
            loop_ns = run["mean_ns"] * run["steady_iterations"]
            share = f" ({100 * run['warmup_ns'] / loop_ns:.0f}% of the loop's time)" \
                if loop_ns else ""
            left = (f"; warm-up left out: {run['warmup_iterations']} iteration(s), "
                    f"{run['warmup_ns'] / 1e6:.2f} ms{share}" if run["warmup_iterations"] else "")
            odd = (f", {run['outlier_iterations']} outlier(s) kept" if run["outlier_iterations"]
                   else "")
            many = f", {run['kinds']} kinds" if (run.get("kinds") or 1) > 1 else ""
            lines.append(
                f"  loop: {run['steady_iterations']} of {run['iterations']} iterations{many}{odd}"
                f"{left}; median {run['wall_med_ns'] / 1e6:.2f} ms, p95 "
                f"{run['wall_p95_ns'] / 1e6:.2f} ms, p99 {run['wall_p99_ns'] / 1e6:.2f} ms, "
                f"CoV {run['wall_cov_pct']:.1f}%")
            if run.get("before_ns") is not None:
                lines.append(f"  session time in no number (start-up, set-up, teardown): "
                             f"{_dur(run['before_ns'])} before the first iteration, "
                             f"{_dur(run['after_ns'])} after the last"
                             + ("" if run.get("session_recorded", True) else
                                " (the export has no ANALYSIS_DETAILS: the session's end is "
                                "taken as its last GPU activity)"))
    # a partial trace is said here, in the first lines (and not again on stderr); the other
    # data warnings once, on stderr (``cli.options.say_warnings``)
    shown = [w for w in rr.warnings if w["severity"] == "partial"]
    if shown:
        lines += ["", "warnings:"] + [f"  - {w['severity'].upper()}: {w['message']}" for w in shown]
    lines += ["", "findings:"] + [f"  - {f}" for f in rr.findings]
    if not rr.partial and len(rr.kinds) and ((~rr.kinds["kind"].isin(["main", "warm-up"])).any()
                                             or (rr.kinds["pattern"] == "trend").any()):
        k = rr.kinds[["kind", "which", "iterations", "med_ns", "min_ns", "max_ns", "share_pct",
                      "verdict"]]
        lines += ["", "kinds of iteration (share: of the loop's time):", ms_table(k.head(limit))]
    if len(rr.unsteady):
        lines += ["", "warm-up and outlier iterations:", ms_table(rr.unsteady.head(limit))]
    if len(rr.budget) and not rr.partial:
        lines += ["", "where an iteration's time goes (mean per iteration of the loop):",
                  ms_table(parts_table(rr.budget))]
    if rr.profile is not None:
        lines += ["time per iteration by class (GPU):",
                  ms_table(rr.profile.by_class.sort_values("time_ns", ascending=False))]
    if len(rr.top_kernels):
        top = rr.top_kernels[["name", "instances", "total_ns", "time_pct", "kernel_class",
                              "precision"]]
        top = top.assign(name=[kernel_label(n, MAX_CELL) for n in top["name"]])  # as diff
        lines += ["top kernels:", ms_table(top.head(limit))]
    if len(rr.syncs):
        lines += ["host syncs:", ms_table(rr.syncs)]
    if rr.profile is None and len(rr.api):
        lines += ["CUDA API time:", ms_table(rr.api[["name", "calls", "total_ns", "time_pct"]]
                                             .head(limit))]
    if rr.profile is None and len(rr.ranges):
        lines += ["NVTX ranges:", ms_table(rr.ranges[["name", "instances", "cpu_total_ns",
                                                      "kernel_count"]].head(limit))]
    return "\n".join(lines)


def _dur(ns: float) -> str:
    """A span of session time: seconds from 1 s, else milliseconds."""
    return f"{ns / 1e9:.2f} s" if ns >= 1e9 else f"{ns / 1e6:.2f} ms"


@render.register
def _(infos: ReportInfos, limit: int | None = None) -> str:
    return "\n".join(info_text(i) for i in infos.infos)


def runtime_lines(rows: list[dict]) -> list[str]:
    """One line per process of ``analysis.runtime.identify``: its runtime and the evidence."""
    out = []
    for r in rows:
        who = f"pid {r['pid']}: " if r["pid"] >= 0 and len(rows) > 1 else ""
        libs = f"; libraries: {r['libraries']}" if r["libraries"] else ""
        out.append(f"  runtime: {who}{r['runtime']} ({r['evidence']}{libs})")
    return out


def info_text(info: dict) -> str:
    """Human summary of ``Report.info()`` for the terminal."""
    out = [str(info["path"])]
    # notes here; warnings and partial findings once, on stderr (``cli.options.say_warnings``)
    out += [f"  {w['severity'].upper()}: {w['message']}" for w in info.get("warnings", [])
            if w["severity"] == "note"]
    out.append(f"  nsys {info['nsys_version'] or '?'} · export schema {info['schema_version'] or '?'}")
    for g in info["gpus"]:
        mem = f", {g['memory_bytes'] / 2**30:.1f} GiB" if g.get("memory_bytes") else ""
        sms = f", {g['sm_count']} SMs" if g.get("sm_count") else ""
        cc = f", cc {g['compute_capability']}" if g.get("compute_capability") else ""
        out.append(f"  GPU {g['device_id']}: {g['name']} ({g.get('chip') or '?'}{sms}{mem}{cc})")
    if not info["gpus"]:
        out.append("  GPUs: none recorded")
    procs = [p for p in info["processes"] if p.get("uses_cuda")]
    shown = ", ".join(f"{p['name']} ({p['pid']})" for p in procs[:4])
    out.append(f"  CUDA processes: {shown or 'none'}"
               + (f" and {len(procs) - 4} more" if len(procs) > 4 else "")
               + f"  [{len(info['processes'])} processes recorded]")
    out += runtime_lines(info.get("runtimes", []))
    if info["span_ns"] is not None:
        out.append(f"  span: {info['span_ns'] / 1e9:.3f} s "
                   f"({info['start_ns']} → {info['end_ns']} ns)")
    out.append("  tables:")
    width = max(len(t) for t in info["tables"])
    for t, n in info["tables"].items():
        hint = info["missing"].get(t)
        if hint:
            out.append(f"    {t:<{width}}  {'—':>11}  {_missing_words(hint)}")
        else:
            out.append(f"    {t:<{width}}  {n:>11,}")
    return "\n".join(out) + "\n"


def _missing_words(hint: str) -> str:
    """The words of ``info`` for a table the report lacks, from ``Report.missing_hint`` after
    its "X has no TABLE table": "none in this run (...)" as it is (the traced application did
    none of that work), else "not recorded (...)"."""
    why = hint.split(" table", 1)[-1].lstrip(": ")
    return why if why.startswith("none in this run") else f"not recorded ({why})"


def _kernel_rows(k: pd.DataFrame) -> pd.DataFrame:
    """The judged kernels as a terminal reads them: one line each, the longest first."""
    k = k.sort_values("duration_ns", ascending=False)
    launches = k.groupby(["function", "grid", "block"])["kernel"].transform("size")
    k = k.assign(n=launches).drop_duplicates(["function", "grid", "block"])
    return pd.DataFrame({
        "kernel": [kernel_label(str(x), 44) for x in k["function"]], "n": k["n"],
        "grid": k["grid"], "time": [fmt_time(x) for x in k["duration_ns"]],
        "limiter": [f"{a} ({u})" if isinstance(u, str) and a != "latency" else str(a)
                    for a, u in zip(k["limiter"], k["unit"])],
        "SM %": [_pct(x) for x in k["compute_pct"]], "mem %": [_pct(x) for x in k["memory_pct"]],
        "tensor %": [_pct(x, 1) for x in pd.to_numeric(k["tensor_pct"], errors="coerce")],
        "headroom %": [_pct(x) for x in k["headroom_pct"]]})


def _pct(x, digits: int = 0) -> str:
    return "" if x != x else f"{x:.{digits}f}"


@render.register
def _(r: KernelReport, limit: int | None = 15) -> str:
    k = r.judged.kernels
    out = [f"{r.source}: {len(k)} kernels profiled by Nsight Compute "
           f"({', '.join(sorted(k['device'].dropna().unique())) or 'device unknown'}); "
           "times are ncu's (base clocks, caches flushed)"]
    if r.joined is not None:
        j = r.joined
        saves = j.saves
        out += ["", f"== what each kernel could save per iteration (loop: {fmt_time(j.loop_ns)} per "
                f"iteration, {j.iterations} iterations; headroom from the roofline) =="]
        if len(saves):
            shown = saves.head(limit or len(saves))
            out.append(table_text(pd.DataFrame({
                "kernel": [kernel_label(str(x), 44) for x in shown["function"]],
                "grid": shown["grid"], "per iteration": [fmt_time(x) for x in shown["time_ns"]],
                "% loop": [f"{x:.1f}" for x in shown["share_pct"]], "limiter": shown["limiter"],
                "headroom %": [f"{x:.0f}" for x in shown["headroom_pct"]],
                "could save": [fmt_time(x) for x in shown["saves_ns"]],
                "% loop ": [f"{x:.1f}" for x in shown["saves_pct"]]})))
            out.append(f"in all: up to {fmt_time(saves['saves_ns'].sum())} per iteration "
                       f"({saves['saves_pct'].sum():.1f}% of the loop) from the "
                       f"{len(saves)} profiled launch configurations")
        for f in j.findings(0):
            out.append(f"- {f}")
        if len(j.unprofiled):
            regex = "|".join(sorted(set(re.escape(str(x)) for x in j.unprofiled["function"])))
            out.append(f"  profile them: nsightlab capture NAME --ncu --ncu-kernels "
                       f"'{regex}' -- YOUR COMMAND (or --ncu-mode auto)")
    out += ["", "== kernels by launch configuration (n profiled; the longest shown), longest "
            "first ==", table_text(_kernel_rows(k).head(limit or len(k)))]
    out += ["", "== findings (longest kernels first; NVIDIA's estimates capped at the headroom) =="]
    longest = k.sort_values("duration_ns", ascending=False).drop_duplicates(
        ["function", "grid", "block"])
    for i in longest.index[:5]:
        fs = r.judged.findings(i)
        out.append(f"{kernel_label(str(k.at[i, 'function']), 72)} ({fmt_time(k.at[i, 'duration_ns'])})")
        out += [f"  - {f}" for f in fs[:4]]
    if r.judged.missing:
        out += ["", "not judged, for want of metrics in this report:"] + \
            [f"  - {m}" for m in r.judged.missing]
    return "\n".join(out) + "\n"


@render.register
def _(d: KernelDiff, limit: int | None = 20) -> str:
    f = d.findings()
    out = [str(f[0]), "durations are ncu's on both sides (base clocks, caches flushed)", ""]
    out += ["== pairs (by role: NVTX range, class, order), longest in A first =="]
    out += [f"- {x}" for x in f[1:] if x.code != "pair_only"][:limit or None]
    only = [x for x in f if x.code == "pair_only"]
    if only:
        out += ["", "== kernels on one side only =="] + [f"- {x}" for x in only[:limit or None]]
    return "\n".join(out) + "\n"


@render.register
def _(d: KernelLineup, limit: int | None = None) -> str:
    t = d.table.copy()
    t["profiled"] = [fmt_time(x) for x in t["profiled_ns"]]
    return table_text(t[["report", "kernels", "profiled", "vs_first", "pairs", "only_here",
                         "headline"]]) + "\n"
