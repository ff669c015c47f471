"""Cache entries built by worker processes (nsightlab.read.workers) equal those built by
reader threads, row for row, with the same rows left out; failures are one-line errors."""
import json
import os
import shutil
import sqlite3

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

import nsightlab
from conftest import SHUFFLE, edited_copy
from nsightlab.read import parallel, reader, workers as part_workers
from nsightlab.errors import CorruptReportError


def read_all(path, cache_dir):
    with nsightlab.open(path, cache_dir=cache_dir) as r:
        frames = {t: r.table(t) for t in ("kernels", "cuda_api")}
        dropped = {t: r.cache.meta(t).dropped for t in frames}
        parts = {t: len(r.cache.files(t)) for t in frames}
    return frames, dropped, parts


def damaged_copy(sqlite_of, tmp_path):
    """The launch-bound fixture with every 997th kernel ending before it starts and every 991st API
    call ending before it starts (rows the read must leave out)."""
    dst = tmp_path / "damaged.sqlite"
    shutil.copyfile(sqlite_of("h200-launchbound"), dst)
    os.chmod(dst, 0o644)
    with sqlite3.connect(dst) as con:
        con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET \"end\" = start - 1 WHERE rowid % 997 = 0")
        con.execute('UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET "end" = start - 5 WHERE rowid % 991 = 0')
    return dst


def test_processes_build_the_same_entries_as_threads(sqlite_of, tmp_path, by_processes):
    path = damaged_copy(sqlite_of, tmp_path)
    frames, dropped, parts = read_all(path, tmp_path / "procs")
    assert parts["kernels"] >= 8 and parts["cuda_api"] >= 8  # RANGES_PER_WORKER x 2 workers
    os.environ["NSIGHTLAB_READERS"] = "1"
    try:
        with pytest.MonkeyPatch.context() as m:
            m.setattr(part_workers, "PROCESS_MIN_ROWS", 10**12)  # threads this time
            want, want_dropped, _ = read_all(path, tmp_path / "threads")
    finally:
        del os.environ["NSIGHTLAB_READERS"]
    assert dropped == want_dropped and dropped["kernels"] > 0 and dropped["cuda_api"] > 0
    for t in frames:
        pd.testing.assert_frame_equal(frames[t], want[t], check_categorical=False)  # order of first sight


def test_a_bad_job_is_an_answer_and_a_killed_worker_an_error(sqlite_of, tmp_path):
    workers = part_workers.Workers(1)
    try:
        answers = []
        workers.run([{"db_path": str(tmp_path / "missing.sqlite"), "table": "kernels",
                      "sql": "SELECT 1", "out": str(tmp_path / "p.parquet"), "limit": None,
                      "ident": {}}], lambda i, a: answers.append(a))
        assert answers[0]["kind"] == "report" and "missing.sqlite" in answers[0]["error"]
        workers.procs[0].kill()
        workers.procs[0].wait()
        with pytest.raises(part_workers.WorkerDied):
            workers.run([{"db_path": "x", "table": "kernels", "sql": "", "out": "", "limit": None,
                          "ident": {}}], lambda i, a: None)
    finally:
        workers.close()


def test_a_dead_worker_leaves_no_entry_and_names_the_report(sqlite_of, tmp_path, by_processes,
                                                            monkeypatch):
    class Dying(part_workers.Workers):
        def run(self, jobs, done, workers=None):
            raise part_workers.WorkerDied("Killed (exit code -9)")

    monkeypatch.setattr(part_workers, "pool", lambda n: Dying(0))
    path = sqlite_of("h200-launchbound")
    with nsightlab.open(path, cache_dir=tmp_path / "c") as r:
        with pytest.raises(CorruptReportError, match="a reader process died while reading "
                           "CUPTI_ACTIVITY_KIND_KERNEL"):
            r.kernels()
        assert r.cache.files("kernels") is None and r.cache.files("cuda_api") is None
    assert not [p for p in (tmp_path / "c").rglob("*.parquet")]


