"""sync_gaps: host waits on the GPU, GPU idle gaps, and which wait each gap follows.
Big reports: the gaps (8M in a launch-bound run of 8M kernels) are found and matched in
DuckDB over the table cache (``nsightlab.analysis.engine``); only the reported ones reach pandas."""
import numpy as np
import pandas as pd

from nsightlab.recipe_api import (
    engine,
    gaps as idle_gaps,
    join_keys,
    match,
    nullable_int64,
    release_memory,
    sync_kind,
    trace,
)

OPS = ("kernels", "memcpy", "memset", "graph_execs")  # a graph-level trace: each replay


SYNC_COLUMNS = ["pid", "tid", "name", "start_ns", "end_ns", "duration_ns", "correlation_id",
                "callchain_id"]


def run(report, params):
    return engine.analyse(report, lambda db: run_sql(report, db, params),
                          lambda: run_numpy(report, params))


def run_numpy(report, params):
    ops = gpu_ops(report)
    raw_gaps = all_gaps(ops)
    syncs = sync_calls(report, raw_gaps)
    gaps = reported_gaps(report, ops, raw_gaps, syncs, params["min_gap_ms"] * 1e6)
    return {"syncs": syncs, "gaps": gaps, "by_api": by_api(syncs, gaps)}


def run_sql(report, db, params):
    """The same three tables from a sorted stream: DuckDB sorts the GPU operations by
    (pid, device, context, start) out of core and hands them over a million at a time; each
    batch yields its gaps (an operation that starts after every earlier-starting one has
    ended, the running maximum of ends carried from batch to batch). That is NVIDIA's pairing
    of the j-th smallest end with the (j+1)-th smallest start: the j operations that start
    first have all ended exactly when the j-th smallest end comes before the (j+1)-th start.
    Only the reported gaps and the syncs' idle times are kept: memory does not grow with the
    report."""
    api = db.view("cuda_api", rows=True)
    ordered = _ordered_ops(report)  # read from the cache while DuckDB finds the syncs
    try:
        names = [n for n in db.distinct("cuda_api", "name") if sync_kind(n)]
        rows = db.rows_named("cuda_api", names, f"{', '.join(SYNC_COLUMNS)}, row", "row")
    except BaseException:
        if ordered is not None:
            ordered.close()
        raise
    trace.mark("sync_gaps: sync calls")
    gaps, after = _stream_gaps(report, db, rows, float(params["min_gap_ms"]) * 1e6, ordered)
    trace.mark("sync_gaps: GPU gaps")
    db.release()  # the sorted stream's buffers, before the syncs are described
    # freed heap arenas back, before and after the syncs are described (937k syncs on 2
    # cores: 562 -> 515 MB after them; no change measured on 16 cores)
    release_memory()
    syncs = describe_syncs(report, rows.drop(columns="row"), after)
    release_memory()
    ending = pd.DataFrame({"pid": gaps["pid"].to_numpy(np.int64),
                           "correlation_id": gaps.pop("next_correlation_id").to_numpy(np.int64)})
    found = db.frame(f"""SELECT q.i, a.row FROM ending q JOIN {api} a
                         ON a.pid = q.pid AND a.correlation_id = q.correlation_id
                         ORDER BY q.i, a.row""",
                     ending=ending.assign(i=np.arange(len(ending))))
    gi, ai = found["i"].to_numpy(np.int64), found["row"].to_numpy(np.int64)
    trace.mark("sync_gaps: the calls that ended the gaps")
    db.release()  # the rest is pandas and cache reads
    gaps = _finish(report, syncs, gaps, gi, ai, *_previous_sql(report, ai))
    return {"syncs": syncs, "gaps": gaps, "by_api": by_api(syncs, gaps)}


#: operations per batch of ``_stream_gaps``' sorted stream
GAP_BATCH_ROWS = 1 << 20


#: what the gap passes read of each GPU operation (``_stream_gaps``; ``gpu_ops`` in memory)
GAP_COLUMNS = ["pid", "device_id", "context_id", "start_ns", "end_ns", "correlation_id"]


def _ordered_ops(report):
    """The GPU operations as ``_gap_pass`` reads them, merged in start order from a cache in
    start order (``engine.in_start_order``), the reading begun now on a thread; None when a
    table is known out of order (DuckDB sorts)."""
    tables = tuple(t for t in OPS if report.has_rows(t))
    try:
        return engine.read_ahead_now(_by_key(engine.in_start_order(report, tables, GAP_COLUMNS)))
    except engine.OutOfOrder:
        return None


