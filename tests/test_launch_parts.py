"""Kernels joined to their launch calls by the reader processes (``nsightlab.read.launch_parts``):
the parts equal a plain join of the cached tables on real exports, the refusals leave the join to
DuckDB (and are remembered), and the engine's answers with the entry are tested in
test_engine.py (test_launch_table_left_by_the_budget_join_equals_numpy)."""
import json
import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import nsightlab
from nsightlab.read import launch_join, launch_parts
from tests.conftest import xz_fixtures

DATA = Path(__file__).parent / "data"
#: real exports: one process; graph replays (a call, many kernels); copies and streams; nsys
#: 2024.5; TensorRT
STEMS = [("nsys", "", "h200-launchbound"), ("nsys", "", "h200-vit-fp16-cudagraph"),
         ("scenarios", "h100-", "overlap"), ("nsys", "", "pub-pipit-cloverleaf-a100"),
         ("nsys", "", "pub-realcugan-trt10")]


@pytest.fixture
def by_processes(monkeypatch):
    """Tables of these small fixtures read by 2 reader processes in parts of ~1,000-10,000
    rows, and the join on them."""
    from nsightlab.read import parallel, reader, workers

    monkeypatch.setattr(reader, "PROCESS_MIN_ROWS", 1)
    monkeypatch.setattr(reader, "PROCESS_MIN_WORKERS", 2)
    monkeypatch.setattr(parallel, "ROWS_PER_READER", 1000)
    monkeypatch.setattr(reader, "readers", lambda rows=None: 2)
    monkeypatch.setattr(parallel, "readers", lambda rows=None: 2)
    yield
    workers.discard_pool()


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    getters = {"nsys": xz_fixtures(tmp_path_factory, DATA),
               "scenarios": xz_fixtures(tmp_path_factory, DATA / "scenarios")}
    return lambda folder, prefix, name: getters[folder](prefix + name)


def _entry(report) -> pd.DataFrame:
    files = launch_parts.files(report)
    assert files is not None
    return pd.concat([pq.read_table(f).to_pandas() for f in files], ignore_index=True)


def _expected(report) -> pd.DataFrame:
    """The same join by pandas over the cached tables (rows numbered as the entries')."""
    k = report.table("kernels", ["device_id", "start_ns", "end_ns", "pid", "name",
                                 "correlation_id"])
    k["row"] = np.arange(len(k))
    a = report.table("cuda_api", ["pid", "correlation_id", "start_ns", "end_ns", "tid", "name"])
    a["api_row"] = np.arange(len(a))
    a = a.rename(columns={"start_ns": "api_start", "end_ns": "api_end", "tid": "api_tid",
                          "name": "api_name"}).dropna(subset=["correlation_id"])
    return k.merge(a, on=["pid", "correlation_id"], how="left").sort_values("row")


@pytest.mark.parametrize("processes", [False, True])
@pytest.mark.parametrize("folder,prefix,name", STEMS, ids=[s[2] for s in STEMS])
def test_parts_equal_a_plain_join(reports, folder, prefix, name, processes, tmp_path, request,
                                  monkeypatch):
    """Every kernel, in the kernels entry's order, with its call's start, end, thread, name
    and row (NULL where none), names decoded from the entry's codes: equal to pandas' join;
    one part joined in this process, and many parts on two reader processes."""
    if processes:
        request.getfixturevalue("by_processes")
    else:
        monkeypatch.setenv("NSIGHTLAB_READERS", "1")
    report = nsightlab.open(reports(folder, prefix, name), cache_dir=tmp_path)
    got, want = _entry(report), _expected(report)
    assert len(got) == len(want) == report.row_count("kernels")
    names = launch_parts.names(report)
    for c in ("name", "api_name"):
        codes = got[c].fillna(-1).to_numpy(np.int64)
        got[c] = np.array([*names[c], None], dtype=object)[codes]
    for c in ("device_id", "start_ns", "end_ns", "pid", "row", "api_start", "api_end", "api_tid",
              "api_row", "name", "api_name"):
        x = got[c].to_numpy(dtype=object)
        y = want[c].astype(object).where(want[c].notna(), None).to_numpy(dtype=object)
        same = [(a is None and b is None) or (a is not None and b is not None and a == b)
                for a, b in zip(x, y)]
        assert all(same), (c, x[~np.array(same)][:3], y[~np.array(same)][:3])
    assert got["api_row"].notna().sum() > 0
    assert (len(launch_parts.files(report)) > 1) == processes