def _nvtx_whole(path):
    """The NVTX table as one query reads it (no cache: whole table, depth in memory)."""
    return nsightlab.open(path, cache=False).nvtx()


def test_nvtx_read_in_parts_equals_one_query(sqlite_of, tmp_path, by_processes, monkeypatch):
    """NVTX is read by rowid range like the activity tables (reader processes here, threads
    below), each part in start order, and its nesting depth computed over the finished parts
    from five columns: the same table, depth included, as one query and the whole table in
    memory. Ranges nest 18 deep in this fixture, across part boundaries."""
    path = sqlite_of("pub-fuser-crossentropy-h200")
    want = _nvtx_whole(path)
    assert want["depth"].max() >= 10
    with nsightlab.open(path, cache_dir=tmp_path / "procs") as r:
        got = r.nvtx()
        assert len(r.cache.files("nvtx")) >= 8  # RANGES_PER_WORKER x 2 workers
    pd.testing.assert_frame_equal(got, want, check_categorical=False)
    monkeypatch.setattr(part_workers, "PROCESS_MIN_ROWS", 10**12)  # threads
    with nsightlab.open(path, cache_dir=tmp_path / "threads") as r:
        got = r.nvtx()
        assert len(r.cache.files("nvtx")) >= 2
    pd.testing.assert_frame_equal(got, want, check_categorical=False)


def test_nvtx_rowids_out_of_start_order_are_put_in_order(sqlite_of, tmp_path, by_processes):
    """Synthetic edit of a real export: NVTX rows written in reverse start order, so the
    rowid ranges come back out of order. The table is still in start order, with the depth
    of one query."""
    src = sqlite_of("pub-fuser-crossentropy-h200")
    path = tmp_path / "reversed.sqlite"
    shutil.copyfile(src, path)
    os.chmod(path, 0o644)
    with sqlite3.connect(path) as con:
        con.execute("CREATE TABLE r AS SELECT * FROM NVTX_EVENTS ORDER BY start DESC")
        con.execute("DELETE FROM NVTX_EVENTS")
        con.execute("INSERT INTO NVTX_EVENTS SELECT * FROM r")
        con.execute("DROP TABLE r")
    want = _nvtx_whole(src)
    with nsightlab.open(path, cache_dir=tmp_path / "c") as r:
        got = r.nvtx()
    assert got["start_ns"].is_monotonic_increasing
    key = ["start_ns", "end_ns", "tid", "name"]  # equal starts may come in either order
    pd.testing.assert_frame_equal(
        got.sort_values(key, kind="stable").reset_index(drop=True).astype({"name": str}),
        want.sort_values(key, kind="stable").reset_index(drop=True).astype({"name": str}),
        check_categorical=False)


def test_nvtx_parts_name_domains_and_categories_as_one_query(sqlite_of, tmp_path, by_processes):
    """Synthetic edit of a real TensorRT export: a registered category (eventType 33, a quote
    in its name) on every 5th range of domain 1. Read in parts, each range query takes the
    domain and category names from a list made once (not a scan of the table per part): the
    same names as one query's joins."""
    src = sqlite_of("pub-realcugan-trt10")
    path = tmp_path / "categories.sqlite"
    shutil.copyfile(src, path)
    os.chmod(path, 0o644)
    with sqlite3.connect(path) as con:
        tid = con.execute("SELECT globalTid FROM NVTX_EVENTS WHERE eventType = 75").fetchone()[0]
        con.execute("INSERT INTO NVTX_EVENTS (start, eventType, category, text, globalTid, "
                    "domainId) VALUES (0, 33, 7, 'layer''s \"kind\"', ?, 1)", (tid,))
        con.execute("UPDATE NVTX_EVENTS SET category = 7 WHERE domainId = 1 AND eventType IN "
                    "(59, 60) AND rowid % 5 = 0")
    want = _nvtx_whole(path)
    assert (want["category"] == 'layer\'s "kind"').sum() > 10 and want["domain"].notna().any()
    with nsightlab.open(path, cache_dir=tmp_path / "c") as r:
        got = r.nvtx()
        assert len(r.cache.files("nvtx")) >= 8
    pd.testing.assert_frame_equal(got, want, check_categorical=False)