def _stream_gaps(report, db, calls, min_gap_ns, ordered):
    """(reported gaps with the correlation id of the operation ending each, GPU idle after
    each of ``calls``), from one pass over the operations in start order (see ``run_sql``).
    Tables cached in start order (exports before nsys 2025.6) are merged as they are read
    (``ordered``, from ``_ordered_ops``: 8M kernels on 16 cores, the sort and its stream took
    0.76 s); otherwise (None, or a table going back in time) DuckDB sorts their union."""
    tables = [t for t in OPS if report.has_rows(t)]
    cols = GAP_COLUMNS
    if ordered is not None:
        try:
            return _gap_pass(ordered, calls, min_gap_ns)
        except engine.OutOfOrder:  # a table's rows went back in time on the way
            pass
        finally:
            ordered.close()
    selects = [f"SELECT {', '.join(cols)}, {i} AS tbl, row FROM {db.view(t, rows=True)}"
               for i, t in enumerate(tables)]
    # ties in (table, row) order put so batch by batch (``engine.ties_in_order``): DuckDB
    # sorts on the four keys alone
    stream = db.stream(
        f"SELECT {', '.join(cols)}, tbl, row FROM "
        f"({' UNION ALL '.join(selects)}) ORDER BY pid, device_id, context_id, start_ns",
        GAP_BATCH_ROWS)
    return _gap_pass(engine.ties_in_order(stream, 4, (6, 7)), calls, min_gap_ns)


def _by_key(chunks):
    """Chunks of operations in start order, each reordered by (pid, device, context) with a
    stable sort (one key, the usual run: as they are), as ``_gap_pass`` reads them."""
    for col in chunks:
        pid, dev, ctx = col[0], col[1], col[2]
        if (pid != pid[0]).any() or (dev != dev[0]).any() or (ctx != ctx[0]).any():
            order = np.lexsort((ctx, dev, pid))  # stable: start order within a key
            col = [c[order] for c in col]
        yield col


def _gap_pass(chunks, calls, min_gap_ns):
    """``_stream_gaps`` over ``chunks`` (lists of columns pid, device, context, start, end,
    correlation id, ...) that hold each (pid, device, context) in start order, a key's
    operations spread over any number of chunks."""
    call_pid, call_end = calls["pid"].to_numpy(), calls["end_ns"].to_numpy(np.int64)
    after = np.zeros(len(calls), np.int64)
    # each process's calls by end: a run of operations looks only at the calls that end
    # within its gaps' span (every call each time: 937k syncs x 17 runs, most of the pass)
    by_end = {}
    for p in np.unique(call_pid):
        mine = np.flatnonzero(call_pid == p)
        mine = mine[np.argsort(call_end[mine], kind="stable")]
        by_end[p] = (mine, call_end[mine])
    reach: dict[tuple, int] = {}  # per (pid, device, context): the latest end so far
    kept = []
    for col in chunks:
        pid, dev, ctx = col[0], col[1], col[2]
        for lo, hi in engine.runs(pid, dev, ctx):
            key = (int(pid[lo]), int(dev[lo]), int(ctx[lo]))
            s, e = (col[i][lo:hi].astype(np.int64, copy=False) for i in (3, 4))
            corr = col[5][lo:hi]
            prev = reach.get(key)
            upto = np.maximum.accumulate(e)
            if prev is not None:
                np.maximum(upto, prev, out=upto)
            before = np.empty_like(upto)
            before[1:] = upto[:-1]
            before[0] = s[0] if prev is None else prev  # the very first follows no gap
            reach[key] = int(upto[-1])
            idle = s > before
            gs, ge, gc = before[idle], s[idle], corr[idle]
            mine, ends = by_end.get(key[0], (None, None))
            if mine is not None and len(gs):  # each call returned into at most one gap of
                # this key; those ending outside [first gap start, last gap end] in none
                a, b = np.searchsorted(ends, gs[0], "left"), np.searchsorted(ends, ge[-1], "right")
                mine, t = mine[a:b], ends[a:b]
                i = np.searchsorted(gs, t, "right") - 1
                inside = (i >= 0) & (t <= ge[np.maximum(i, 0)])
                after[mine] = np.maximum(after[mine], np.where(inside, ge[np.maximum(i, 0)] - t, 0))
            long = (ge - gs) >= min_gap_ns
            if long.any():
                kept.append(pd.DataFrame({"pid": key[0], "device_id": key[1], "context_id": key[2],
                                          "start_ns": gs[long], "end_ns": ge[long],
                                          "next_correlation_id": gc[long]}))
    if not kept:
        return pd.DataFrame({c: pd.Series(dtype=np.int64) for c in (
            "pid", "device_id", "context_id", "start_ns", "end_ns", "next_correlation_id")}), after
    gaps = pd.concat(kept, ignore_index=True)
    # by key, each key's gaps in start order: chunks may hold several keys' gaps
    return gaps.sort_values(GROUP, kind="stable", ignore_index=True), after


