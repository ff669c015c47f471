"""Big reports are analysed out of core: SQL in DuckDB over the report's Parquet table cache.

Below ``MIN_ROWS`` kernels the recipes work on NumPy arrays in memory (fast, no start-up).
From there on, steps whose memory would grow with the report run in DuckDB, within a memory
limit (``NSIGHTLAB_MEMORY_MB``, default ``MEMORY_MB``), on one thread per core for joins and
aggregations (``Engine.all_cores``) and as many as the limit allows for sorts (``threads()``),
spilling to a private folder beside the cache: kernel_sum's statistics (medians in bounded
memory, ``medians``), sync_gaps' GPU gaps and the time budget (``budget_stream``: sorted
streams, the next batch read on another thread while NumPy works, ``read_ahead``), launch_compute's
launch table, statistics and NVTX projection, and the completeness checks. On the 16-core GPU
machine at 100M kernels (commit e65ed4b, cold commands) kernel_sum's process peaked at
0.26 GB, sync_gaps' at 0.88 GB and launch_compute's at 1.03 GB (12.6 GB in memory). The NumPy path stays the reference: the tests run every recipe
both ways on real reports and compare (counts exact, sums within 1e-9 relative).

A step that runs inside another's analysis (launch_compute computes the time budget) gets the
same engine (``analyse``), so scratch tables are shared: the budget's join of operations and
calls leaves launch_compute's launch table (``Engine.want_launches``). ``Engine.release`` gives
DuckDB's buffers back before pandas work that needs none of them.

``NSIGHTLAB_ENGINE`` chooses: ``auto`` (default, as above), ``duckdb`` (on any cached
report, and also the kernel ⋈ API join of the in-memory steps) or ``numpy`` (never). The
join stays in NumPy under ``auto``: on 2 cores at 8M kernels DuckDB took 2.3 s against 0.8 s.
"""
from __future__ import annotations

import contextlib
import copy
import importlib.util
import os
import queue
import shutil
import threading

import numpy as np
import pandas as pd

from nsightlab.errors import UsageError
from nsightlab.read.frames import release_memory
from nsightlab.read.reader import readers
from nsightlab.read.report import Report
from nsightlab.read.table_cache import build_dir

#: kernels from which ``auto`` analyses in DuckDB
MIN_ROWS = 2_000_000
#: DuckDB's memory limit unless NSIGHTLAB_MEMORY_MB says otherwise (the process also holds
#: Python, pandas and pyarrow: ~200 MB, and Arrow batches). 640 -> 480 took launch_compute at
#: 8M kernels from 823 to 700 MB on 2 cores in the same time.
MEMORY_MB = 480
MB_PER_THREAD = 80
#: sort threads of the next tries when a step runs out of DuckDB's memory, before the NumPy
#: path (syncy x2180 on 16 cores: sync_gaps' sort of 8M operations ran out with 6 threads,
#: and the NumPy path it fell back to peaked at 1.6 GB; the TensorRT shape, realcugan x530,
#: ran out with 2 as well: 1.43-1.48 GB in the NumPy path)
RETRY_THREADS = (2, 1)
CHOICES = ("auto", "duckdb", "numpy")


#: the engine each report's analysis runs in, while it runs ((id(report), thread) -> Engine):
#: a step that calls another (launch_compute calls the budget) shares its scratch tables
_OPEN: dict[tuple[int, int], "Engine"] = {}


class Unavailable(Exception):
    """The engine cannot see the report's tables (its cache turned out unwritable)."""


def choice() -> str:
    """NSIGHTLAB_ENGINE, checked (a typo is an error, not a silent default)."""
    value = os.environ.get("NSIGHTLAB_ENGINE", "auto").strip().lower() or "auto"
    if value not in CHOICES:
        raise UsageError(f"NSIGHTLAB_ENGINE={value!r} is not an analysis engine: set it to one "
                         f"of {', '.join(CHOICES)} (or unset it)")
    return value


def active(report: Report, auto: bool = True) -> bool:
    """Whether ``report``'s analyses run in DuckDB (see the module docstring); ``auto=False``:
    only when NSIGHTLAB_ENGINE=duckdb asks for it (a recipe whose SQL path measured slower)."""
    how = choice()
    if how == "numpy" or report.cache is None or not report.has("kernels"):
        return False
    if importlib.util.find_spec("duckdb") is None:  # an install without it: in memory
        return False
    if not (how == "duckdb" or (auto and _kernels_at_least(report, MIN_ROWS))):
        return False
    memory_mb()  # a mistyped limit is an error before any work, not a silent default
    return True


def _kernels_at_least(report: Report, n: int) -> bool:
    """Whether the kernel table spans ``n`` rowids (two b-tree lookups; a count(*) walks
    the whole table, seconds at 100M kernels, and this is asked once per step)."""
    source = report.spec("kernels").source
    if source in report.db.views:
        return report.row_count("kernels") >= n
    lo, hi = report.db.rowid_bounds(source)
    return lo is not None and hi - lo + 1 >= n


