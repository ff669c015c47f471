"""launch_compute: launch overhead vs GPU compute, per kernel, per run and per NVTX range.
In memory (NumPy) on small reports; on big ones (``nsightlab.analysis.engine``) joined and summarized
in DuckDB over the table cache, in bounded memory: medians by ``engine.medians``, busy time
and the NVTX projection from streams of the launch table."""
import contextlib

import numpy as np
import pandas as pd

from nsightlab.recipe_api import (
    STATS,
    BusyByKey,
    Groups,
    NoDataError,
    busy_time,
    engine,
    first_of_call,
    group_ids,
    launches,
    launches_sql,
    median_in_place,
    nullable_int64,
    project,
    project_sql,
    release_memory,
    run_recipe,
    trace,
)

OP_COLUMNS = ("start_ns", "end_ns", "device_id", "name")
API_COLUMNS = ("start_ns", "end_ns", "tid", "name")


def run(report, params):
    return engine.analyse(report, lambda db: in_duckdb(report, db, params),
                          lambda: in_numpy(report, params))


def in_duckdb(report, db, params):
    # the budget's join of kernels and calls (when it runs now, not from the result store)
    # leaves the launch table in this engine: one join of 8M kernels and 16M calls, not two;
    # its statistics (SQL, little Python) then run beside the budget's start-order pass,
    # which is mostly NumPy
    db.want_launches(OP_COLUMNS, API_COLUMNS)
    db.beside_start_pass(lambda side: _statistics(side, params))
    try:
        budget = run_recipe("budget", report)["summary"]
        if not launches_sql(db, "kernels", OP_COLUMNS, API_COLUMNS):
            raise _no_launches(report)
    except BaseException:
        with contextlib.suppress(Exception):  # let it end; the first error is the one raised
            db.beside_result()
        raise
    trace.mark("launch_compute: launch table")
    ran, got = db.beside_result()
    per_kernel_, numbers = got if ran else _statistics(db, params)
    busy = _busy_sql(db)
    numbers.insert(numbers.columns.get_loc("gpu_span_ns") + 1, "gpu_busy_ns", np.array(
        [busy[(p, d)] for p, d in zip(numbers["pid"], numbers["device"])], np.int64))
    ranges = by_range(project_sql(report, db, int(params["max_ranges"])), params)
    trace.mark("launch_compute: NVTX ranges")
    return {"per_kernel": per_kernel_, "summary": summary(numbers, params, budget),
            "by_range": ranges}


def _statistics(db, params):
    """Per kernel, and the run's numbers but its busy time (``_busy_sql``), from the launch
    table ``lk`` in DuckDB."""
    per_kernel_ = per_kernel_sql(db)
    trace.mark("launch_compute: per kernel")
    numbers = summary_sql(db, params)
    trace.mark("launch_compute: run numbers")
    return per_kernel_, numbers


def in_numpy(report, params):
    budget = run_recipe("budget", report)["summary"]  # first: its arrays are freed before lk
    lk = launches(report, op_columns=OP_COLUMNS, api_columns=API_COLUMNS)
    if lk.empty:
        raise _no_launches(report)
    ranges = by_range(project(report, lk, int(params["max_ranges"])), params)
    return {"per_kernel": per_kernel(lk), "summary": summary(run_numbers(lk, params), params, budget),
            "by_range": ranges}


def _no_launches(report):
    return NoDataError(report.missing_hint("kernels") or report.missing_hint("cuda_api")
                       or f"{report.path.name}: no kernel launches")


def per_kernel(lk):
    gid, keys = group_ids(lk[["pid", "api_tid", "device_id", "api_name", "name"]])
    out = keys.rename(columns={"api_tid": "tid", "device_id": "device"})
    api_start, api_end = lk["api_start_ns"].to_numpy(), lk["api_end_ns"].to_numpy()
    start, end = lk["start_ns"].to_numpy(), lk["end_ns"].to_numpy()
    def queue():
        q = np.subtract(start, api_end, dtype=float)  # one 8M-row array, not two
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


