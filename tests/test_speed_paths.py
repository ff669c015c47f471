"""Issue 29: the shortcuts that make commands fast give the answers the long way gives, and the
start-up order they rely on holds (reader processes start before pandas is imported, and never
import it themselves). Times themselves live in benchmarks/cli.py, not here."""
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pandas as pd
import pytest

import nsightlab
from nsightlab import recipe_runner
from nsightlab.analysis import budget_parts, completeness, stats
from nsightlab.read import workers as part_workers
from nsightlab.read.db import ExportDB
from nsightlab.read.table_cache import identity


def run_python(code: str, stdin: str = "") -> subprocess.CompletedProcess:
    p = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], input=stdin,
                       capture_output=True, text=True, timeout=180)
    assert p.returncode == 0, p.stderr[-2000:]
    return p


# ---- start-up order --------------------------------------------------------------------------
def test_a_reader_process_converts_and_writes_a_part_without_ever_importing_pandas(
        sqlite_of, tmp_path):
    """pyarrow imports pandas on a process's first ``pa.array`` when it is installed (0.8 s a
    worker on the GPU machine); the worker loop refuses it, and still does its job."""
    path = sqlite_of("h200-launchbound")
    out = tmp_path / "part-0.parquet"
    job = {"db_path": str(path), "table": "kernels", "rows": [1, 5001], "out": str(out),
           "ident": identity(path), "limit": None}
    p = run_python("""
        import sys
        from nsightlab.read import workers
        workers.main()
        print("pandas imported:", "pandas" in sys.modules, file=sys.stderr)
        """, json.dumps(job) + "\n")
    answer = json.loads(p.stdout.strip().splitlines()[-1])
    assert answer["rows"] == 5000 and "error" not in answer
    assert "pandas imported: False" in p.stderr
    assert len(pd.read_parquet(out)) == 5000  # a real part, read back here (with pandas)


def test_start_reading_starts_the_reads_before_pandas_and_open_takes_them_over(
        sqlite_of, tmp_path):
    """``recipe run``, ``report`` and ``diff`` call ``opener.start_reading`` before anything
    imports pandas; ``nsightlab.open`` then finishes those reads (small fixture, read by 2
    worker processes as a big report would be)."""
    p = run_python(f"""
        import sys
        from nsightlab.read import parallel, workers as pw
        pw.PROCESS_MIN_ROWS, pw.PROCESS_MIN_WORKERS = 1, 2
        pw.readers = parallel.readers = lambda rows=None: 2
        from nsightlab.read.opener import start_reading, as_report
        start_reading({str(sqlite_of("h200-launchbound"))!r}, ("kernels",),
                      cache_dir={str(tmp_path)!r})
        from nsightlab.read import opener
        print("started", len(opener._early.started), "pandas" in sys.modules)
        from nsightlab.read import reader
        reader.readers = lambda rows=None: 2
        r = as_report({str(sqlite_of("h200-launchbound"))!r}, cache_dir={str(tmp_path)!r},
                      prefetch=("kernels",))
        print("rows", len(r.kernels(["start_ns"])), all(s.finished for s in r.store.started.values()))
        """)
    assert p.stdout.split() == ["started", "1", "False", "rows", "80001", "True"]


def test_a_recipe_prefetch_from_its_metadata_alone_is_the_loaded_recipe_s():
    for name in recipe_runner.available():
        assert recipe_runner.prefetch_of(name) == recipe_runner.get(name).prefetch(), name
    assert recipe_runner.prefetch_of("kernel_sum") == ("kernels",)
    assert recipe_runner.prefetch_of("no_such_recipe") == ()


# ---- scans started ahead -----------------------------------------------------------------------
def test_a_scan_started_ahead_is_awaited_once_and_its_failure_is_raised_by_the_caller(
        sqlite_of):
    db = ExportDB(sqlite_of("h200-vit-fp16"))
    calls = []
    db.ahead("k", lambda: calls.append(1) or 42)
    db.ahead("k", lambda: calls.append(2) or 0)  # started already: not again
    assert db.once("k", lambda: calls.append(3) or -1) == 42 and calls == [1]

    def boom():
        raise ValueError("scan failed")

    db.ahead("bad", boom)
    with pytest.raises(ValueError, match="scan failed"):
        db.once("bad", boom)  # run again in the caller, so the error is its own


