"""ONNX Runtime's profiler JSON (``SessionOptions.enable_profiling``) as a DataFrame.

The file is a Chrome trace: a list of events. Node executions are ``cat == "Node"`` events
named ``<node>_kernel_time`` whose ``args`` carry op_name and provider (and, depending on the
version, node_index, thread_scheduling_stats...); ``Session`` events time model loading,
session initialization and every ``model_run``. Times are microseconds from the profiler's
start (``InferenceSession.get_profiling_start_time_ns()``).

ORT writes one event per line, each with a large ``thread_scheduling_stats`` object nobody
reads: ``events`` parses that layout with Arrow's JSON reader (only the fields it names; a
35-run BERT-base profile, 31 MB, in 0.2 s instead of 0.7 s in ``json``), and any other
layout (a ``traceEvents`` object, a pretty-printed list) with ``json``.
"""
from __future__ import annotations

import io
import json
import lzma
from pathlib import Path

import pandas as pd

from nsightlab.errors import NotAReportError

COLUMNS = ["node", "op_type", "provider", "start_ns", "duration_ns", "thread", "pid"]
#: ``events``' columns: one row per event, times in ns from the profiler's start
EVENT_COLUMNS = ["cat", "name", "start_ns", "duration_ns", "pid", "tid", "provider", "op_name"]


def nodes(path: str | Path) -> pd.DataFrame:
    """One row per node execution: node, op_type, provider, start_ns (from the profiler's
    start), duration_ns, thread, pid."""
    return from_events(events(Path(path)))


def from_events(ev: pd.DataFrame) -> pd.DataFrame:
    """``nodes`` of an already read profile (``events``)."""
    n = ev[(ev["cat"] == "Node") & ev["name"].str.endswith("_kernel_time", na=False)]
    return pd.DataFrame({"node": n["name"].str.slice(0, -len("_kernel_time")),
                         "op_type": n["op_name"], "provider": n["provider"],
                         "start_ns": n["start_ns"], "duration_ns": n["duration_ns"],
                         "thread": n["tid"], "pid": n["pid"]}).reset_index(drop=True)[COLUMNS]


def events(path: Path) -> pd.DataFrame:
    """The profile's events (a ``.json`` or ``.json.xz`` Chrome trace) as ``EVENT_COLUMNS``."""
    try:
        raw = lzma.open(path).read() if path.name.endswith(".xz") else path.read_bytes()
    except (OSError, lzma.LZMAError, EOFError) as e:
        raise NotAReportError(f"{path}: not a readable ONNX Runtime profile ({e})") from None
    fast = _arrow(raw)
    return fast if fast is not None else _frame(_parsed(raw, path))


def _arrow(raw: bytes) -> pd.DataFrame | None:
    """ORT's own layout ("[", one event per line, "]") through Arrow; None for any other."""
    body = raw.strip()
    if body[:2] not in (b"[\n", b"[\r") or body[-1:] != b"]":
        return None
    import pyarrow as pa
    import pyarrow.json as pj

    schema = pa.schema([("cat", pa.string()), ("name", pa.string()), ("ts", pa.float64()),
                        ("dur", pa.float64()), ("pid", pa.int64()), ("tid", pa.int64()),
                        ("args", pa.struct([("provider", pa.string()), ("op_name", pa.string())]))])
    try:
        t = pj.read_json(io.BytesIO(body[1:-1].replace(b"},\r\n", b"}\n").replace(b"},\n", b"}\n")),
                         read_options=pj.ReadOptions(block_size=1 << 22),
                         parse_options=pj.ParseOptions(explicit_schema=schema,
                                                       unexpected_field_behavior="ignore"))
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return None
    args = t.column("args").combine_chunks()
    return pd.DataFrame({
        "cat": t.column("cat").to_pandas(), "name": t.column("name").to_pandas(),
        "start_ns": (t.column("ts").to_numpy() * 1000).round().astype("int64"),
        "duration_ns": (t.column("dur").fill_null(0).to_numpy() * 1000).round().astype("int64"),
        "pid": t.column("pid").to_pandas(), "tid": t.column("tid").to_pandas(),
        "provider": args.field("provider").to_pandas(),
        "op_name": args.field("op_name").to_pandas()})[EVENT_COLUMNS]


def _parsed(raw: bytes, path: Path) -> list:
    try:
        ev = json.loads(raw)
    except ValueError as e:
        raise NotAReportError(f"{path}: not a readable ONNX Runtime profile ({e})") from None
    if isinstance(ev, dict):
        ev = ev.get("traceEvents", [])
    if not isinstance(ev, list):
        raise NotAReportError(f"{path}: not an ONNX Runtime profile (expected a list of events)")
    return ev


def _frame(ev: list) -> pd.DataFrame:
    rows = []
    for e in ev:
        if not isinstance(e, dict):
            continue
        a = e.get("args") if isinstance(e.get("args"), dict) else {}
        rows.append((e.get("cat"), str(e.get("name", "")), int(round(float(e.get("ts", 0)) * 1000)),
                     int(round(float(e.get("dur", 0) or 0) * 1000)), e.get("pid"), e.get("tid"),
                     a.get("provider"), a.get("op_name")))
    return pd.DataFrame(rows, columns=EVENT_COLUMNS)


def summary(df: pd.DataFrame) -> pd.DataFrame:
    """Time per (op_type, provider): calls, total_ns, avg_ns, time_pct."""
    g = df.groupby(["op_type", "provider"], dropna=False)["duration_ns"]
    out = g.agg(calls="size", total_ns="sum", avg_ns="mean").reset_index()
    out["time_pct"] = 100.0 * out["total_ns"] / max(out["total_ns"].sum(), 1)
    return out.sort_values("total_ns", ascending=False).reset_index(drop=True)