#: per metric of per_kernel: SQL over lk, NULL where the call has no value (queue: the kernel
#: started before its launch call returned)
METRICS_SQL = {"api": "api_end_ns - api_start_ns",
               "queue": "CASE WHEN start_ns >= api_end_ns THEN start_ns - api_end_ns END",
               "kernel": "end_ns - start_ns",
               "total": "greatest(api_end_ns, end_ns) - api_start_ns"}


def per_kernel_sql(db):
    """``per_kernel`` in DuckDB over ``lk``: the same groups (in order of first appearance),
    the same statistics (NVIDIA's: sample standard deviation, 0 for one value); medians in
    bounded memory (``engine.medians``)."""
    keys = ["pid", "api_tid", "device_id", "api_name", "name"]
    cols = []
    for metric, expr in METRICS_SQL.items():
        x = f"({expr})"
        if metric in ("api", "queue"):
            cols.append(f"count({x}) AS {'count' if metric == 'api' else 'queue_count'}")
        cols += [f"sum({x})::BIGINT AS {metric}_total_ns", f"avg({x}) AS {metric}_avg_ns",
                 f"NULL::DOUBLE AS {metric}_med_ns", f"min({x}) AS {metric}_min_ns",
                 f"max({x}) AS {metric}_max_ns",
                 f"CASE WHEN count({x}) > 1 THEN stddev_samp({x}) WHEN count({x}) = 1 THEN 0.0 "
                 f"END AS {metric}_stddev_ns"]
    with db.all_cores():  # one row per group to sort
        out = db.frame(f"""SELECT {', '.join(keys)}, {', '.join(cols)}
                           FROM lk GROUP BY ALL ORDER BY min(op_row)""")
    for metric, expr in METRICS_SQL.items():
        out[f"{metric}_med_ns"] = engine.medians_at(
            db, out, f"(SELECT {', '.join(keys)}, {expr} AS x FROM lk)", keys, "x")
    out = out.rename(columns={"api_tid": "tid", "device_id": "device"})
    for c in out.columns:
        if c.endswith(("_total_ns", "_min_ns", "_max_ns")):
            out[c] = out[c].astype("Int64")
    for c in ("count", "queue_count"):
        out[c] = out[c].astype(np.int64)
    for c in ("api_name", "name"):
        out[c] = out[c].astype("category")
    return out.sort_values("total_avg_ns", ascending=False, kind="stable").reset_index(drop=True)


def by_range(proj, params):
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


def run_numbers(lk, params):
    """Per (pid, device) of the launch table: the numbers the run summary states."""
    rows = []
    pids, devs = lk["pid"].to_numpy(), lk["device_id"].to_numpy()
    if pids.min() == pids.max() and devs.min() == devs.max():  # one process on one GPU
        groups = {(pids[0], devs[0]): None}  # no groupby: its codes and index cost ~300 MB at 8M
    else:
        groups = lk.groupby(["pid", "device_id"], sort=True).indices
    cols = {c: lk[c].to_numpy() for c in ("start_ns", "end_ns", "api_start_ns", "api_end_ns", "api_row")}
    for (pid, dev), idx in groups.items():
        g = cols if idx is None else {c: v[idx] for c, v in cols.items()}
        span = int(g["end_ns"].max() - g["start_ns"].min())
        busy_ns = busy_time(g["start_ns"], g["end_ns"])
        once = first_of_call(g["api_row"])
        adur = g["api_end_ns"] - g["api_start_ns"]
        if not once.all():
            adur = adur[once]
        launch_sum, launch_avg, n_calls = int(adur.sum()), float(adur.mean()), len(adur)
        del adur
        # 8M-row temporaries one at a time, medians by in-place partitions of our own copies
        queue = g["start_ns"] - g["api_end_ns"]
        queued = queue[queue >= 0]
        del queue
        queue_med = median_in_place(queued) if len(queued) else np.nan
        del queued
        kdur = g["end_ns"] - g["start_ns"]
        k_sum, k_mean, n_k = int(kdur.sum()), float(kdur.mean()), len(kdur)
        short = 100.0 * float((kdur < params["short_kernel_us"] * 1e3).mean())
        k_med = median_in_place(kdur)
        del kdur
        release_memory()
        rows.append({
            "pid": pid, "device": dev, "kernel_count": n_k, "kernel_time_ns": k_sum,
            "gpu_span_ns": span, "gpu_busy_ns": busy_ns,
            "launch_calls": n_calls, "launch_api_ns": launch_sum, "launch_api_avg_ns": launch_avg,
            "kernel_avg_ns": k_mean, "kernel_med_ns": k_med, "queue_med_ns": queue_med,
            "short_kernel_pct": short,
        })
    return pd.DataFrame(rows)


