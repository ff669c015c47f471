"""What an export says about its recording: versions, GPUs, processes, time span, call stacks.

Small stdlib-SQLite queries that tolerate every schema from 2.9.1 on (columns that an older
nsys did not write read as NULL). ``Report`` exposes them as properties.
"""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from nsightlab.core.result import Result
from nsightlab.errors import NotAReportError, UnsupportedReportError
from nsightlab.read.db import ExportDB
from nsightlab.read.tables import TABLES

#: tables whose presence says "this SQLite came from nsys export"
NSYS_MARKERS = ("StringIds", "TARGET_INFO_SESSION_START_TIME", "ThreadNames", "NVTX_EVENTS",
                "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME")
#: call-stack ids looked up per query (inlined integers: no bound-parameter limit)
STACK_CHUNK = 20_000
GPU_COLUMNS = ["device_id", "name", "chip", "sm_count", "memory_bytes", "compute_capability",
               "bus_location"]


def export_meta(db: ExportDB) -> dict[str, str]:
    """META_DATA_EXPORT (or the older EXPORT_META_DATA) as a dict.

    Raises:
        UnsupportedReportError: an nsys export without them (2021.x, or a partial copy).
        NotAReportError: an SQLite database that nsys did not write.
    """
    for t in ("META_DATA_EXPORT", "EXPORT_META_DATA"):
        if db.has(t):
            return {str(k): str(v) for k, v in db.query(f"SELECT name, value FROM {t}")}
    if any(db.has(t) for t in NSYS_MARKERS):
        raise UnsupportedReportError(
            f"{db.name}: an nsys SQLite export without version metadata (no META_DATA_EXPORT "
            "table: nsys 2021.x or older, or a tool that copied only some tables); export the "
            ".nsys-rep again with nsys 2022.1 or newer: "
            "nsys export --type sqlite -o NEW.sqlite REPORT.nsys-rep")
    raise NotAReportError(f"{db.name}: an SQLite database, but not an Nsight Systems "
                          "export; give the .sqlite written by nsys export")


def capture_manifest(source: Path) -> dict:
    """The manifest of the capture a report came from (``nsightlab capture``): the folder's
    manifest.json for a capture folder, else the one beside the report file; {} when there is
    none or it is not a JSON object (a damaged one is said where the capture is opened)."""
    folder = source if source.is_dir() else source.parent
    try:
        m = json.loads((folder / "manifest.json").read_text())
    except (OSError, ValueError):
        return {}
    return m if isinstance(m, dict) else {}


def capture_options(db: ExportDB) -> dict[str, str]:
    """META_DATA_CAPTURE (nsys 2023+): the options the report was recorded with."""
    if not db.has("META_DATA_CAPTURE"):
        return {}
    return {str(k): str(v) for k, v in db.query("SELECT name, value FROM META_DATA_CAPTURE")}


def drivers(db: ExportDB) -> dict[str, str]:
    """The NVIDIA driver and the CUDA version it supports, where the export records them
    (TARGET_INFO_SYSTEM_ENV: ``driver`` '580.159.04', ``cuda`` '13.0'); empty otherwise."""
    if not {"name", "value"} <= set(db.columns("TARGET_INFO_SYSTEM_ENV")):
        return {}
    rows = dict(db.query("SELECT name, value FROM TARGET_INFO_SYSTEM_ENV WHERE name IN "
                         "('NvDriverVersion', 'CudaDriverVersion')"))
    out = {}
    driver = str(rows.get("NvDriverVersion") or "")
    if driver.isdigit() and len(driver) >= 7:  # older exports: 52510517 for 525.105.17
        driver = f"{driver[:-5]}.{driver[-5:-2]}.{driver[-2:]}"
    if driver:
        out["driver"] = driver
    cuda = str(rows.get("CudaDriverVersion") or "")
    if cuda.isdigit():  # 13000 -> 13.0
        out["cuda"] = f"{int(cuda) // 1000}.{int(cuda) % 1000 // 10}"
    return out


def traced(options: dict[str, str], what: str) -> bool | None:
    """Whether ``what`` (CUDA, NVTX) was traced for any process: True, False, or None when
    the report does not say (older nsys)."""
    keys = [v for k, v in options.items() if k.endswith(f"COLLECT_{what}_TRACE")]
    return None if not keys else any(v.lower() == "true" for v in keys)


def gpus(db: ExportDB) -> pd.DataFrame:
    """GPUs of the target, one row each (``GPU_COLUMNS``); a GPU table without device ids
    (a tool that copied some of its columns) describes none."""
    have = set(db.columns("TARGET_INFO_GPU")) if db.has("TARGET_INFO_GPU") else set()
    device = next((c for c in ("id", "cuDevice") if c in have), None)
    if device is not None:
        pick = lambda c: c if c in have else "NULL"  # noqa: E731
        rows = db.query(
            f"SELECT {device}, {pick('name')}, {pick('chipName')}, {pick('smCount')}, "
            f"{pick('totalMemory')}, {pick('computeMajor')} || '.' || {pick('computeMinor')}, "
            f"{pick('busLocation')} FROM TARGET_INFO_GPU WHERE {device} IS NOT NULL "
            f"ORDER BY {device}")
    elif db.has("TARGET_INFO_CUDA_GPU"):  # nsys < 2021.3
        rows = db.query(
            "SELECT deviceId, name, NULL, numMultiprocessors, totalMemory, "
            "computeCapabilityMajor || '.' || computeCapabilityMinor, busLocation "
            "FROM TARGET_INFO_CUDA_GPU ORDER BY deviceId")
    else:
        rows = []
    return pd.DataFrame(rows, columns=GPU_COLUMNS)