#: gaps whose previous call ``_previous_sql`` looks up at a time
PREVIOUS_CHUNK = 1 << 14


#: what ``_finish`` looks up of the calls that ended gaps and of the calls before them
LOOKED = ["name", "start_ns", "end_ns"]


def _previous_sql(report, ai, max_back=256):
    """(``previous_on_thread`` of ``ai``, ``_take`` of ``LOOKED`` at ``ai`` then at the
    previous calls found), reading only the ``max_back`` API rows before each of ``ai`` (rows
    in time order; otherwise by time over the whole table, and nothing looked up: None),
    ``PREVIOUS_CHUNK`` calls at a time in row order (all at once, 1.5M gaps held GBs of row
    numbers; a chunk reads only the cache parts its rows lie in). The rows read for the
    threads hold both calls, so ``LOOKED`` comes from the same pass (a second one over the
    parts took 0.19 s of sync_gaps on 16 cores, 0.3 s on 2)."""
    if not report.in_start_order("cuda_api"):  # rows out of time order
        return previous_on_thread(report.cuda_api(["tid"])["tid"].to_numpy(), ai,
                                  starts=report.cuda_api(["start_ns"])["start_ns"].to_numpy()), None
    out = np.full(len(ai), -1, np.int64)
    order = np.argsort(ai, kind="stable")
    own, before = [], []  # (positions in ai, rows of LOOKED) per chunk
    for lo in range(0, len(ai), PREVIOUS_CHUNK):
        at = order[lo:lo + PREVIOUS_CHUNK]
        mine = ai[at]
        near = _windows(mine, max_back)
        got = report.take("cuda_api", ["tid", *LOOKED], near)
        here = np.searchsorted(near, mine)
        local = previous_on_thread(got["tid"].to_numpy(), here, max_back)
        out[at] = np.where(local >= 0, near[np.maximum(local, 0)], -1)
        own.append((at, _values(got.iloc[here], LOOKED)))
        has = local >= 0
        before.append((at[has], _values(got.iloc[local[has]], LOOKED)))
    return out, {c: np.concatenate([_in_order(own, c), _in_order(before, c)]) for c in LOOKED}


def _in_order(pieces, column):
    """Values of ``column`` from (positions, {column: values}) pieces, by position."""
    if not pieces:
        return np.empty(0, object)
    at = np.concatenate([a for a, _ in pieces])
    values = np.concatenate([v[column] for _, v in pieces])
    return values[np.argsort(at, kind="stable")]


def _windows(rows, back):
    """Every row in [r - back, r] of some r of the sorted ``rows``, sorted, once each: the
    overlapping windows merged, then their rows listed (np.unique of rows x back values took
    seconds)."""
    if not len(rows):
        return np.empty(0, np.int64)
    lo, hi = np.maximum(rows - back, 0), rows + 1  # both sorted
    new = np.empty(len(rows), bool)
    new[0] = True
    new[1:] = lo[1:] > hi[:-1]
    first = np.flatnonzero(new)
    starts, ends = lo[first], hi[np.append(first[1:] - 1, len(rows) - 1)]
    sizes = ends - starts
    return np.repeat(starts - np.cumsum(sizes) + sizes, sizes) + np.arange(sizes.sum())


def gpu_ops(report):
    """Kernels, memcpys, memsets and whole-graph executions: the GPU operations a gap lies
    between."""
    frames = [report.table(t, GAP_COLUMNS) for t in OPS if report.has_rows(t)]
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
    wanted = [n for n in api["name"].cat.categories if sync_kind(str(n))]
    rows = np.flatnonzero(api["name"].isin(wanted).to_numpy())
    del api
    s = report.take("cuda_api", SYNC_COLUMNS, rows)  # the sync rows only, not 8 whole columns
    return describe_syncs(report, s, idle_after(s, raw_gaps))