def analyse(report: Report, in_duckdb, in_numpy, auto: bool = True):
    """``in_duckdb(engine)`` when ``report`` is analysed in DuckDB (``active``), else
    ``in_numpy()``. A step that outgrows DuckDB's memory limit (it spills most, not
    everything) is not an error for the user: a note says so and the NumPy path answers."""
    if not active(report, auto):
        return in_numpy()
    import duckdb

    key = (id(report), threading.get_ident())  # a connection serves one thread at a time
    open_ = _OPEN.get(key)
    if open_ is not None:  # a step inside another's analysis: its engine, its scratch tables
        return in_duckdb(open_)
    for sort_threads in sorted({threads(), *(min(threads(), n) for n in RETRY_THREADS)},
                               reverse=True):
        try:
            with Engine(report, sort_threads) as db:
                _OPEN[key] = db
                try:
                    return in_duckdb(db)
                finally:
                    del _OPEN[key]
        except (Unavailable, OSError):  # no cache to scan after all (unwritable): in memory
            return in_numpy()
        except duckdb.OutOfMemoryException:
            # a sort's per-thread buffers: again with fewer threads, what the failed try
            # freed handed back to the system first (cheap; no effect on the peak measured)
            release_memory()
            continue
    report.note(f"{report.path.name}: a step needed more than DuckDB's {memory_mb()} MB; "
                "analysing in memory instead (set NSIGHTLAB_MEMORY_MB higher to stay out "
                "of core)")
    return in_numpy()


def memory_mb() -> int:
    """DuckDB's memory limit in MB: NSIGHTLAB_MEMORY_MB (at least 100), checked, or
    ``MEMORY_MB``."""
    value = os.environ.get("NSIGHTLAB_MEMORY_MB", "").strip()
    if not value:
        return MEMORY_MB
    if not value.isdigit() or int(value) < 100:
        raise UsageError(f"NSIGHTLAB_MEMORY_MB={value!r} is not a memory limit: set it to a "
                         f"whole number of megabytes, at least 100 (default {MEMORY_MB}), or "
                         "unset it")
    return int(value)