def processes(db: ExportDB) -> pd.DataFrame:
    """Processes in the report: pid, name, uses_cuda (it created CUDA streams)."""
    if not db.has("PROCESSES"):
        return pd.DataFrame({"pid": pd.Series(dtype="int64"), "name": pd.Series(dtype=str),
                             "uses_cuda": pd.Series(dtype=bool)})
    cuda = set()
    if "processId" in db.columns("TARGET_INFO_CUDA_STREAM"):
        cuda = {r[0] for r in db.query("SELECT DISTINCT processId FROM TARGET_INFO_CUDA_STREAM")}
    rows = db.query("SELECT pid, name FROM PROCESSES ORDER BY pid")
    return pd.DataFrame([(p, n, p in cuda) for p, n in rows], columns=["pid", "name", "uses_cuda"])


def session_start(db: ExportDB) -> int | None:
    """The session's start on the wall clock (TARGET_INFO_SESSION_START_TIME.utcEpochNs, epoch
    ns: the events' zero); None when the export does not record it."""
    if "utcEpochNs" not in db.columns("TARGET_INFO_SESSION_START_TIME"):
        return None
    rows = db.query("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME LIMIT 1")
    return int(rows[0][0]) if rows and rows[0][0] else None


def span(db: ExportDB) -> tuple[int, int] | None:
    """(start_ns, end_ns) of the collection on the events' clock: events are stamped from
    the session's start (ANALYSIS_DETAILS.startTime is their zero; checked on exports of nsys
    2022.4 to 2026.2), so it is (0, stopTime - startTime); without ANALYSIS_DETAILS, from 0
    (the events' clock still starts there) to the end of the last GPU activity."""
    if {"startTime", "stopTime"} <= set(db.columns("ANALYSIS_DETAILS")):
        row = db.query("SELECT min(startTime), max(stopTime) FROM ANALYSIS_DETAILS")[0]
        if row[0] is not None:
            return 0, int(row[1]) - int(row[0])
    lo, hi = None, None
    for spec in TABLES.values():
        if spec.split and db.has(spec.source):
            a, b = db.query(f'SELECT min(start), max("end") FROM {spec.source}')[0]
            if a is not None:
                lo, hi = (a, b) if lo is None else (min(lo, a), max(hi, b))
    if lo is None:
        return None
    # the events are still stamped from the session's start: it is at 0 (its end is unknown:
    # the last event's); an export on an absolute clock keeps its first event
    return (min(int(lo), 0) if int(lo) < SESSION_CLOCK_NS else int(lo)), int(hi)


#: events stamped less than this (ns) after 0 are on the session's clock (an hour)
SESSION_CLOCK_NS = 3_600 * 10**9


def call_stacks(db: ExportDB, ids) -> dict[int, str]:
    """CPU call stacks of API calls recorded with backtraces (``cuda_api.callchain_id``):
    id -> frames, innermost first, joined with " < ". Any number of ids (looked up in chunks);
    empty where none were recorded."""
    wanted = sorted({int(i) for i in ids if i is not None and i == i})
    if not wanted or not {"id", "symbol", "stackDepth"} <= set(db.columns("CUDA_CALLCHAINS")):
        return {}
    # exports number the API rows' callchainId from 0 and CUDA_CALLCHAINS.id from 1 (seen
    # in a 2.9.1 export: chain 4 is the stack of the call with callchainId 3)
    first_ref = db.query("SELECT min(callchainId) FROM CUPTI_ACTIVITY_KIND_RUNTIME")[0][0]
    first_id = db.query("SELECT min(id) FROM CUDA_CALLCHAINS")[0][0]
    offset = 1 if first_ref == 0 and first_id == 1 else 0
    out: dict[int, list[str]] = {}
    for a in range(0, len(wanted), STACK_CHUNK):
        chunk = ",".join(str(i + offset) for i in wanted[a:a + STACK_CHUNK])  # ints: safe
        for i, sym in db.query(
                "SELECT c.id, COALESCE(s.value, '?') FROM CUDA_CALLCHAINS c LEFT JOIN StringIds s "
                f"ON s.id = c.symbol WHERE c.id IN ({chunk}) ORDER BY c.id, c.stackDepth"):
            out.setdefault(int(i) - offset, []).append(str(sym))
    return {i: " < ".join(stack) for i, stack in out.items()}


class ReportInfos(Result):
    """``Report.info()`` of one or more reports, as a result the renderers take: JSON is the
    info dict (a list for several reports); the table is one row per report."""

    def __init__(self, infos: list[dict]):
        self.infos = infos

    def tables(self) -> dict[str, pd.DataFrame]:
        rows = [{"path": i["path"], "nsys_version": i["nsys_version"],
                 "schema_version": i["schema_version"],
                 "gpus": ", ".join(str(g["name"]) for g in i["gpus"]), "span_ns": i["span_ns"],
                 **{f"{t}_rows": n for t, n in i["tables"].items()}} for i in self.infos]
        return {"reports": pd.DataFrame(rows)}

    def manifest(self) -> dict:
        return {"kind": "info", "inputs": [i["path"] for i in self.infos]}

    def to_json(self) -> dict | list:
        return self.infos[0] if len(self.infos) == 1 else self.infos
