"""``nsightlab.compare(runs)``: several runs of one model side by side, the first the baseline.

The question is asked as "FP16 vs MXFP8 vs NVFP4" or "ORT CUDA EP vs TensorRT": one row per run
with its wall-clock iteration latency (mean, p50, p95, p99, min, max over the time budget's
iterations), throughput (iterations/s, and items/s when the batch size is known), speedup
against the baseline, GPU time by kernel class and precision, the precision-conversion work it
adds over the baseline, copies, Tensor Core activity and its verdict; then each run against the
baseline as a ``Diff`` (``nsightlab.comparison.diff``). Times are ns per iteration.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from nsightlab.analysis import budget, completeness, kinds, runtime
from nsightlab.core.labels import run_labels
from nsightlab.analysis.iterations import nvtx_ranges
from nsightlab.comparison.diff import (Diff, of_profiles as diff_profiles, more_runs, pick_process,
                                       runs_of)
from nsightlab.run.model import (RunProfile, batch_of, iteration_walls,
                                               latency_stats, profile)
from nsightlab.core.result import Result, json_records, json_value
from nsightlab.errors import NsightlabError
from nsightlab.read.opener import as_report
from nsightlab.read.report import Report

LATENCY = ("mean", "p50", "p95", "p99", "min", "max")


@dataclass(repr=False)
class Lineup(Result):
    """Runs side by side. Tables:

    - ``summary``: one row per run: run, reports (how many runs of it: a capture made with
      --repeat, or 'a1,a2'), iterations, iteration_source, latency_{mean,p50,p95,p99,min,max}_ns,
      iterations_per_s, batch, items_per_s, speedup (the baseline's median iteration / this
      run's, as its diff's headline says it: ``diff``'s ``speedup``),
      speedup_low / speedup_high (the 95% interval of the speed-up of the medians, the spread
      between reports included; ``core.benchmath``), kernel_ns, busy_pct, conversion_ns (precision-conversion kernels this run
      adds over the baseline), copies_ns, tensor_kernel_time_pct, tensor_active_pct, verdict,
      and for ONNX Runtime runs (captures made with --ort) execution_providers (node time
      share per EP), ort_fallback_pct, ort_memcpy_pct; a run without GPU kernels (CPU EP) is
      timed by its NVTX iterations, with no GPU columns and no kernel-level pair detail;
    - ``by_class`` / ``by_precision``: run, kernel_class / precision, time_ns;
    - ``latency``: run, iteration, wall_ns, phase (every wall-clock iteration: its kind,
      warm-up, main, B..., or outlier; ``nsightlab.analysis.kinds``);
    - ``pairs``: run, baseline, verdict (the diff's sentence), workload_warnings,
      runtime_change and runtime_causes (``diff.runtime_causes``, "; "-joined).

    ``diffs`` holds each run's ``Diff`` against the baseline; ``notes`` say which process was
    taken of a run of several CUDA processes (the baseline's rank on each, else the busiest).
    """

    runs: list[str]
    summary: pd.DataFrame
    by_class: pd.DataFrame
    by_precision: pd.DataFrame
    latency: pd.DataFrame
    pairs: pd.DataFrame
    diffs: list[Diff] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # which process of a several-process run

    SECTIONS = ("summary", "by_class", "by_precision", "latency", "pairs")

    def brief(self) -> str:
        return f"{len(self.runs)} runs against {self.runs[0]}" if self.runs else "no runs"

    def tables(self) -> dict[str, pd.DataFrame]:
        return {s: getattr(self, s) for s in self.SECTIONS}

    def manifest(self) -> dict:
        return {"kind": "compare", "runs": self.runs, "baseline": self.runs[0]}

    def wide_ms(self, table: str) -> pd.DataFrame:
        """``by_class`` or ``by_precision`` as one row per class/precision and one column per
        run (ms per iteration), largest first."""
        df = getattr(self, table)
        key = "kernel_class" if table == "by_class" else "precision"
        w = df.pivot_table(index=key, columns="run", values="time_ns", aggfunc="sum",
                           fill_value=0.0).reindex(columns=self.runs, fill_value=0.0) / 1e6
        return w.loc[w.max(axis=1).sort_values(ascending=False).index].reset_index()

    def to_json(self) -> dict:
        return {"runs": self.runs, "notes": list(self.notes), **{s: json_records(getattr(self, s)) for s in self.SECTIONS},
                "diffs": [json_value(d.headline) for d in self.diffs]}


def compare(runs: list[Report | str | os.PathLike], batch: int | None = None,
            labels: list[str] | None = None, **open_options) -> Lineup:
    """Line up ``runs`` (Reports, or anything ``nsightlab.open`` takes) against the first.
    A run may be several reports of the same code (a list, 'a1,a2', or a capture made with
    ``--repeat``): its tables are the first report's, and its speed-up's interval holds the
    spread between them. ``batch``: items per iteration for throughput, when the capture
    manifest does not say."""
    if len(runs) < 2:
        raise ValueError("compare needs at least two runs (the first is the baseline)")
    open_options = {"prefetch": ("kernels", "cuda_api"), **open_options}
    sides = [runs_of(r) for r in runs]
    runs = [side[0] for side in sides]
    reports = [as_report(r, **open_options) for r in runs]
    labels = labels or run_labels([str(r) if not isinstance(r, Report) else str(r.source)
                                   for r in runs])
    labels = _unique(labels)
    notes, like = [], None
    for i, (r, lab) in enumerate(zip(reports, labels)):
        reports[i], labels[i], said, got = pick_process(
            r, lab, None, f"run {lab}", like, hint="nsightlab report RUN shows each",
            base="the baseline")
        like = got if i == 0 else like
        notes += said
    profiles = [_profile(r, lab) for r, lab in zip(reports, labels)]
    more = [more_runs(side[1:], lab, like, open_options) if p.kernels else []
            for side, p, lab in zip(sides, profiles, labels)]
    diffs = []
    for r, p, extra in zip(reports[1:], profiles[1:], more[1:]):
        if profiles[0].kernels and p.kernels:
            diffs.append(diff_profiles(profiles[0], p, more[0], extra))  # labels short
            diffs[-1].headline.update(a_path=str(reports[0].source), b_path=str(r.source))
    batches = [batch or batch_of(r) for r in reports]
    rows, classes, precisions, walls = [], [], [], []
    for i, (p, r, b) in enumerate(zip(profiles, reports, batches)):
        lat = p.latency or {"mean_ns": p.median_ns}
        mean = lat.get("mean_ns") or p.median_ns
        # the diff against the baseline (none for the baseline itself): its interval and
        # conversion overhead
        d = next((d for d in diffs if d.b is p or d.b.label == p.label), None) if i else None
        one = float("nan") if i else 1.0
        interval = d.headline["interval"] if d is not None else {"low": one, "high": one}
        row = {"run": p.label, "reports": len(sides[i]), "runtime": p.runtime,
               "iterations": p.iterations,
               "iteration_source": p.iteration_source,
               **{f"latency_{k}_ns": lat.get(f"{k}_ns", float("nan")) for k in LATENCY},
               "iterations_per_s": 1e9 / mean if mean else float("nan"), "batch": b,
               "items_per_s": b * 1e9 / mean if b and mean else float("nan"),
               "speedup": _speedup(diffs, p, profiles[0]) if i else 1.0,
               "speedup_low": 1 / interval["high"] if interval["high"] else float("nan"),
               "speedup_high": 1 / interval["low"] if interval["low"] else float("nan"),
               "kernel_ns": p.kernel_ns, "busy_pct": p.busy_pct,
               "conversion_ns": d.headline["conversion_overhead_ns"] if d is not None else 0.0,
               "copies_ns": sum(p.budget.get(f"{c}_ns", 0.0) for c in budget.COPY_PARTS),
               "tensor_kernel_time_pct": p.tensor_core.get("tensor_kernel_time_pct", float("nan")),
               "tensor_active_pct": p.tensor_core.get("tensor_active_pct", float("nan")),
               "verdict": str(p.budget.get("verdict", "")) if p.budget else "",
               "ort_settings": ", ".join(SETTING_WORDS[k] for k, v in p.settings.items() if v)
               if p.settings else ""}
        row.update(_placement(r))
        rows.append(row)
        classes.append(p.by_class.assign(run=p.label)[["run", "kernel_class", "time_ns"]])
        precisions.append(p.by_precision.groupby("precision", as_index=False)["time_ns"].sum()
                          .assign(run=p.label)[["run", "precision", "time_ns"]])
        walls.append(_walls(r, p))
    by_run = {d.b.label: d.headline for d in diffs}
    pairs = pd.DataFrame([
        {"run": p.label, "baseline": profiles[0].label,
         "verdict": h["verdict"] if h else _cpu_verdict(profiles[0], p),
         "workload_warnings": "; ".join(h.get("workload_warnings", [])),
         "runtime_change": h.get("runtime_change", ""),
         "runtime_causes": "; ".join(h.get("runtime_causes", []))}
        for p in profiles[1:] for h in [by_run.get(p.label, {})]],
        columns=["run", "baseline", "verdict", "workload_warnings", "runtime_change",
                 "runtime_causes"])
    summary = pd.DataFrame(rows)
    summary["batch"] = summary["batch"].astype("Int64")
    return Lineup([p.label for p in profiles], summary,
                  pd.concat(classes, ignore_index=True), pd.concat(precisions, ignore_index=True),
                  pd.concat(walls, ignore_index=True), pairs, diffs, notes)


def _unique(labels: list[str]) -> list[str]:
    """Run labels, made unique (the same report twice gets #2)."""
    seen: dict[str, int] = {}
    out = []
    for lab in labels:
        seen[lab] = seen.get(lab, 0) + 1
        out.append(lab if seen[lab] == 1 else f"{lab}#{seen[lab]}")
    return out


def _walls(report: Report, p: RunProfile) -> pd.DataFrame:
    """Every wall-clock iteration (first GPU; a CPU run's NVTX iterations): run, iteration,
    wall_ns, phase (its kind: warm-up, main, B..., or outlier)."""
    if p.kernels:
        w, phase = iteration_walls(report, with_phase=True)
    else:
        w = _cpu_walls(report)
        phase = kinds.classify(w).label
    return pd.DataFrame({"run": p.label, "iteration": range(len(w)), "wall_ns": w,
                         "phase": phase})


def _profile(report: Report, label: str) -> RunProfile:
    """The run's profile; for a run without GPU kernels (ONNX Runtime's CPU EP, CPU
    inference) what it has: its NVTX iterations' wall time, nothing on the GPU."""
    try:
        return profile(report, label)
    except NsightlabError:
        if report.has_rows("kernels"):
            raise
    lost = [w["message"] for w in completeness.check(report) if w["check"] == "kernels_missing"]
    if lost:  # CUDA work was launched but its kernels are not in the report: not a CPU run
        raise NsightlabError(f"{report.source}: {lost[0]}")
    w = _cpu_walls(report)
    if not len(w):
        raise NsightlabError(f"{report.source}: no GPU kernels and no NVTX iteration ranges: "
                             "nothing to time; capture with NVTX ranges per iteration (the "
                             "--ort runner makes them) or with --trace=cuda")
    latency = latency_stats(w)
    empty = pd.DataFrame({"kernel_class": [], "time_ns": [], "count": []})
    return RunProfile(
        label=label, iterations=len(w),
        iteration_source=f"{len(w)} NVTX iteration ranges, CPU only (no GPU kernels)",
        median_ns=latency["p50_ns"], kernel_ns=0.0, kernels=0.0, busy_pct=0.0,
        by_class=empty, by_precision=pd.DataFrame({"precision": [], "kernel_class": [], "time_ns": []}),
        by_layer=pd.DataFrame({"layer": [], "time_ns": [], "count": [], "math_precision": []}),
        slots=pd.DataFrame(), flat_slots=pd.DataFrame(),
        budget={"verdict": "CPU only (no GPU kernels)"}, latency=latency,
        runtimes=runtime.identify(report).to_dict("records"))


def _cpu_walls(report: Report) -> np.ndarray:
    r = nvtx_ranges(report)
    return (r["end_ns"] - r["start_ns"]).to_numpy(float) if len(r) else np.array([], float)


#: the ORT runner's settings as a lineup says them
SETTING_WORDS = {"io_binding": "io_binding", "cuda_graph": "enable_cuda_graph",
                 "profiler_on": "ORT's profiler on (its host time is in the run's numbers)"}


def _cpu_verdict(a: RunProfile, b: RunProfile) -> str:
    """The pair sentence when one run has no GPU kernels: latency only."""
    ma, mb = a.latency.get("mean_ns", a.median_ns), b.latency.get("mean_ns", b.median_ns)
    speed = ma / mb if mb else float("nan")
    word = f"{speed:.2f}x faster" if speed >= 1 else f"{1 / speed:.2f}x slower"
    cpu = [p.label for p in (a, b) if not p.kernels]
    return (f"B is {word} per iteration ({mb / 1e6:.2f} ms vs {ma / 1e6:.2f} ms); "
            f"{' and '.join(cpu)} ran no GPU kernels (CPU only): no kernel-level comparison")


def _placement(report: Report) -> dict:
    """ONNX Runtime placement columns for a run captured with --ort (empty otherwise)."""
    from nsightlab.comparison import ort_placement

    folder = Path(report.source)
    if not folder.is_dir() or not any((folder / f).is_file()
                                      for f in ("ort_profile.json", "ort_profile.json.xz")):
        return {"execution_providers": "", "ort_fallback_pct": float("nan"),
                "ort_memcpy_pct": float("nan")}
    p = ort_placement.placement(folder, join=False)
    eps = ", ".join(f"{r.provider} {r.time_pct:.0f}%" for r in p.by_provider.itertuples())
    return {"execution_providers": eps, "ort_fallback_pct": p.run.get("fallback_time_pct", 0.0),
            "ort_memcpy_pct": float(p.memcpy["time_pct"].sum()) if len(p.memcpy) else 0.0}


def _speedup(diffs: list, p, base) -> float:
    """The speed-up of run ``p`` over the baseline ``base``: its diff's headline figure (the
    medians it compares), so that the table and the pair's verdict say one number; without
    a diff (no kernels to compare), the ratio of the medians."""
    d = next((d for d in diffs if d.headline.get("b") == p.label), None)
    if d is not None:
        return float(d.headline["speedup"])
    return base.median_ns / p.median_ns if p.median_ns else float("nan")