def test_launch_counts_from_the_cached_names_equal_the_sql_scan(sqlite_of, tmp_path):
    """The checks count kernel and graph launch calls in SQL over the export; once the API
    table is cached, from its name column: the counts agree (graph launches included)."""
    for stem in ("h200-vit-fp16-cudagraph", "h200-launchbound"):
        with nsightlab.open(sqlite_of(stem), cache_dir=tmp_path / stem) as r:
            scanned = completeness._facts(r, "cuda_api")
            r.db._once.clear()
            r.cuda_api(["name"])  # now cached
            cached = completeness._facts(r, "cuda_api")
        assert (cached["launch"], cached["graph"]) == (scanned["launch"], scanned["graph"])
        assert cached["launch"] > 0 and (cached["graph"] > 0) == ("cudagraph" in stem)


def test_the_checks_started_beside_a_recipe_find_what_they_find_after_it(sqlite_of, tmp_path):
    path = sqlite_of("h200-vit-fp16-syncy")
    with nsightlab.open(path, cache_dir=tmp_path / "a") as r:
        completeness.start(r, ("kernels",))  # kernel_sum's reads: the API scan runs ahead
        assert "facts:cuda_api:False" in r.db._ahead
        ahead = completeness.check(r)
    with nsightlab.open(path, cache_dir=tmp_path / "b") as r:
        after = completeness.check(r)
    with nsightlab.open(path, cache_dir=tmp_path / "b") as r:
        completeness.start(r, ("kernels",))  # stored now: nothing to start
        assert not r.db._ahead
    assert ahead == after


# ---- same numbers, faster paths ----------------------------------------------------------------
def test_last_gpu_end_per_iteration_for_launches_in_order_equals_the_general_path():
    rng = np.random.default_rng(7)
    for _ in range(400):
        n, m = int(rng.integers(0, 300)), int(rng.integers(1, 25))
        t = np.sort(rng.integers(0, 2000, n))
        e = t + rng.integers(0, 80, n)
        rs = np.sort(rng.integers(0, 2000, m))
        re_ = rs + rng.integers(0, 300, m)
        got = np.full(m, -1, np.int64)
        budget_parts.max_end_per_iteration(got, rs, re_, t, e)
        want = np.full(m, -1, np.int64)
        i = np.searchsorted(rs, t, "right") - 1
        inside = (i >= 0) & (t <= re_[np.maximum(i, 0)])
        np.maximum.at(want, i[inside], e[inside])
        assert (got == want).all()


def test_group_statistics_side_by_side_equal_one_at_a_time(monkeypatch):
    rng = np.random.default_rng(3)
    gid = rng.integers(0, 6, 400_000).astype(np.int32)
    values = rng.integers(0, 10**6, len(gid)).astype(np.float64)
    values[rng.random(len(gid)) < 0.01] = np.nan
    monkeypatch.setattr(stats, "readers", lambda rows=None: 1)
    one = stats.Groups(gid, 6).summarize(values.copy())
    monkeypatch.setattr(stats, "readers", lambda rows=None: 4)
    monkeypatch.setattr(stats, "PARALLEL_ROWS", 1000)
    many = stats.Groups(gid, 6).summarize(values.copy())
    for k in stats.STATS:
        np.testing.assert_array_equal(one[k], many[k])
    assert (one["count"] > 60_000).all()


def test_trace_marks_say_where_a_command_s_time_goes_only_when_asked(sqlite_of, tmp_path):
    cmd = [sys.executable, "-m", "nsightlab", "recipe", "run", "kernel_sum",
           str(sqlite_of("h200-vit-fp16"))]
    env = {"NSIGHTLAB_CACHE_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"}
    quiet = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=180)
    traced = subprocess.run(cmd, capture_output=True, text=True, timeout=180,
                            env={**env, "NSIGHTLAB_TRACE": "1",
                                 "NSIGHTLAB_CACHE_DIR": str(tmp_path / "t")})
    assert quiet.returncode == traced.returncode == 0, traced.stderr[-1000:]
    assert "trace" not in quiet.stderr
    marks = [line.split(None, 5)[-1] for line in traced.stderr.splitlines()
             if line.startswith("nsightlab: trace")]
    assert marks[0] == "cli" and "recipe kernel_sum" in marks and "checks done" in marks
    assert quiet.stdout == traced.stdout