def test_a_later_command_finds_the_entry_and_a_changed_table_rebuilds_it(reports, tmp_path):
    report = nsightlab.open(reports("nsys", "", "h200-launchbound"), cache_dir=tmp_path)
    first = launch_parts.files(report)
    stamp = [f.stat().st_mtime_ns for f in first]
    again = nsightlab.open(reports("nsys", "", "h200-launchbound"), cache_dir=tmp_path)
    assert [f.stat().st_mtime_ns for f in launch_parts.files(again)] == stamp
    meta = report.cache.root / launch_parts.ENTRY / "meta.json"
    m = json.loads(meta.read_text())
    m["origin"]["kernels"][0] += 1  # as if the kernels entry had been rebuilt differently
    meta.write_text(json.dumps(m))
    rebuilt = launch_parts.files(nsightlab.open(reports("nsys", "", "h200-launchbound"),
                                                cache_dir=tmp_path))
    assert rebuilt is not None and len(rebuilt) == len(first)
    assert json.loads(meta.read_text())["origin"] == launch_parts._origin(report.cache)


def test_calls_out_of_call_order_are_refused_and_remembered(reports, by_processes, tmp_path,
                                                           monkeypatch):
    """Synthetic edit of a real export: the API rows stored in random order (each row group's
    correlation ids then span the run). A job would read every call: refused, remembered in
    the entry, and the engine joins (test_engine)."""
    path = tmp_path / "shuffled.sqlite"
    shutil.copy(reports("nsys", "", "h200-launchbound"), path)
    with sqlite3.connect(path) as c:
        c.execute("CREATE TABLE r AS SELECT * FROM CUPTI_ACTIVITY_KIND_RUNTIME ORDER BY random()")
        c.execute("DELETE FROM CUPTI_ACTIVITY_KIND_RUNTIME")
        c.execute("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME SELECT * FROM r")
        c.execute("DROP TABLE r")
    monkeypatch.setattr(launch_parts, "SLACK_ROWS", 30000)
    ordered = nsightlab.open(reports("nsys", "", "h200-launchbound"), cache_dir=tmp_path / "o")
    assert len(launch_parts.files(ordered)) > 4  # in call order: accepted, same settings
    report = nsightlab.open(path, cache_dir=tmp_path / "c")
    assert launch_parts.files(report) is None
    meta = json.loads((report.cache.root / launch_parts.ENTRY / "meta.json").read_text())
    assert "not in call order" in meta["refused"]
    monkeypatch.setattr(launch_parts, "plan", lambda *a: pytest.fail("planned again"))
    assert launch_parts.files(nsightlab.open(path, cache_dir=tmp_path / "c")) is None


def test_match_by_process_and_id():
    """Two processes with the same correlation ids, NULL ids and processes on both sides, calls
    out of order, a kernel whose call is missing; two API rows of one call refused."""
    k_pid = pa.array([1, 2, 1, 2, None, 1], pa.int32())
    k_id = pa.array([10, 10, 11, 12, 10, None], pa.uint32())
    a_pid = pa.array([2, 1, 1, 2, None], pa.int32())
    a_id = pa.array([10, 11, 10, None, 12], pa.uint32())
    got = launch_join._match(k_pid, k_id, a_pid, a_id)
    assert got.tolist() == [2, 0, 1, -1, -1, -1]
    twice = launch_join._match(k_pid, k_id, pa.array([1, 1], pa.int32()),
                                pa.array([10, 10], pa.uint32()))
    assert twice == "one call has two API rows"
    none = launch_join._match(k_pid, k_id, pa.array([], pa.int32()), pa.array([], pa.uint32()))
    assert none.tolist() == [-1] * 6