def describe_syncs(report, s, idle_after_ns):
    """The syncs table from the synchronizing calls ``s`` (SYNC_COLUMNS, in row order) and the
    GPU idle time after each."""
    s = s.rename(columns={"name": "api_name"})
    s["api_name"] = s["api_name"].astype(str)
    s["sync_kind"] = s["api_name"].map(sync_kind)
    # what CUPTI says the call waited on
    s["stream_id"] = pd.array([pd.NA] * len(s), dtype="UInt32")
    s["sync_type"] = pd.Series([None] * len(s), dtype=object)
    if report.has("syncs") and len(s):
        cu = report.syncs(["pid", "correlation_id", "stream_id", "sync_type"])
        si, ci = match(*join_keys(s, cu))
        s.loc[si, "stream_id"] = cu["stream_id"].to_numpy()[ci]
        s.loc[si, "sync_type"] = cu["sync_type"].astype(str).to_numpy()[ci]
    s["gpu_idle_after_ns"] = idle_after_ns
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
    gi = ai = prev = np.empty(0, np.int64)
    if len(gaps):
        ending = ending_ops(ops, gaps)
        api = report.cuda_api(["pid", "correlation_id"])
        gi, ai = match(*join_keys(ending, api))
        del api
        calls = report.cuda_api(["tid", "start_ns"])
        # host activity: the thread's previous CUDA call (by time: rows may be out of order)
        prev = previous_on_thread(calls["tid"].to_numpy(), ai,
                                  starts=calls["start_ns"].to_numpy())
        del calls
    return _finish(report, syncs, gaps, gi, ai, prev)


def _finish(report, syncs, gaps, gi, ai, prev, looked=None):
    """Causes of the reported ``gaps`` (pid, device_id, context_id, start_ns, end_ns): ``ai``
    is the API row that launched the operation ending gap ``gi``, ``prev`` the previous call
    on that thread (-1: none); ``looked``: ``LOOKED`` of those rows (``_previous_sql``), else
    read here."""
    gaps["duration_ns"] = gaps["end_ns"] - gaps["start_ns"]
    n = len(gaps)
    cause = np.array(["host"] * n, dtype=object)
    follows = np.array([None] * n, dtype=object)
    follows_end = np.full(n, -1, np.int64)
    next_api = np.array([None] * n, dtype=object)
    next_start = np.full(n, -1, np.int64)
    if n:
        has = prev >= 0
        rows = np.concatenate([ai, prev[has]])  # only these API rows are looked at
        pick = looked if looked is not None else _take(report, LOOKED, rows)
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


def _take(report, columns, rows):
    """{column: values} of cuda_api at ``rows`` (names as str), reading only those rows,
    all columns in one pass over the cache."""
    return _values(report.take("cuda_api", columns, rows), columns)


def _values(got, columns):
    """{column: values} of frame ``got`` (names as str)."""
    return {c: got[c].astype(str).to_numpy(dtype=object)
            if isinstance(got[c].dtype, pd.CategoricalDtype) else got[c].to_numpy()
            for c in columns}


def ending_ops(ops, gaps):
    """The GPU operation that starts at each gap's end (pid, correlation_id)."""
    pid = np.zeros(len(gaps), np.int64)
    corr = np.zeros(len(gaps), np.int64)
    op_groups = groups(ops)
    # an operation without a correlation id (NULL: a minimal export) ends its gap unmatched
    starts = ops["start_ns"].to_numpy()
    corrs = ops["correlation_id"].to_numpy(np.int64, na_value=-1)
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


def previous_on_thread(tids, rows, max_back=256, starts=None):
    """Index of the previous API row on the same thread as each of ``rows`` (-1 if none): the
    host's preceding call. With ``starts`` (every call's start) and rows out of time order
    (exports of nsys 2025.6 and later), by time; else the nearest earlier row of the thread
    within ``max_back`` rows."""
    if starts is not None and len(starts) > 1 and not np.all(starts[1:] >= starts[:-1]):
        order = np.lexsort((starts, tids))  # by thread, then time
        rank = np.empty(len(order), np.int64)
        rank[order] = np.arange(len(order))
        at = rank[rows] - 1
        cand = order[np.maximum(at, 0)]
        return np.where((at >= 0) & (tids[cand] == tids[rows]), cand, -1)
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
