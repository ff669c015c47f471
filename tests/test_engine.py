"""Big reports are analysed in DuckDB (nsightlab.analysis.engine); the NumPy path is the reference.
Every recipe with an SQL path runs both ways on real reports of each shape that the SQL
handles differently (graph replays, nested and start/end NVTX ranges, copies, syncs,
duplicate-free and multi-stream runs) and must give the same tables: same rows in the same
order, counts exact, sums and statistics within 1e-9 relative."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from nsightlab.analysis import completeness
import nsightlab
import nsightlab.recipe_runner as R
from nsightlab.analysis import engine
from nsightlab.errors import UsageError

from conftest import xz_fixtures

DATA = Path(__file__).parent / "data"
#: (folder, prefix, name): what each report exercises
REPORTS = [
    ("nsys", "", "h200-launchbound"),             # 80k tiny kernels, one NVTX range per iteration
    ("nsys", "", "h200-vit-fp16-cudagraph"),      # graph replays: one call, many kernels
    ("nsys", "", "h200-vit-fp16-syncy"),          # a host sync in every block
    ("nsys", "", "pub-realcugan-trt10"),          # TensorRT, start/end NVTX ranges (fallback)
    ("nsys", "", "pub-fuser-crossentropy-h200"),  # push/pop ranges 18 deep (as-of joins)
    ("nsys", "", "pub-pipit-saxpy-a100"),         # nsys 2022.2, schema 2.9.1, A100
    ("nsys", "", "pub-pipit-cloverleaf-a100"),    # nsys 2024.5, schema 3.13.2
    ("scenarios", "h100-", "h2d_pageable"),       # copies
    ("scenarios", "h100-", "overlap"),            # kernels on several streams
]
RECIPES = ["kernel_sum", "budget", "launch_compute", "sync_gaps", "api_sum"]


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    getters = {"nsys": xz_fixtures(tmp_path_factory, DATA),
               "scenarios": xz_fixtures(tmp_path_factory, DATA / "scenarios")}
    return lambda folder, prefix, name: getters[folder](prefix + name)


def _run(path: Path, name: str, how: str, cache: Path, monkeypatch, params=None) -> dict:
    monkeypatch.setenv("NSIGHTLAB_ENGINE", how)
    report = nsightlab.open(path, cache_dir=cache / how)
    assert engine.active(report) == (how == "duckdb")
    return dict(R.run(name, report, params))


def assert_same(a: pd.DataFrame, b: pd.DataFrame, where: str) -> None:
    assert list(a.columns) == list(b.columns), where
    assert len(a) == len(b), where
    for c in a.columns:
        x, y = a[c], b[c]
        if pd.api.types.is_numeric_dtype(x) and pd.api.types.is_numeric_dtype(y):
            xs, ys = x.astype("float64").to_numpy(), y.astype("float64").to_numpy()
            ok = np.isclose(xs, ys, rtol=1e-9, atol=0, equal_nan=True)
            assert ok.all(), f"{where}.{c}: {xs[~ok][:3]} vs {ys[~ok][:3]}"
        else:
            text = lambda s: [str(v) if pd.notna(v) else None for v in s.astype(object)]  # noqa: E731
            assert text(x) == text(y), f"{where}.{c}"


@pytest.mark.parametrize("folder,prefix,name", REPORTS, ids=[r[2] for r in REPORTS])
def test_duckdb_equals_numpy(reports, folder, prefix, name, tmp_path, monkeypatch):
    path = reports(folder, prefix, name)
    for recipe in RECIPES:
        ref = _run(path, recipe, "numpy", tmp_path, monkeypatch)
        got = _run(path, recipe, "duckdb", tmp_path, monkeypatch)
        assert ref.keys() == got.keys()
        assert sum(len(df) for df in ref.values()), f"{name} {recipe}: nothing to compare"
        for table in ref:
            assert_same(ref[table], got[table], f"{name} {recipe}.{table}")


def test_kernel_sum_iterations_only_same_both_ways(reports, tmp_path, monkeypatch):
    path = reports("nsys", "", "h200-launchbound")
    params = {"iterations_only": True}
    ref = _run(path, "kernel_sum", "numpy", tmp_path, monkeypatch, params)["kernel_sum"]
    got = _run(path, "kernel_sum", "duckdb", tmp_path, monkeypatch, params)["kernel_sum"]
    everything = _run(path, "kernel_sum", "numpy", tmp_path / "all", monkeypatch)["kernel_sum"]
    assert ref["instances"].sum() < everything["instances"].sum()  # the filter did something
    assert_same(ref, got, "kernel_sum iterations_only")


def test_inside_windows_sql_equals_a_search_per_row():
    """``engine.inside_sql`` (binary lifting over two lists) on 300 random cases in DuckDB:
    windows in any order whose end reaches past the next start, empty ones, one window, up to
    a few thousand, times on every edge; the rows it keeps are those of a search per row (the
    window starting last at or before t, t before its end)."""
    import duckdb

    rng = np.random.default_rng(13)
    con = duckdb.connect()
    for case in range(300):
        w = int(rng.integers(1, [70, 3000][case % 2]))
        ws = np.unique(rng.integers(0, 20 * w, w))
        we = ws + rng.integers(0, 40, len(ws))
        t = rng.integers(-10, 20 * w + 60, 400)
        i = np.searchsorted(ws, t, "right") - 1
        want = (i >= 0) & (t < we[np.maximum(i, 0)])
        shuffled = rng.permutation(len(ws))
        windows = pd.DataFrame({"start_ns": ws[shuffled], "end_ns": we[shuffled]})
        con.register("ts", pd.DataFrame({"start_ns": t, "k": np.arange(len(t))}))
        got = con.execute(f"SELECT k FROM ({engine.inside_sql(con, 'win', 'ts', windows)}) "
                          "ORDER BY k").fetchnumpy()["k"]
        np.testing.assert_array_equal(got, np.flatnonzero(want), err_msg=f"case {case}")


def test_engine_choice_and_spill_folder(reports, tmp_path, monkeypatch):
    path = reports("nsys", "", "h200-launchbound")
    monkeypatch.setenv("NSIGHTLAB_ENGINE", "auto")
    report = nsightlab.open(path, cache_dir=tmp_path)
    assert not engine.active(report)  # 80k kernels: under MIN_ROWS, NumPy
    assert not engine.active(nsightlab.open(path, cache=False))  # no cache: nothing to scan
    monkeypatch.setenv("NSIGHTLAB_ENGINE", "duckdb")
    with engine.Engine(report) as db:
        assert db.con.execute(f"SELECT count(*) FROM {db.view('kernels')}").fetchone()[0] \
            == report.row_count("kernels")
        rows = db.arrays(f"SELECT row FROM {db.view('kernels', rows=True)} ORDER BY row")["row"]
        assert (rows == np.arange(report.row_count("kernels"))).all()
        spill = db.spill
    assert not spill.exists()  # the spill folder goes with the engine
    monkeypatch.setenv("NSIGHTLAB_ENGINE", "fast")
    with pytest.raises(UsageError, match="NSIGHTLAB_ENGINE"):
        engine.active(report)


@pytest.mark.parametrize("setting,value", [("NSIGHTLAB_MEMORY_MB", "1GB"),
                                           ("NSIGHTLAB_MEMORY_MB", "50"),
                                           ("NSIGHTLAB_READERS", "all"),
                                           ("NSIGHTLAB_READERS", "0")])
def test_mistyped_engine_settings_are_one_line_errors(reports, tmp_path, monkeypatch, setting,
                                                      value):
    """A memory limit or reader count that is not a number is a one-line usage error naming
    the setting (it used to mean the default, silently), from the API and the CLI."""
    from click.testing import CliRunner

    from nsightlab.cli import cli

    path = reports("nsys", "", "h200-vit-fp16-syncy")
    monkeypatch.setenv("NSIGHTLAB_ENGINE", "duckdb")
    monkeypatch.setenv(setting, value)
    with pytest.raises(UsageError, match=setting):
        R.run("sync_gaps", nsightlab.open(path, cache_dir=tmp_path / "api"))
    monkeypatch.setenv("NSIGHTLAB_CACHE_DIR", str(tmp_path / "cli"))
    got = CliRunner().invoke(cli, ["recipe", "run", "sync_gaps", str(path)])
    assert got.exit_code != 0 and setting in got.output and "Traceback" not in got.output
    assert not isinstance(got.exception, UsageError), got.exception  # turned into click's


def test_out_of_memory_in_duckdb_falls_back_with_a_note(reports, tmp_path, monkeypatch):
    """Simulated (a real one needs a report bigger than the test data): DuckDB raising its
    out-of-memory error mid-recipe gives the NumPy answer and one note, not a traceback."""
    import duckdb

    path = reports("nsys", "", "h200-vit-fp16-syncy")
    ref = _run(path, "sync_gaps", "numpy", tmp_path, monkeypatch)

    def no_memory(*_a, **_k):
        raise duckdb.OutOfMemoryException("Out of Memory Error: could not allocate block")

    monkeypatch.setattr(engine.Engine, "frame", no_memory)
    notes = _sync_gaps_in_duckdb_equal(ref, path, tmp_path, monkeypatch)
    assert any("NSIGHTLAB_MEMORY_MB" in n for n in notes)


def _sync_gaps_in_duckdb_equal(ref: dict, path: Path, tmp_path: Path, monkeypatch,
                               recipe: str = "sync_gaps") -> list:
    """Run ``recipe`` under NSIGHTLAB_ENGINE=duckdb, check its tables equal ``ref``; its notes."""
    monkeypatch.setenv("NSIGHTLAB_ENGINE", "duckdb")
    notes: list[str] = []
    got = R.run(recipe, nsightlab.open(path, cache_dir=tmp_path / "oom", progress=notes.append))
    for table in ref:
        assert_same(ref[table], got[table], f"{recipe}.{table}")
    return notes


def test_out_of_memory_in_a_sort_tries_again_with_fewer_threads(reports, tmp_path, monkeypatch):
    """Simulated: a sorted stream that runs out of memory with more than one sort thread
    (a sort's per-thread buffers outgrow the limit on many cores) is run again in DuckDB with
    fewer threads (``RETRY_THREADS``), down to one: the same tables, no note, no fall-back
    to the NumPy path. (The budget's two sorted streams: the second runs at one thread.)"""
    import duckdb

    from nsightlab.read import reader

    path = reports("nsys", "", "h200-vit-fp16-syncy")
    ref = _run(path, "budget", "numpy", tmp_path, monkeypatch)
    monkeypatch.setattr(engine, "readers", lambda rows=None: 8)
    monkeypatch.setattr(reader, "readers", lambda rows=None: 8)
    assert engine.threads() > 2 and engine.RETRY_THREADS == (2, 1)
    tries, stream = [], engine.Engine.stream

    def short_of_memory(self, sql, batch_rows):
        tries.append(self.threads)
        if self.threads > 1:
            raise duckdb.OutOfMemoryException("Out of Memory Error: could not allocate block")
        return stream(self, sql, batch_rows)

    monkeypatch.setattr(engine.Engine, "stream", short_of_memory)
    notes = _sync_gaps_in_duckdb_equal(ref, path, tmp_path, monkeypatch, "budget")
    assert tries == [engine.threads(), 2, 1, 1]
    assert not [n for n in notes if "NSIGHTLAB_MEMORY_MB" in n]


@pytest.mark.parametrize("folder,prefix,name", REPORTS[:3], ids=[r[2] for r in REPORTS[:3]])
def test_completeness_same_both_ways(reports, folder, prefix, name, tmp_path, monkeypatch):
    """Launch calls and devices are counted in SQL on big reports: the same findings."""
    path = reports(folder, prefix, name)
    found = {}
    for how in ("numpy", "duckdb"):
        monkeypatch.setenv("NSIGHTLAB_ENGINE", how)
        found[how] = completeness.check(nsightlab.open(path, cache_dir=tmp_path / how))
    assert found["numpy"] == found["duckdb"]


@pytest.mark.parametrize("max_pairs", [engine.MAX_PAIRS, 10], ids=["value-counts", "sorted"])
def test_medians_equal_numpy(reports, tmp_path, monkeypatch, max_pairs):
    """engine.medians (counts of distinct values, or past MAX_PAIRS a sorted stream: bounded
    memory either way) against np.median, for odd and even counts, repeated values, one-row
    groups, huge values, two-column keys and NULL values."""
    rng = np.random.default_rng(7)
    sizes = {"a": 1, "b": 2, "c": 1001, "d": 1000, "e": 5000}
    frames = [pd.DataFrame({"k": k, "j": rng.integers(0, 2, n),
                            "v": rng.integers(0, 50 if k == "e" else 10**12, n).astype(float)})
              for k, n in sizes.items()]
    df = pd.concat(frames, ignore_index=True).sample(frac=1, random_state=1)
    df.loc[df.index[:7], "v"] = np.nan
    monkeypatch.setenv("NSIGHTLAB_ENGINE", "duckdb")
    monkeypatch.setattr(engine, "MAX_PAIRS", max_pairs)
    report = nsightlab.open(reports("nsys", "", "h200-launchbound"), cache_dir=tmp_path)
    with engine.Engine(report) as db:
        got = engine.medians(db, "t", "k", "v", {"t": df}).set_index("k")["med"]
        two = engine.medians(db, "t", ["k", "j"], "v", {"t": df}).set_index(["k", "j"])["med"]
    for k, g in df.groupby("k"):
        assert got[k] == np.median(g["v"].dropna().to_numpy()), k
    for (k, j), g in df.groupby(["k", "j"]):
        assert two[(k, j)] == np.median(g["v"].dropna().to_numpy()), (k, j)
    assert len(two) == df.groupby(["k", "j"]).ngroups


def test_no_cache_entry_after_all_means_numpy_not_empty_tables(reports, tmp_path, monkeypatch):
    """A cache that turns out unusable mid-run (entries not there) must not read as a report
    without kernels: the NumPy path answers."""
    path = reports("nsys", "", "h200-vit-fp16-syncy")
    ref = _run(path, "kernel_sum", "numpy", tmp_path, monkeypatch)["kernel_sum"]
    monkeypatch.setenv("NSIGHTLAB_ENGINE", "duckdb")
    report = nsightlab.open(path, cache_dir=tmp_path / "gone")
    monkeypatch.setattr(type(report.cache), "files", lambda self, table: None)
    got = R.run("kernel_sum", report)["kernel_sum"]
    assert_same(ref, got, "kernel_sum")


def test_spill_folders_of_killed_runs_go_live_ones_stay(reports, tmp_path, monkeypatch):
    """DuckDB's spill folder carries its process id: a killed run's is removed by the next
    open of the report, a running one's is kept however old."""
    import os
    import time

    monkeypatch.setenv("NSIGHTLAB_ENGINE", "duckdb")
    path = reports("nsys", "", "h200-launchbound")
    report = nsightlab.open(path, cache_dir=tmp_path)
    with engine.Engine(report) as db:
        live = db.spill
        assert live.name.startswith(f".duckdb-{os.getpid()}-") and live.is_dir()
        dead = live.with_name(".duckdb-999999999-x")
        dead.mkdir()
        old = time.time() - 7200
        os.utime(live, (old, old))
        nsightlab.open(path, cache_dir=tmp_path)  # what a next run does first
        assert live.is_dir() and not dead.exists()
    assert not live.exists()


def test_budget_idle_attribution_in_threads_equals_one_pass(reports, monkeypatch):
    """The idle gaps are attributed in chunks on several threads: with 1,000-gap chunks (80
    chunks on this report) the budget equals the one-chunk, one-thread result exactly."""
    from nsightlab.analysis import budget, budget_parts

    report = nsightlab.open(reports("nsys", "", "h200-launchbound"), cache=False)
    monkeypatch.setattr(budget_parts, "GAP_CHUNK", 1 << 30)
    monkeypatch.setattr(budget_parts, "IDLE_THREADS", 1)
    one, by_sync_one, _ = budget.compute(report)
    monkeypatch.setattr(budget_parts, "GAP_CHUNK", 1000)
    monkeypatch.setattr(budget_parts, "IDLE_THREADS", 4)
    monkeypatch.setattr(budget_parts, "readers", lambda: 4)
    many, by_sync_many, _ = budget.compute(report)
    pd.testing.assert_frame_equal(one, many)
    assert by_sync_one["idle_ns"].sum() == by_sync_many["idle_ns"].sum()
    assert one[[c for c in one.columns if c.startswith("idle_")]].to_numpy().sum() > 0


@pytest.mark.parametrize("folder,prefix,name", REPORTS, ids=[r[2] for r in REPORTS])
def test_streamed_budget_in_small_batches_equals_numpy(reports, folder, prefix, name, tmp_path,
                                                       monkeypatch):
    """The out-of-core budget carries union intervals, gaps and launch times from batch to
    batch: batches of 997 and of 3 operations (every carry taken many times) give the
    in-memory numbers."""
    from nsightlab.analysis import budget_stream

    path = reports(folder, prefix, name)
    ref = _run(path, "budget", "numpy", tmp_path, monkeypatch)
    for rows in (997, 3) if name in ("h200-vit-fp16-syncy", "h2d_pageable", "overlap") else (997,):
        monkeypatch.setattr(budget_stream, "BATCH_ROWS", rows)
        got = _run(path, "budget", "duckdb", tmp_path / str(rows), monkeypatch)
        for table in ref:
            assert_same(ref[table], got[table], f"{name} budget.{table} in batches of {rows}")


@pytest.mark.parametrize("name", ["h200-vit-fp16-cudagraph", "pub-realcugan-trt10",
                                  "pub-fuser-crossentropy-h200"])
def test_launch_compute_streamed_in_small_batches_equals_numpy(reports, name, tmp_path,
                                                              monkeypatch):
    """The NVTX projection adds up ranges over batches of the launch table, on 4 threads into
    sums of their own, merged at the end: batches of 1000 launches (graph replays, start/end
    ranges, 18-deep push/pop) give the in-memory tables."""
    from nsightlab.analysis import projection
    from nsightlab.read import reader

    path = reports("nsys", "", name)
    ref = _run(path, "launch_compute", "numpy", tmp_path, monkeypatch)
    monkeypatch.setattr(projection, "STREAM_ROWS", 1000)
    monkeypatch.setattr(reader, "readers", lambda rows=None: 4)
    got = _run(path, "launch_compute", "duckdb", tmp_path, monkeypatch)
    for table in ref:
        assert_same(ref[table], got[table], f"{name} launch_compute.{table} in batches")


def test_projection_threads_hold_one_batch_each():
    """``_Sums.add_all`` on 4 threads holds at most 4 batches, the one being read included:
    four threads with million-row batches read ahead once held up to 8 million launches
    (launch_compute at 1.44 GB on 8M graph-launched kernels)."""
    import threading
    import time

    import pyarrow as pa

    from nsightlab.analysis import projection

    sums = projection._Sums(pd.DataFrame({
        "name": ["r"], "pid": [1], "tid": [1], "start_ns": [0], "end_ns": [10**12],
        "depth": [0], "kind": ["push_pop"]}))
    state = {"pulled": 0, "done": 0, "most": 0}
    lock = threading.Lock()
    real_add = projection._Sums.add

    def slow_add(self, got, once):
        time.sleep(0.01)
        real_add(self, got, once)
        with lock:
            state["done"] += 1

    def batches():
        for i in range(40):
            with lock:
                state["pulled"] += 1
                state["most"] = max(state["most"], state["pulled"] - state["done"])
            yield pa.record_batch({"pid": [1], "api_tid": [1], "api_start_ns": [i],
                                   "api_end_ns": [i + 1], "start_ns": [i + 2],
                                   "end_ns": [i + 3], "once": [True]})

    with pytest.MonkeyPatch.context() as m:
        m.setattr(projection._Sums, "add", slow_add)
        m.setattr(projection._Sums, "threads", staticmethod(lambda: 4))
        sums.add_all(batches())
    assert state["done"] == 40 and int(sums.count[0]) == 40
    assert state["most"] <= 4, state


def test_row_bits_hold_exactly_the_rows_added():
    """engine.RowBits (what the streamed budget and the once-per-call test remember about
    API rows): membership equals a Python set's, across byte boundaries and repeats."""
    rng = np.random.default_rng(3)
    for n, per_add in ((10_003, 700), (10_003, 40), (1_000_003, 25)):  # dense and sparse adds
        bits = engine.RowBits(n)
        added = set()
        for _ in range(5):
            rows = rng.integers(0, n, per_add)
            bits.add(rows)
            added.update(rows.tolist())
        bits.add(np.array([n - 1]))  # the last byte
        added.add(n - 1)
        probe = np.arange(n)
        assert bits.has(probe).tolist() == [r in added for r in probe.tolist()], (n, per_add)
    assert not engine.RowBits(0).has(np.array([0, 5])).any()


def test_streamed_budget_two_gpus_synthetic_from_real(reports, tmp_path, monkeypatch):
    """Synthetic edit of a real export: every other kernel and copy on a second GPU (device
    1). The streamed budget keeps one running state per GPU and starts a GPU's launch-time
    bits afresh; in batches of 997 and 5 it must give the in-memory budget of both GPUs,
    and launch_compute and sync_gaps must agree too."""
    import shutil
    import sqlite3

    from nsightlab.analysis import budget_stream

    path = tmp_path / "two-gpus.sqlite"
    shutil.copy(reports("nsys", "", "h200-vit-fp16-syncy"), path)
    with sqlite3.connect(path) as c:
        for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY"):
            c.execute(f"UPDATE {table} SET deviceId = 1 WHERE correlationId % 2 = 1")
    ref = {r: _run(path, r, "numpy", tmp_path, monkeypatch)
           for r in ("budget", "launch_compute", "sync_gaps")}
    assert sorted(ref["budget"]["summary"]["device_id"]) == [0, 1]
    for rows in (997, 5):
        monkeypatch.setattr(budget_stream, "BATCH_ROWS", rows)
        for recipe, tables in ref.items():
            got = _run(path, recipe, "duckdb", tmp_path / f"{recipe}-{rows}", monkeypatch)
            for table in tables:
                assert_same(tables[table], got[table], f"two GPUs {recipe}.{table} ({rows})")


def test_streamed_budget_tied_starts_synthetic_from_real(reports, tmp_path, monkeypatch):
    """Synthetic edit of a real export: kernel and copy starts rounded down to 200 us, so
    operations tie in start on a GPU (launched at different times, ending at different
    times, kernels tied with copies). DuckDB sorts the budget's start-order pass by (GPU,
    start) only and sync_gaps' by (process, GPU, context, start), and the ties are put in
    order batch by batch, held back across batch edges; in batches of 997, 5 and 2 the
    budget, launch_compute (busy time from that pass) and sync_gaps must equal the in-memory
    ones, which sort ties as a whole."""
    import shutil
    import sqlite3

    from nsightlab.analysis import budget_stream

    path = tmp_path / "tied.sqlite"
    shutil.copy(reports("nsys", "", "h200-vit-fp16-syncy"), path)
    with sqlite3.connect(path) as c:
        for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY"):
            c.execute(f"UPDATE {table} SET start = start - start % 200000")
        tied = c.execute("SELECT count(*) - count(DISTINCT start) FROM "
                         "CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
    assert tied > 1000  # many ties, not a handful
    ref = {r: _run(path, r, "numpy", tmp_path, monkeypatch)
           for r in ("budget", "launch_compute", "sync_gaps")}
    sync_gaps = R.get("sync_gaps").module
    for rows in (997, 5, 2):
        monkeypatch.setattr(budget_stream, "BATCH_ROWS", rows)
        monkeypatch.setattr(sync_gaps, "GAP_BATCH_ROWS", rows)
        for recipe in ("launch_compute", "budget", "sync_gaps"):  # launch_compute: budget inside
            got = _run(path, recipe, "duckdb", tmp_path / f"{recipe}-{rows}", monkeypatch)
            for table in ref[recipe]:
                assert_same(ref[recipe][table], got[table], f"tied {recipe}.{table} ({rows})")


@pytest.mark.parametrize("folder,prefix,name", REPORTS, ids=[r[2] for r in REPORTS])
def test_launch_table_left_by_the_budget_join_equals_numpy(reports, folder, prefix, name,
                                                            tmp_path, monkeypatch, request):
    """launch_compute on a fresh result store computes the budget inside its own engine
    (``Engine.want_launches``): the budget's join of operations and calls carries the launch
    table's columns and leaves ``lk`` (a view, or a copy where duplicate API rows are about to
    be dropped), so launch_compute joins nothing itself. Same tables as in memory.
    (test_duckdb_equals_numpy runs the budget first: there launch_compute joins on its own.)"""
    from nsightlab import recipe_api, recipe_runner
    from nsightlab.analysis import budget_stream

    path = reports(folder, prefix, name)
    ref = _run(path, "launch_compute", "numpy", tmp_path, monkeypatch)
    left, joined, beside = [], [], []
    leave, own = budget_stream.StreamedOps._leave_launches, recipe_api.launches_sql
    monkeypatch.setattr(budget_stream.StreamedOps, "_leave_launches",
                        lambda self, share, keep: (left.append(keep), leave(self, share, keep)))
    monkeypatch.setattr(recipe_api, "launches_sql", lambda db, *a: (  # bound as the recipe loads
        joined.append(db.left_launches is None), own(db, *a))[1])
    recipe_runner._loaded.cache_clear()  # recipes load once per process: again, with the spy
    request.addfinalizer(recipe_runner._loaded.cache_clear)  # and again without it after
    result = engine.Engine.beside_result
    monkeypatch.setattr(engine.Engine, "beside_result", lambda self: (
        lambda got: (beside.append(got[0]), got)[1])(result(self)))
    got = _run(path, "launch_compute", "duckdb", tmp_path, monkeypatch)
    assert len(left) == 1 and joined == [False], (left, joined)
    # the statistics ran beside the budget's start-order pass, on the second connection
    assert beside == [True], beside
    for table in ref:
        assert_same(ref[table], got[table], f"{name} launch_compute.{table} (shared join)")
    print(name, "copy" if left[0] else "view")


def test_launch_table_left_by_the_budget_join_leaves_out_unlaunched_kernels(
        reports, tmp_path, monkeypatch):
    """Synthetic edit of a real export: the launch calls of every 7th kernel deleted. The
    budget's join keeps those kernels (GPU busy time) while the launch table it leaves must
    not (no call, no launch numbers): launch_compute equals the in-memory path's."""
    import shutil
    import sqlite3

    path = tmp_path / "unlaunched.sqlite"
    shutil.copy(reports("nsys", "", "h200-vit-fp16-syncy"), path)
    with sqlite3.connect(path) as c:
        c.execute("DELETE FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE correlationId IN (SELECT "
                  "correlationId FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE rowid % 7 = 0)")
        kernels = c.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
    ref = _run(path, "launch_compute", "numpy", tmp_path, monkeypatch)
    got = _run(path, "launch_compute", "duckdb", tmp_path, monkeypatch)
    assert 0 < ref["per_kernel"]["count"].sum() < kernels
    for table in ref:
        assert_same(ref[table], got[table], f"unlaunched launch_compute.{table}")


@pytest.mark.parametrize("folder,prefix,name", REPORTS, ids=[r[2] for r in REPORTS])
def test_budget_join_in_correlation_windows_equals_numpy(reports, folder, prefix, name, tmp_path,
                                                         monkeypatch):
    """The budget joins operations to their calls in windows of correlation ids (each
    window's hash table within DuckDB's memory): windows of about 3,000 operations give the
    in-memory budget and launch table (launch_compute, which shares the join)."""
    from nsightlab.analysis import budget_stream

    path = reports(folder, prefix, name)
    ref = {r: _run(path, r, "numpy", tmp_path, monkeypatch) for r in ("launch_compute", "budget")}
    monkeypatch.setattr(budget_stream, "JOIN_ROWS", 3000)
    windows = []
    real = budget_stream.StreamedOps._windows
    monkeypatch.setattr(budget_stream.StreamedOps, "_windows",
                        lambda self, *a: windows.append(real(self, *a)) or windows[-1])
    for recipe, tables in ref.items():  # launch_compute first: its budget runs inside it
        got = _run(path, recipe, "duckdb", tmp_path / recipe, monkeypatch)
        for table in tables:
            assert_same(tables[table], got[table], f"{name} {recipe}.{table} in windows")
    kernels = int(ref["launch_compute"]["per_kernel"]["count"].sum())
    assert len(windows[0]) >= min(kernels // 3000, 4), (kernels, len(windows[0]))


def test_budget_join_windows_keep_operations_without_correlation_ids(reports, tmp_path,
                                                                     monkeypatch):
    """Synthetic edit of a real export: every 5th kernel without a correlation id. Those
    kernels still count as GPU time (in the last window, joined to no call); same budget
    and launch table as in memory."""
    import shutil
    import sqlite3

    from nsightlab.analysis import budget_stream

    path = tmp_path / "uncorrelated.sqlite"
    shutil.copy(reports("nsys", "", "h200-vit-fp16-syncy"), path)
    with sqlite3.connect(path) as c:
        c.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET correlationId = NULL WHERE rowid % 5 = 0")
    ref = {r: _run(path, r, "numpy", tmp_path, monkeypatch) for r in ("launch_compute", "budget")}
    monkeypatch.setattr(budget_stream, "JOIN_ROWS", 3000)
    for recipe, tables in ref.items():
        got = _run(path, recipe, "duckdb", tmp_path / recipe, monkeypatch)
        for table in tables:
            assert_same(tables[table], got[table], f"uncorrelated {recipe}.{table}")
    assert ref["budget"]["iterations"]["kernels_ns"].sum() > 0


def test_sync_gaps_previous_calls_in_small_chunks_equal_numpy(reports, tmp_path, monkeypatch):
    """The previous call on the thread of each gap's launch is looked up a chunk of gaps at
    a time (reading only the cache parts their rows lie in): chunks of 7 gaps give the
    in-memory table."""
    path = reports("nsys", "", "h200-vit-fp16-syncy")
    ref = _run(path, "sync_gaps", "numpy", tmp_path, monkeypatch)
    module = R.get("sync_gaps").module  # loaded afresh by every run: patch the file's value
    monkeypatch.setattr(module, "PREVIOUS_CHUNK", 7)
    real = R.Recipe.module
    monkeypatch.setattr(R.Recipe, "module", property(lambda self: module if self.name ==
                                                     "sync_gaps" else real.func(self)))
    got = _run(path, "sync_gaps", "duckdb", tmp_path, monkeypatch)
    assert len(ref["gaps"]) > 7 and ref["gaps"]["follows"].notna().any()
    for table in ref:
        assert_same(ref[table], got[table], f"sync_gaps.{table} in chunks")


def test_take_reads_only_the_parts_holding_the_rows(reports, tmp_path, monkeypatch):
    """``take`` skips cache parts without a wanted row: rows from the first and last of 4
    parts, in any order, equal the whole column's, and only those 2 parts are read."""
    from nsightlab.read import parallel, reader
    from nsightlab.read.db import ExportDB

    monkeypatch.setattr(parallel, "ROWS_PER_READER", 1000)
    monkeypatch.setattr(reader, "readers", lambda rows=None: 4)
    report = nsightlab.open(reports("nsys", "", "h200-launchbound"), cache_dir=tmp_path)
    whole = report.cuda_api(["start_ns", "tid"])
    assert len(report.cache.files("cuda_api")) == 4
    jobs = []
    real = ExportDB.parallel
    monkeypatch.setattr(ExportDB, "parallel", lambda self, js: (jobs.append(len(js)),
                                                               real(self, js))[1])
    rows = np.array([len(whole) - 1, 5, len(whole) - 3, 0, 7])
    got = report.take("cuda_api", ["start_ns", "tid"], rows)
    assert jobs == [2]
    assert got["start_ns"].tolist() == whole["start_ns"].to_numpy()[rows].tolist()
    assert got["tid"].tolist() == whole["tid"].to_numpy()[rows].tolist()


@pytest.mark.parametrize("how", ["numpy", "duckdb"])
def test_launch_compute_by_range_keeps_the_outermost_levels(reports, tmp_path, monkeypatch, how):
    """max_ranges bounds the per-range table: the ranges of every nesting level that fits
    (the same rows as the whole table's at those depths), with a note saying how many were
    left out; at most 20 ranges, even the outermost level cut to its first 20."""
    path = reports("nsys", "", "pub-fuser-crossentropy-h200")  # push/pop ranges 18 deep
    everything = _run(path, "launch_compute", how, tmp_path / "all", monkeypatch,
                      {"max_ranges": 0})["by_range"]
    nvtx = nsightlab.open(path, cache=False).nvtx(["kind", "depth"])
    per_level = np.bincount(nvtx.loc[nvtx["kind"] != "mark", "depth"].to_numpy(np.int64))
    limit = int(per_level[:3].sum())  # levels 0-2 fit, level 3 does not
    monkeypatch.setenv("NSIGHTLAB_ENGINE", how)
    notes = []
    report = nsightlab.open(path, cache_dir=tmp_path / "cut", progress=notes.append)
    got = R.run("launch_compute", report, {"max_ranges": limit})["by_range"]
    assert len(got) < len(everything) and got["depth"].max() == 2
    assert_same(everything[everything["depth"] <= 2].reset_index(drop=True), got, "levels 0-2")
    assert any(f"{int(per_level[3:].sum()):,} NVTX ranges left out" in n for n in notes), notes
    tiny = R.run("launch_compute", nsightlab.open(path, cache_dir=tmp_path / "tiny"),
                 {"max_ranges": 20})["by_range"]
    assert len(tiny) <= 20 and (tiny["depth"] == 0).all()


@pytest.mark.parametrize("how", ["numpy", "duckdb"])
def test_open_ranges_found_both_ways(reports, tmp_path, monkeypatch, how):
    """Synthetic edit of a real export: two NVTX ranges never closed. The completeness check
    names them in table order, in memory (kinds and ends, then the names of those rows) and
    in DuckDB (a filtered scan)."""
    import shutil
    import sqlite3

    path = tmp_path / "open.sqlite"
    shutil.copy(reports("nsys", "", "h200-vit-fp16-syncy"), path)
    with sqlite3.connect(path) as c:
        picked = c.execute("SELECT rowid, text FROM NVTX_EVENTS WHERE text IS NOT NULL AND "
                           "eventType = 59 ORDER BY start LIMIT 2 OFFSET 3").fetchall()
        c.executemany("UPDATE NVTX_EVENTS SET [end] = NULL WHERE rowid = ?",
                      [(r,) for r, _ in picked])
        names = [t for _, t in picked]
    monkeypatch.setenv("NSIGHTLAB_ENGINE", how)
    report = nsightlab.open(path, cache_dir=tmp_path / how)
    found = [w for w in completeness.check(report) if w["check"] == "ranges_open"]
    assert len(found) == 1 and f"2 NVTX range(s) never closed ({names[0]}, {names[1]})" \
        in found[0]["message"], found


def test_read_ahead_keeps_order_raises_errors_and_stops_early():
    """engine.read_ahead (streams read on another thread): every item in order; an error
    in the stream reaches the reader; a reader that stops early does not leave the thread
    blocked."""
    import threading

    assert list(engine.read_ahead(iter(range(50)), depth=2)) == list(range(50))

    def broken():
        yield 1
        raise ValueError("damaged batch")

    got = []
    with pytest.raises(ValueError, match="damaged batch"):
        for item in engine.read_ahead(broken()):
            got.append(item)
    assert got == [1]
    before = threading.active_count()
    ahead = engine.read_ahead(iter(range(1000)), depth=1)
    assert next(ahead) == 0
    ahead.close()  # the caller stops: the pump thread ends
    assert threading.active_count() == before


def test_read_ahead_now_reads_before_the_first_item_is_asked_for():
    """engine.read_ahead_now (sync_gaps' cache parts read while its SQL runs): the thread
    starts reading at once; the items come in order; closing it early ends the thread."""
    import threading

    started = threading.Event()

    def items():
        started.set()
        yield from range(20)

    ahead = engine.read_ahead_now(items(), depth=2)
    assert started.wait(5), "nothing read before the first item was asked for"
    assert list(ahead) == list(range(20))
    before = threading.active_count()
    ahead = engine.read_ahead_now(iter(range(1000)), depth=1)
    assert next(ahead) == 0
    ahead.close()
    assert threading.active_count() == before


def test_all_cores_for_joins_and_aggregations_then_back(reports, tmp_path, monkeypatch):
    """Joins and aggregations run on one DuckDB thread per core (``Engine.all_cores``), sorts
    on the memory-bound count (``threads()``): here 4 and 1. Same tables as in memory, and
    the thread count is back to 1 after each block (also when a query in it fails)."""
    from nsightlab.read import reader

    monkeypatch.setattr(engine, "MB_PER_THREAD", 10**6)  # threads() = 1
    monkeypatch.setattr(engine, "readers", lambda rows=None: 4)
    monkeypatch.setattr(reader, "readers", lambda rows=None: 4)
    assert (engine.threads(), engine.all_threads()) == (1, 4)
    path = reports("nsys", "", "h200-vit-fp16-syncy")
    ref = _run(path, "launch_compute", "numpy", tmp_path, monkeypatch)
    seen = []
    real = engine.Engine.all_cores

    def spy(self, really=True):
        seen.append(really)
        return real(self, really)

    monkeypatch.setattr(engine.Engine, "all_cores", spy)
    got = _run(path, "launch_compute", "duckdb", tmp_path, monkeypatch)
    for table in ref:
        assert_same(ref[table], got[table], f"launch_compute.{table} on all cores")
    assert True in seen
    monkeypatch.setattr(engine.Engine, "all_cores", real)
    report = nsightlab.open(path, cache_dir=tmp_path / "duckdb")
    with engine.Engine(report) as db:
        threads = lambda: db.one("SELECT current_setting('threads')")[0]  # noqa: E731
        with db.all_cores():
            assert threads() == 4
        assert threads() == 1
        with pytest.raises(Exception):
            with db.all_cores():
                db.one("SELECT * FROM no_such_table")
        assert threads() == 1


def test_work_beside_the_start_pass_runs_on_a_second_connection(reports, tmp_path, monkeypatch):
    """``Engine.beside_start_pass``: the work runs on another thread and connection once
    started; it sees the database's tables and types, makes its own temporary views, leaves
    the database's thread count alone, and its answer or its error comes back to the caller.
    Work that never starts is handed back for the caller to run."""
    import threading

    monkeypatch.setattr(engine, "MB_PER_THREAD", 10**6)  # threads() = 1
    monkeypatch.setattr(engine, "readers", lambda rows=None: 4)
    path = reports("nsys", "", "h200-launchbound")
    report = nsightlab.open(path, cache_dir=tmp_path)
    with engine.Engine(report) as db:
        kernels = db.one(f"SELECT count(*) FROM {db.view('kernels')}")[0]
        db.con.execute(f"CREATE TABLE k AS SELECT name::{db.enum('kernels', 'name')} AS name "
                       f"FROM {db.view('kernels')}")

        def work(side):
            assert side.con is not db.con and threading.current_thread().name == "nsightlab-beside"
            with side.all_cores():  # the database's setting: not changed from here
                threads = side.one("SELECT current_setting('threads')")[0]
            return (side.one("SELECT count(*) FROM k")[0], threads,
                    side.one(f"SELECT count(*) FROM {side.view('kernels')}")[0],
                    side.enum("kernels", "name"))

        assert db.beside_result() == (False, None)  # nothing registered
        db.beside_start_pass(work)
        assert db.beside_result() == (False, None)  # registered, never started: the caller's
        db.start_beside()  # dropped by beside_result: nothing to start
        assert db.beside_result() == (False, None)
        db.beside_start_pass(work)
        db.start_beside()
        assert db.beside_result() == (True, (kernels, 1, kernels, "enum_kernels_name"))

        def fails(side):
            side.one("SELECT * FROM no_such_table")

        import duckdb

        db.beside_start_pass(fails)
        db.start_beside()
        with pytest.raises(duckdb.CatalogException):
            db.beside_result()
        db.beside_start_pass(lambda side: side.one("SELECT count(*) FROM k"))
        db.start_beside()  # not collected: closing the engine waits for it
    assert not any(t.name == "nsightlab-beside" for t in threading.enumerate())


@pytest.mark.parametrize("first", ["pass", "statistics"])
def test_launch_compute_out_of_memory_beside_its_statistics_tries_again(reports, tmp_path,
                                                                        monkeypatch, first):
    """Simulated: the budget's start-order pass runs out of DuckDB's memory while
    launch_compute's statistics run beside it, and they fail too, in either order. The pass's
    error is the one raised (the statistics' thread is let end first), so the engine tries
    again with fewer threads (``analyse``), and the tables equal the in-memory ones."""
    import threading

    import duckdb

    from nsightlab.analysis import budget_stream

    path = reports("nsys", "", "h200-launchbound")
    ref = _run(path, "launch_compute", "numpy", tmp_path, monkeypatch)
    failed, finish, medians = [], budget_stream._Device.finish, engine.medians
    done = {"pass": threading.Event(), "statistics": threading.Event()}
    other = {"pass": "statistics", "statistics": "pass"}

    def fail_once(who, error):
        if who not in failed:
            if who != first:
                done[other[who]].wait(30)  # the other one fails first
            failed.append(who)
            done[who].set()
            raise error

    def pass_short_of_memory(self, *a):
        fail_once("pass", duckdb.OutOfMemoryException("Out of Memory Error: could not allocate"))
        return finish(self, *a)

    def side_fails(*a, **k):
        if threading.current_thread().name == "nsightlab-beside":
            fail_once("statistics", RuntimeError("the statistics failed too"))
        return medians(*a, **k)

    monkeypatch.setattr(budget_stream._Device, "finish", pass_short_of_memory)
    monkeypatch.setattr(engine, "medians", side_fails)
    got = _run(path, "launch_compute", "duckdb", tmp_path, monkeypatch)
    assert failed == [first, other[first]]
    for table in ref:
        assert_same(ref[table], got[table], f"launch_compute.{table} after a retry")


def test_ties_put_in_time_order_batch_by_batch_equal_one_whole_sort():
    """``budget_stream._tied_in_time_order`` gets batches sorted by (GPU, start) only, ties
    in any order, and must give what one sort of everything by (GPU, start, launch call
    start with none last, end, table, row) gives: 300 random streams with many ties, some
    runs of ties longer than a batch, batches of random sizes."""
    import pyarrow as pa

    from nsightlab.analysis.budget_stream import _tied_in_time_order

    rng = np.random.default_rng(7)
    for case in range(300):
        n = int(rng.integers(1, 400))
        dev = rng.integers(0, 2, n).astype(np.int32)
        start = rng.integers(0, int(rng.integers(1, 60)), n).astype(np.int64)
        end = start + rng.integers(0, 5, n)
        api = np.where(rng.random(n) < 0.2, np.nan, rng.integers(0, 8, n).astype(float))
        tbl = rng.integers(0, 3, n).astype(np.int8)
        row = rng.permutation(n).astype(np.int64)
        pid = np.full(n, 7, np.int64)
        shuffled = np.lexsort((rng.random(n), start, dev))  # ties in random order
        cols = [dev, start, end, np.zeros(n, np.int8), api, row, tbl, row, pid]
        names = ["device_id", "start_ns", "end_ns", "part", "api_start", "api_row", "tbl", "row",
                 "pid"]
        table = pa.table({k: pa.array(v[shuffled], from_pandas=True) for k, v in zip(names, cols)})
        cuts = np.sort(rng.integers(0, n + 1, int(rng.integers(0, 12))))
        edges = [0, *cuts, n]
        batches = [b for a, z in zip(edges[:-1], edges[1:]) if z > a
                   for b in table.slice(a, z - a).to_batches()]
        got = [np.concatenate(c) for c in zip(*_tied_in_time_order(iter(batches)))]
        want = np.lexsort((row, tbl, end, np.nan_to_num(api, nan=np.inf), start, dev))
        for i, name in enumerate(names):
            np.testing.assert_array_equal(got[i], np.asarray(cols[i], dtype=got[i].dtype)[want],
                                          err_msg=f"case {case} {name}")


def test_ties_in_order_of_sync_gaps_shape_equal_one_whole_sort():
    """``engine.ties_in_order`` as sync_gaps uses it: a stream sorted by (process, GPU,
    context, start) only, ties in random order, batches of random sizes; the rows must come
    out as one sort by (process, GPU, context, start, table, row) puts them (200 streams)."""
    import pyarrow as pa

    rng = np.random.default_rng(5)
    for case in range(200):
        n = int(rng.integers(1, 300))
        cols = {"pid": rng.integers(0, 2, n), "device_id": rng.integers(0, 2, n),
                "context_id": rng.integers(0, 2, n),
                "start_ns": rng.integers(0, int(rng.integers(1, 30)), n),
                "end_ns": rng.integers(0, 100, n), "correlation_id": rng.permutation(n),
                "tbl": rng.integers(0, 3, n), "row": rng.permutation(n)}
        v = list(cols.values())
        shuffled = np.lexsort((rng.random(n), v[3], v[2], v[1], v[0]))
        table = pa.table({k: x[shuffled] for k, x in cols.items()})
        edges = [0, *np.sort(rng.integers(0, n + 1, int(rng.integers(0, 10)))), n]
        batches = [b for a, z in zip(edges[:-1], edges[1:]) if z > a
                   for b in table.slice(a, z - a).to_batches()]
        got = [np.concatenate(c) for c in zip(*engine.ties_in_order(iter(batches), 4, (6, 7)))]
        want = np.lexsort((v[7], v[6], v[3], v[2], v[1], v[0]))
        for i, name in enumerate(cols):
            np.testing.assert_array_equal(got[i], v[i][want], err_msg=f"case {case} {name}")


@pytest.mark.parametrize("folder,prefix,name", REPORTS, ids=[r[2] for r in REPORTS])
def test_pairs_left_by_the_budget_join_equal_numpy_match(reports, folder, prefix, name,
                                                          tmp_path, monkeypatch):
    """``report`` and ``diff`` ask for the kernel/call pairs (``launches.want_pairs``) before
    the time budget runs; its join in DuckDB then leaves them, and the run profile's launch
    table joins nothing in NumPy. They must be the pairs ``launches.match`` finds: same
    kernels, same calls, same order. Where an export holds two API rows for one call the
    budget keeps one, so it leaves nothing and the NumPy join runs.
    Nine real exports: NVTX iterations, graph replays, TensorRT, copies, several streams,
    iterations found in the trace, 2022-era duplicate API rows."""
    from nsightlab.analysis import budget_stream
    from nsightlab.analysis.launches import keys, leave_pairs, match, want_pairs

    left = []
    monkeypatch.setattr(budget_stream, "leave_pairs", lambda report, table, api_of_row: (
        left.append(api_of_row.copy()), leave_pairs(report, table, api_of_row)))
    path = reports(folder, prefix, name)
    monkeypatch.setenv("NSIGHTLAB_ENGINE", "duckdb")
    report = nsightlab.open(path, cache_dir=tmp_path)
    report.results = None  # computed here, not served
    want_pairs(report)
    source = R.run("budget", report)["summary"]["iteration_source"].iloc[0]
    ops, calls = match(*keys(report.table("kernels", ["pid", "correlation_id"]),
                             report.cuda_api(["pid", "correlation_id"])))
    duplicates = len(ops) > len(np.unique(ops))
    # without NVTX iteration ranges the iterations were found from the operations with their
    # calls (``iterations.find``): the pairs were joined in NumPy then, and nothing is left
    from_ops = source.startswith(("no NVTX", "found in the trace"))
    assert len(left) == (0 if duplicates or not len(ops) or from_ops else 1), (name, source)
    if left:
        assert len(left[0]) == report.row_count("kernels")
        np.testing.assert_array_equal(np.flatnonzero(left[0] >= 0), ops, name)
        np.testing.assert_array_equal(left[0][ops], calls, name)
        got_ops, got_calls = report.db.once("pairs:kernels", None)
        np.testing.assert_array_equal(got_ops, ops, name)
        np.testing.assert_array_equal(got_calls, calls, name)


def test_pairs_not_left_where_calls_have_two_api_rows(reports, tmp_path, monkeypatch):
    """Synthetic edit of a real export with NVTX iterations: every 5th launch call's API row
    recorded twice (as 2022-era exports did with CUDA backtraces). ``match`` pairs those
    kernels with both rows; the budget's join keeps one, so it must leave no pairs, and the
    run profile's launch table joins in NumPy as before."""
    import shutil
    import sqlite3

    from nsightlab.analysis import budget_stream
    from nsightlab.analysis.launches import want_pairs

    path = tmp_path / "twice.sqlite"
    shutil.copy(reports("nsys", "", "h200-launchbound"), path)
    with sqlite3.connect(path) as c:
        c.execute("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME SELECT * FROM "
                  "CUPTI_ACTIVITY_KIND_RUNTIME WHERE rowid % 5 = 0 AND correlationId IN "
                  "(SELECT correlationId FROM CUPTI_ACTIVITY_KIND_KERNEL)")
    left = []
    monkeypatch.setattr(budget_stream, "leave_pairs", lambda *a: left.append(a))
    monkeypatch.setenv("NSIGHTLAB_ENGINE", "duckdb")
    report = nsightlab.open(path, cache_dir=tmp_path / "cache")
    report.results = None
    want_pairs(report)
    source = R.run("budget", report)["summary"]["iteration_source"].iloc[0]
    assert "NVTX iteration ranges" in source and not source.startswith("no ")
    assert left == [] and not report.db.knows("pairs:kernels")


def test_checks_started_beside_the_budget_join_find_what_they_find_alone(reports, tmp_path,
                                                                          monkeypatch):
    """Once the budget's join has cached the API table, the completeness checks' facts (launch
    calls counted on the names' codes) start on a thread beside it (``start_cached``), not in
    the first check launch_compute's nested budget run makes. Same findings as the checks of
    a fresh report computed alone."""
    from nsightlab.analysis import completeness

    started = []
    facts = completeness._facts
    monkeypatch.setattr(completeness, "_facts", lambda report, name, invalid=False, ahead=False: (
        started.append((name, ahead)), facts(report, name, invalid, ahead))[1])
    path = reports("nsys", "", "h200-launchbound")
    got = _run(path, "launch_compute", "duckdb", tmp_path / "a", monkeypatch)
    assert ("cuda_api", True) in started
    assert len(got["per_kernel"])
    monkeypatch.setattr(completeness, "_facts", facts)
    alone = completeness.check(nsightlab.open(path, cache_dir=tmp_path / "b"))
    beside = completeness.check(nsightlab.open(path, cache_dir=tmp_path / "a" / "duckdb"))
    assert [(w["check"], w["message"]) for w in beside] == \
        [(w["check"], w["message"]) for w in alone]


def test_pairs_left_leave_out_kernels_without_a_call(reports, tmp_path, monkeypatch):
    """Synthetic edit of a real export with NVTX iterations: the launch calls of every 7th
    kernel deleted. The pairs the budget leaves skip those kernels, as ``launches.match``
    does (``leave_pairs``' path for kernels without a call)."""
    import shutil
    import sqlite3

    from nsightlab.analysis.launches import keys, match, want_pairs

    path = tmp_path / "unlaunched.sqlite"
    shutil.copy(reports("nsys", "", "h200-launchbound"), path)
    with sqlite3.connect(path) as c:
        c.execute("DELETE FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE correlationId IN (SELECT "
                  "correlationId FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE rowid % 7 = 0)")
    from nsightlab.analysis import budget_stream
    from nsightlab.analysis.launches import leave_pairs

    left = []
    monkeypatch.setattr(budget_stream, "leave_pairs", lambda report, table, api_of_row: (
        left.append(api_of_row.copy()), leave_pairs(report, table, api_of_row)))
    monkeypatch.setenv("NSIGHTLAB_ENGINE", "duckdb")
    report = nsightlab.open(path, cache_dir=tmp_path / "cache")
    report.results = None
    want_pairs(report)
    R.run("budget", report)
    assert len(left) == 1 and (left[0] < 0).any()  # left by the budget, some without a call
    left_ops, left_calls = report.db.once("pairs:kernels", None)
    ops, calls = match(*keys(report.table("kernels", ["pid", "correlation_id"]),
                             report.cuda_api(["pid", "correlation_id"])))
    assert 0 < len(ops) < report.row_count("kernels")  # some kernels have no call
    np.testing.assert_array_equal(left_ops, ops)
    np.testing.assert_array_equal(left_calls, calls)


def test_merged_in_start_order_equals_one_sort_of_the_union():
    """``engine._merged`` (sync_gaps' operations in start order without a sort): random
    tables in start order, with many tied starts within and across tables, read in random
    pieces (empty ones, single rows, a tie spread over several pieces), give every row once
    in (start, table, row) order: the order of one stable sort of their union."""
    rng = np.random.default_rng(7)
    for case in range(200):
        k = int(rng.integers(1, 4))
        tables = []
        for _ in range(k):
            n = int(rng.integers(0, 60))
            start = np.sort(rng.integers(0, int(rng.integers(1, 40)), n))  # ties likely
            tables.append([start, rng.integers(0, 10**6, n)])  # start, a payload column

        def pieces(t):
            cuts = np.sort(rng.integers(0, len(t[0]) + 1, int(rng.integers(0, 8))))
            edges = [0, *cuts.tolist(), len(t[0])]
            for a, b in zip(edges[:-1], edges[1:]):
                yield [c[a:b] for c in t]

        got = list(engine._merged([pieces(t) for t in tables], 0))
        start = np.concatenate([t[0] for t in tables])
        payload = np.concatenate([t[1] for t in tables])
        tbl = np.concatenate([np.full(len(t[0]), i) for i, t in enumerate(tables)])
        row = np.concatenate([np.arange(len(t[0])) for t in tables])
        order = np.lexsort((row, tbl, start))
        if not len(start):
            assert got == [], case
            continue
        out = [np.concatenate(c) for c in zip(*got)]
        assert out[0].tolist() == start[order].tolist(), case
        assert out[1].tolist() == payload[order].tolist(), case
        assert out[2].tolist() == tbl[order].tolist(), case


def test_merged_in_start_order_stops_at_rows_out_of_order():
    """A table whose rows go back in time (nsys 2025.6 exports) is not merged: the caller
    sorts instead."""
    back = [[np.array([1, 5, 9])], [np.array([8, 12])]]  # 8 after 9
    with pytest.raises(engine.OutOfOrder):
        list(engine._merged([iter(back), iter([[np.array([2, 3])]])], 0))


def test_sync_gaps_merges_tables_in_order_and_sorts_those_out_of_order(reports, tmp_path,
                                                                        monkeypatch):
    """sync_gaps' GPU gaps in DuckDB: a real export (kernels and copies, tables in start
    order) is merged from the cache as read, here in pieces of 7 rows so ties and copies
    cross piece edges; the same export with its kernel rows shuffled (as nsys 2025.6
    writes them) falls back to DuckDB's sort. Both equal the in-memory recipe."""
    import shutil
    import sqlite3

    from nsightlab.read import table_cache

    path = reports("nsys", "", "h200-vit-fp16-syncy")
    ref = _run(path, "sync_gaps", "numpy", tmp_path, monkeypatch)
    parts, sorted_streams = table_cache.part_tables, []

    def in_pieces(files, columns, ahead=4):
        for cols in parts(files, columns, ahead):
            for a in range(0, len(cols[0]), 7):
                yield [c[a:a + 7] for c in cols]

    stream = engine.Engine.stream
    monkeypatch.setattr(table_cache, "part_tables", in_pieces)
    monkeypatch.setattr(engine.Engine, "stream", lambda self, sql, rows: (
        sorted_streams.append(sql), stream(self, sql, rows))[1])
    assert _sync_gaps_in_duckdb_equal(ref, path, tmp_path / "merged", monkeypatch) == []
    assert not [s for s in sorted_streams if "context_id, start_ns" in s]

    shuffled = tmp_path / "shuffled.sqlite"
    shutil.copy(path, shuffled)
    with sqlite3.connect(shuffled) as c:
        t = "CUPTI_ACTIVITY_KIND_KERNEL"
        c.execute(f"CREATE TABLE s AS SELECT * FROM {t} ORDER BY (rowid * 7919) % 10007")
        c.execute(f"DROP TABLE {t}")
        c.execute(f"ALTER TABLE s RENAME TO {t}")
    ref = _run(shuffled, "sync_gaps", "numpy", tmp_path / "s", monkeypatch)
    _sync_gaps_in_duckdb_equal(ref, shuffled, tmp_path / "sorted", monkeypatch)
    assert [s for s in sorted_streams if "context_id, start_ns" in s]


@pytest.mark.parametrize("name", ["h200-launchbound", "h200-vit-fp16-syncy"])
def test_join_windows_cut_from_row_group_statistics_are_balanced(reports, name, tmp_path,
                                                                 monkeypatch):
    """The budget's join windows are cut at correlation ids read off the cache's row-group
    statistics (no scan): on real exports every window holds about ``JOIN_ROWS`` operations
    (at most twice that), counted from the operations themselves."""
    from nsightlab.analysis import budget_stream

    path = reports("nsys", "", name)
    monkeypatch.setenv("NSIGHTLAB_ENGINE", "duckdb")
    monkeypatch.setattr(budget_stream, "JOIN_ROWS", 3000)
    report = nsightlab.open(path, cache_dir=tmp_path)
    ids = np.concatenate([report.table(t, ["correlation_id"])["correlation_id"].dropna()
                          .to_numpy(np.int64) for t in budget_stream.TABLES
                          if report.has_rows(t)])
    with engine.Engine(report, 1) as db:
        ops = budget_stream.StreamedOps.__new__(budget_stream.StreamedOps)
        ops.report, ops.db = report, db
        for t in budget_stream.TABLES:
            if report.has_rows(t):
                db.view(t)
        k = -(-len(ids) // 3000)
        cuts = ops._cuts_from_statistics([i / k for i in range(1, k)])
    assert cuts is not None and cuts == sorted(cuts)  # None: no statistics, a scan instead
    per_window = np.diff(np.searchsorted(np.sort(ids), [ids.min(), *cuts, ids.max() + 1]))
    assert per_window.sum() == len(ids) and per_window.max() <= 6000, per_window


@pytest.mark.parametrize("stem", ["h200-vit-fp16", "h200-vit-fp16-cudagraph", "h200-launchbound",
                                  "pub-fuser-crossentropy-h200", "pub-fuser-matmul-h100",
                                  "pub-pipit-saxpy-a100"])
def test_nvtx_gpu_takes_launch_compute_projection_and_gets_its_own_answer(
        stem, sqlite_of, tmp_path, monkeypatch):
    """``nsightlab report`` runs launch_compute, then nvtx_gpu: the projection launch_compute
    made in DuckDB over every range and launch is remembered for the export, and nvtx_gpu
    answers from it exactly what it computes alone in memory (real exports: NVTX-heavy,
    graph replays, push/pop iterations, MPI ranks)."""
    import nsightlab.recipe_runner as R
    from nsightlab.analysis import projection

    monkeypatch.setenv("NSIGHTLAB_ENGINE", "duckdb")
    path = sqlite_of(stem)
    r = nsightlab.open(path, cache_dir=tmp_path / "a")
    R.run("launch_compute", r)
    assert r.db.knows(projection.WHOLE)
    got = R.run("nvtx_gpu", r)
    monkeypatch.setenv("NSIGHTLAB_ENGINE", "numpy")
    alone = nsightlab.open(path, cache_dir=tmp_path / "b")
    want = R.run("nvtx_gpu", alone)
    assert not alone.db.knows(projection.WHOLE)
    for name in ("ranges", "by_name"):
        pd.testing.assert_frame_equal(got[name], want[name])
    if stem == "h200-vit-fp16":  # a projection of the outermost ranges only is not it
        monkeypatch.setenv("NSIGHTLAB_ENGINE", "duckdb")
        cut = nsightlab.open(path, cache_dir=tmp_path / "c")
        R.run("launch_compute", cut, {"max_ranges": 20})
        assert not cut.db.knows(projection.WHOLE)


def test_calls_counted_once_from_one_window(reports, tmp_path, monkeypatch, request):
    """Graph replays: one call launches many kernels, so launch_compute counts calls once
    (a window over every launch). Its run numbers and its NVTX ranges share one table with
    that column (``launches.once_table``): the window is computed once, and the answers are
    the in-memory ones."""
    from nsightlab.analysis import launches

    path = reports("nsys", "", "h200-vit-fp16-cudagraph")
    ref = _run(path, "launch_compute", "numpy", tmp_path, monkeypatch)
    built, asked = [], []
    build, ask = launches._build_once, launches.once_table
    monkeypatch.setattr(launches, "_build_once", lambda db, once: (built.append(once),
                                                                 build(db, once))[1])
    monkeypatch.setattr(launches, "once_table", lambda db: asked.append(1) or ask(db))
    from nsightlab import recipe_api, recipe_runner

    monkeypatch.setattr(recipe_api, "once_table", launches.once_table)
    recipe_runner._loaded.cache_clear()  # recipes load once per process: again, with the spy
    request.addfinalizer(recipe_runner._loaded.cache_clear)  # and again without it after
    got = _run(path, "launch_compute", "duckdb", tmp_path, monkeypatch)
    for table in ref:
        assert_same(ref[table], got[table], f"cudagraph launch_compute.{table}")
    assert len(asked) == 2 and len(built) == 1 and "OVER" in built[0]
