"""sync_gaps: host waits on the GPU, GPU idle gaps, and which wait each gap follows."""
import numpy as np
import pandas as pd

from nsightlab.classify import sync_kind
from nsightlab.launches import keys as join_keys, match
from nsightlab.tables import nullable_int64
from nsightlab.timeline import gaps as idle_gaps

OPS = ("kernels", "memcpy", "memset")


def run(report, params):
    ops = gpu_ops(report)
    raw_gaps = all_gaps(ops)
    syncs = sync_calls(report, raw_gaps)
    gaps = reported_gaps(report, ops, raw_gaps, syncs, params["min_gap_ms"] * 1e6)
    return {"syncs": syncs, "gaps": gaps, "by_api": by_api(syncs, gaps)}


def gpu_ops(report):
    """Kernels, memcpys and memsets: the GPU operations a gap lies between."""
    cols = ["pid", "device_id", "context_id", "start_ns", "end_ns", "correlation_id"]
    frames = [report.table(t, cols) for t in OPS if report.has_rows(t)]
    return frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)


GROUP = ["pid", "device_id", "context_id"]


def groups(df):
    """{(pid, device, context): row indices, or None for "all rows"} without a groupby
    when there is only one group (the usual single-process, single-GPU run)."""
    first = df.iloc[0]
    if all(np.all(df[c].to_numpy() == first[c]) for c in GROUP):
        return {tuple(int(first[c]) for c in GROUP): None}
    return df.groupby(GROUP, sort=True).indices


def _rows(a, idx):
    return a if idx is None else a[idx]


def all_gaps(ops):
    """Every idle gap, as arrays per (pid, device, context): {key: (starts, ends)}. Arrays,
    not a DataFrame: a launch-bound run of 8M kernels has 8M tiny gaps."""
    starts, ends = ops["start_ns"].to_numpy(), ops["end_ns"].to_numpy()
    return {key: idle_gaps(_rows(starts, idx), _rows(ends, idx))
            for key, idx in groups(ops).items()}


def sync_calls(report, raw_gaps):
    api = report.cuda_api(["name"])
    kinds = {n: sync_kind(str(n)) for n in api["name"].cat.categories}
    wanted = [n for n, k in kinds.items() if k]
    rows = np.flatnonzero(api["name"].isin(wanted).to_numpy())
    del api
    cols = ["pid", "tid", "name", "start_ns", "end_ns", "duration_ns", "correlation_id",
            "callchain_id"]
    s = pd.concat([report.cuda_api([c])[c].iloc[rows].reset_index(drop=True) for c in cols],
                  axis=1)
    s = s.rename(columns={"name": "api_name"})
    s["api_name"] = s["api_name"].astype(str)
    s["sync_kind"] = s["api_name"].map(kinds)
    # what CUPTI says the call waited on
    s["stream_id"] = pd.array([pd.NA] * len(s), dtype="UInt32")
    s["sync_type"] = pd.Series([None] * len(s), dtype=object)
    if report.has("syncs") and len(s):
        cu = report.syncs(["pid", "correlation_id", "stream_id", "sync_type"])
        si, ci = match(*join_keys(s, cu))
        s.loc[si, "stream_id"] = cu["stream_id"].to_numpy()[ci]
        s.loc[si, "sync_type"] = cu["sync_type"].astype(str).to_numpy()[ci]
    s["gpu_idle_after_ns"] = idle_after(s, raw_gaps)
    stacks = report.call_stacks(s["callchain_id"].dropna().unique())
    s["call_stack"] = s["callchain_id"].map(lambda i: stacks.get(int(i)) if pd.notna(i) else None)
    s = s.drop(columns=["callchain_id"])
    order = ["pid", "tid", "api_name", "sync_kind", "start_ns", "end_ns", "duration_ns",
             "correlation_id", "stream_id", "sync_type", "gpu_idle_after_ns", "call_stack"]
    return s[order].sort_values("duration_ns", ascending=False, kind="stable").reset_index(drop=True)


def idle_after(s, raw_gaps):
    """GPU idle from each call's return to the end of the gap it returned into (per process;
    the longest over the process's devices)."""
    out = np.zeros(len(s), np.int64)
    pids, ends = s["pid"].to_numpy(), s["end_ns"].to_numpy()
    for (pid, _dev, _ctx), (gs, ge) in raw_gaps.items():
        mine = np.flatnonzero(pids == pid)
        t = ends[mine]
        i = np.searchsorted(gs, t, "right") - 1
        inside = (i >= 0) & (t <= ge[np.maximum(i, 0)])
        out[mine] = np.maximum(out[mine], np.where(inside, ge[np.maximum(i, 0)] - t, 0))
    return out