def test_reader_processes_and_analysis_commands_start_one_blas_thread_capture_does_not(
        sqlite_of, tmp_path):
    """OpenBLAS starts a spinning thread per core when NumPy loads (~2 CPU-s a process on 16
    cores): reader processes and the analysis commands ask for one; ``capture`` runs the
    user's program with the user's environment untouched."""
    pool = part_workers.Workers(1)
    try:
        import time

        env = [b""]
        for _ in range(100):  # until the worker has started (its environ is empty before)
            env = open(f"/proc/{pool.procs[0].pid}/environ", "rb").read().split(b"\0")
            if env != [b""]:
                break
            time.sleep(0.05)
        assert b"OPENBLAS_NUM_THREADS=1" in env
    finally:
        pool.close()
    clean = {k: v for k, v in os.environ.items()
             if k not in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    p = subprocess.run([sys.executable, "-c", textwrap.dedent(f"""
        import atexit, os, sys
        from nsightlab.cli import main
        sys.argv = ["nsightlab", "info", {str(sqlite_of("h200-vit-fp16"))!r},
                    "--cache-dir", {str(tmp_path / "c")!r}]
        atexit.register(lambda: print("blas", os.environ.get("OPENBLAS_NUM_THREADS"),
                                      file=sys.stderr))  # main() leaves through the handlers
        main()
        """)], capture_output=True, text=True, env=clean, timeout=180)
    assert "blas 1" in p.stderr, p.stderr[-1000:]
    probe = ("import os, sys; sys.exit(3 if any(k in os.environ for k in "
             "('OPENBLAS_NUM_THREADS', 'OMP_NUM_THREADS', 'MKL_NUM_THREADS')) else 0)")
    p = subprocess.run([sys.executable, "-m", "nsightlab", "capture", "probe", "--store",
                        str(tmp_path / "store"), "--no-nsys", "--", sys.executable, "-c", probe],
                       capture_output=True, text=True, env=clean, timeout=180)
    assert p.returncode == 0, (p.stdout + p.stderr)[-1500:]


def test_picking_rows_column_by_column_equals_iloc_and_frees_the_source():
    from nsightlab.read.frames import pick_rows

    rng = np.random.default_rng(5)
    n = 1000
    df = pd.DataFrame({
        "start_ns": rng.integers(0, 10**9, n),
        "name": pd.Categorical(rng.choice(["gemm", "norm", "copy"], n)),
        "stream": pd.array(np.where(rng.random(n) < 0.1, None, rng.integers(0, 8, n)),
                           dtype="Int64"),
        "ratio": rng.random(n)})
    for rows in (np.sort(rng.choice(n, 300, replace=False)), rng.random(n) < 0.5):
        src = df.copy()
        want = df.iloc[np.flatnonzero(rows) if rows.dtype == bool else rows].reset_index(drop=True)
        got = pick_rows(src, rows)
        pd.testing.assert_frame_equal(got, want)
        assert src.columns.empty  # the source was emptied as it was copied


# ---- duplicates found in bounded memory ------------------------------------------------------
def _reference_ties(s: np.ndarray) -> np.ndarray:
    values, counts = np.unique(s, return_counts=True)
    return np.flatnonzero(np.isin(s, values[counts > 1]))


@pytest.mark.parametrize("shuffled", [False, True])
def test_tied_starts_chunk_by_chunk_equal_the_whole_column(monkeypatch, shuffled):
    """``tables.tied_rows`` reads the start column a chunk at a time; rows out of time order
    are split into value ranges (RANGE_ROWS made small here, so every case takes several).
    The tied rows equal those of the whole column sorted at once, ties across chunk edges
    included."""
    from nsightlab.read import tables

    monkeypatch.setattr(tables, "RANGE_ROWS", 97)
    rng = np.random.default_rng(29)
    for case in range(300):
        n = int(rng.integers(0, 700))
        s = np.sort(rng.integers(0, max(n // 3, 1) * int(rng.choice([1, 4, 1000])), n))
        if shuffled and n:
            s = s[rng.permutation(n)]
        cuts = np.sort(rng.choice(np.arange(1, max(n, 2)), int(rng.integers(0, 6)),
                                  replace=True)) if n > 1 else []
        chunks = np.split(s, cuts)
        got = tables.tied_rows(lambda: iter(chunks))
        np.testing.assert_array_equal(got, _reference_ties(s), err_msg=f"case {case}")


def test_duplicates_are_found_in_value_ranges_through_the_cache(sqlite_of, tmp_path,
                                                                monkeypatch):
    """A real report with 100 kernels recorded twice, appended after the others (so out of
    time order), read through the cache with value ranges of 500 rows: the same 100 rows
    are left out as with the whole start column at once."""
    import sqlite3

    from nsightlab.read import tables

    path = tmp_path / "doubled.sqlite"
    path.write_bytes(sqlite_of("h200-vit-fp16").read_bytes())
    k = "CUPTI_ACTIVITY_KIND_KERNEL"
    with sqlite3.connect(path) as c:
        c.execute(f"INSERT INTO {k} SELECT * FROM {k} WHERE rowid % 31 = 0")
    found = {}
    for rows in (tables.RANGE_ROWS, 500):
        monkeypatch.setattr(tables, "RANGE_ROWS", rows)
        r = nsightlab.open(path, cache_dir=tmp_path / f"cache-{rows}")
        found[rows] = len(r.kernels(["start_ns", "name"]))
        assert r.duplicate_rows("kernels") == 100
    assert found[500] == found[tables.RANGE_ROWS] == 3120


@pytest.mark.parametrize("cache", [True, False])
def test_start_order_is_checked_part_by_part_as_the_whole_column_says(sqlite_of, tmp_path,
                                                                      cache):
    """``Report.in_start_order`` (sync_gaps asks it instead of holding 16M-200M API starts)
    agrees with the whole column, on a real export in time order and on the same export
    with its API rows shuffled (as nsys 2025.6 and later write them)."""
    import sqlite3

    src = sqlite_of("h200-launchbound")
    shuffled = tmp_path / "shuffled.sqlite"
    shuffled.write_bytes(src.read_bytes())
    api = "CUPTI_ACTIVITY_KIND_RUNTIME"
    with sqlite3.connect(shuffled) as c:
        c.execute(f"CREATE TABLE s AS SELECT * FROM {api} ORDER BY (rowid * 7919) % 10007")
        c.execute(f"DROP TABLE {api}")
        c.execute(f"ALTER TABLE s RENAME TO {api}")
    for path, ordered in ((src, True), (shuffled, False)):
        r = nsightlab.open(path, cache=cache, cache_dir=tmp_path / "cache")
        if cache:
            r.prefetch(["cuda_api"])
            assert r.is_cached("cuda_api")
        s = r.cuda_api(["start_ns"])["start_ns"].to_numpy()
        assert bool(np.all(s[1:] >= s[:-1])) is ordered
        assert r.in_start_order("cuda_api") is ordered


@pytest.mark.parametrize("chunk,dense_keys", [(1 << 20, 1 << 22), (7, 1 << 22), (7, 1)])
def test_group_ids_and_group_order_equal_pandas(monkeypatch, chunk, dense_keys):
    """``stats.group_ids`` numbers groups through a lookup table when the key combinations
    are few (categorical keys), and ``stats.Groups`` orders rows by a counting sort a chunk
    at a time. On 200 random key frames (categorical keys with missing values, numeric keys
    that vary or are constant, one key or three) the ids are pandas' groups in order of first
    appearance, the key rows those of each group's first row, and the order a stable sort of
    the ids; in chunks of 7 rows too (every chunk edge taken), and with ids from
    ``pd.factorize`` (the path of many key combinations)."""
    from nsightlab.analysis import stats

    monkeypatch.setattr(stats, "CHUNK", chunk)
    monkeypatch.setattr(stats, "DENSE_KEYS", dense_keys)  # 1: ids from pd.factorize
    rng = np.random.default_rng(11)
    for case in range(200):
        n = int(rng.integers(1, 3000))
        names = pd.Categorical.from_codes(rng.integers(-1, 5, n), [f"k{i}" for i in range(5)])
        frame = pd.DataFrame({"name": names,
                              "tid": rng.integers(0, int(rng.integers(1, 4)), n) * 1000 + 7,
                              "kind": pd.Categorical(rng.choice(["rt", "drv"], n))})
        by = [["name"], ["name", "tid", "kind"], ["tid"]][case % 3]
        gid, keys = stats.group_ids(frame[by])
        want = frame[by].astype(object).fillna("<NA>").apply(tuple, axis=1)
        ref, _ = pd.factorize(want)
        np.testing.assert_array_equal(gid, ref, err_msg=f"case {case}")
        first = pd.Series(np.arange(n)).groupby(ref).min().to_numpy()
        assert keys.astype(object).fillna("<NA>").values.tolist() == \
            frame[by].iloc[first].astype(object).fillna("<NA>").values.tolist(), case
        groups = stats.Groups(gid, len(keys))
        np.testing.assert_array_equal(groups.order, np.argsort(gid, kind="stable"),
                                      err_msg=f"case {case}")


def test_occurrence_of_each_launch_equals_counting_row_by_row():
    """The run profile's slot of a launch (``_occurrence``: earlier launches of its group in
    its iteration) by one stable sort, on 300 random cases (few groups, thousands of groups,
    group codes far apart, one iteration or many) equals a count row by row."""
    from nsightlab.run import model as rp

    rng = np.random.default_rng(9)
    for case in range(300):
        n = int(rng.integers(1, 600))
        spread = [3, 70, 40_000, 1 << 26][case % 4]
        group = rng.choice(rng.integers(0, spread, int(rng.integers(1, 50))), n).astype(np.int64)
        it = np.sort(rng.integers(0, int(rng.integers(1, 20)), n)).astype(np.int32)
        seen: dict = {}
        want = np.empty(n, np.int32)
        for r in range(n):
            key = (int(group[r]), int(it[r]))
            want[r] = seen.get(key, 0)
            seen[key] = want[r] + 1
        np.testing.assert_array_equal(rp._occurrence(group, it), want, err_msg=f"case {case}")


def test_first_operation_of_each_call_equals_pandas_duplicated():
    """``first_of_call`` marks each call's first operation by writing positions in reverse
    (the first write of a row lands last) where pandas hashed every row: same marks for
    sorted, shuffled, repeated (graph launches) and sparse call rows (over 4x the rows:
    pandas then), and for rows in iteration order with a few swapped."""
    from nsightlab.analysis.launches import first_of_call

    rng = np.random.default_rng(29)
    cases = [np.arange(5)[::-1], np.array([3, 3, 3]), np.array([0, 10**9, 0])]
    for trial in range(300):
        n = int(rng.integers(2, 3000))
        a = rng.integers(0, int(rng.integers(1, 6 * n)), n)
        cases.append(np.sort(a) if trial % 3 == 0 else rng.permutation(n) if trial % 5 == 0 else a)
    swapped = np.arange(100_000)
    swapped[::97], swapped[1::97] = swapped[1::97].copy(), swapped[::97].copy()
    cases.append(swapped)
    for a in cases:
        np.testing.assert_array_equal(first_of_call(a), ~pd.Series(a).duplicated().to_numpy())


@pytest.mark.parametrize("chunk", [1 << 21, 7, 1])
def test_api_sums_per_iteration_by_slices_equal_bincounts(monkeypatch, chunk):
    """The run profile's API time, calls, sync time and syncs per iteration: for calls in
    start order each iteration's calls are one slice (``_slices``, ``_sliced_sums``), where
    every call was located by a search and counted by bincounts. Same sums for random
    ranges (touching, gapped, empty, calls on their edges), in chunks of any size; and
    ``_slices`` declines calls out of order and overlapping ranges."""
    from nsightlab.run import model as rp

    monkeypatch.setattr(rp, "API_CHUNK", chunk)
    rng = np.random.default_rng(7)
    for trial in range(200):
        t = np.sort(rng.integers(0, 1000, int(rng.integers(0, 400))))
        cuts = np.sort(rng.choice(np.arange(-50, 1100), 2 * int(rng.integers(1, 12)), replace=False))
        lo, hi = cuts[::2], cuts[1::2]
        dur = rng.integers(0, 10**6, len(t))
        codes = rng.integers(0, 5, len(t)).astype(np.int8)
        sync_codes = [1, 3]
        edges = rp._slices(lo, hi, t)
        got = rp._sliced_sums(edges, dur, codes, sync_codes)
        w = rp._containing(lo, hi, t) + 1
        sync = np.isin(codes, sync_codes)
        n = len(lo) + 1
        want = (np.bincount(w, weights=dur, minlength=n)[1:], np.bincount(w, minlength=n)[1:],
                np.bincount(w[sync], weights=dur[sync], minlength=n)[1:],
                np.bincount(w[sync], minlength=n)[1:])
        for g, x in zip(got, want):
            np.testing.assert_array_equal(g, x)
    assert rp._slices(np.array([0, 5]), np.array([6, 9]), np.arange(10)) is None  # overlap
    assert rp._slices(np.array([0]), np.array([9]), np.array([3, 1])) is None  # out of order


def test_launch_calls_per_iteration_by_slices_equal_bincounts():
    """The run profile's launch time and calls per iteration: launches in iteration order
    are summed slice by slice (``reduceat``), others by bincounts. Same numbers, same
    dtypes, for sorted and unsorted iterations, empty iterations, and graph launches (a
    call's time counted once: ``first_of_call``)."""
    from nsightlab.run import model as rp

    rng = np.random.default_rng(3)
    for trial in range(300):
        m, n = int(rng.integers(0, 500)), int(rng.integers(1, 30))
        it = rng.integers(0, n, m).astype(np.int32)
        it = np.sort(it) if trial % 2 else it
        rows = rng.integers(0, m + 1, m) if trial % 3 else np.arange(m)
        s = rng.integers(0, 10**9, m)
        e = s + rng.integers(0, 10**5, m)
        lk = pd.DataFrame({"api_row": rows.astype(np.int32), "iter": it,
                           "api_start_ns": s, "api_end_ns": e})
        once = rp.first_of_call(rows)
        want = (np.bincount(it[once], weights=(e - s)[once], minlength=n),
                np.bincount(it[once], minlength=n))
        for g, w in zip(rp._launch_calls(lk, n), want):
            np.testing.assert_array_equal(g, w)
            assert g.dtype == w.dtype


@pytest.mark.parametrize("stem", ["h200-vit-fp16-syncy", "h200-vit-fp16", "h200-launchbound",
                                  "pub-pipit-cloverleaf-a100"])
@pytest.mark.parametrize("shuffled", [False, True])
def test_api_sums_part_by_part_equal_the_whole_columns(sqlite_of, tmp_path, monkeypatch, stem,
                                                       shuffled):
    """The run profile's API time, calls, sync time and syncs per iteration, read a cache
    part at a time (so they run beside the label sums in little memory), equal those from
    the whole columns: real exports with syncs inside their iterations, the API cached in
    many parts (2 reader processes), in time order and with its rows shuffled (nsys 2025.6
    and later)."""
    from conftest import SHUFFLE, edited_copy
    from nsightlab.analysis import budget
    from nsightlab.run import model as run_profile
    from nsightlab.read import parallel, reader, workers

    path = edited_copy(sqlite_of(stem), tmp_path / f"{stem}.sqlite",
                       "CUPTI_ACTIVITY_KIND_RUNTIME", SHUFFLE if shuffled else ())
    monkeypatch.setattr(workers, "PROCESS_MIN_ROWS", 1)
    monkeypatch.setattr(workers, "PROCESS_MIN_WORKERS", 2)
    monkeypatch.setattr(parallel, "ROWS_PER_READER", 500)
    for module in (workers, reader):
        monkeypatch.setattr(module, "readers", lambda rows=None: 2)
    try:
        r = nsightlab.open(path, cache_dir=tmp_path / "cache")
        r.prefetch(["cuda_api"])
        assert len(r.cache.files("cuda_api")) >= 4
        iters = budget.ranges(r)[0]
        lo, hi = iters["start_ns"].to_numpy(), iters["end_ns"].to_numpy()
        got = run_profile._api_sums(r, lo, hi, len(lo))
        want = run_profile._api_sums_whole(r, lo, hi, len(lo))
    finally:
        workers.discard_pool()
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    assert got[1].sum() > 0
    if stem == "h200-vit-fp16-syncy":
        assert got[3].sum() > 0 and got[2].sum() > 0  # syncs inside the iterations