def test_sql_values_lists():
    """What the range queries inline: ints, text with quotes, NULLs; an empty list selects
    nothing; a NUL character cannot be a literal (the query keeps its own join then)."""
    from nsightlab.read.tables import _values

    con = sqlite3.connect(":memory:")
    rows = [(1, 2, "it's"), (None, 5, None)]
    assert con.execute(f"SELECT * FROM ({_values(rows, 3)})").fetchall() == rows
    assert con.execute(f"SELECT * FROM ({_values([], 3)})").fetchall() == []
    assert _values([(1, "a\x00b")], 2) is None


def test_kernels_are_checked_without_reading_the_calls(sqlite_of, tmp_path, by_processes,
                                                       monkeypatch):
    """A kernel's start/end is impossible by itself (NULL, reversed, longer than the whole
    trace): reading the kernels neither reads nor scans the API calls, and the rows left out
    are those SQL counts with the same rule. Kernels before the first CUDA call are kept."""
    from nsightlab.read import db as dbmod, tables

    path = damaged_copy(sqlite_of, tmp_path)
    with sqlite3.connect(path) as con:
        con.execute('UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = 5, "end" = 9 '
                    "WHERE rowid % 1009 = 0")  # before the first API call: real, kept
        con.execute('UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = start - 10000000000000 '
                    "WHERE rowid % 1013 = 0")  # 10000 s: longer than the trace, left out
    scans = []
    real = dbmod.ExportDB.over_ranges
    monkeypatch.setattr(dbmod.ExportDB, "over_ranges",
                        lambda self, sql, *a: scans.append(sql) or real(self, sql, *a))
    with nsightlab.open(path, cache_dir=tmp_path / "c") as r:
        r.prefetch(["kernels"])
        assert r.cache.files("cuda_api") is None
        dropped = r.cache.meta("kernels").dropped
        limit = tables.duration_limit(r.db)
    assert not [s for s in scans if "CUPTI_ACTIVITY_KIND_RUNTIME" in s]
    with sqlite3.connect(path) as con:
        bad = con.execute(f"SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE "
                          f"{tables.invalid_sql(limit)}").fetchone()[0]
        early = con.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL "
                            "WHERE start = 5").fetchone()[0]
    assert dropped == bad and bad > 0 and early > 0


def test_row_count_of_a_cached_table_equals_the_sql_count(sqlite_of, tmp_path):
    """Report.row_count of a cached table comes from the entry (rows kept + rows left out),
    not a count in SQLite: the same number, damaged rows included."""
    path = damaged_copy(sqlite_of, tmp_path)
    with nsightlab.open(path, cache_dir=tmp_path / "c") as r:
        want = {t: r.row_count(t) for t in ("kernels", "cuda_api", "nvtx")}
        r.prefetch(["kernels", "cuda_api", "nvtx"])
        assert r.cache.meta("kernels").dropped > 0
        r.db.query = None  # the counts must not come from SQLite now
        assert {t: r.row_count(t) for t in want} == want


