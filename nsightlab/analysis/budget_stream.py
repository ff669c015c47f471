"""The time budget of a big report out of core: the same numbers as ``budget`` in memory,
from two sorted streams that DuckDB reads off the table cache (``nsightlab.analysis.engine``).

``budget`` holds every GPU operation of the run in memory (29 bytes each: 2.9 GB at 100M
kernels). Here DuckDB joins the operations to their launch calls into a scratch table and
hands them over a million at a time:

1. in launch-call order (per GPU): the end of the last GPU work each iteration launched (the
   iteration windows), and for every launch call whether the previous one started at most
   ``LAUNCH_STRETCH_NS`` before it, one bit per API row;
2. in start order (per GPU): the busy unions, part by part in priority order, and the idle gaps
   between them. A union interval can only grow while later operations start inside it, so
   every interval but the last of a batch is final: its covered time per window is added and
   the last is carried into the next batch (one interval per level). Each gap ends at an
   operation's start; that operation's launch call and its bit decide the idle cause
   (``budget_parts.idle_pieces``, shared with the in-memory path).

Memory holds the windows, the sync calls, one batch and the bits, not the run.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pandas as pd

from nsightlab.analysis.budget_parts import (
    BUSY_PARTS,
    COMM_PREFIX,
    COPY_PARTS,
    GAP_CHUNK,
    IDLE_PARTS,
    IDLE_THREADS,
    LAUNCH_STRETCH_NS,
    add_idle,
    by_sync_frame,
    copy_part,
    has_comm,
    idle_context,
    idle_pieces,
    max_end_per_iteration,
    none_last,
)
from nsightlab.analysis import completeness
from nsightlab.analysis.classify import sync_kind
from nsightlab.analysis.engine import RowBits, runs, ties_in_order
from nsightlab.analysis.launches import (
    SharedCalls,
    forget_once,
    know_shared_calls,
    leave_pairs,
    pairs_wanted,
)
from nsightlab.analysis.timeline import BusyByKey, covered, union_in_order
from nsightlab.read import trace
from nsightlab.read.reader import readers

BATCH_ROWS = 1 << 20
#: operations joined to their launch calls at once (``StreamedOps._windows``). Every window
#: scans both tables' cache files: at 8M kernels on 16 cores the join took 1.73-1.78 s in
#: windows of 2M (5 windows), 1.00-1.15 s in windows of 3M (3), 2.26 s in windows of 1M; on
#: 2 cores 2.6 s for each size (peak +80 MB with the larger windows, below the run's peak)
JOIN_ROWS = 3_000_000
#: graph executions of a graph-level trace are GPU work like kernels (they hold the replayed
#: graphs' kernels, which have no records of their own)
TABLES = ("kernels", "memcpy", "memset", "graph_execs")
_MIN, _MAX = np.iinfo(np.int64).min, np.iinfo(np.int64).max
#: operation columns ``bops`` has anyway (a launch table asking for them adds nothing)
_IN_BOPS = ("start_ns", "end_ns", "device_id")


class StreamedOps:
    """The GPU operations of a report as DuckDB's scratch table ``bops``: device_id,
    start_ns, end_ns, part (``BUSY_PARTS`` index), tbl and row (the operation's table and row:
    the in-memory order of equal starts), api_start and api_row (its launch call; NULL when
    none was recorded)."""

    def __init__(self, report, db, batch_rows: int | None = None):
        self.report, self.db, self.batch_rows = report, db, batch_rows or BATCH_ROWS
        share = self._shared_launches()
        selects = [self._select(i, t, share) for i, t in enumerate(TABLES) if report.has_rows(t)]
        self.count, self.lo, self.hi, self._by_gpu = 0, 0, 0, "device_id, "
        self._left_view = False  # the launch table left as a view of bops
        self._gpu_end, self._quick = None, None
        self._kernels, self._one_call_row = 0, True  # kernels; one API row per call
        if not selects:
            return
        counts = {t: db.one(f"SELECT count(*) FROM {db.view(t)}")[0]
                  for t in TABLES if report.has_rows(t)}  # Parquet metadata: no scan
        ops, self._kernels = sum(counts.values()), counts.get("kernels", 0)
        api = db.view("cuda_api", rows=True)
        completeness.start_cached(report)  # the API table is cached now: its facts beside the join
        if share:
            api = (f"(SELECT pid, correlation_id, start_ns, row, "
                   f"{', '.join(a for _, a in share['api'])} FROM {api})")
        extra = "".join(f", o.{c}" for c, _ in share["op"]) + "".join(
            f", a.{c} AS {c}" for c, _ in share["api"]) if share else ""
        union = " UNION ALL ".join(selects)
        db.con.execute("DROP TABLE IF EXISTS bops")
        windows = self._windows(union, ops)
        has_api = report.has_rows("cuda_api")
        with db.all_cores():
            for i, (op_where, api_where) in enumerate(windows):
                join = (f"LEFT JOIN (SELECT * FROM {api} WHERE {api_where}) a "
                        f"ON o.pid = a.pid AND o.correlation_id = a.correlation_id" if has_api
                        else "LEFT JOIN (SELECT NULL::BIGINT AS start_ns, NULL::BIGINT AS row) "
                        "a ON false")
                db.con.execute(f"""{"INSERT INTO bops" if i else "CREATE TABLE bops AS"}
                    SELECT o.device_id::INTEGER AS device_id, o.start_ns, o.end_ns, o.part,
                           o.tbl, o.row, a.start_ns AS api_start, a.row AS api_row{extra}
                    FROM (SELECT * FROM ({union}) WHERE {op_where}) o {join}""")
        self.count, lo, hi, first_gpu, last_gpu, on_gpu = db.one(
            "SELECT count(*), min(start_ns), max(end_ns), min(device_id), max(device_id), "
            "count(device_id) FROM bops")
        # one GPU (the usual run): the passes sort without the constant device key (8M
        # operations on 2 cores: 1.11-1.16 -> 0.95-1.03 s a sort)
        self._by_gpu = "" if first_gpu == last_gpu and on_gpu == self.count else "device_id, "
        trace.mark("budget: operations joined to their launch calls")
        if share:
            self._leave_launches(share, keep=self.count > ops)
        if self.count > ops:  # an export with two API rows for one call: the last one wins
            self._one_call_row = False
            db.con.execute(f"""CREATE OR REPLACE TABLE bops AS
                SELECT any_value(device_id) AS device_id, any_value(start_ns) AS start_ns,
                       {"any_value(pid) AS pid," if share else ""}
                       any_value(end_ns) AS end_ns, any_value(part) AS part, tbl, row,
                       arg_max(api_start, api_row) AS api_start, max(api_row) AS api_row
                FROM bops GROUP BY tbl, row""")
            self.count = ops
        self.lo, self.hi = lo, hi

    def _windows(self, union: str, ops: int) -> list[tuple[str, str]]:
        """The join in windows of correlation ids, up to ``JOIN_ROWS`` operations each
        (filters on the operations and on the calls): one window's hash table stays within
        DuckDB's memory limit, where one join of them all spills (8M kernels with their 16M
        calls on 2 cores: 4.5 s in one join, 1.7-2.6 s in 2-8 windows). Operations without a
        correlation id go with the last window."""
        k = -(-ops // JOIN_ROWS)
        if k < 2 or not self.report.has_rows("cuda_api"):
            return [("true", "true")]
        qs = [i / k for i in range(1, k)]
        cuts = self._cuts_from_statistics(qs)
        if cuts is None:  # a cache part without statistics: one pass over the ids
            cuts = self.db.one(f"SELECT approx_quantile(correlation_id, "
                               f"[{', '.join(map(str, qs))}]) FROM ({union})")[0]
        cuts = sorted({int(c) for c in cuts or () if c is not None})
        if not cuts:
            return [("true", "true")]
        out = []
        for lo, hi in zip([None, *cuts], [*cuts, None]):
            w = " AND ".join([*([f"correlation_id >= {lo}"] if lo is not None else []),
                              *([f"correlation_id < {hi}"] if hi is not None else [])])
            out.append((w, w))
        out[-1] = (f"{out[-1][0]} OR correlation_id IS NULL", out[-1][1])
        return out

    def _cuts_from_statistics(self, qs: list[float]) -> list[int] | None:
        """Correlation ids below which about ``qs`` of the operations lie, from the cache
        parts' row-group statistics (min, max and rows of each group, the ids taken as spread
        evenly between its min and max): no scan (approx_quantile over the operations took
        0.19 s at 8M kernels on 2 cores). None when a group has no statistics."""
        from nsightlab.read.table_cache import id_ranges

        got = [id_ranges(self.report.cache.files(t), "correlation_id")
               for t in TABLES if self.report.has_rows(t)]
        if any(g is None for g in got):
            return None
        lo, hi, n = (np.concatenate(c) for c in zip(*got)) if got else ([],) * 3
        total = n.sum() if len(n) else 0
        if not total:
            return None
        width = (hi - lo + 1).astype(np.float64)

        def below(c: int) -> float:  # ids estimated below c
            return float((n * np.clip((c - lo) / width, 0, 1)).sum())

        cuts = []
        for q in qs:
            a, b = int(lo.min()), int(hi.max()) + 1  # below(a) = 0 <= target <= below(b)
            while b - a > 1:
                m = (a + b) // 2
                a, b = (m, b) if below(m) <= q * total else (a, m)
            cuts.append(a)
        return cuts

    def _shared_launches(self) -> dict | None:
        """What the launch table asked for by ``Engine.want_launches`` takes from the join:
        {"op": [(bops column, kernels SQL)], "api": [(bops column, API SQL)]}; None when
        nothing asked or the report has no kernel launches to share."""
        wanted = self.db.wanted_launches
        if not wanted or not self.report.has_rows("kernels") or not self.report.has_rows(
                "cuda_api"):
            return None
        def col(table: str, c: str) -> str:  # names as ENUM codes (launches.launches_sql)
            return f"{c}::{self.db.enum(table, c)}" if c == "name" else c

        op_cols, api_cols = wanted
        return {"cols": op_cols,
                "op": [("pid", "pid")] + [(f"op_{c}", f"{col('kernels', c)} AS op_{c}")
                                           for c in op_cols if c not in _IN_BOPS],
                "api": [(f"api_{c}", f"{col('cuda_api', c)} AS api_{c}") for c in api_cols]}

    def _leave_launches(self, share: dict, keep: bool) -> None:
        """The launch table ``lk`` (``launches.launches_sql``'s columns) from this join: a
        view of the kernels with a launch call, or, when ``keep`` (the table is about to be
        rebuilt without duplicate calls, which the launch table keeps), a copy."""
        cols = ", ".join(["pid", *(c if c in _IN_BOPS else f"op_{c} AS {c}" for c in share["cols"]),
                          *(c for c, _ in share["api"]), "api_row", "row AS op_row"])
        where = "tbl = 0 AND api_row IS NOT NULL"
        kind = "TABLE" if keep else "VIEW"
        self.db.con.execute(f"CREATE OR REPLACE {kind} lk AS SELECT {cols} FROM bops WHERE {where}")
        if not keep:
            self.db.filtered["lk"] = ("bops", where)
            self._left_view = True
        self.db.left_launches = self.db.wanted_launches
        forget_once(self.db)

    def _select(self, i: int, table: str, share: dict | None) -> str:
        view = self.db.view(table, rows=True)
        if share and share["op"][1:]:  # the launch table's kernel columns; NULL elsewhere
            view = (f"(SELECT *, {', '.join(sql for _, sql in share['op'][1:])} FROM {view})"
                    if table == "kernels" else
                    f"(SELECT *, {', '.join(f'NULL AS {c}' for c, _ in share['op'][1:])} "
                    f"FROM {view})")
        extra = "".join(f", {c}" for c, _ in share["op"][1:]) if share else ""
        if table != "memcpy":
            part = str(BUSY_PARTS.index("memset" if table == "memset" else "kernels"))
            if table == "kernels" and has_comm(self.report):  # NCCL's kernels: communication
                part = (f"CASE WHEN starts_with(CAST(name AS VARCHAR), '{COMM_PREFIX}') THEN "
                        f"{BUSY_PARTS.index('communication')} ELSE {part} END")
            return (f"SELECT device_id, start_ns, end_ns, pid, correlation_id, "
                    f"({part})::TINYINT AS part, {i} AS tbl, row{extra} FROM {view}")
        trio = ("copy_kind", "src_kind", "dst_kind")
        kinds = self.db.frame(f"SELECT DISTINCT {', '.join(trio)} FROM {view}")
        kinds["part"] = [BUSY_PARTS.index(copy_part(*("" if pd.isna(v) else str(v) for v in r)))
                         for r in kinds[list(trio)].itertuples(index=False)]
        kinds = kinds.astype({"part": np.int8})
        self.db.con.register("copy_parts", kinds)
        on = " AND ".join(f"m.{c}::VARCHAR IS NOT DISTINCT FROM o.{c}::VARCHAR" for c in trio)
        return (f"SELECT o.device_id, o.start_ns, o.end_ns, o.pid, o.correlation_id, "
                f"m.part::TINYINT AS part, {i} AS tbl, o.row"
                f"{extra.replace(', ', ', o.')} FROM {view} o "
                f"JOIN copy_parts m ON {on}")

    def span(self) -> tuple[int, int]:
        return int(self.lo), int(self.hi)

    def syncs(self) -> pd.DataFrame:
        """Sync API calls: api_name and end_ns, sorted by end (``iterations.sync_calls``)."""
        if not self.report.has_rows("cuda_api"):
            return pd.DataFrame({"api_name": [], "end_ns": np.array([], np.int64)})
        names = [n for n in self.db.distinct("cuda_api", "name") if sync_kind(n)]
        got = self.db.rows_named("cuda_api", names, "name AS api_name, end_ns", "end_ns, row")
        return pd.DataFrame({"api_name": got["api_name"].astype(str).to_numpy(dtype=object),
                             "end_ns": got["end_ns"].to_numpy(np.int64)})

    def gpu_end(self, iters: pd.DataFrame) -> np.ndarray:
        """``budget._gpu_end_per_iteration``, from the launch-order pass."""
        self._launch_pass(iters)
        return self._gpu_end

    def _launch_pass(self, iters: pd.DataFrame | None) -> None:
        """Pass 1 (module docstring): per launch call in start order per GPU, the bit 'the
        previous distinct launch time of this GPU is at most LAUNCH_STRETCH_NS earlier'
        (``budget._idle``'s stretch test), and each iteration's GPU end."""
        if self._quick is not None:
            return
        n_api = self._n_api = self.db.one("SELECT coalesce(max(api_row), -1) + 1 FROM bops")[0]
        bits = RowBits(n_api)
        # the launch table left as a view of this join (``_leave_launches``): whether a call
        # launched several of its kernels (``launches.once_sql``), found on the way here
        calls = SharedCalls(n_api) if self._left_view else None
        rs = iters["start_ns"].to_numpy(np.int64) if iters is not None else np.empty(0, np.int64)
        re_ = iters["end_ns"].to_numpy(np.int64) if iters is not None else np.empty(0, np.int64)
        gpu_end = np.full(len(rs), -1, np.int64)
        carry: tuple | None = None  # (device, last launch time, the distinct one before it)
        stream = self.db.stream("SELECT device_id, api_start, api_row, end_ns, tbl FROM bops "
                                f"WHERE api_start IS NOT NULL ORDER BY {self._by_gpu}api_start",
                                self.batch_rows)
        for batch in stream:
            dev, t, row, e, tbl = (batch.column(i).to_numpy() for i in range(5))
            if calls is not None:
                calls.add(row[tbl == 0])
            t, e = t.astype(np.int64, copy=False), e.astype(np.int64, copy=False)
            for lo, hi in runs(dev):
                d = int(dev[lo])
                prev = _previous_distinct(t[lo:hi], carry[1:] if carry and carry[0] == d else None)
                quick = (prev != _MIN) & (t[lo:hi] - prev <= LAUNCH_STRETCH_NS)
                bits.add(row[lo:hi][quick])
                carry = (d, int(t[hi - 1]), int(prev[-1]))
            if len(rs):
                max_end_per_iteration(gpu_end, rs, re_, t, e)
        self._quick, self._gpu_end = bits, gpu_end
        trace.mark("budget: launch-order pass done")
        if calls is not None:
            know_shared_calls(self.db, calls.shared)

    def budgets(self, start: np.ndarray, end: np.ndarray, syncs: pd.DataFrame) -> dict:
        """{device: (parts per window, idle time per sync API)}, as ``budget._device_budget``,
        from the start-order pass."""
        if not self.count:
            return {}
        self._launch_pass(None)
        present = self.db.frame("SELECT DISTINCT device_id, part FROM bops")
        ctx = idle_context(start, end, syncs)
        workers = min(IDLE_THREADS, readers())
        if workers < 2:
            return self._start_pass(present, ctx, None)
        with ThreadPoolExecutor(workers) as pool:
            return self._start_pass(present, ctx, pool)

    def _start_pass(self, present: pd.DataFrame, ctx: dict, pool) -> dict:
        out, state = {}, None
        lk = self._left_view or self.db.left_launches is not None
        # GPU busy time of the launch table's kernels (those with a launch call) per (process,
        # GPU), summed on this pass: launch_compute's run summary then needs no sort of its
        # own (``Engine.launched_busy``)
        busy = BusyByKey() if lk else None
        # each kernel's API row (-1: none), when a later step asked for the pairs
        # (``launches.want_pairs``): written nearly in order, as kernels are cached by start
        pairs = np.full(self._kernels, -1, np.int32) if (
            self._kernels and self._one_call_row and self._n_api < 2**31
            and pairs_wanted(self.report, "kernels")) else None
        # sorted by (GPU, start) alone; ties put in time order here (``_tied_in_time_order``):
        # with the four tie keys in the ORDER BY, DuckDB's sort of 8M operations took 0.99 s
        # on 16 cores, with two 0.47 s
        stream = self.db.stream("SELECT device_id, start_ns, end_ns, part, api_start, "
                                f"coalesce(api_row, -1), tbl, row{', pid' if lk else ''} "
                                f"FROM bops ORDER BY {self._by_gpu}start_ns", self.batch_rows)
        for col in _tied_in_time_order(stream):
            if state is None:
                trace.mark("budget: start-order pass, first batch")
                if lk:  # the sort is done: launch_compute's statistics beside this pass
                    self.db.start_beside()
            dev, s, e, part, api, row = col[:6]
            for lo, hi in runs(dev):
                d = int(dev[lo])
                if state is None or state.device != d:
                    if state is not None:
                        out[state.device] = state.finish()
                    codes = present.loc[present["device_id"] == d, "part"].to_numpy()
                    state = _Device(d, codes, ctx, self._quick, pool)
                state.add(s[lo:hi], e[lo:hi], part[lo:hi], api[lo:hi], row[lo:hi])
                kernel = col[6][lo:hi] == 0
                if pairs is not None:
                    pairs[col[7][lo:hi][kernel]] = row[lo:hi][kernel]
                if busy is not None:
                    _add_busy(busy, d, col[8][lo:hi], kernel & (row[lo:hi] >= 0), s[lo:hi],
                              e[lo:hi])
        if state is not None:
            out[state.device] = state.finish()
        if busy is not None:
            self.db.launched_busy = busy.total
        if pairs is not None:
            leave_pairs(self.report, "kernels", pairs)
        trace.mark("budget: start-order pass done")
        return out


def _add_busy(busy: BusyByKey, device: int, pid: np.ndarray, launched: np.ndarray,
              s: np.ndarray, e: np.ndarray) -> None:
    """Add a GPU's operations in start order to the busy time of the launched kernels per
    (process, GPU). A batch of one process's launched kernels only (the usual batch) is added
    as it is: no unique, no masked copies (8M kernels on 2 cores: the start-order pass took
    1.08-1.14 s with them, 0.82-0.85 s without)."""
    if pid[0] == pid[-1] and launched.all() and (pid == pid[0]).all():
        busy.add((int(pid[0]), device), s, e)
        return
    for p in np.unique(pid[launched]):
        mine = launched & (pid == p)
        busy.add((int(p), device), s[mine], e[mine])


def _tied_in_time_order(stream):
    """The batches of a stream sorted by (GPU, start) as NumPy columns (device, start, end,
    part, api_start as float with NaN for none, api_row, tbl, row, and any more), with
    operations that start together on a GPU ordered as in memory
    (``budget._ties_in_time_order``): by launch call start (none last), end, table, row
    (``engine.ties_in_order``)."""
    def prepare(col):
        col[4] = col[4].astype(np.float64)  # NULL -> NaN
        col[1], col[2], col[5], col[7] = (col[i].astype(np.int64, copy=False) for i in (1, 2, 5, 7))
        return col

    return ties_in_order(stream, 2, ((4, none_last), 2, 6, 7), prepare)


class _Device:
    """One GPU's running budget in the start-order pass: a carried union interval per level
    (the busy parts up to each present one, in priority order; copies also alone), covered
    time per window and level, and the idle sums."""

    def __init__(self, device: int, codes: np.ndarray, ctx: dict, quick_bits, pool=None):
        self.device, self.ctx, self.bits, self.pool = device, ctx, quick_bits, pool
        self.pending: list = []  # idle attributions running on ``pool``
        self.codes = sorted(int(c) for c in codes)
        n = len(ctx["start"])
        self.level = {c: np.zeros(n, np.int64) for c in self.codes}
        self.alone = {c: np.zeros(n, np.int64) for c in self.codes if BUSY_PARTS[c] in COPY_PARTS}
        self.carry: dict[tuple, tuple[int, int]] = {}
        self.first = True
        self.idle = [({f"{p}_ns": np.zeros(n, np.int64) for p in IDLE_PARTS},
                      np.zeros(len(ctx["sync_names"]), np.int64),
                      np.zeros(len(ctx["sync_names"]), np.int64))]

    def _advance(self, key: tuple, s: np.ndarray, e: np.ndarray, into: np.ndarray):
        """Union of the carried interval and ``s``/``e`` (sorted by start): covered time of
        every final interval into ``into``; the last interval is carried. Returns the union
        and the position in ``s`` of each of its intervals' first operation (-1: the
        carried one)."""
        held = self.carry.get(key)
        if held is not None:
            s, e = np.concatenate([[held[0]], s]), np.concatenate([[held[1]], e])
        if not len(s):
            return np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, np.intp)
        us, ue, first = union_in_order(s, e)
        into += covered(us[:-1], ue[:-1], self.ctx["start"], self.ctx["end"])
        self.carry[key] = (int(us[-1]), int(ue[-1]))
        return us, ue, (first - 1 if held is not None else first)

    def add(self, s, e, part, api, row) -> None:
        top = self.codes[-1]
        for c in self.codes:
            sel = part <= c if c != top else slice(None)
            us, ue, first = self._advance(("level", c), s[sel], e[sel], self.level[c])
            if c in self.alone:
                mine = part == c
                self._advance(("alone", c), s[mine], e[mine], self.alone[c])
        # the gaps between this batch's union intervals of everything (the top level), each
        # ended by the first operation of the interval after it
        gs, ge, nxt = ue[:-1], us[1:], first[1:]
        if self.first:  # the stretch before the GPU's first operation
            gs, ge = np.concatenate([[_MIN], gs]), np.concatenate([[us[0]], ge])
            nxt = first
            self.first = False
        if len(nxt) and (nxt[0] > 0 and s[nxt[0] - 1] == ge[0] or np.any(
                s[nxt[1:] - 1] == ge[1:])):  # an earlier operation with the same start (one
            # ending before it started): the first of them, as a search finds it
            nxt = np.searchsorted(s, ge, "left")
        launch_at, r = api[nxt], row[nxt]
        quick = (r >= 0) & self.bits.has(np.maximum(r, 0))
        self._idle(gs, ge, launch_at, quick)

    def _idle(self, gs, ge, launch_at, quick) -> None:
        """Attribute gaps (``idle_pieces``), ``GAP_CHUNK`` at a time; on the pool, while the
        pass goes on (at most two chunks per thread waiting)."""
        for a in range(0, len(gs), GAP_CHUNK):
            args = (*(x[a:a + GAP_CHUNK] for x in (gs, ge, launch_at, quick)), self.ctx)
            if self.pool is None:
                self._add_idle(idle_pieces(*args))
                continue
            self.pending.append(self.pool.submit(idle_pieces, *args))
            while len(self.pending) > 2 * IDLE_THREADS:
                self._add_idle(self.pending.pop(0).result())

    def _add_idle(self, got) -> None:
        sums, idle, count = self.idle[0]
        for k, v in got[0].items():
            sums[k] += v
        idle += got[1]
        count += got[2]

    def finish(self) -> tuple[dict, pd.DataFrame]:
        for (kind, c), (cs, ce) in self.carry.items():  # the last intervals are final now
            into = self.level[c] if kind == "level" else self.alone[c]
            into += covered(np.array([cs]), np.array([ce]), self.ctx["start"], self.ctx["end"])
        last_end = self.carry[("level", self.codes[-1])][1]  # after the last operation
        self._idle(np.array([last_end]), np.array([_MAX]), np.array([np.nan]), np.array([False]))
        while self.pending:
            self._add_idle(self.pending.pop(0).result())
        parts, done = {}, np.zeros(len(self.ctx["start"]), np.int64)
        copy_total = np.zeros_like(done)
        for code, part in enumerate(BUSY_PARTS):
            if code in self.level:
                parts[f"{part}_ns"] = self.level[code] - done
                done = self.level[code]
                if code in self.alone:
                    copy_total += self.alone[code]
            else:
                parts[f"{part}_ns"] = np.zeros_like(done)
        copies = sum(parts[f"{p}_ns"] for p in COPY_PARTS)
        parts.update(add_idle(self.ctx, self.idle))
        parts["hidden_copy_ns"] = copy_total - copies
        return parts, by_sync_frame(self.ctx, self.idle)


def _previous_distinct(t: np.ndarray, carry: tuple | None) -> np.ndarray:
    """For sorted ``t``: the largest earlier value strictly below each (``_MIN`` if none);
    ``carry`` = (last value before ``t``, the distinct value before that)."""
    ext = np.concatenate([[carry[0]], t]) if carry else t
    new = np.empty(len(ext), bool)
    new[0] = True
    new[1:] = ext[1:] != ext[:-1]
    run = np.maximum.accumulate(np.where(new, np.arange(len(ext)), 0))  # each run's first index
    prev = np.where(run > 0, ext[np.maximum(run - 1, 0)], carry[1] if carry else _MIN)
    return prev[1:] if carry else prev
