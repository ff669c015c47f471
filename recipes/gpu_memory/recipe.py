"""gpu_memory: GPU memory over time from the CUDA memory events (nsys --cuda-memory-usage=true).

Every allocation and free is paired by (process, device, address); memory in use is the running
sum per device and memory kind (device memory: Device, Array, Device Static; managed; pinned and
pageable host memory apart). A free whose allocation was not recorded is counted, not
subtracted. Growth per NVTX range and phase (warm-up, graph capture, iterations), the CUDA API
calls that allocated (cudaMalloc, graph instantiation, module loads...), the largest
allocations and what is still allocated at the end, with the CPU call stacks when recorded."""
import re

import numpy as np
import pandas as pd

from nsightlab.recipe_api import ITERATION, base_name

GROUP = {"Device": "device", "Array": "device", "Device Static": "device", "Managed": "managed",
         "Managed Static": "managed", "Pinned": "pinned host", "Pageable": "pageable host"}
PHASES = (("warm-up", re.compile(r"(?i)warm")), ("graph capture", re.compile(r"(?i)captur|graph")),
          ("iteration", ITERATION))


def run(report, params):
    m = report.memory(["start_ns", "pid", "device_id", "operation", "bytes", "kind", "address",
                       "correlation_id"]).sort_values("start_ns", kind="stable").reset_index(drop=True)
    m["memory"] = m["kind"].astype(str).map(GROUP).fillna("other")
    alloc = (m["operation"].astype(str) == "Allocation").to_numpy()
    delta, freed_at, unmatched = _pair(m, alloc)
    m["delta_bytes"] = delta
    m["in_use_bytes"] = m.groupby(["device_id", "memory"])["delta_bytes"].cumsum()
    api = _api_of(report, m)
    ranges = _ranges(report)
    allocs = m[alloc].assign(freed_at_ns=freed_at[alloc], api=api[alloc])
    allocs["range"] = _innermost(ranges, allocs["start_ns"].to_numpy())
    return {
        "summary": _summary(m, alloc, allocs, unmatched, ranges),
        "timeline": m[["device_id", "memory", "start_ns", "delta_bytes", "in_use_bytes"]],
        "by_range": _by_range(m, ranges),
        "by_api": _by_api(m, alloc, api),
        "largest": _with_stacks(report, allocs.nlargest(params["top"], "bytes"), m),
        "still_allocated": _with_stacks(
            report, allocs[allocs["freed_at_ns"].isna()].sort_values("bytes", ascending=False,
                                                                     kind="stable"), m),
    }


def _pair(m, alloc):
    """+bytes for an allocation, -bytes for the free of a recorded allocation (0 for a free
    whose allocation was not recorded); each allocation's free time; unmatched frees."""
    delta = np.zeros(len(m), np.int64)
    freed_at = np.full(len(m), np.nan)
    live: dict[tuple, int] = {}
    unmatched = 0
    keys = zip(m["pid"].to_numpy(), m["device_id"].to_numpy(), m["address"].to_numpy())
    nbytes, starts = m["bytes"].to_numpy(np.int64), m["start_ns"].to_numpy()
    for i, key in enumerate(keys):
        if alloc[i]:
            live[key] = i
            delta[i] = nbytes[i]
        elif key in live:
            j = live.pop(key)
            delta[i] = -nbytes[j]
            freed_at[j] = starts[i]
        else:
            unmatched += 1
    return delta, freed_at, unmatched


def _api_of(report, m):
    """The CUDA API call each event correlates to (its name), "" where none was recorded."""
    if not report.has_rows("cuda_api"):
        return pd.Series([""] * len(m), index=m.index)
    a = report.cuda_api(["pid", "correlation_id", "name", "tid", "callchain_id"])
    a = a.drop_duplicates(["pid", "correlation_id"])
    j = m[["pid", "correlation_id"]].merge(a, on=["pid", "correlation_id"], how="left")
    m["tid"] = j["tid"].to_numpy()
    m["callchain_id"] = j["callchain_id"].to_numpy()
    return j["name"].astype(object).where(j["name"].notna(), "").set_axis(m.index)


def _ranges(report):
    nv = report.nvtx(["name", "kind", "depth", "start_ns", "end_ns"])
    r = nv[nv["kind"] != "mark"].copy()
    r["name"] = r["name"].astype(str).map(base_name)
    r["end_ns"] = r["end_ns"].fillna(np.iinfo(np.int64).max).astype(np.int64)
    r["phase"] = [next((p for p, rx in PHASES if rx.search(n)), "other") for n in r["name"]]
    return r.sort_values("start_ns", kind="stable").reset_index(drop=True)