def test_open_starts_the_reader_processes_before_pandas_is_imported(sqlite_of, tmp_path):
    """nsightlab.open on a report whose big tables are not cached starts the reader pool
    before pandas and pyarrow are imported (both start-ups overlap), and does not when the
    tables are cached. Run in fresh interpreters: here pandas is loaded already."""
    import subprocess
    import sys
    import textwrap

    path = sqlite_of("h200-launchbound")
    code = textwrap.dedent(f"""
        import sys
        from nsightlab.read import parallel, workers as pw
        pw.PROCESS_MIN_ROWS, pw.PROCESS_MIN_WORKERS = 1, 2
        pw.readers = parallel.readers = lambda rows=None: 2  # a 2-core machine would read with threads
        seen, real = [], pw.pool
        pw.pool = lambda n: (seen.append(("pandas" in sys.modules, n)), real(n))[1]
        import nsightlab
        r = nsightlab.open({str(path)!r}, cache_dir={str(tmp_path)!r})
        print(seen[:1])
        r.kernels(["start_ns"])
        print(r.cache.files("kernels") is not None)
        """)
    run = lambda: subprocess.run([sys.executable, "-c", code], capture_output=True,  # noqa: E731
                                 text=True, timeout=120)
    first = run()
    assert first.returncode == 0, first.stderr[-2000:]
    assert first.stdout.split() == ["[(False,", "2)]", "True"], first.stdout
    again = run()  # cached now: no pool until a read needs one
    assert again.returncode == 0 and again.stdout.split() == ["[]", "True"], again.stdout


@pytest.mark.parametrize("how", ["threads", "processes"])
def test_later_columns_are_read_when_asked_for_into_an_entry_of_their_own(sqlite_of, tmp_path,
                                                                           how, request):
    """The first read of kernels leaves the launch configuration out (no recipe reads it);
    asking for one reads them into ``kernels+``, whose rows line up with the first read's (the
    same damaged rows left out) and equal one SQL read of every column. The API table has
    every column in its first read (api_sum's API kinds: a second pass cost `report` ~1 s)."""
    if how == "processes":
        request.getfixturevalue("by_processes")
    path = damaged_copy(sqlite_of, tmp_path)
    with nsightlab.open(path, cache=False) as r:  # no cache: every column in one read
        want = {t: r.table(t) for t in ("kernels", "cuda_api")}
    with nsightlab.open(path, cache_dir=tmp_path / "cache") as r:
        first = r.kernels(["start_ns", "name", "stream_id"])
        r.cuda_api(["start_ns", "name"])
        root = r.cache.root
        assert not (root / "kernels+").exists() and not (root / "cuda_api+").exists()
        assert "grid_x" not in pq.read_schema(r.cache.files("kernels")[0]).names
        assert "api_kind" in pq.read_schema(r.cache.files("cuda_api")[0]).names
        rows = np.array([7, 3, len(first) - 1, 0])
        picked = r.take("kernels", ["grid_x", "name", "launch_type"], rows)
        only_later = r.arrow("cuda_api", ["api_kind"])
        got = {t: r.table(t) for t in want}
    assert (root / "kernels+").is_dir() and not (root / "cuda_api+").exists()
    pd.testing.assert_frame_equal(first, want["kernels"][["start_ns", "name", "stream_id"]],
                                  check_categorical=False)
    for t in want:
        pd.testing.assert_frame_equal(got[t], want[t], check_categorical=False)
    pd.testing.assert_frame_equal(
        picked, want["kernels"][["grid_x", "name", "launch_type"]].iloc[rows].reset_index(drop=True),
        check_categorical=False)
    assert only_later.column("api_kind").to_pylist() == want["cuda_api"]["api_kind"].astype(str).tolist()


def test_later_columns_that_do_not_line_up_are_an_error_and_both_entries_go(sqlite_of, tmp_path):
    """A cache whose first read recorded another duration limit (a damaged meta.json) would
    pair rows wrongly: the read stops with a one-line error and both entries are removed."""
    path = damaged_copy(sqlite_of, tmp_path)
    with nsightlab.open(path, cache_dir=tmp_path / "cache") as r:
        k = r.kernels(["start_ns", "duration_ns"])
        starts = k["start_ns"]
        meta_file = r.cache.root / "kernels" / "meta.json"
        meta = json.loads(meta_file.read_text())
        meta["limit"] = int(k["duration_ns"].median())  # keeps about half the rows
        meta_file.write_text(json.dumps(meta))
        with pytest.raises(CorruptReportError, match="disagree.*run the command again"):
            r.kernels(["start_ns", "grid_x"])
        assert not (r.cache.root / "kernels").exists() and not (r.cache.root / "kernels+").exists()
        assert len(r.kernels(["start_ns", "grid_x"])) == len(starts)  # rebuilt, lined up


