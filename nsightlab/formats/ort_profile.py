"""ONNX Runtime's profiler JSON (``SessionOptions.enable_profiling``) as a DataFrame.

The file is a Chrome trace: a list of events. Node executions are ``cat == "Node"`` events
named ``<node>_kernel_time`` whose ``args`` carry op_name and provider (and, depending on the
version, node_index, thread_scheduling_stats...). Durations are microseconds.
"""
from __future__ import annotations

import json
import lzma
from pathlib import Path

import pandas as pd

from nsightlab.errors import NotAReportError

COLUMNS = ["node", "op_type", "provider", "start_ns", "duration_ns", "thread", "pid"]


def nodes(path: str | Path) -> pd.DataFrame:
    """One row per node execution: node, op_type, provider, start_ns (from the profiler's
    start), duration_ns, thread, pid."""
    return from_events(read_events(Path(path)))


def from_events(events: list) -> pd.DataFrame:
    """``nodes`` of an already parsed profile (its events)."""
    rows = []
    for e in events:
        if not isinstance(e, dict) or e.get("cat") != "Node":
            continue
        name = str(e.get("name", ""))
        if not name.endswith("_kernel_time"):
            continue
        args = e.get("args") or {}
        rows.append((name[: -len("_kernel_time")], args.get("op_name"), args.get("provider"),
                     int(float(e.get("ts", 0)) * 1000), int(float(e.get("dur", 0)) * 1000),
                     e.get("tid"), e.get("pid")))
    return pd.DataFrame(rows, columns=COLUMNS)


def read_events(path: Path) -> list:
    """The profile's events (a ``.json`` or ``.json.xz`` Chrome trace: a list, or a dict with
    ``traceEvents``)."""
    try:
        raw = lzma.open(path).read() if path.name.endswith(".xz") else path.read_bytes()
        events = json.loads(raw)
    except (OSError, ValueError, lzma.LZMAError, EOFError) as e:
        raise NotAReportError(f"{path}: not a readable ONNX Runtime profile ({e})") from None
    if isinstance(events, dict):
        events = events.get("traceEvents", [])
    if not isinstance(events, list):
        raise NotAReportError(f"{path}: not an ONNX Runtime profile (expected a list of events)")
    return events


def summary(df: pd.DataFrame) -> pd.DataFrame:
    """Time per (op_type, provider): calls, total_ns, avg_ns, time_pct."""
    g = df.groupby(["op_type", "provider"], dropna=False)["duration_ns"]
    out = g.agg(calls="size", total_ns="sum", avg_ns="mean").reset_index()
    out["time_pct"] = 100.0 * out["total_ns"] / max(out["total_ns"].sum(), 1)
    return out.sort_values("total_ns", ascending=False).reset_index(drop=True)
