"""Which CPU API call launched which GPU operation: the kernel ⋈ CUDA API join.

The join is NVIDIA's (``cuda_kern_exec_sum``): same process and same correlation id. It is
done with sorted integer keys and ``searchsorted`` instead of a hash merge, reading only key
columns of the 16M-row API table first and then just the matched rows of the columns asked
for, so an 8M-kernel report joins in seconds and within the memory of its kernel columns.
Kernels replayed from a CUDA graph carry the correlation id of the ``cudaGraphLaunch`` that
replayed them, so they are attributed to it.

When an export holds two API rows for one call (2022-era CUDA-backtrace duplicates), each
kernel matches both, as in NVIDIA's script.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from nsightlab.analysis.stats import first_rows
from nsightlab.read.report import Report


def _keys(pid: pd.Series, corr: pd.Series, one_pid: bool) -> np.ndarray:
    if one_pid:  # the usual case: the correlation id alone is the key (no 64-bit copy)
        return corr.to_numpy()
    # a pid the export does not give (several processes, no globalPid) joins nothing
    return (pid.to_numpy(np.int64, na_value=-1) << 32) | corr.to_numpy(np.int64, na_value=-1)


def keys(a: pd.DataFrame, b: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Join keys (process + correlation id) for two frames with pid and correlation_id."""
    pa_, pb = a["pid"].to_numpy(), b["pid"].to_numpy()
    one = len(pa_) > 0 and len(pb) > 0 and np.all(pa_ == pa_[0]) and np.all(pb == pa_[0])
    return _keys(a["pid"], a["correlation_id"], one), _keys(b["pid"], b["correlation_id"], one)