@pytest.fixture
def started_at_open(monkeypatch):
    """``nsightlab.open`` starts reading this small fixture's kernels and calls on 2 worker
    processes (``ReadStore.start``), as it does for big reports."""
    monkeypatch.setattr(part_workers, "PROCESS_MIN_ROWS", 1)
    monkeypatch.setattr(part_workers, "PROCESS_MIN_WORKERS", 2)
    for module in (part_workers, reader):
        monkeypatch.setattr(module, "readers", lambda rows=None: 2)
    yield
    part_workers.discard_pool()


def out_of_bounds_copy(sqlite_of, tmp_path):
    """``damaged_copy`` plus rows only the trace's length leaves out (every 1009th kernel and
    every 1013th call lasting 10000 s), and 40 kernels recorded twice."""
    path = damaged_copy(sqlite_of, tmp_path)
    with sqlite3.connect(path) as con:
        con.execute('UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = start - 10000000000000 '
                    "WHERE rowid % 1009 = 0")
        con.execute('UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET start = start - 10000000000000 '
                    "WHERE rowid % 1013 = 0")
        con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL SELECT * FROM "
                    "CUPTI_ACTIVITY_KIND_KERNEL WHERE rowid % 2003 = 1 AND \"end\" >= start")
    return path


def test_reads_started_at_open_equal_reads_started_by_the_reader(sqlite_of, tmp_path,
                                                                  started_at_open, monkeypatch):
    """The reads open starts check rows against the trace's length from the start (read with
    the standard library before pyarrow loads). The entries equal those of reader threads,
    row for row, with the same rows left out as impossible or duplicated, and the same limit
    recorded."""
    path = out_of_bounds_copy(sqlite_of, tmp_path)
    with nsightlab.open(path, cache_dir=tmp_path / "started",
                        prefetch=("kernels", "cuda_api")) as r:
        assert len(r.store.started) == 2  # the calls and the kernels, reading already
        got = {t: r.table(t, ["start_ns", "end_ns", "name", "correlation_id"])
               for t in ("kernels", "cuda_api")}
        metas = {t: r.cache.meta(t) for t in got}
    assert all(s.finished for s in r.store.started.values())
    monkeypatch.setenv("NSIGHTLAB_READERS", "1")
    monkeypatch.setattr(part_workers, "PROCESS_MIN_ROWS", 10**12)
    with nsightlab.open(path, cache_dir=tmp_path / "threads") as r:
        want = {t: r.table(t, ["start_ns", "end_ns", "name", "correlation_id"]) for t in got}
        want_metas = {t: r.cache.meta(t) for t in got}
    for t in got:
        pd.testing.assert_frame_equal(got[t], want[t], check_categorical=False)
        assert metas[t].dropped == want_metas[t].dropped > 0
        assert metas[t].limit == want_metas[t].limit < 10**13
    assert metas["kernels"].dropped > len(got["kernels"]) // 997  # the long rows too
    assert metas["kernels"].duplicates == want_metas["kernels"].duplicates > 0


def test_a_started_read_whose_worker_died_is_a_one_line_error_and_leaves_nothing(
        sqlite_of, tmp_path, started_at_open):
    path = sqlite_of("h200-launchbound")
    with nsightlab.open(path, cache_dir=tmp_path / "c") as r:
        started = list(r.store.started.values())
        for p in part_workers._POOL.procs:
            p.kill()
        with pytest.raises(CorruptReportError, match="reader process died.*NSIGHTLAB_READERS"):
            r.kernels(["start_ns"])
        kernels = [s for s in started if s.folder.name.startswith(".kernels")]
        assert r.cache.files("kernels") is None and not kernels[0].folder.exists()
        assert len(r.kernels(["start_ns"])) == 80_001  # read again, on a new pool


