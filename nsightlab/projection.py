"""NVTX ranges projected onto the GPU: which kernels each range launched, and when they ran.

A kernel belongs to every NVTX range that was open, on the thread that launched it, when its
launching API call started (push/pop ranges: same thread; start/end ranges, which may cross
threads: same process). So an iteration range owns the kernels of all its layer ranges, and
kernels replayed from a CUDA graph belong to the ranges around their ``cudaGraphLaunch``.
This is NVIDIA's documented NVTX→runtime→kernel attribution, generalized to all enclosing
ranges, computed with one sort and ``searchsorted`` per thread.

Columns of ``project``: the NVTX columns (name, text, domain, kind, pid, tid, depth,
start_ns, end_ns, duration_ns) plus kernel_count, kernel_time_ns (sum of kernel durations),
launch_calls and launch_api_ns (the distinct launching calls and the sum of their durations: a
graph launch counts once, not once per kernel), gpu_start_ns / gpu_end_ns (first kernel
start, last kernel end) and gpu_span_ns (their distance: the range's duration on the GPU).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from .launches import first_of_call, launches
from .report import Report
from .tables import nullable_int64
from .timeline import slice_reduce

NVTX_COLUMNS = ["name", "text", "domain", "kind", "pid", "tid", "depth", "start_ns", "end_ns",
                "duration_ns"]


def project(report: Report, launched: pd.DataFrame | None = None) -> pd.DataFrame:
    """Every NVTX range (not marks) with the GPU work it launched (see module docstring).

    ``launched`` may be passed in when the caller already has ``launches(report)`` with at
    least start_ns, end_ns, api_start_ns, api_end_ns, api_tid and api_row.

    One function on purpose (62 lines): the per-thread loop shares a dozen arrays over every
    launch of the run (8M on big reports); split up, they would be passed or copied around.
    """
    nvtx = report.nvtx(NVTX_COLUMNS)
    nvtx = nvtx[nvtx["kind"] != "mark"].reset_index(drop=True)
    if launched is None:
        launched = launches(report, op_columns=("start_ns", "end_ns"),
                            api_columns=("start_ns", "end_ns", "tid"))
    n = len(nvtx)
    count = np.zeros(n, np.int64)
    ktime = np.zeros(n, np.int64)
    api = np.zeros(n, np.int64)
    calls = np.zeros(n, np.int64)
    gstart = np.full(n, np.iinfo(np.int64).max)
    gend = np.full(n, np.iinfo(np.int64).min)
    if n and len(launched):
        end = nvtx["end_ns"].fillna(np.iinfo(np.int64).max).to_numpy(np.int64)
        start = nvtx["start_ns"].to_numpy(np.int64)
        pids, tids = nvtx["pid"].to_numpy(), nvtx["tid"].to_numpy()
        push_pop = (nvtx["kind"] == "push_pop").to_numpy()
        first = first_of_call(launched["api_row"].to_numpy())
        lp = launched["pid"].to_numpy()
        lt = launched["api_tid"].to_numpy()
        l_api_start = launched["api_start_ns"].to_numpy(np.int64)
        l_api_end = launched["api_end_ns"].to_numpy(np.int64)
        l_start = launched["start_ns"].to_numpy(np.int64)
        l_end = launched["end_ns"].to_numpy(np.int64)
        single = len(np.unique(lt[:1000])) == 1 and np.all(lt == lt[0]) and np.all(lp == lp[0])
        for (pid, tid), rows in _groups(pids, np.where(push_pop, tids, -1)):
            if single and pid == lp[0] and tid in (-1, lt[0]):
                sel = None  # one launching thread (the usual case): use the columns as they are
            else:
                sel = np.flatnonzero((lp == pid) & ((lt == tid) if tid >= 0 else True))
                if not len(sel):
                    continue
            take = _ordered(l_api_start, sel)
            api_start = l_api_start if take is None else l_api_start[take]
            k_start = l_start if take is None else l_start[take]
            k_end = l_end if take is None else l_end[take]
            once = first if take is None else first[take]
            lo = np.searchsorted(api_start, start[rows], "left")
            hi = np.searchsorted(api_start, end[rows], "right")
            count[rows] = hi - lo
            ktime[rows] = _slice_sum(k_end, k_start, lo, hi)
            api[rows] = _slice_sum(l_api_end if take is None else l_api_end[take], api_start,
                                   lo, hi, once)
            calls[rows] = _slice_sum(once, 0, lo, hi)
            gstart[rows] = slice_reduce(np.minimum, k_start, lo, hi, gstart[0])
            gend[rows] = slice_reduce(np.maximum, k_end, lo, hi, gend[0])
    out = nvtx.copy()
    out["kernel_count"] = count
    out["kernel_time_ns"] = ktime
    out["launch_calls"] = calls
    out["launch_api_ns"] = api
    has = count > 0
    out["gpu_start_ns"] = nullable_int64(gstart, ~has)
    out["gpu_end_ns"] = nullable_int64(gend, ~has)
    out["gpu_span_ns"] = out["gpu_end_ns"] - out["gpu_start_ns"]
    return out


def _ordered(api_start: np.ndarray, sel: np.ndarray | None) -> np.ndarray | None:
    """Row indices putting the selected launches in call order (None: all rows, already)."""
    if sel is None:
        if np.all(api_start[1:] >= api_start[:-1]):
            return None
        return np.argsort(api_start, kind="stable")
    return sel[np.argsort(api_start[sel], kind="stable")]


def _slice_sum(a: np.ndarray, b, lo: np.ndarray, hi: np.ndarray,
               where: np.ndarray | None = None) -> np.ndarray:
    """Sum of ``a - b`` (only where ``where``) over every [lo, hi) slice, in one buffer: one
    8M-row array, not three (difference, cumulative sum, its shifted copy)."""
    cum = np.empty(len(a) + 1, np.int64)
    cum[0] = 0
    np.subtract(a, b, out=cum[1:])
    if where is not None and not where.all():
        cum[1:][~where] = 0
    np.cumsum(cum[1:], out=cum[1:])
    return cum[hi] - cum[lo]


def _groups(pids: np.ndarray, tids: np.ndarray):
    """(pid, tid) -> row indices; tid -1 stands for "any thread of the process"."""
    frame = pd.DataFrame({"pid": pids, "tid": tids})
    for key, idx in frame.groupby(["pid", "tid"], sort=False).indices.items():
        yield key, idx


def project_sql(report: Report, db) -> pd.DataFrame:
    """``project`` in DuckDB over the launch table ``lk`` (``launches.launches_sql`` with
    start_ns, end_ns, api_start_ns, api_end_ns, api_tid).

    Push/pop ranges of one thread and depth never overlap, so each launch finds its range at
    every depth with one as-of join (the latest range starting at or before the call) instead
    of a join of every range with every launch. Ranges that may overlap (start/end ranges,
    which cross threads, or pushes that share a nanosecond boundary) go through ``project``
    with the launch columns fetched from DuckDB."""
    from .launches import once_sql

    nvtx = report.nvtx(NVTX_COLUMNS)
    nvtx = nvtx[nvtx["kind"] != "mark"].reset_index(drop=True)
    if not _disjoint_per_thread(nvtx):
        lk = db.frame("SELECT pid, start_ns, end_ns, api_start_ns, api_end_ns, api_tid, api_row "
                      "FROM lk ORDER BY op_row")
        return project(report, lk)
    ranges = pd.DataFrame({
        "rid": np.arange(len(nvtx), dtype=np.int64), "pid": nvtx["pid"].to_numpy(np.int64),
        "tid": nvtx["tid"].to_numpy(np.int64), "depth": nvtx["depth"].to_numpy(np.int64),
        "start_ns": nvtx["start_ns"].to_numpy(np.int64),
        "end_ns": nvtx["end_ns"].fillna(np.iinfo(np.int64).max).to_numpy(np.int64)})
    once = once_sql(db)
    db.con.execute(f"""CREATE OR REPLACE TABLE lk_once AS
        SELECT pid::BIGINT AS pid, api_tid::BIGINT AS tid, api_start_ns, start_ns, end_ns,
               {once} AS once, api_end_ns - api_start_ns AS api_ns FROM lk""")
    per_depth = " UNION ALL ".join(
        f"""SELECT r.rid, l.start_ns, l.end_ns, l.once, l.api_ns FROM lk_once l
            ASOF JOIN (SELECT * FROM ranges WHERE depth = {int(d)}) r
            ON l.pid = r.pid AND l.tid = r.tid AND l.api_start_ns >= r.start_ns
            WHERE l.api_start_ns <= r.end_ns"""
        for d in sorted(ranges["depth"].unique()))
    agg = db.frame(f"""SELECT rid, count(*) AS kernel_count, sum(end_ns - start_ns)::BIGINT AS
                           kernel_time_ns, sum(once::BIGINT)::BIGINT AS launch_calls,
                           sum(CASE WHEN once THEN api_ns ELSE 0 END)::BIGINT AS launch_api_ns,
                           min(start_ns) AS gpu_start_ns, max(end_ns) AS gpu_end_ns
                    FROM ({per_depth}) GROUP BY rid""" if len(ranges) else
                   "SELECT 0 AS rid LIMIT 0", ranges=ranges)
    db.con.execute("DROP TABLE lk_once")
    out = nvtx.copy()
    got = agg.set_index("rid").reindex(np.arange(len(nvtx)))
    for c in ("kernel_count", "kernel_time_ns", "launch_calls", "launch_api_ns"):
        out[c] = got[c].fillna(0).to_numpy(np.int64) if c in got else np.zeros(len(nvtx), np.int64)
    has = out["kernel_count"].to_numpy() > 0
    for c in ("gpu_start_ns", "gpu_end_ns"):
        v = got[c].fillna(0).to_numpy(np.int64) if c in got else np.zeros(len(nvtx), np.int64)
        out[c] = nullable_int64(v, ~has)
    out["gpu_span_ns"] = out["gpu_end_ns"] - out["gpu_start_ns"]
    return out


def _disjoint_per_thread(nvtx: pd.DataFrame) -> bool:
    """Whether every range is a push/pop range and no two ranges of one thread and depth
    share a nanosecond (then at most one of them holds any instant)."""
    if not len(nvtx):
        return True
    if not (nvtx["kind"] == "push_pop").all():
        return False
    end = nvtx["end_ns"].fillna(np.iinfo(np.int64).max).astype(np.int64)
    df = pd.DataFrame({"pid": nvtx["pid"], "tid": nvtx["tid"], "depth": nvtx["depth"],
                       "start": nvtx["start_ns"].astype(np.int64), "end": end})
    df = df.sort_values(["pid", "tid", "depth", "start"], kind="stable")
    same = ((df["pid"].to_numpy()[1:] == df["pid"].to_numpy()[:-1])
            & (df["tid"].to_numpy()[1:] == df["tid"].to_numpy()[:-1])
            & (df["depth"].to_numpy()[1:] == df["depth"].to_numpy()[:-1]))
    return not (same & (df["start"].to_numpy()[1:] <= df["end"].to_numpy()[:-1])).any()