def reported_gaps(report, ops, raw_gaps, syncs, min_gap_ns):
    frames = []
    for (pid, dev, ctx), (gs, ge) in raw_gaps.items():
        keep = (ge - gs) >= min_gap_ns
        frames.append(pd.DataFrame({"pid": pid, "device_id": dev, "context_id": ctx,
                                    "start_ns": gs[keep], "end_ns": ge[keep]}))
    gaps = pd.concat(frames, ignore_index=True)
    gaps["duration_ns"] = gaps["end_ns"] - gaps["start_ns"]
    n = len(gaps)
    cause = np.array(["host"] * n, dtype=object)
    follows = np.array([None] * n, dtype=object)
    follows_end = np.full(n, -1, np.int64)
    next_api = np.array([None] * n, dtype=object)
    next_start = np.full(n, -1, np.int64)
    if n:
        ending = ending_ops(ops, gaps)
        api = report.cuda_api(["pid", "correlation_id"])
        gi, ai = match(*join_keys(ending, api))
        del api
        tids = report.cuda_api(["tid"])["tid"].to_numpy()
        prev = previous_on_thread(tids, ai)  # host activity: the thread's previous CUDA call
        del tids
        has = prev >= 0
        rows = np.concatenate([ai, prev[has]])  # only these API rows are looked at
        pick = {c: _take(report, c, rows) for c in ("name", "start_ns", "end_ns")}
        n_ai = len(ai)
        next_api[gi] = pick["name"][:n_ai]
        next_start[gi] = pick["start_ns"][:n_ai]
        cause[gi[next_start[gi] <= gaps["start_ns"].to_numpy()[gi]]] = "launch"
        follows[gi[has]] = pick["name"][n_ai:]
        follows_end[gi[has]] = pick["end_ns"][n_ai:]
        # a sync that returned during the gap: the host was blocked, then re-issued work
        for pid, idx in gaps.groupby("pid").indices.items():
            sp = syncs[syncs["pid"] == pid].sort_values("end_ns")
            if not len(sp):
                continue
            se = sp["end_ns"].to_numpy()
            k = np.searchsorted(se, gaps["end_ns"].to_numpy()[idx], "right") - 1
            ok = (k >= 0) & (se[np.maximum(k, 0)] >= gaps["start_ns"].to_numpy()[idx])
            rows = idx[ok]
            cause[rows] = "sync"
            follows[rows] = sp["api_name"].to_numpy()[k[ok]]
            follows_end[rows] = se[k[ok]]
    out = gaps.copy()
    out["cause"] = cause
    out["follows"] = follows
    out["follows_end_ns"] = _nullable(follows_end)
    out["next_api"] = next_api
    out["next_api_start_ns"] = _nullable(next_start)
    return out.sort_values("duration_ns", ascending=False, kind="stable").reset_index(drop=True)


def _take(report, column, rows):
    """Values of one cuda_api column at ``rows`` (names as str), reading only those rows."""
    col = report.take("cuda_api", [column], rows)[column]
    return col.astype(str).to_numpy(dtype=object) if isinstance(col.dtype, pd.CategoricalDtype) \
        else col.to_numpy()


def ending_ops(ops, gaps):
    """The GPU operation that starts at each gap's end (pid, correlation_id)."""
    pid = np.zeros(len(gaps), np.int64)
    corr = np.zeros(len(gaps), np.int64)
    op_groups = groups(ops)
    starts, corrs = ops["start_ns"].to_numpy(), ops["correlation_id"].to_numpy()
    for key, idx in gaps.groupby(GROUP).indices.items():
        rows = op_groups[key]
        st = _rows(starts, rows)
        if not np.all(st[1:] >= st[:-1]):
            order = np.argsort(st, kind="stable")
            rows = order if rows is None else rows[order]
            st = starts[rows]
        j = np.minimum(np.searchsorted(st, gaps["end_ns"].to_numpy()[idx], "left"), len(st) - 1)
        pid[idx] = key[0]
        corr[idx] = corrs[j] if rows is None else corrs[rows[j]]
    return pd.DataFrame({"pid": pid, "correlation_id": corr})


def previous_on_thread(tids, rows, max_back=256):
    """Index of the previous API row on the same thread as each of ``rows`` (-1 if none within
    ``max_back`` rows): API rows are in time order, so this is the host's preceding call."""
    prev = np.full(len(rows), -1, np.int64)
    todo = np.arange(len(rows))
    for back in range(1, max_back + 1):
        cand = rows[todo] - back
        ok = cand >= 0
        hit = ok & (tids[np.maximum(cand, 0)] == tids[rows[todo]])
        prev[todo[hit]] = cand[hit]
        todo = todo[ok & ~hit]
        if not len(todo):
            break
    return prev


def _nullable(values):
    return nullable_int64(values, values < 0)  # -1 marks "none"


def by_api(syncs, gaps):
    if not len(syncs):
        return pd.DataFrame(columns=["api_name", "sync_kind", "calls", "total_ns", "avg_ns",
                                     "max_ns", "gpu_idle_after_ns", "gaps_after"])
    g = syncs.groupby(["api_name", "sync_kind"], sort=False)
    out = g.agg(calls=("duration_ns", "size"), total_ns=("duration_ns", "sum"),
                avg_ns=("duration_ns", "mean"), max_ns=("duration_ns", "max"),
                gpu_idle_after_ns=("gpu_idle_after_ns", "sum")).reset_index()
    after = gaps["follows"].value_counts()
    out["gaps_after"] = out["api_name"].map(after).fillna(0).astype(int)
    return out.sort_values("total_ns", ascending=False, kind="stable").reset_index(drop=True)