def test_reads_started_but_never_taken_leave_nothing_at_exit(sqlite_of, tmp_path):
    """A process that opens a big report and ends without reading it (``nsightlab info``)
    leaves no half-built entry behind. Fresh interpreter: the exit is what is tested."""
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent(f"""
        from nsightlab.read import parallel, workers as pw
        pw.PROCESS_MIN_ROWS, pw.PROCESS_MIN_WORKERS = 1, 2
        pw.readers = parallel.readers = lambda rows=None: 2
        import nsightlab
        r = nsightlab.open({str(sqlite_of("h200-launchbound"))!r}, cache_dir={str(tmp_path)!r},
                           prefetch=("kernels", "cuda_api"))
        started = r.store.started.values()
        print(len(started), sum(1 for s in started if s.folder.is_dir()))
        """)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.split() == ["2", "2"]  # two reads under way at exit
    assert not [f for f in tmp_path.rglob("*") if f.name != "cache" and f.is_file()], \
        sorted(tmp_path.rglob("*"))


def test_idle_readers_are_left_to_end_on_their_own_at_exit(sqlite_of, tmp_path):
    """At exit, workers with nothing to do are told to stop and not waited for (0.07 s of
    every cold command); they end on their own, shortly after. Fresh interpreter."""
    import subprocess
    import sys
    import textwrap
    import time

    code = textwrap.dedent(f"""
        from nsightlab.read import parallel, reader, workers as pw
        pw.PROCESS_MIN_ROWS, pw.PROCESS_MIN_WORKERS = 1, 2
        pw.readers = parallel.readers = reader.readers = lambda rows=None: 2
        import nsightlab
        r = nsightlab.open({str(sqlite_of("h200-launchbound"))!r}, cache_dir={str(tmp_path)!r})
        print(len(r.kernels(["start_ns"])), *(p.pid for p in pw._POOL.procs))
        """)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    rows, *pids = map(int, p.stdout.split())
    assert rows == 80001 and len(pids) == 2
    def alive(pid: int) -> bool:  # a zombie has ended (an init that does not reap keeps it)
        try:
            with open(f"/proc/{pid}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0] != "Z"
        except OSError:
            return False

    deadline = time.time() + 20
    while time.time() < deadline and any(alive(q) for q in pids):
        time.sleep(0.05)
    assert not any(alive(q) for q in pids)


def shuffled_calls_copy(sqlite_of, tmp_path):
    """The launch-bound fixture with its API rows in no time order (as nsys 2025.6 and later
    write them)."""
    return edited_copy(sqlite_of("h200-launchbound"), tmp_path / "shuffled.sqlite",
                       "CUPTI_ACTIVITY_KIND_RUNTIME", SHUFFLE)


@pytest.mark.parametrize("how", ["by the reader", "started at open"])
def test_reader_processes_record_whether_a_table_is_in_start_order(sqlite_of, tmp_path,
                                                                   monkeypatch, how):
    """Each reader process checks the part it writes (``tables.StartOrder``); the entry's
    meta.json then says whether the table is in start order, and ``Report.in_start_order``
    answers from it without reading the column: a real export in time order, and the same
    export with its calls shuffled. The answer equals the column's."""
    from nsightlab.read import report as report_module

    monkeypatch.setattr(part_workers, "PROCESS_MIN_ROWS", 1)
    monkeypatch.setattr(part_workers, "PROCESS_MIN_WORKERS", 2)
    for module in (part_workers, reader):
        monkeypatch.setattr(module, "readers", lambda rows=None: 2)
    prefetch = ("kernels", "cuda_api") if how == "started at open" else ()
    monkeypatch.setattr(parallel, "ROWS_PER_READER", 1000)
    try:
        for path, ordered in ((sqlite_of("h200-launchbound"), True),
                              (shuffled_calls_copy(sqlite_of, tmp_path), False)):
            cache = tmp_path / f"cache-{ordered}"
            with nsightlab.open(path, cache_dir=cache, prefetch=prefetch) as r:
                assert bool(r.store.started) is (how == "started at open")
                r.prefetch(["kernels", "cuda_api"])
                assert len(r.cache.files("cuda_api")) >= 4
                assert r.cache.meta("cuda_api").in_start_order is ordered
                assert r.cache.meta("kernels").in_start_order is True
                s = r.cuda_api(["start_ns"])["start_ns"].to_numpy()
                assert bool(np.all(s[1:] >= s[:-1])) is ordered
                with monkeypatch.context() as m:  # answered from meta.json alone
                    m.setattr(report_module, "part_columns", None)
                    assert r.in_start_order("cuda_api") is ordered
            part_workers.discard_pool()  # the next open starts its reads on a new pool
    finally:
        part_workers.discard_pool()


def test_parts_in_order_joins_the_answers_of_the_parts():
    """``tables.parts_in_order``: parts each in order and in order with one another (empty
    parts between them say nothing); one part out of order, parts that overlap, or a part
    whose process did not say make it False or unknown. ``StartOrder`` on Arrow chunks."""
    import pyarrow as pa

    from nsightlab.read.tables import StartOrder, parts_in_order

    assert parts_in_order([[1, 5], [], [5, 9], [10, 10]]) is True
    assert parts_in_order([[1, 5], [4, 9]]) is False
    assert parts_in_order([[1, 5], False]) is False
    assert parts_in_order([[1, 5], None]) is None
    assert parts_in_order([]) is True
    o = StartOrder()
    for chunk in ([3, 4, 4], [], [4, 8]):
        o.add(pa.array(chunk, pa.int64()))
    assert o.answer() == [3, 8]
    o.add(pa.array([7], pa.int64()))
    assert o.answer() is False
    o = StartOrder()
    o.add(pa.array([1, None], pa.int64()))
    assert o.answer() is False
    assert StartOrder().answer() == []


@pytest.mark.parametrize("fork", [True, False])
def test_forked_and_started_workers_read_the_same_part(sqlite_of, tmp_path, monkeypatch, fork):
    """Readers forked from one zygote (Linux's default) and readers started one interpreter
    each (NSIGHTLAB_NO_FORK=1) write the same part; each forked reader is its own process."""
    import pyarrow.parquet as pq

    monkeypatch.setattr(part_workers, "FORK", fork)
    path = sqlite_of("h200-vit-fp16")
    ident = {"size": path.stat().st_size, "mtime_ns": path.stat().st_mtime_ns}
    workers = part_workers.Workers(2)
    try:
        answers = {}
        jobs = [{"db_path": str(path), "table": "cuda_api", "rows": [1, 5000],
                 "out": str(tmp_path / f"p{i}.parquet"), "limit": None, "ident": ident}
                for i in range(2)]
        workers.run(jobs, lambda i, a: answers.__setitem__(i, a))
        for a in answers.values():
            a.pop("t", None)  # when each started and ran
        assert answers[0] == answers[1] and answers[0]["rows"] > 0
        assert pq.read_table(tmp_path / "p0.parquet").equals(pq.read_table(tmp_path / "p1.parquet"))
        pids = [p.pid for p in workers.procs]
        assert len(set(pids)) == 2 and os.getpid() not in pids
        assert all(p.poll() is None for p in workers.procs)
    finally:
        workers.close()
    assert all(p.poll() is not None for p in workers.procs)


@pytest.mark.parametrize("wait", [True, False])
def test_a_pool_closed_at_once_leaves_no_process(wait):
    """Forked readers of a pool closed before its zygote has even forked them (a command
    that ended at once) end, and so does the zygote, whether or not the close waits."""
    workers = part_workers.Workers(2)
    zygote = workers.zygote
    workers.close(wait=wait)
    if zygote is None:  # not Linux: nothing forked
        return
    assert zygote.wait(timeout=20) == 0
