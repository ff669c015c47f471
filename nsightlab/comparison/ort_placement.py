"""Where ONNX Runtime really ran each node: execution providers, fallbacks, memcpy nodes,
TensorRT EP subgraphs, and session set-up apart from steady state.

Reads ORT's profiler JSON (``SessionOptions.enable_profiling``; a capture made with ``--ort``
keeps it as ``ort_profile.json`` beside ``ort_run.json``, the runner's record of the execution
providers requested, available and used). ORT records, per node execution, the provider that
ran it (``args.provider``) and the op type (``args.op_name``); ``Session`` events time model
loading, session initialization (where the TensorRT EP builds its engines) and every
``model_run``.

- **fallbacks**: nodes run by the CPU EP while a GPU EP (CUDA, TensorRT) was requested;
- **memcpy**: ``MemcpyToHost`` / ``MemcpyFromHost`` nodes, which ORT inserts where the graph
  crosses between providers;
- **TensorRT subgraphs**: nodes run by the TensorRT EP (its fused ``TRTKernel_graph_*`` /
  ``TensorrtExecutionProvider_*`` nodes), each standing for the part of the graph it took.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from nsightlab.core.result import Result, json_records, json_value
from nsightlab.errors import NotAReportError
from nsightlab.comparison.ort_timeline import profile_events
from nsightlab.run.remedies import ort_record
from nsightlab.formats import ort_profile

GPU_EPS = ("CUDAExecutionProvider", "TensorrtExecutionProvider", "ROCMExecutionProvider",
           "MIGraphXExecutionProvider", "DmlExecutionProvider")
MEMCPY = re.compile(r"^Memcpy(To|From)Host$")
TRT_NODE = re.compile(r"TRTKernel_graph|TensorrtExecutionProvider_", re.I)
#: the runner's --ep choices -> ORT provider names
EP_NAMES = {"cpu": "CPUExecutionProvider", "cuda": "CUDAExecutionProvider",
            "tensorrt": "TensorrtExecutionProvider"}


@dataclass(repr=False)
class Placement(Result):
    """Placement of one ORT run. ``run``: what was requested and used (a dict); tables:

    - ``phases``: phase (model loading, session initialization, first run, steady run),
      time_ns (median for steady runs), runs;
    - ``by_provider``: provider, nodes, op_types, executions, time_ns, time_pct;
    - ``fallbacks``: node, op_type, executions, time_ns (CPU EP nodes while a GPU EP was
      requested);
    - ``memcpy``: node, op_type, executions, time_ns, time_pct;
    - ``trt_subgraphs``: node, op_type, executions, time_ns, time_pct;
    - ``assignment``: provider, nodes, names: ORT's own node placement at session creation
      (the runner's record of its verbose log; empty for a bare profile);
    - ``timeline``: the profile joined to a Nsight Systems report of the same run
      (``ort_timeline.NodeTimeline``: per node and op type, host time, launches, kernels'
      GPU time and copies per run), when one is given or the capture holds one;
      ``timeline_note`` says why not where a capture's report could not be joined.
    """

    run: dict
    phases: pd.DataFrame
    by_provider: pd.DataFrame
    fallbacks: pd.DataFrame
    memcpy: pd.DataFrame
    trt_subgraphs: pd.DataFrame
    assignment: pd.DataFrame
    timeline: object = None  # ort_timeline.NodeTimeline
    timeline_note: str | None = None

    SECTIONS = ("phases", "by_provider", "fallbacks", "memcpy", "trt_subgraphs", "assignment")

    def tables(self) -> dict[str, pd.DataFrame]:
        out = {"run": pd.DataFrame([{k: json.dumps(v) if isinstance(v, (list, dict)) else v
                                     for k, v in self.run.items()}]),
               **{s: getattr(self, s) for s in self.SECTIONS}}
        if self.timeline is not None:
            out.update({f"timeline_{k}": v for k, v in self.timeline.tables().items()})
        return out

    def manifest(self) -> dict:
        return {"kind": "ort_placement", "run": json_value(self.run)}

    def to_json(self) -> dict:
        return {"run": json_value(self.run), **{s: json_records(getattr(self, s))
                                                for s in self.SECTIONS},
                "timeline": self.timeline.to_json() if self.timeline is not None else None,
                "timeline_note": self.timeline_note}


def locate(path: str | Path) -> tuple[Path, Path | None]:
    """(profile JSON, runner record or None) for a profile file or an ``--ort`` capture folder,
    given by its path or, as every command takes it, by its capture name."""
    from nsightlab.read.locate import default_store

    p = Path(path)
    if not p.exists() and not p.is_absolute() and len(p.parts) == 1 and \
            (default_store() / p).is_dir():
        p = default_store() / p
    if p.is_dir():
        prof, run = p / "ort_profile.json", p / "ort_run.json"
        if not prof.is_file() and (p / "ort_profile.json.xz").is_file():
            prof = p / "ort_profile.json.xz"
        if not prof.is_file():
            raise NotAReportError(f"{path}: no ort_profile.json; give an ONNX Runtime profile "
                                  "JSON or a capture made with nsightlab capture --ort")
        return prof, run if run.is_file() else None
    if not p.is_file():
        raise NotAReportError(f"{path}: no such file; give an ONNX Runtime profile JSON "
                              "(SessionOptions.enable_profiling) or an --ort capture folder")
    run = p.with_name("ort_run.json")
    return p, run if run.is_file() else None


def placement(path: str | Path, requested: str | None = None,
              report: str | Path | None = None, join: bool = True) -> Placement:
    """Where each node ran, for the profile at ``path`` (or an ``--ort`` capture folder).
    ``requested``: the execution provider asked for (cpu, cuda, tensorrt or an ORT provider
    name); by default the runner's record says, else the busiest provider is taken as asked.
    ``report``: a Nsight Systems report of the same run to join the profile to (an ``--ort``
    capture's own is joined without it); one that cannot be aligned is refused (raises)."""
    prof, run_file = locate(path)
    events = profile_events(prof)  # read once: nodes and session phases
    nodes = ort_profile.from_events(events)
    run = _run_record(run_file)
    asked = EP_NAMES.get(str(requested), requested) if requested else run.get("requested")
    total = max(int(nodes["duration_ns"].sum()), 1)
    by_provider = _by_provider(nodes, total)
    if asked is None and len(by_provider):
        asked = by_provider["provider"].iloc[0]
    run["requested"] = asked
    run["providers_seen"] = by_provider["provider"].tolist()
    gpu_asked = asked in GPU_EPS
    cpu = nodes[nodes["provider"] == "CPUExecutionProvider"] if gpu_asked else nodes.iloc[0:0]
    run["fallback_time_pct"] = 100.0 * cpu["duration_ns"].sum() / total if gpu_asked else 0.0
    mem = nodes[nodes["op_type"].astype(str).str.match(MEMCPY.pattern)]
    trt = nodes[(nodes["provider"] == "TensorrtExecutionProvider")
                | nodes["node"].astype(str).str.contains(TRT_NODE.pattern, regex=True)]
    assignment = pd.DataFrame(
        [{"provider": ep, "nodes": int(v.get("nodes", 0)), "names": "; ".join(v.get("names", []))}
         for ep, v in (run.pop("node_placements", None) or {}).items()],
        columns=["provider", "nodes", "names"])
    out = Placement(run, _phases(events), by_provider, _per_node(cpu, total, share=False),
                    _per_node(mem, total), _per_node(trt, total), assignment)
    if join:
        _join(out, prof, run_file, report)
    return out


def _join(out: Placement, prof: Path, run_file: Path | None, report) -> None:
    """The timeline, from ``report`` (a failure raises) or the capture's own (a note)."""
    from nsightlab.comparison import ort_timeline
    from nsightlab.read.opener import as_report

    own = next((prof.parent / f for f in ("report.sqlite", "report.sqlite.xz", "report.nsys-rep")
                if (prof.parent / f).is_file()), None)
    if report is None and (run_file is None or own is None):
        return
    record = ort_record(run_file) if run_file is not None else {}
    try:
        out.timeline = ort_timeline.join(as_report(report or own), prof, record)
    except ort_timeline.NotJoined as e:
        if report is not None:
            raise
        out.timeline_note = e.reason


def _run_record(run_file: Path | None) -> dict:
    r = ort_record(run_file) if run_file is not None else {}
    if not r:
        return {}
    return {"requested": EP_NAMES.get(r.get("ep_requested"), r.get("ep_requested")),
            "providers_available": r.get("providers_available"),
            "providers_used": r.get("providers_used"), "session_fallback": r.get("fallback"),
            "onnxruntime_version": r.get("onnxruntime_version"),
            "node_placements": r.get("node_placements") or {}}


def _by_provider(nodes: pd.DataFrame, total: int) -> pd.DataFrame:
    cols = ["provider", "nodes", "op_types", "executions", "time_ns", "time_pct"]
    if nodes.empty:
        return pd.DataFrame(columns=cols)
    g = nodes.groupby(nodes["provider"].fillna("(none)"), sort=False)
    out = pd.DataFrame({"nodes": g["node"].nunique(), "op_types": g["op_type"].nunique(),
                        "executions": g.size(), "time_ns": g["duration_ns"].sum()})
    out["time_pct"] = 100.0 * out["time_ns"] / total
    return out.reset_index().sort_values("time_ns", ascending=False,
                                         kind="stable").reset_index(drop=True)[cols]


def _per_node(df: pd.DataFrame, total: int, share: bool = True) -> pd.DataFrame:
    cols = ["node", "op_type", "executions", "time_ns"] + (["time_pct"] if share else [])
    if df.empty:
        return pd.DataFrame(columns=cols)
    g = df.groupby(["node", "op_type"], sort=False, dropna=False)["duration_ns"]
    out = g.agg(executions="size", time_ns="sum").reset_index()
    if share:
        out["time_pct"] = 100.0 * out["time_ns"] / total
    return out.sort_values("time_ns", ascending=False, kind="stable").reset_index(drop=True)[cols]


def _phases(events: pd.DataFrame) -> pd.DataFrame:
    """Session set-up (loading, initialization: where engines are built) and the first run
    apart from the steady runs (median), from the profile's events."""
    sess = events[events["cat"] == "Session"].sort_values("start_ns", kind="stable")

    def dur(names) -> list[int]:
        return sess.loc[sess["name"].isin(names), "duration_ns"].astype("int64").tolist()
    rows = []
    for label, names in (("model loading", ("model_loading_uri", "model_loading_array")),
                         ("session initialization", ("session_initialization",))):
        d = dur(names)
        if d:
            rows.append({"phase": label, "time_ns": int(sum(d)), "runs": len(d)})
    runs = dur(("model_run",))
    if runs:
        rows.append({"phase": "first run", "time_ns": runs[0], "runs": 1})
    if len(runs) > 1:
        rows.append({"phase": "steady run (median)", "time_ns": int(np.median(runs[1:])),
                     "runs": len(runs) - 1})
    return pd.DataFrame(rows, columns=["phase", "time_ns", "runs"])