def _innermost(ranges, times):
    """The deepest NVTX range open at each time ("" when none), by name."""
    out = np.full(len(times), "", dtype=object)
    if not len(ranges) or not len(times):
        return out
    s, e = ranges["start_ns"].to_numpy(), ranges["end_ns"].to_numpy()
    depth, names = ranges["depth"].to_numpy(), ranges["name"].to_numpy()
    step = max(1, 4_000_000 // len(ranges))  # times x ranges compared per pass
    for k in range(0, len(times), step):
        t = times[k:k + step][:, None]
        inside = (s[None, :] <= t) & (t <= e[None, :])
        d = np.where(inside, depth[None, :], -1)
        best = d.argmax(axis=1)
        hit = d[np.arange(len(t)), best] >= 0
        out[k:k + len(t)][hit] = names[best[hit]]
    return out


def _summary(m, alloc, allocs, unmatched, ranges):
    rows = []
    for (dev, mem), g in m.groupby(["device_id", "memory"], sort=True):
        a = g[alloc[g.index]]
        peak_i = g["in_use_bytes"].idxmax()
        t_peak = int(g.loc[peak_i, "start_ns"])
        rows.append({
            "device_id": int(dev), "memory": mem, "allocations": len(a),
            "frees": int((~alloc[g.index]).sum()), "allocated_bytes": int(a["bytes"].sum()),
            "freed_bytes": int(-g.loc[g["delta_bytes"] < 0, "delta_bytes"].sum()),
            "peak_bytes": int(g.loc[peak_i, "in_use_bytes"]), "peak_at_ns": t_peak,
            "peak_in_range": _innermost(ranges, np.array([t_peak]))[0],
            "end_bytes": int(g["in_use_bytes"].iloc[-1]),
            "still_allocated": int(allocs.loc[allocs.index.isin(g.index), "freed_at_ns"].isna().sum()),
            "largest_bytes": int(a["bytes"].max()) if len(a) else 0,
            "unmatched_frees": unmatched if mem == "device" else 0})
    return pd.DataFrame(rows, columns=["device_id", "memory", "allocations", "frees",
                                       "allocated_bytes", "freed_bytes", "peak_bytes",
                                       "peak_at_ns", "peak_in_range", "end_bytes",
                                       "still_allocated", "largest_bytes", "unmatched_frees"])


def _by_range(m, ranges):
    """Per NVTX range with memory activity: device memory in use at its start and end, the
    growth, the peak inside, what was allocated and freed inside."""
    dev = m[m["memory"] == "device"]
    cols = ["name", "phase", "depth", "start_ns", "end_ns", "device_id", "in_use_start_bytes",
            "in_use_end_bytes", "growth_bytes", "peak_bytes", "allocated_bytes", "freed_bytes",
            "allocations"]
    if dev.empty or ranges.empty:
        return pd.DataFrame(columns=cols)
    rows = []
    for device, d in dev.groupby("device_id"):
        t = d["start_ns"].to_numpy()
        inuse, delta = d["in_use_bytes"].to_numpy(), d["delta_bytes"].to_numpy()
        lo = np.searchsorted(t, ranges["start_ns"].to_numpy(), "left")
        hi = np.searchsorted(t, ranges["end_ns"].to_numpy(), "right")
        at_start = np.where(lo > 0, inuse[np.maximum(lo - 1, 0)], 0)
        at_end = np.where(hi > 0, inuse[np.maximum(hi - 1, 0)], 0)
        for k, r in enumerate(ranges.itertuples(index=False)):
            if hi[k] <= lo[k]:
                continue
            seg = delta[lo[k]:hi[k]]
            rows.append({"name": r.name, "phase": r.phase, "depth": int(r.depth),
                         "start_ns": int(r.start_ns), "end_ns": int(r.end_ns),
                         "device_id": int(device), "in_use_start_bytes": int(at_start[k]),
                         "in_use_end_bytes": int(at_end[k]),
                         "growth_bytes": int(at_end[k] - at_start[k]),
                         "peak_bytes": int(inuse[lo[k]:hi[k]].max()),
                         "allocated_bytes": int(seg[seg > 0].sum()),
                         "freed_bytes": int(-seg[seg < 0].sum()),
                         "allocations": int((seg > 0).sum())})
    return pd.DataFrame(rows, columns=cols)


def _by_api(m, alloc, api):
    df = pd.DataFrame({"api": api.to_numpy(), "memory": m["memory"].to_numpy(),
                       "alloc": alloc, "bytes": m["bytes"].to_numpy()})
    g = df.groupby(["api", "memory"], sort=False)
    out = pd.DataFrame({"allocations": g["alloc"].sum(),
                        "allocated_bytes": g.apply(lambda x: x.loc[x["alloc"], "bytes"].sum(),
                                                   include_groups=False),
                        "frees": g["alloc"].apply(lambda x: (~x).sum())}).reset_index()
    out["api"] = out["api"].replace("", "(no API call recorded)")
    return out.sort_values("allocated_bytes", ascending=False, kind="stable").reset_index(drop=True)


def _with_stacks(report, rows, m):
    out = rows[["start_ns", "device_id", "memory", "kind", "bytes", "api", "range",
                "freed_at_ns"]].copy()
    out["kind"] = out["kind"].astype(str)
    out["tid"] = m.loc[rows.index, "tid"].to_numpy() if "tid" in m else pd.NA
    ids = m.loc[rows.index, "callchain_id"] if "callchain_id" in m else pd.Series(dtype=float)
    stacks = report.call_stacks(ids.dropna().tolist()) if len(ids.dropna()) else {}
    out["call_stack"] = [stacks.get(int(i), "") if pd.notna(i) else "" for i in ids] \
        if len(ids) else ""
    return out.reset_index(drop=True)
