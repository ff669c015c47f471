"""ONNX Runtime's profile joined to the Nsight Systems timeline: per ORT node, the execution
provider that ran it, its host time, and the GPU work its launch calls made.

ORT's profiler times each node on the host (``<node>_kernel_time``: the node's span on the
thread that ran it) and knows nothing of the GPU. The trace knows every CUDA call, on which
thread, and the kernel or copy each one started (by correlation id), but not which node made
it. A node's span on its thread holds the calls it made: joined, each node gets its launches,
its kernels' GPU time and its copies, and each op type and execution provider how much of its
time is launching (host) and how much is math (GPU).

**The clocks.** The profile's times count from ``InferenceSession.get_profiling_start_time_ns()``
(epoch ns, which nsightlab's runner records in ``ort_run.json``); the trace's from its session's
start (``TARGET_INFO_SESSION_START_TIME.utcEpochNs``). Their difference places the profile on
the trace. Without the start time, the runs' NVTX ranges (the runner's ``iterN``, one per timed
run) place it: the median distance from each timed ``model_run`` to its range. Either way the
alignment is checked, not assumed: at least ``ALIGN_MIN_PCT`` of the launch and copy calls the
process made on the runs' threads inside the timed runs must fall inside a node's span.
Otherwise the profile and the report are refused with one line that says why.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from nsightlab.analysis.ending import LAUNCH_CALLS
from nsightlab.core.result import Result, json_records, json_value
from nsightlab.errors import NsightlabError
from nsightlab.formats import ort_profile
from nsightlab.read import metadata
from nsightlab.read.report import Report

#: share of the launch and copy calls amid a run's nodes (%) that must fall in a node's span
ALIGN_MIN_PCT = 95.0
#: the NVTX estimate is refined over this many ns either side, in REFINE_STEP_NS steps (the
#: runner's range opens a few tens of microseconds before ORT's model_run)
REFINE_NS, REFINE_STEP_NS = 100_000, 5_000
#: the profile's times are whole microseconds: a call this close to a span still belongs to it
SLACK_NS = 2_000
#: the calls that start GPU work (kernels, graphs, copies, memsets)
WORK_CALLS = LAUNCH_CALLS[:-1] + r"|cudaMemcpy\w*|cuMemcpy\w*|cudaMemset\w*|cuMemset\w*)"
MEMCPY_OP = re.compile(r"^Memcpy(To|From)Host$")
PER_RUN = ["executions", "host_ns", "launch_calls", "launch_call_ns", "kernels", "kernel_ns",
           "copies", "copy_bytes", "copy_ns"]


class NotJoined(NsightlabError):
    """A profile and a report that cannot be joined; ``reason`` says why (without the files)."""

    def __init__(self, where: str, reason: str):
        super().__init__(f"{where}: {reason}")
        self.reason = reason


@dataclass(repr=False)
class NodeTimeline(Result):
    """A profile on a trace. ``alignment``: how (method, offset_ns, runs, calls,
    calls_in_nodes_pct, and the other method's disagreement when both exist). Tables, per
    timed run (means over the runs):

    - ``nodes``: node, op_type, provider, then ``PER_RUN``: executions, host_ns (the node's
      span), launch_calls and launch_call_ns (CUDA launch/copy calls in the span, their host
      time), kernels and kernel_ns (GPU time of the kernels they launched), copies, copy_bytes,
      copy_ns;
    - ``by_op``: op_type, provider, nodes and ``PER_RUN``, largest host time first;
    - ``by_provider``: provider, nodes and ``PER_RUN``;
    - ``runs``: run, start_ns (trace clock), wall_ns (model_run), host_in_nodes_ns, launch_calls,
      kernel_ns, copies, copies_outside_nodes (the session's own input and output copies).
    """

    alignment: dict
    nodes: pd.DataFrame
    by_op: pd.DataFrame
    by_provider: pd.DataFrame
    runs: pd.DataFrame

    def tables(self) -> dict[str, pd.DataFrame]:
        return {"alignment": pd.DataFrame([self.alignment]), "nodes": self.nodes,
                "by_op": self.by_op, "by_provider": self.by_provider, "runs": self.runs}

    def to_json(self) -> dict:
        return {"alignment": json_value(self.alignment),
                **{k: json_records(v) for k, v in self.tables().items() if k != "alignment"}}

    def provider_cost(self, provider: str) -> dict:
        """Per run: nodes, host_ns, kernel_ns and copies of one provider's nodes (zeros when
        none ran)."""
        row = self.by_provider[self.by_provider["provider"] == provider]
        return {k: float(row[k].sum()) for k in ("nodes", "host_ns", "kernel_ns", "copies")}

    def memcpy_cost(self) -> dict:
        """Per run: executions, host_ns, copies, copy_bytes and copy_ns of the Memcpy nodes."""
        m = self.by_op[self.by_op["op_type"].astype(str).str.match(MEMCPY_OP.pattern)]
        return {k: float(m[k].sum()) for k in ("executions", "host_ns", "copies", "copy_bytes",
                                               "copy_ns")}


def join(report: Report, profile: Path, record: dict | None = None) -> NodeTimeline:
    """``profile`` (ORT's profiler JSON, or its events already read) placed on ``report``'s
    timeline; ``record``: the runner's ``ort_run.json`` (profiling start, timed iterations).
    Raises NotJoined (one line, with the reason) when the two cannot be aligned."""
    record = record or {}
    ev = profile_events(Path(profile))
    nodes = ort_profile.from_events(ev)
    runs = ev[(ev["cat"] == "Session") & (ev["name"] == "model_run")].sort_values("start_ns")
    where = f"{profile} on {report.source}"
    if nodes.empty or runs.empty:
        raise NotJoined(where, "the profile holds no node or model_run events to place")
    pid = int(runs["pid"].iloc[0])
    calls = report.cuda_api(["start_ns", "end_ns", "pid", "tid", "correlation_id", "name"])
    calls = calls[(calls["pid"] == pid) & calls["name"].astype(str).str.match(WORK_CALLS)]
    if calls.empty:
        raise NotJoined(where, "the report holds no CUDA launch or copy call of the "
                        f"profile's process (pid {pid}): they are not of the same run")
    n_timed = int(record.get("iterations") or 0)
    timed = runs.iloc[-n_timed:] if 0 < n_timed <= len(runs) else runs.iloc[1:] if len(runs) > 1 \
        else runs
    candidates = []
    clock = _clock_offset(report, record)
    if clock is not None:
        candidates.append(("the profiler's start time against the trace session's start", clock))
    nvtx = _nvtx_offset(report, pid, timed)
    if nvtx is not None:
        candidates.append(("the runs' NVTX ranges (iterN)", nvtx))
    if not candidates:
        raise NotJoined(
            where, "cannot align the two clocks: the profile's start time is not recorded "
            "(nsightlab's runner keeps get_profiling_start_time_ns() in ort_run.json) and the "
            "report has no NVTX range per run (iterN)")
    if any(_graph_replays(calls, timed, o) for _, o in candidates[:1]) and \
            not _amid(nodes, timed, candidates[0][1]):
        raise NotJoined(
            where, "ONNX Runtime replayed a CUDA graph in the timed runs (enable_cuda_graph): "
            "its profile times no node in them, so there is nothing per node to join; each run "
            "is one graph launch")
    tried = []
    for how, offset in candidates:
        placed = _place(nodes, timed, calls, offset)
        if how.startswith("the runs' NVTX"):
            placed, offset = max(((_place(nodes, timed, calls, offset + d), offset + d)
                                  for d in range(-REFINE_NS, REFINE_NS + 1, REFINE_STEP_NS)),
                                 key=lambda po: (po[0]["pct"], -abs(po[1] - offset)))
        tried.append((how, placed["pct"]))
        if placed["calls"] and placed["pct"] >= ALIGN_MIN_PCT:
            break
    else:
        said = "; ".join(f"{h}: {p:.0f}%" for h, p in tried)
        raise NotJoined(
            where, "cannot align the profile with the trace: too few of the launch and copy "
            f"calls inside the profile's runs fall in a node's span ({said}; "
            f"{ALIGN_MIN_PCT:.0f}% needed): are they of the same run?")
    alignment = {"method": how, "offset_ns": int(offset), "runs": len(timed),
                 "calls": placed["calls"], "calls_in_nodes_pct": round(placed["pct"], 1)}
    if len(candidates) == 2:
        alignment["methods_differ_ns"] = int(abs(candidates[0][1] - candidates[1][1]))
    return _tables(report, placed, alignment, len(timed))


def _clock_offset(report: Report, record: dict) -> int | None:
    start, zero = record.get("profiling_start_ns"), metadata.session_start(report.db)
    return int(start) - zero if start and zero is not None else None


def _graph_replays(calls: pd.DataFrame, timed: pd.DataFrame, offset: int) -> bool:
    """Whether the process launched CUDA graphs inside the timed runs."""
    g = calls[calls["name"].astype(str).str.match(r"^(cudaGraphLaunch|cuGraphLaunch)")]
    lo = timed["start_ns"].to_numpy() + offset
    k = np.searchsorted(lo, g["start_ns"].to_numpy(), side="right") - 1
    return bool(((k >= 0) & (g["start_ns"].to_numpy() <= (lo + timed["duration_ns"].to_numpy())
                             [np.clip(k, 0, None)])).any())


def _amid(nodes: pd.DataFrame, timed: pd.DataFrame, offset: int) -> int:
    """Node executions inside the timed runs."""
    lo = timed["start_ns"].to_numpy() + offset
    t = nodes["start_ns"].to_numpy() + offset
    k = np.searchsorted(lo, t, side="right") - 1
    return int(((k >= 0) & (t <= (lo + timed["duration_ns"].to_numpy())[np.clip(k, 0, None)])).sum())


def _nvtx_offset(report: Report, pid: int, timed: pd.DataFrame) -> int | None:
    """Median (range start - model_run start) over the last iterN ranges, one per timed run."""
    if not report.has_rows("nvtx"):
        return None
    nv = report.nvtx(["start_ns", "end_ns", "pid", "text"])
    nv = nv[(nv["pid"] == pid) & nv["text"].astype(str).str.fullmatch(r"iter\d+")] \
        .sort_values("start_ns")
    if len(nv) < len(timed) or not len(timed):
        return None
    nv = nv.iloc[-len(timed):]
    return int(np.median(nv["start_ns"].to_numpy() - timed["start_ns"].to_numpy()))


def _place(nodes: pd.DataFrame, timed: pd.DataFrame, calls: pd.DataFrame, offset: int) -> dict:
    """Node executions of the timed runs on the trace's clock, each call in a run given to the
    node whose span (on its thread) holds it."""
    lo = timed["start_ns"].to_numpy() + offset
    hi = lo + timed["duration_ns"].to_numpy()
    n = nodes.assign(start_ns=nodes["start_ns"] + offset)
    n["end_ns"] = n["start_ns"] + n["duration_ns"]
    run = np.searchsorted(lo, n["start_ns"].to_numpy(), side="right") - 1
    n["run"] = run
    n = n[(run >= 0) & (n["start_ns"].to_numpy() <= hi[np.clip(run, 0, None)])]
    n = n.sort_values(["thread", "start_ns"], kind="stable").reset_index(drop=True)
    t = calls["start_ns"].to_numpy()
    crun = np.searchsorted(lo, t, side="right") - 1
    inside = (crun >= 0) & (t <= hi[np.clip(crun, 0, None)] + SLACK_NS)
    threads = set(n["thread"].dropna().astype("int64"))
    c = calls[inside & calls["tid"].isin(threads)].reset_index(drop=True)
    owner = np.full(len(c), -1, dtype=np.int64)
    for tid, idx in n.groupby("thread").indices.items():
        mine = np.flatnonzero(c["tid"].to_numpy() == tid)
        if not len(mine):
            continue
        s = n["start_ns"].to_numpy()[idx]
        e = n["end_ns"].to_numpy()[idx]
        k = np.searchsorted(s - SLACK_NS, c["start_ns"].to_numpy()[mine], side="right") - 1
        ok = (k >= 0) & (c["start_ns"].to_numpy()[mine] <= e[np.clip(k, 0, None)] + SLACK_NS)
        owner[mine[ok]] = idx[k[ok]]
    c["node_row"] = owner
    c["run"] = np.searchsorted(lo, c["start_ns"].to_numpy(), side="right") - 1
    # the check: calls between a run's first node and its last (the session's own input and
    # output copies come before and after them) that fall in no node's span
    first = n.groupby("run")["start_ns"].min()
    last = n.groupby("run")["end_ns"].max()
    ts = c["start_ns"].to_numpy()
    amid = (ts >= first.reindex(c["run"]).to_numpy() - SLACK_NS) & \
        (ts <= last.reindex(c["run"]).to_numpy() + SLACK_NS)
    pct = 100.0 * float((owner[amid] >= 0).mean()) if amid.any() else 0.0
    return {"nodes": n, "calls": int(amid.sum()), "pct": pct, "placed": c, "lo": lo, "hi": hi}


def _tables(report: Report, placed: dict, alignment: dict, n_runs: int) -> NodeTimeline:
    n, c = placed["nodes"], placed["placed"]
    pid = int(n["pid"].iloc[0]) if len(n) else None
    k = report.kernels(["pid", "correlation_id", "duration_ns"])
    k = k[k["pid"] == pid].groupby("correlation_id")["duration_ns"].agg(["size", "sum"])
    m = report.memcpy(["pid", "correlation_id", "duration_ns", "bytes"]) \
        if report.has_rows("memcpy") else pd.DataFrame(columns=["pid", "correlation_id",
                                                                "duration_ns", "bytes"])
    m = m[m["pid"] == pid].groupby("correlation_id")[["duration_ns", "bytes"]].agg(
        {"duration_ns": ["size", "sum"], "bytes": "sum"})
    m.columns = ["copies", "copy_ns", "copy_bytes"]
    c = c.join(k.rename(columns={"size": "kernels", "sum": "kernel_ns"}), on="correlation_id") \
        .join(m, on="correlation_id").fillna({"kernels": 0, "kernel_ns": 0, "copies": 0,
                                              "copy_ns": 0, "copy_bytes": 0})
    c["launch_call_ns"] = c["end_ns"] - c["start_ns"]
    mine = c[c["node_row"] >= 0]
    per_row = mine.groupby("node_row").agg(
        launch_calls=("name", "size"), launch_call_ns=("launch_call_ns", "sum"),
        kernels=("kernels", "sum"), kernel_ns=("kernel_ns", "sum"), copies=("copies", "sum"),
        copy_bytes=("copy_bytes", "sum"), copy_ns=("copy_ns", "sum"))
    ex = n.join(per_row).fillna({k: 0 for k in per_row.columns})
    ex["executions"] = 1
    ex = ex.rename(columns={"duration_ns": "host_ns"})

    def per_run(keys: list[str]) -> pd.DataFrame:
        g = ex.groupby(keys, sort=False, dropna=False)
        out = g[PER_RUN].sum() / max(n_runs, 1)
        if keys != ["node", "op_type", "provider"]:
            out.insert(0, "nodes", g["node"].nunique())
        return out.reset_index().sort_values("host_ns", ascending=False, kind="stable") \
            .reset_index(drop=True)

    nodes = per_run(["node", "op_type", "provider"])
    by_op = per_run(["op_type", "provider"])
    by_provider = per_run(["provider"])
    runs = pd.DataFrame({"run": np.arange(n_runs), "start_ns": placed["lo"],
                         "wall_ns": placed["hi"] - placed["lo"]})
    g = ex.groupby("run")
    runs["host_in_nodes_ns"] = g["host_ns"].sum().reindex(runs["run"]).fillna(0).to_numpy()
    cg = c.groupby("run")
    for col, src in (("launch_calls", "name"), ("kernel_ns", "kernel_ns"), ("copies", "copies")):
        agg = cg[src].size() if col == "launch_calls" else cg[src].sum()
        runs[col] = agg.reindex(runs["run"]).fillna(0).to_numpy()
    runs["copies_outside_nodes"] = (c[(c["node_row"] < 0) & (c["copies"] > 0)].groupby("run")
                                    ["copies"].sum().reindex(runs["run"]).fillna(0).to_numpy())
    return NodeTimeline(alignment, nodes, by_op, by_provider, runs)


def profile_events(prof: Path) -> pd.DataFrame:
    """``ort_profile.events`` of ``prof``, kept as Parquet in nsightlab's cache (keyed by the
    file's path, size and mtime; ``NSIGHTLAB_NO_CACHE`` reads it afresh): a profile is read
    once, then served from there."""
    import os

    from nsightlab.core.result import atomic_file
    from nsightlab.read import table_cache

    if os.environ.get("NSIGHTLAB_NO_CACHE"):
        return ort_profile.events(prof)
    try:
        entry = table_cache.keyed_dir(table_cache.default_root() / "ort", prof) / "events.parquet"
        if entry.is_file():
            return pd.read_parquet(entry)
    except (OSError, ValueError):
        entry = None
    ev = ort_profile.events(prof)
    if entry is not None:
        try:
            entry.parent.mkdir(parents=True, exist_ok=True)
            with atomic_file(entry, "wb") as f:
                ev.to_parquet(f, index=False)
        except OSError:
            pass  # a read-only cache: served afresh each time
    return ev
