"""launch_compute: launch overhead vs GPU compute, per kernel, per run and per NVTX range."""
import numpy as np
import pandas as pd

from nsightlab import recipes
from nsightlab.launches import first_of_call, launches
from nsightlab.projection import project
from nsightlab.recipes import NoDataError
from nsightlab.stats import STATS, Groups, group_ids
from nsightlab.tables import nullable_int64
from nsightlab.timeline import busy_time


def run(report, params):
    budget = recipes.run("budget", report)["summary"]  # first: its scratch is freed before lk
    lk = launches(report, op_columns=("start_ns", "end_ns", "device_id", "name"),
                  api_columns=("start_ns", "end_ns", "tid", "name"))
    if lk.empty:
        raise NoDataError(report.missing_hint("kernels") or report.missing_hint("cuda_api")
                          or f"{report.path.name}: no kernel launches")
    ranges = by_range(report, lk, params)
    return {"per_kernel": per_kernel(lk), "summary": summary(lk, ranges, params, budget),
            "by_range": ranges}


def per_kernel(lk):
    gid, keys = group_ids(lk[["pid", "api_tid", "device_id", "api_name", "name"]])
    out = keys.rename(columns={"api_tid": "tid", "device_id": "device"})
    api_start, api_end = lk["api_start_ns"].to_numpy(), lk["api_end_ns"].to_numpy()
    start, end = lk["start_ns"].to_numpy(), lk["end_ns"].to_numpy()
    def queue():
        q = (start - api_end).astype(float)
        q[q < 0] = np.nan  # a kernel that starts before its call returns has no queue time
        return q

    metrics = {"api": lambda: api_end - api_start, "queue": queue,
               "kernel": lambda: end - start, "total": lambda: np.maximum(api_end, end) - api_start}
    groups = Groups(gid, len(keys))
    for metric, values in metrics.items():  # one metric array alive at a time
        stats = groups.summarize(values())
        if metric in ("api", "queue"):
            out["count" if metric == "api" else "queue_count"] = stats["count"]
        for st in STATS[1:]:
            col = stats[st]
            if st in ("total", "min", "max"):  # whole nanoseconds; NA where nothing queued
                col = nullable_int64(col, np.isnan(col))
            out[f"{metric}_{st}_ns"] = col
    return out.sort_values("total_avg_ns", ascending=False, kind="stable").reset_index(drop=True)


def verdict(busy_pct, kernel_avg, api_avg, params):
    """Per NVTX range: launch-bound when the GPU idles most of the range and its kernels are no
    longer than the calls that launch them (longer kernels would keep the queue ahead of the
    host); compute-bound when the GPU is busy; mixed in between. The run's own verdict is the
    time budget's (recipe budget)."""
    if busy_pct >= params["busy_high_pct"]:
        return "compute-bound"
    if busy_pct < params["busy_low_pct"] and kernel_avg <= api_avg:
        return "launch-bound"
    return "mixed"


def _evidence(busy_pct, kernel_avg, api_avg, n):
    return (f"GPU busy {busy_pct:.0f}% of its window; mean kernel {kernel_avg / 1e3:.1f} us vs "
            f"mean launch call {api_avg / 1e3:.1f} us; {n} kernels")


def by_range(report, lk, params):
    proj = project(report, lk)
    proj = proj[proj["kernel_count"] > 0].reset_index(drop=True)
    span = proj["gpu_span_ns"].astype("float64").to_numpy()
    busy = np.minimum(100.0, 100.0 * proj["kernel_time_ns"].to_numpy() / np.maximum(span, 1))
    kavg = proj["kernel_time_ns"].to_numpy() / proj["kernel_count"].to_numpy()
    # launch cost per kernel: a graph launch's call is shared by all the kernels it replays
    aavg = proj["launch_api_ns"].to_numpy() / proj["kernel_count"].to_numpy()
    out = proj[["name", "depth", "pid", "tid", "start_ns", "duration_ns", "kernel_count",
                "launch_calls", "kernel_time_ns", "gpu_span_ns"]].copy()
    out["gpu_busy_pct"] = busy
    out["launch_api_avg_ns"] = aavg
    out["kernel_avg_ns"] = kavg
    out["verdict"] = [verdict(b, k, a, params) for b, k, a in zip(busy, kavg, aavg)]
    out["evidence"] = [_evidence(b, k, a, n) for b, k, a, n in
                       zip(busy, kavg, aavg, out["kernel_count"])]
    return out


def _budget_verdict(budget, dev, busy_pct, k_mean, per_kernel_api, n_k):
    """The run's verdict is the time budget's (wall-clock iterations, idle time by cause), with
    the launch numbers beside its evidence."""
    mine = budget[budget["device_id"] == dev]
    launch = _evidence(busy_pct, k_mean, per_kernel_api, n_k)
    if not len(mine):
        return "no GPU activity", launch
    b = mine.iloc[0]
    return str(b["verdict"]), f"{b['evidence']}; whole run: {launch}"


def summary(lk, ranges, params, budget):
    rows = []
    groups = lk.groupby(["pid", "device_id"], sort=True).indices
    cols = {c: lk[c].to_numpy() for c in ("start_ns", "end_ns", "api_start_ns", "api_end_ns", "api_row")}
    for (pid, dev), idx in groups.items():
        whole = len(idx) == len(lk)  # one process on one GPU: no copies
        g = cols if whole else {c: v[idx] for c, v in cols.items()}
        span = int(g["end_ns"].max() - g["start_ns"].min())
        busy_ns = busy_time(g["start_ns"], g["end_ns"])
        once = first_of_call(g["api_row"])
        adur = g["api_end_ns"] - g["api_start_ns"]
        if not once.all():
            adur = adur[once]
        launch_sum, launch_avg, n_calls = int(adur.sum()), float(adur.mean()), len(adur)
        del adur
        # 8M-row temporaries one at a time, medians by in-place sorts of our own copies
        queue = g["start_ns"] - g["api_end_ns"]
        queue.sort()
        queued = queue[np.searchsorted(queue, 0):]
        queue_med = float(np.median(queued)) if len(queued) else np.nan
        del queue, queued
        kdur = g["end_ns"] - g["start_ns"]
        k_sum, k_mean, n_k = int(kdur.sum()), float(kdur.mean()), len(kdur)
        short = 100.0 * float((kdur < params["short_kernel_us"] * 1e3).mean())
        kdur.sort()
        k_med = float(kdur[(n_k - 1) // 2] + kdur[n_k // 2]) / 2
        del kdur
        busy_pct = 100.0 * busy_ns / max(span, 1)
        per_kernel_api = launch_sum / n_k
        v, ev = _budget_verdict(budget, dev, busy_pct, k_mean, per_kernel_api, n_k)
        rows.append({
            "pid": pid, "device": dev, "kernel_count": n_k, "kernel_time_ns": k_sum,
            "gpu_span_ns": span, "gpu_busy_ns": busy_ns, "gpu_busy_pct": busy_pct,
            "launch_calls": n_calls, "launch_api_ns": launch_sum, "launch_api_avg_ns": launch_avg,
            "kernel_avg_ns": k_mean, "kernel_med_ns": k_med, "queue_med_ns": queue_med,
            "short_kernel_pct": short,
            "verdict": v, "evidence": ev,
        })
    return pd.DataFrame(rows)