def threads() -> int:
    """DuckDB threads for sorts: one per core (``nsightlab.read.parallel.readers()``), but at least
    ``MB_PER_THREAD`` of the memory limit each (every thread keeps its own buffers: 16
    threads in 640 MB ran out of memory in a sort that 8 finish)."""
    return max(1, min(readers(), memory_mb() // MB_PER_THREAD))


def all_threads() -> int:
    """DuckDB threads for joins and aggregations that ``Engine.all_cores`` marks: one per
    core; their hash tables spill within the limit where a sort's per-thread buffers do not.
    (At 8M kernels on 16 cores, 16 threads for every query took launch_compute from 5.4 to
    4.7 s but the process to 1.08 GB, in sync_gaps' and the budget's sorts; so only the
    joins and aggregations get them.)"""
    return max(threads(), readers())


class Engine:
    """A DuckDB connection with the report's cached tables as views.

    ``view(name)`` builds the table's cache entry when needed (SQLite read by the reader
    processes) and names it in SQL; ``rows=True`` adds ``row``, the row's position in the
    table (the index ``Report.take`` and the NumPy path use)."""

    def __init__(self, report: Report, sort_threads: int | None = None):
        import duckdb

        self.report = report
        #: threads of every query but those in ``all_cores`` (the sorts)
        self.threads = sort_threads or threads()
        report.cache.root.mkdir(parents=True, exist_ok=True)
        self.spill = build_dir(report.cache.root, "duckdb")  # a killed run's: removed next run
        # a database file, not memory: tables built here (the launch table) can then leave
        # the memory limit for the disk; in an in-memory database they cannot
        self.con = duckdb.connect(str(self.spill / "scratch.duckdb"), config={
            "threads": self.threads, "memory_limit": f"{memory_mb()}MB",
            "temp_directory": str(self.spill), "preserve_insertion_order": False})
        self.con.execute("SET enable_progress_bar = false")  # it prints to stdout: our answers
        # freed blocks go back sooner (default: 128 MB cached across DuckDB's threads), so
        # the pandas work that follows a query does not stack on DuckDB's leftovers
        self.con.execute("SET allocator_flush_threshold = '16MB'")
        self._views: set[str] = set()  # this connection's temporary views
        #: what this database holds for every connection (ENUM types, tables built by
        #: ``rows_inside``): one set, shared with ``beside_start_pass``'s connection
        self._kept: set[str] = set()
        self._fixed = False  # a second connection's: the database's settings are not its own
        self._beside = None  # the work ``beside_start_pass`` registered, until it starts
        self._beside_run = None  # (thread, its outcome) once it started
        self._once: str | None = None  # launches.once_sql's answer for the launch table
        #: the launch table's columns a later step will ask for (``want_launches``), and
        #: views that ``chunks`` reads off a table by a filter: {view: (table, where)}
        self.wanted_launches: tuple | None = None
        self.left_launches: tuple | None = None  # the columns of an ``lk`` left that way
        self.filtered: dict[str, tuple[str, str]] = {}
        #: GPU busy time of the launch table's kernels per (pid, device), when the budget's
        #: start-order pass went over the join that left the launch table
        self.launched_busy: dict[tuple[int, int], int] | None = None

    def want_launches(self, op_columns: tuple[str, ...], api_columns: tuple[str, ...]) -> None:
        """Say that ``launches.launches_sql`` will follow with these columns: the time
        budget's join of the same operations and calls (``budget_stream``) then carries them
        and leaves the launch table ``lk`` as a view of its own (one join, not two)."""
        self.wanted_launches = (tuple(op_columns), tuple(api_columns))

    def view(self, name: str, rows: bool = False) -> str:
        """SQL name of table ``name`` (an empty view when the report lacks it)."""
        key = f"{name}_rows" if rows else name
        if key in self._views:
            return key
        report = self.report
        spec = report.spec(name)
        files = None
        if report.has_rows(name):
            report.prefetch([name])
            files = report.cache.files(name) if report.cache is not None else None
            if files is None:  # the cache turned out unwritable: the tables are not there
                raise Unavailable(f"no cache entry for {name}")
        if files is None:  # the report lacks the table: the contract's empty table
            empty = spec.schema.empty_table()
            self.con.register(f"_{key}", empty)
            sql = f"SELECT *{', 0::BIGINT AS row' if rows else ''} FROM _{key}"
        else:
            listed = ", ".join("'" + str(f).replace("'", "''") + "'" for f in files)
            sql = f"SELECT * FROM read_parquet([{listed}])"
            if rows:  # one scan of all parts; a part's first row is the rows before it
                parts = report.cache.meta(name).parts
                starts = np.concatenate([[0], np.cumsum([p.rows for p in parts])])
                first = ", ".join(str(int(x)) for x in starts[:-1])
                sql = (f"SELECT * EXCLUDE (file_row_number), file_row_number + "
                       f"([{first}]::BIGINT[])[file_index::BIGINT + 1] AS row "
                       f"FROM read_parquet([{listed}], file_row_number = true)")
        self.con.execute(f"CREATE OR REPLACE TEMP VIEW {key} AS {sql}")
        self._views.add(key)
        return key

    def enum(self, table: str, column: str) -> str:
        """A DuckDB ENUM type of the distinct values of a text column: cast to it, 8M kernel
        names are 8M small integers in a join or temporary table, not 8M copied strings."""
        key = f"enum_{table}_{column}"
        if key not in self._kept:
            self.con.execute(f"CREATE TYPE {key} AS ENUM (SELECT DISTINCT {column} FROM "
                             f"{self.view(table)} WHERE {column} IS NOT NULL)")
            self._kept.add(key)
        return key

    def rows_inside(self, table: str, windows: pd.DataFrame, columns: list[str]) -> str:
        """A table, built once in this engine's database (it can spill), of ``columns`` of the
        rows of ``table`` (with ``row``) whose ``start_ns`` lies in one of ``windows``
        (``start_ns`` <= t < ``end_ns`` of the window that starts last at or before t).
        A text ``name`` column is stored as the table's ENUM (``enum``).

        The test is a binary search in SQL (``inside_sql``), vectorised on every core. It
        was a Python function (a search per batch of 2,048 rows in NumPy, under the GIL:
        0.66 s for 8M kernels on 2 cores, 1.2-1.8 s on 16; the SQL search 0.15 s on 2
        cores); an ASOF join sorts the rows with their payload (2.4-2.8 s on 2 cores)."""
        n = len(self._kept)
        cols = ", ".join(f"name::{self.enum(table, 'name')} AS name" if c == "name" else c
                         for c in columns)
        key = f"inside_{table}_{n}"
        inside = inside_sql(self.con, f"windows_{n}", self.view(table, rows=True), windows)
        with self.all_cores():  # a filter and a copy: no sort
            self.con.execute(f"CREATE TABLE {key} AS SELECT {cols} FROM ({inside})")
        self._kept.add(key)
        return key

    def distinct(self, table: str, column: str) -> list[str]:
        """The distinct non-null values of a text column (API names, kernel names)."""
        got = self.con.execute(f"SELECT DISTINCT {column} FROM {self.view(table)} "
                               f"WHERE {column} IS NOT NULL").fetchall()
        return [str(v) for (v,) in got]

    def rows_named(self, table: str, names: list[str], columns: str, order: str) -> pd.DataFrame:
        """``columns`` of the rows of ``table`` whose name is one of ``names`` (a few API
        names: the sync calls), ordered by ``order``; ``row`` is the row's position."""
        wanted = pd.DataFrame({"name": names}, dtype=object)
        return self.frame(f"SELECT {columns} FROM {self.view(table, rows=True)} "
                          f"WHERE name IN (SELECT name FROM wanted) ORDER BY {order}",
                          wanted=wanted)

    def frame(self, sql: str, **tables: pd.DataFrame) -> pd.DataFrame:
        """Result of ``sql`` as a DataFrame; ``tables`` are registered under their names."""
        return self._run(sql, tables).df()

    def one(self, sql: str) -> tuple:
        """The single row of ``sql`` (fully fetched: a half-read result blocks the connection)."""
        return self.con.execute(sql).fetchall()[0]

    def arrays(self, sql: str, **tables: pd.DataFrame) -> dict[str, np.ndarray]:
        """Result of ``sql`` as NumPy arrays by column (no DataFrame in between)."""
        return {k: np.asarray(v) for k, v in self._run(sql, tables).fetchnumpy().items()}

    def _run(self, sql: str, tables: dict[str, pd.DataFrame]):
        for k, v in tables.items():
            self.con.register(k, v)
        return self.con.execute(sql)

    def stream(self, sql: str, batch_rows: int):
        """Result of ``sql`` as Arrow record batches of up to ``batch_rows`` (DuckDB hands out
        at most 122,880 at a time), produced as they are read (a sorted result comes out of
        DuckDB's out-of-core sort, not from memory), the next one while the caller works on
        this one (``read_ahead``). The caller runs no other query until it is done."""
        return read_ahead(self.con.sql(sql).to_arrow_reader(batch_rows))

    def chunks(self, table: str, columns: str, rows: int = 1 << 20):
        """``columns`` of every row of ``table`` (one built in this engine's database, or a
        view of one in ``filtered``), as Arrow tables of up to ``rows`` rows (fewer through a
        view's filter), by rowid range: DuckDB's own streams
        (``stream``) buffer an unordered result whole (40M launches: +1.1 GB)."""
        table, where = self.filtered.get(table, (table, "true"))
        n = self.one(f"SELECT coalesce(max(rowid), -1) + 1 FROM {table}")[0]
        for a in range(0, n, rows):
            got = self.con.sql(f"SELECT {columns} FROM {table} WHERE rowid >= {a} "
                               f"AND rowid < {a + rows} AND ({where})").to_arrow_table()
            if got.num_rows:
                yield got

    def beside_start_pass(self, work) -> None:
        """Run ``work(engine)`` beside the time budget's start-order pass, on a second
        connection of this database, when that pass starts on a launch table the budget's
        join left (``want_launches``; ``budget_stream``): the pass is mostly single-threaded
        NumPy over a sorted stream, so DuckDB's threads are free for launch_compute's
        statistics of that table. ``beside_result`` collects the outcome. The second
        connection sees this database's tables and types, not this connection's temporary
        views (``view`` makes its own), and changes no database setting (threads, memory
        limit): ``all_cores`` and ``release`` do nothing there."""
        self._beside = work

    def start_beside(self) -> None:
        """Start the work ``beside_start_pass`` registered, if any (``budget_stream``, once
        the sort of the start-order pass is done and the launch table is left)."""
        work, self._beside = self._beside, None
        if work is None:
            return
        side = copy.copy(self)
        side.con, side._views, side._fixed = self.con.cursor(), set(), True
        side._beside = side._beside_run = None
        outcome: list = []

        def run() -> None:
            try:
                outcome.append((True, work(side)))
            except BaseException as e:  # raised again in the caller's thread
                outcome.append((False, e))
            finally:
                side.con.close()

        thread = threading.Thread(target=run, name="nsightlab-beside", daemon=True)
        self._beside_run = (thread, outcome)
        thread.start()

    def beside_result(self) -> tuple[bool, object]:
        """(True, what the work returned) once the work ``beside_start_pass`` registered
        has ended; (False, None) when it never started (the budget came from the result
        store, or its join left no launch table): the caller then runs it itself. An
        exception of the work is raised here."""
        self._beside = None
        if self._beside_run is None:
            return False, None
        thread, outcome = self._beside_run
        thread.join()
        self._beside_run = None
        ok, value = outcome[0]
        if not ok:
            raise value
        return True, value

    @contextlib.contextmanager
    def all_cores(self, really: bool = True):
        """Run the queries inside on ``all_threads()`` (``really``): joins and aggregations
        only (no ORDER BY or window over many rows), whose memory stays within the limit
        however many threads."""
        more = all_threads() if really and not self._fixed else self.threads
        if more != self.threads:
            self.con.execute(f"SET threads = {more}")
        try:
            yield
        finally:
            if more != self.threads:
                self.con.execute(f"SET threads = {self.threads}")

    def release(self) -> None:
        """Give back what DuckDB keeps after its queries (buffers of finished results, up to
        its limit) before Python work that needs none of it: the limit lowered, then restored
        (after sync_gaps' sorted stream of 3.7M operations: 693 -> 236 MB). Not while a
        second connection works (``beside_start_pass``): the limit is the database's."""
        if self._fixed or self._beside_run is not None:
            return
        self.con.execute("SET memory_limit = '16MB'")
        self.con.execute(f"SET memory_limit = '{memory_mb()}MB'")

    def close(self) -> None:
        """Close the connection and remove the scratch folder. The scratch tables are dropped
        first: closing a database file checkpoints what it holds (0.3-0.5 s after
        launch_compute at 8M kernels on the GPU machine; 0.03 s once dropped)."""
        import duckdb

        self._beside = None
        if self._beside_run is not None:  # its connection closes with this one: let it end
            self._beside_run[0].join()
            self._beside_run = None
        try:
            for (name,) in self.con.execute("SELECT table_name FROM duckdb_tables() "
                                            "WHERE NOT temporary").fetchall():
                self.con.execute(f'DROP TABLE IF EXISTS "{name}" CASCADE')
        except duckdb.Error:
            pass  # a connection in a failed state: closing it is all that is left
        self.con.close()
        shutil.rmtree(self.spill, ignore_errors=True)
        # what the queries' threads freed, back to the system before the next step: report
        # went on from kernel_sum with 656 MB held into sync_gaps' sort (peak 938 MB, 2 cores)
        release_memory()

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def read_ahead(batches, depth: int = 2):
    """The items of ``batches``, read by another thread up to ``depth`` ahead: DuckDB
    produces the next batch of a stream (without the GIL) while NumPy works on this one."""
    yield from _drained(*_pumped(batches, depth))


def read_ahead_now(batches, depth: int = 2):
    """``read_ahead`` with its thread started now, not at the first item: reading goes on
    while the caller does other work first (sync_gaps' cache parts under its SQL for the sync
    calls). The caller iterates the result to its end or closes it."""
    return _drained(*_pumped(batches, depth))


def _pumped(batches, depth: int):
    """(queue, stop flag, thread): a started thread putting the items of ``batches`` on the
    queue, then ``StopIteration()`` or the exception that ended them."""
    ahead: queue.Queue = queue.Queue(depth)
    stop = threading.Event()

    def pump() -> None:
        try:
            for item in batches:
                if stop.is_set():
                    return
                ahead.put(item)
            ahead.put(StopIteration())
        except BaseException as e:  # handed to the reader, raised there
            ahead.put(e)

    thread = threading.Thread(target=pump, daemon=True, name="nsightlab-read-ahead")
    thread.start()
    return ahead, stop, thread


def _drained(ahead: queue.Queue, stop: threading.Event, thread: threading.Thread):
    """The items ``_pumped`` puts, in order; an exception it put is raised here."""
    try:
        while not isinstance(item := ahead.get(), BaseException):
            yield item
        if not isinstance(item, StopIteration):
            raise item
    finally:
        stop.set()
        while thread.is_alive():  # a caller that stopped early: let the pump see the flag
            try:
                ahead.get(timeout=0.05)
            except queue.Empty:
                pass


#: distinct (key, value) pairs ``medians`` holds at most (~60 MB); past that it sorts instead
MAX_PAIRS = 2_000_000


def medians(db: Engine, source: str, keys: str | list[str], value: str,
            tables: dict | None = None) -> pd.DataFrame:
    """Exact median of ``value`` per ``keys`` over the SQL relation ``source`` (nsys's: the
    mean of the two middle values for an even count), in bounded memory. DuckDB's median
    keeps every value of a group (40M kernels ran it out of memory), so this counts each
    distinct (key, value) in a spilling hash aggregate and reads the middle ranks off those
    counts; values too scattered for that (an estimated ``MAX_PAIRS`` distinct pairs or more:
    queue times in nanoseconds) are read in sorted order instead, one column at a time.
    Columns: the keys, ``med`` (groups without values left out)."""
    keys = [keys] if isinstance(keys, str) else list(keys)
    k = ", ".join(keys)
    for name, t in (tables or {}).items():
        db.con.register(name, t)
    # how many distinct pairs, estimated in one pass of fixed memory (HyperLogLog): the
    # counts below come back whole, so they must be few
    pairs = db.one(f"SELECT approx_count_distinct(hash({k}, {value})) FROM {source} "
                   f"WHERE {value} IS NOT NULL")[0]
    if pairs > MAX_PAIRS:
        return _medians_sorted(db, source, keys, value)
    h = db.frame(f"SELECT {k}, {value} AS v, count(*) AS c FROM {source} "
                 f"WHERE {value} IS NOT NULL GROUP BY ALL")
    if not len(h):
        return pd.DataFrame({**{c: pd.Series(dtype=object) for c in keys},
                             "med": pd.Series(dtype=np.float64)})
    codes = h.groupby(keys, sort=False, dropna=False, observed=True).ngroup().to_numpy()
    v, c = h["v"].to_numpy(np.float64), h["c"].to_numpy(np.int64)
    order = np.lexsort((v, codes))
    codes, v, c = codes[order], v[order], c[order]
    starts = np.flatnonzero(np.concatenate([[True], codes[1:] != codes[:-1]]))
    ends = np.append(starts[1:], len(codes))
    cum = np.cumsum(c)  # rows up to and including each (key, value), over all keys
    before = np.concatenate([[0], cum[ends[:-1] - 1]])  # rows of earlier keys
    n = cum[ends - 1] - before
    out = np.empty(len(starts))
    for i, (lo, hi) in enumerate(zip(starts, ends)):
        seg = cum[lo:hi] - before[i]  # ranks (1-based) reached by each value of the key
        a = v[lo + np.searchsorted(seg, (n[i] - 1) // 2 + 1)]
        b = v[lo + np.searchsorted(seg, n[i] // 2 + 1)]
        out[i] = (a + b) / 2
    found = h.iloc[order[starts]][keys].reset_index(drop=True)
    found["med"] = out
    return found


def describe_sql(db: Engine, source: str, keys: list[str], value: str) -> pd.DataFrame:
    """``stats.describe`` in DuckDB over the relation ``source`` (with a ``row`` column): per
    group of ``keys``, in order of first appearance, count, total_ns, avg_ns, med_ns, min_ns,
    max_ns and stddev_ns of ``value`` (nsys's statistics: the sample standard deviation, 0
    for one value); medians by ``medians_at``, keys as categories."""
    k = ", ".join(keys)
    with db.all_cores():
        out = db.frame(f"""
            SELECT {k}, count(*) AS count, sum({value})::BIGINT AS total_ns,
                   avg({value}) AS avg_ns, min({value}) AS min_ns, max({value}) AS max_ns,
                   coalesce(stddev_samp({value}), 0) AS stddev_ns
            FROM {source} GROUP BY {k} ORDER BY min(row)""")
    out["med_ns"] = medians_at(db, out, source, keys, value)
    for c in keys:
        out[c] = out[c].astype("category")
    columns = [*keys, "count", "total_ns", "avg_ns", "med_ns", "min_ns", "max_ns", "stddev_ns"]
    return out[columns].astype({"count": np.int64, "total_ns": np.int64, "min_ns": np.int64,
                                "max_ns": np.int64})


def medians_at(db: Engine, rows: pd.DataFrame, source: str, keys: str | list[str], value: str,
               tables: dict | None = None) -> np.ndarray:
    """``medians`` in the order of ``rows`` (found by its ``keys`` columns; NaN where a row's
    group has no values): the median column of a summary built by another query."""
    keys = [keys] if isinstance(keys, str) else list(keys)
    med = medians(db, source, keys, value, tables)
    if len(keys) == 1:
        return med.set_index(keys[0])["med"].reindex(rows[keys[0]].to_numpy()).to_numpy()
    return med.set_index(keys)["med"].reindex(pd.MultiIndex.from_frame(rows[keys])).to_numpy()


def _medians_sorted(db: Engine, source: str, keys: list[str], value: str) -> pd.DataFrame:
    """``medians`` from the values in (keys, value) order, streamed: group sizes first (in
    the same key order), then the two middle ranks of every group picked as they pass."""
    k = ", ".join(keys)
    counts = db.frame(f"SELECT {k}, count(*) AS n FROM {source} WHERE {value} IS NOT NULL "
                      f"GROUP BY ALL ORDER BY {k}")
    n = counts.pop("n").to_numpy(np.int64)
    first = np.concatenate([[0], np.cumsum(n)[:-1]])
    want = np.concatenate([first + (n - 1) // 2, first + n // 2])  # global ranks, 0-based
    order = np.argsort(want, kind="stable")
    got, pos, j = np.empty(len(want)), 0, 0
    for batch in db.stream(f"SELECT {value} FROM {source} WHERE {value} IS NOT NULL "
                           f"ORDER BY {k}, {value}", 1 << 20):
        v = batch.column(0).to_numpy().astype(np.float64)
        hi = j + int(np.searchsorted(want[order[j:]], pos + len(v), "left"))
        got[order[j:hi]] = v[want[order[j:hi]] - pos]
        pos, j = pos + len(v), hi
    counts["med"] = (got[:len(n)] + got[len(n):]) / 2
    return counts


def inside_sql(con, name: str, source: str, windows: pd.DataFrame) -> str:
    """SQL: the rows of ``source`` whose ``start_ns`` lies in [start_ns, end_ns) of the window
    of ``windows`` that starts last at or before it. The windows' starts and ends are two
    lists in a one-row table ``name``; each row finds its window by binary lifting (one step
    per bit of the window count, each a list lookup: vectorised, no join, no sort)."""
    import pyarrow as pa

    order = np.argsort(windows["start_ns"].to_numpy(np.int64), kind="stable")
    ws = windows["start_ns"].to_numpy(np.int64)[order]
    we = windows["end_ns"].to_numpy(np.int64)[order]
    con.register(f"_{name}", pa.table({"ws": pa.array([ws], pa.list_(pa.int64())),
                                       "we": pa.array([we], pa.list_(pa.int64()))}))
    con.execute(f"CREATE OR REPLACE TEMP TABLE {name} AS SELECT * FROM _{name}")
    con.unregister(f"_{name}")
    step = 1 << max(len(ws).bit_length() - 1, 0)
    sql = f"SELECT s.*, 0 AS lo_, w.ws AS ws_, w.we AS we_ FROM {source} s, {name} w"
    while step:  # lo_: how many window starts lie at or before start_ns (1-based list index)
        sql = (f"SELECT * REPLACE (lo_ + CASE WHEN lo_ + {step} <= {len(ws)} AND "
               f"start_ns >= ws_[lo_ + {step}] THEN {step} ELSE 0 END AS lo_) FROM ({sql})")
        step //= 2
    return (f"SELECT * EXCLUDE (lo_, ws_, we_) FROM ({sql}) "
            f"WHERE lo_ >= 1 AND start_ns < we_[lo_]")


def ties_in_order(batches, keys: int, tie_by: tuple, prepare=None):
    """The batches of a stream sorted by its first ``keys`` columns only, as lists of NumPy
    columns, with the rows tied on all of those keys put in order of ``tie_by`` (column
    indices, or (index, function) pairs whose function turns the tied rows' values of that
    column into a sort key; most significant first).

    A sort with the tie-breaking columns in its ORDER BY costs DuckDB more than this (the
    budget's start-order sort of 8M operations on 16 cores: 0.99 s with four tie keys, 0.47 s
    without). The rows tied with a batch's last row are held back for the next batch, so a
    tie is never split between two. ``prepare(columns)`` converts a batch's columns first."""
    held = None
    for batch in batches:
        if not batch.num_rows:
            continue
        col = [batch.column(i).to_numpy(zero_copy_only=False) for i in range(batch.num_columns)]
        if prepare is not None:
            col = prepare(col)
        if held is not None:
            if all(h[-1] == c[0] for h, c in zip(held[:keys], col[:keys])):  # the tie goes on
                col = [np.concatenate([h, c]) for h, c in zip(held, col)]
            else:  # the held rows are a whole tie: not copied in front of this batch
                yield sort_ties(held, keys, tie_by)
        other = np.zeros(len(col[0]), bool)
        for c in col[:keys]:
            other |= c != c[-1]
        found = np.flatnonzero(other)
        tail = int(found[-1]) + 1 if len(found) else 0
        held = [c[tail:] for c in col]
        if tail:
            yield sort_ties([c[:tail] for c in col], keys, tie_by)
    if held is not None and len(held[0]):
        yield sort_ties(held, keys, tie_by)


def sort_ties(col: list, keys: int, tie_by: tuple) -> list:
    """``col`` (columns sorted by the first ``keys``) with each run of rows tied on all of
    them ordered by ``tie_by`` (as ``ties_in_order``); rows not tied keep their place, and
    rows equal in ``tie_by`` too keep their order. Only the tied rows are sorted."""
    same = np.ones(max(len(col[0]) - 1, 0), bool)
    for c in col[:keys]:
        same &= c[1:] == c[:-1]
    tied = np.flatnonzero(same)
    if not len(tied):
        return col
    rows = np.unique(np.concatenate([tied, tied + 1]))
    by = [col[t][rows] if isinstance(t, int) else t[1](col[t[0]][rows]) for t in tie_by]
    sub = np.lexsort([*by[::-1], *(c[rows] for c in col[keys - 1::-1])])
    order = np.arange(len(col[0]))
    order[rows] = rows[sub]
    return [c[order] for c in col]


class OutOfOrder(Exception):
    """A cached table ``in_start_order`` read turned out not to be in start order."""


def in_start_order(report: Report, tables: tuple[str, ...], columns: list[str]):
    """The rows of the cached ``tables`` (each must be in start order: exports before nsys
    2025.6) merged into (start, table, row) order without a sort, as lists of NumPy columns
    (``columns``, which hold ``start_ns``, then the table's index in ``tables`` as int8),
    a cache part or so at a time: the order DuckDB's sort of their union by start gives
    with ties by (table, row) (``ties_in_order``), at the cost of reading the parts.
    Raises ``OutOfOrder`` as soon as a table's rows go back in time (the caller sorts)."""
    from nsightlab.read.table_cache import part_tables

    at = columns.index("start_ns")
    streams = []
    for t in tables:
        report.prefetch([t])
        files = report.cache.files(t) if report.cache is not None else None
        if files is None:
            raise OutOfOrder(t)  # not cached: the caller's SQL path reads it
        if report.cache_meta(t).in_start_order is False:  # known before any merging
            raise OutOfOrder(t)
        streams.append(part_tables(files, columns))
    return _merged(streams, at)


def _merged(streams: list, at: int):
    """``in_start_order``'s merge of ``streams`` (each yields lists of columns in start order,
    column ``at`` the start). Rows starting before the smallest last start among the buffers
    of the streams not yet done are final: no later row of any stream starts before it."""
    from nsightlab.read.tables import breaks_order

    k = len(streams)
    buf: list = [None] * k
    last: list = [None] * k
    done = [False] * k

    def pull(i: int) -> None:
        for cols in streams[i]:
            s = cols[at]
            if not len(s):
                continue
            if breaks_order(s, last[i]):
                raise OutOfOrder(i)
            last[i] = s[-1]
            buf[i] = cols if buf[i] is None else [np.concatenate([a, b])
                                                   for a, b in zip(buf[i], cols)]
            return
        done[i] = True

    for i in range(k):
        pull(i)
    while True:
        live = [i for i in range(k) if not done[i]]
        horizon = min((buf[i][at][-1] for i in live), default=None)
        cuts = [0 if buf[i] is None else len(buf[i][at]) if horizon is None
                else int(np.searchsorted(buf[i][at], horizon, "left")) for i in range(k)]
        if not any(cuts):
            if horizon is None:
                return
            for i in live:  # every row left starts at the horizon or later: read on
                if buf[i][at][-1] == horizon:
                    pull(i)
            continue
        pieces = [(i, [c[:cuts[i]] for c in buf[i]]) for i in range(k) if cuts[i]]
        for i in range(k):
            if cuts[i]:
                rest = [c[cuts[i]:] for c in buf[i]]
                buf[i] = rest if len(rest[at]) else None
                if buf[i] is None and not done[i]:
                    pull(i)
        if len(pieces) == 1:
            i, cols = pieces[0]
            yield [*cols, np.full(len(cols[at]), i, np.int8)]
            continue
        cols = [np.concatenate(c) for c in zip(*(p for _, p in pieces))]
        tbl = np.concatenate([np.full(len(p[at]), i, np.int8) for i, p in pieces])
        order = np.argsort(cols[at], kind="stable")  # ties: by table, then row
        yield [c[order] for c in [*cols, tbl]]


def runs(*keys: np.ndarray):
    """(lo, hi) of each run of equal keys in a batch of a stream sorted by ``keys`` (the
    groups of that batch: one GPU, one process...), in order."""
    change = np.zeros(max(len(keys[0]) - 1, 0), bool)
    for k in keys:
        change |= k[1:] != k[:-1]
    cut = np.flatnonzero(change) + 1
    return zip(np.concatenate([[0], cut]), np.concatenate([cut, [len(keys[0])]]))


class RowBits:
    """A set of row numbers in [0, n) as one bit each (200M API rows: 25 MB): what a stream
    remembers about rows it has passed."""

    def __init__(self, n: int):
        self.bits = np.zeros((max(n, 0) + 7) // 8, np.uint8)

    def add(self, rows: np.ndarray) -> None:
        if not len(rows):
            return
        rows = rows.astype(np.int64, copy=False)
        lo, hi = int(rows.min()) & ~7, int(rows.max()) + 1
        if hi - lo <= 64 * len(rows):  # dense (a batch of a stream): a mask of the span,
            mask = np.zeros(hi - lo, bool)  # packed into bytes (6x faster than by sorting)
            mask[rows - lo] = True
            packed = np.packbits(mask, bitorder="little")
            self.bits[lo >> 3:(lo >> 3) + len(packed)] |= packed
            return
        rows = np.sort(rows)
        byte = rows >> 3
        mask = np.left_shift(1, rows & 7).astype(np.uint8)
        first = np.flatnonzero(np.concatenate([[True], byte[1:] != byte[:-1]]))
        self.bits[byte[first]] |= np.bitwise_or.reduceat(mask, first)

    def has(self, rows: np.ndarray) -> np.ndarray:
        rows = rows.astype(np.int64, copy=False)
        if not len(self.bits):
            return np.zeros(len(rows), bool)
        return ((self.bits[rows >> 3] >> (rows & 7).astype(np.uint8)) & 1).astype(bool)