def summary_sql(db, params):
    """``run_numbers`` in DuckDB over ``lk``, in bounded memory (medians by
    ``engine.medians``), but the busy time (``_busy_sql``): the budget's start-order pass
    sums it, and this runs beside that pass."""
    from nsightlab.recipe_api import once_table

    short = float(params["short_kernel_us"]) * 1e3
    # the window over every launch, when calls launched several kernels, is built in
    # once_table on the sort's threads; the aggregations below run on every core
    table, once = once_table(db)
    with db.all_cores():
        out = db.frame(f"""
            WITH k AS (SELECT pid, device_id, count(*) AS kernel_count,
                              sum(end_ns - start_ns)::BIGINT AS kernel_time_ns,
                              max(end_ns) - min(start_ns) AS gpu_span_ns,
                              avg(end_ns - start_ns) AS kernel_avg_ns,
                              100.0 * avg(((end_ns - start_ns) < {short})::INTEGER) AS short_kernel_pct
                       FROM lk GROUP BY pid, device_id),
                 c AS (SELECT pid, device_id, count(*) AS launch_calls,
                              sum(api_end_ns - api_start_ns)::BIGINT AS launch_api_ns,
                              avg(api_end_ns - api_start_ns) AS launch_api_avg_ns
                       FROM (SELECT pid, device_id, api_start_ns, api_end_ns, {once} AS once
                             FROM {table})
                       WHERE once GROUP BY pid, device_id)
            SELECT k.pid, k.device_id AS device, kernel_count, kernel_time_ns, gpu_span_ns,
                   launch_calls, launch_api_ns, launch_api_avg_ns, kernel_avg_ns,
                   short_kernel_pct
            FROM k JOIN c USING (pid, device_id)
            ORDER BY k.pid, k.device_id""")
    groups = pd.DataFrame({"pid": out["pid"], "device_id": out["device"]})
    def median(expr):
        return engine.medians_at(db, groups, f"(SELECT pid, device_id, {expr} AS x FROM lk)",
                                 ["pid", "device_id"], "x")

    out.insert(out.columns.get_loc("kernel_avg_ns") + 1, "kernel_med_ns",
               median("end_ns - start_ns"))
    out.insert(out.columns.get_loc("kernel_med_ns") + 1, "queue_med_ns",
               median("CASE WHEN start_ns >= api_end_ns THEN start_ns - api_end_ns END"))
    return out


def _busy_sql(db) -> dict:
    """GPU busy time (the union of kernel intervals) per (pid, device) of ``lk``: summed by the
    budget's pass over the same operations in start order when it left ``lk``
    (``Engine.launched_busy``), else from a sort of its own."""
    if db.launched_busy is not None:
        return db.launched_busy
    busy = BusyByKey()
    for batch in db.stream("SELECT pid, device_id, start_ns, end_ns FROM lk "
                           "ORDER BY pid, device_id, start_ns", 1 << 20):
        pid, dev, s, e = (batch.column(i).to_numpy() for i in range(4))
        for lo, hi in engine.runs(pid, dev):
            busy.add((int(pid[lo]), int(dev[lo])), s[lo:hi], e[lo:hi])
    return busy.total


def summary(numbers, params, budget):
    """The run summary: per (pid, device) numbers with busy share and the budget's verdict."""
    out = numbers.copy()
    busy = 100.0 * out["gpu_busy_ns"].to_numpy() / np.maximum(out["gpu_span_ns"].to_numpy(), 1)
    out.insert(out.columns.get_loc("gpu_busy_ns") + 1, "gpu_busy_pct", busy)
    verdicts = [_budget_verdict(budget, r.device, b, r.kernel_avg_ns, r.launch_api_ns / r.kernel_count,
                                r.kernel_count) for r, b in zip(out.itertuples(), busy)]
    out["verdict"] = [v for v, _ in verdicts]
    out["evidence"] = [e for _, e in verdicts]
    return out