def match(op_keys: np.ndarray, api_keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(op row, API row) index pairs with equal keys; ops without a match are left out."""
    if len(api_keys) == 0 or len(op_keys) == 0:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    if np.all(api_keys[1:] >= api_keys[:-1]):  # comparisons only: no 64-bit copies
        order, ordered = None, api_keys  # API rows are in call order almost always
    else:
        order = np.argsort(api_keys, kind="stable")
        ordered = api_keys[order]
    lo = np.searchsorted(ordered, op_keys, "left")
    if np.all(ordered[1:] > ordered[:-1]):  # one API row per key: a single search suffices
        hit = ordered[np.minimum(lo, len(ordered) - 1)] == op_keys
        ops = np.flatnonzero(hit)
        pos = lo[ops]
    else:
        hi = np.searchsorted(ordered, op_keys, "right")
        n = hi - lo
        ops = np.repeat(np.arange(len(op_keys)), n)
        first = np.repeat(lo, n)
        pos = first + np.arange(len(ops)) - np.repeat(np.cumsum(n) - n, n)
    return ops, (pos if order is None else order[pos])


def pairs(report: Report, table: str) -> tuple[np.ndarray, np.ndarray]:
    """(operation row, API row) of every operation of ``table`` and the call that issued it,
    ordered by operation then API row (``match``'s order), by ``match`` over the key columns
    (computed once per report);
    with NSIGHTLAB_ENGINE=duckdb in DuckDB (parallel, spilling; only the pairs come back). Not
    under ``auto``: on 2 cores at 8M kernels DuckDB took 2.3 s against NumPy's 0.8 s, for the
    same peak memory."""
    from nsightlab.analysis import engine

    def in_numpy():
        api = report.cuda_api(["pid", "correlation_id"])
        ops = report.table(table, ["pid", "correlation_id"])
        return match(*keys(ops, api))

    def in_duckdb(db):
        ops, api = db.view(table, rows=True), db.view("cuda_api", rows=True)
        stream = db.stream(f"SELECT o.row AS o, a.row AS a FROM {ops} o JOIN {api} a "
                           "ON o.pid = a.pid AND o.correlation_id = a.correlation_id "
                           "ORDER BY o.row, a.row", 1 << 20)
        got = [(b.column(0).to_numpy(), b.column(1).to_numpy()) for b in stream]
        if not got:
            return np.empty(0, np.int64), np.empty(0, np.int64)
        return (np.concatenate([o for o, _ in got]).astype(np.int64, copy=False),
                np.concatenate([a for _, a in got]).astype(np.int64, copy=False))

    if not report.has_rows(table) or not report.has_rows("cuda_api"):
        return np.empty(0, np.int64), np.empty(0, np.int64)
    # once per report: the budget and the launch table both join them (int32: 64 MB at 8M)
    return report.db.once(f"pairs:{table}", lambda: tuple(
        _int32(x) for x in engine.analyse(report, in_duckdb, in_numpy, auto=False)))


def want_pairs(report: Report, table: str = "kernels") -> None:
    """Say that ``pairs(report, table)`` will be asked for: the time budget's join in DuckDB,
    when it runs, then leaves them behind (``leave_pairs``) and the NumPy join is not done
    (``report`` and ``diff``: the run profile's launch table after launch_compute or the
    budget; 0.5-0.9 s of 8M kernels' keys read and matched)."""
    report.db.wanted.add(f"pairs:{table}")


def pairs_wanted(report: Report, table: str) -> bool:
    """Whether ``want_pairs`` asked for the pairs of ``table`` and none are known yet."""
    key = f"pairs:{table}"
    return key in report.db.wanted and not report.db.knows(key)


def leave_pairs(report: Report, table: str, api_of_row: np.ndarray) -> None:
    """``pairs(report, table)`` from another join: ``api_of_row`` holds each operation's
    API row (-1 for none), one entry per row of ``table``. Only for exports with one API row
    per call (``match`` pairs an operation with each of its duplicates)."""
    launched = api_of_row >= 0
    if launched.all():  # the usual case: every operation has its call (no 8M-row copies)
        got = (np.arange(len(api_of_row), dtype=np.int32), api_of_row)
    else:
        ops = np.flatnonzero(launched)
        got = (_int32(ops), api_of_row[ops])
    report.db.remember(f"pairs:{table}", got)


def launches(report: Report, table: str = "kernels",
             op_columns: tuple[str, ...] = ("start_ns", "end_ns", "device_id", "name"),
             api_columns: tuple[str, ...] = ("start_ns", "end_ns", "tid", "name"),
             where=None) -> pd.DataFrame:
    """Rows of ``table`` (kernels, memcpy or memset) joined to the API call that issued them.

    Columns: ``pid``, the ``op_columns`` as they are (add ``correlation_id`` there if you
    need it), the
    ``api_columns`` prefixed ``api_`` (``api_start_ns``, ``api_end_ns``, ``api_tid``,
    ``api_name``) and ``api_row`` (the call's row in ``cuda_api``: one ``cudaGraphLaunch``
    launches many kernels). Empty (same columns) when either table is missing.

    ``where(api_start_ns, op_rows) -> bool mask`` keeps only some launches, chosen before the
    table is built (a filtered copy of 8M launches would be ~400 MB beside the original).
    """
    cols = ["pid", *op_columns, *(f"api_{c}" for c in api_columns), "api_row"]
    if not report.has(table) or not report.has("cuda_api"):
        return pd.DataFrame({c: pd.Series(dtype="int64") for c in cols})
    op_idx, api_idx = pairs(report, table)  # first: the big API cache before the ops are held
    api_start = None  # the calls' starts, when ``where`` needed them: not read twice
    if where is not None and len(op_idx):
        api_start = report.take("cuda_api", ["start_ns"], api_idx)["start_ns"].to_numpy()
        keep = where(api_start, op_idx)
        if not keep.all():
            op_idx, api_idx, api_start = op_idx[keep], api_idx[keep], api_start[keep]
        del keep
    api_row, op_idx = _int32(api_idx), _int32(op_idx)  # 32 MB each at 8M
    del api_idx
    columns = list(dict.fromkeys(["pid", *op_columns]))
    every = (len(op_idx) < 2 or np.all(op_idx[1:] > op_idx[:-1])) and (
        len(op_idx) == 0 or op_idx[-1] == len(op_idx) - 1)  # rows 0..n-1, once each
    if every and len(op_idx) == report.row_count(table):
        out = report.table(table, columns)  # every operation matched once, in order
    else:  # only the matched rows: the whole columns and a picked copy were both held
        out = report.take(table, columns, op_idx)
    del op_idx
    out["api_row"] = api_row
    rest = [c for c in api_columns if not (c == "start_ns" and api_start is not None)]
    picked = report.take("cuda_api", rest, api_row) if rest else None  # the matched rows
    for c in api_columns:
        if c == "start_ns" and api_start is not None:
            out["api_start_ns"] = api_start
        else:
            out[f"api_{c}"] = picked[c].to_numpy() if not isinstance(
                picked[c].dtype, pd.CategoricalDtype) else picked[c]
    return out[cols]


def _int32(rows: np.ndarray) -> np.ndarray:
    """Row numbers as int32 when they fit (half the memory of match's int64)."""
    return rows.astype(np.int32) if len(rows) and rows.max() < 2**31 else rows


def first_of_call(api_row: np.ndarray) -> np.ndarray:
    """True for the first operation of each API call (count a graph launch's time once)."""
    api_row = np.asarray(api_row)
    n = len(api_row)
    if n < 2 or np.all(api_row[1:] > api_row[:-1]):
        return np.ones(n, bool)  # one operation per call, in call order
    lo, hi = int(api_row.min()), int(api_row.max())
    if lo < 0 or hi >= 4 * n or n >= 2**31:  # sparse rows: a hash of them
        return ~pd.Series(api_row).duplicated().to_numpy()
    # each call's first position (a hash of 8M rows in iteration order took 0.35 s on 2
    # cores; this ~0.05 s)
    return first_rows(api_row, hi + 1, np.int32)[api_row] == np.arange(n, dtype=np.int32)


def launches_sql(db, table: str = "kernels", op_columns: tuple[str, ...] = ("start_ns", "end_ns"),
                 api_columns: tuple[str, ...] = ("start_ns", "end_ns", "tid")) -> int:
    """``launches`` in DuckDB (``nsightlab.analysis.engine``): creates the temporary table ``lk`` with
    the same columns (``op_row`` added: the operation's row in ``table``) and returns its
    row count. Out of core: the join spills instead of holding both tables in memory. When
    the time budget ran first in the same engine, asked by ``Engine.want_launches``, its join
    has left ``lk`` already (``budget_stream``)."""
    if not db.report.has(table) or not db.report.has("cuda_api"):
        db.con.execute("CREATE OR REPLACE TABLE lk AS SELECT 0::INTEGER AS pid, "
                       "0::BIGINT AS api_row, 0::BIGINT AS op_row LIMIT 0")
        return 0
    if table == "kernels" and db.left_launches == (tuple(op_columns), tuple(api_columns)):
        return db.one("SELECT count(*) FROM lk")[0]  # left by the time budget's join
    ops, api = db.view(table, rows=True), db.view("cuda_api", rows=True)
    def side(view: str, name: str, cols: tuple[str, ...]) -> str:
        # names become ENUM codes before the join (as they are scanned): a join that carries
        # 8M strings took 9.9 s against 5.4 s on 2 cores
        got = [f"{c}::{db.enum(name, c)} AS {c}" if c == "name" else c for c in cols]
        return f"(SELECT pid, correlation_id, row, {', '.join(got)} FROM {view})"

    cols = ", ".join([*(f"o.{c} AS {c}" for c in op_columns),
                      *(f"a.{c} AS api_{c}" for c in api_columns)])
    db.left_launches, db.launched_busy = None, None  # a new launch table
    forget_once(db)
    if db.filtered.pop("lk", None):
        db.con.execute("DROP VIEW lk")
    db.con.execute(f"""CREATE OR REPLACE TABLE lk AS
        SELECT o.pid, {cols}, a.row AS api_row, o.row AS op_row
        FROM {side(ops, table, op_columns)} o JOIN {side(api, 'cuda_api', api_columns)} a
        ON o.pid = a.pid AND o.correlation_id = a.correlation_id""")
    return db.one("SELECT count(*) FROM lk")[0]


def once_sql(db) -> str:
    """SQL expression over ``lk``: true for the first operation of each API call (the NumPy
    path's ``first_of_call``); plain true when every call launched one operation (asked once
    per launch table)."""
    if db._once is None:
        know_shared_calls(db, _shared_calls(db))
    return db._once


#: ``lk`` with its ``once`` column computed, when a call launched several operations
ONCE_TABLE = "lk_once"


def once_table(db) -> tuple[str, str]:
    """(table, SQL of its ``once`` column) over which launch calls are counted once: ``lk``
    and true when every call launched one operation; else ``ONCE_TABLE`` (pid, device_id,
    api_tid, api_start_ns, api_end_ns, start_ns, end_ns, once), built here the first time it
    is asked for (a window over every launch), so launch_compute's run numbers and its NVTX
    ranges do not each compute it (graph replays x1230, 2 cores: 0.5 s a window)."""
    once = once_sql(db)
    if once == "true":
        return "lk", "true"
    there = db.one(f"SELECT count(*) FROM duckdb_tables() WHERE table_name = '{ONCE_TABLE}'")[0]
    if not there:
        _build_once(db, once)
    return ONCE_TABLE, "once"


def _build_once(db, once: str) -> None:
    db.con.execute(f"CREATE TABLE {ONCE_TABLE} AS SELECT pid, device_id, api_tid, api_start_ns, "
                   f"api_end_ns, start_ns, end_ns, {once} AS once FROM lk")


def forget_once(db) -> None:
    """A new launch table: ``once_sql`` asks again and ``ONCE_TABLE`` is gone."""
    db._once = None
    db.con.execute(f"DROP TABLE IF EXISTS {ONCE_TABLE}")


def know_shared_calls(db, shared: bool) -> None:
    """Tell ``once_sql`` whether an API call of ``lk`` launched more than one operation
    (the time budget's launch pass finds it out on the way)."""
    db._once = "(op_row = min(op_row) OVER (PARTITION BY api_row))" if shared else "true"


def _shared_calls(db) -> bool:
    """Whether any API call of ``lk`` launched more than one operation: one pass over the
    API row numbers with a bit per row (a DISTINCT or GROUP BY over 100M launches held ~1 GB
    past DuckDB's memory limit)."""
    calls = SharedCalls(db.one("SELECT coalesce(max(api_row), -1) + 1 FROM lk")[0])
    for batch in db.chunks("lk", "api_row"):
        calls.add(batch.column(0).to_numpy())
        if calls.shared:
            return True
    return False


class SharedCalls:
    """Whether any API row was added twice (a call that launched several operations), with
    a bit per row (``engine.RowBits``)."""

    def __init__(self, n: int):
        from nsightlab.analysis.engine import RowBits

        self.seen, self.shared = RowBits(n), False

    def add(self, rows: np.ndarray) -> None:
        if self.shared or not len(rows):
            return
        rows = np.sort(rows, kind="stable")  # nearly sorted: a merge of runs
        if np.any(rows[1:] == rows[:-1]) or self.seen.has(rows).any():
            self.shared = True
        else:
            self.seen.add(rows)
