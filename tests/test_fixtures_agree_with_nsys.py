"""Every real fixture: counts and totals from nsightlab's tables equal what NVIDIA's own
`nsys stats` printed for the same file (../shared/fixtures/expected, copied to tests/data)."""
from __future__ import annotations

import collections
import csv

import pandas as pd
import pytest

import nsightlab
from nsightlab.read.tables import gpu_metrics_impossible_sql
from nsightlab.read.tables import TABLES

from conftest import STEMS, expected_dir


def expected(stem: str, report: str) -> list[dict] | None:
    p = expected_dir(stem) / f"{report}.csv"
    if not p.is_file() or p.stat().st_size == 0:
        return None
    with p.open(newline="") as f:
        return list(csv.DictReader(f))


def with_expected(report: str) -> list:
    """Parameters: the fixtures for which NVIDIA printed ``report``."""
    return [s for s in STEMS if expected(s, report)]


@pytest.mark.parametrize("stem", with_expected("cuda_gpu_kern_sum"))
def test_kernel_count_and_total_per_name_equal_nsys_stats(stem, sqlite_of, cache_dir):
    k = nsightlab.open(sqlite_of(stem)).kernels(["name", "duration_ns"])
    ours = {n: (int(c), int(t)) for n, (c, t) in
            k.groupby("name", observed=True)["duration_ns"].agg(["count", "sum"]).iterrows()}
    theirs: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0])
    for row in expected(stem, "cuda_gpu_kern_sum"):
        theirs[row["Name"]][0] += int(row["Instances"])
        theirs[row["Name"]][1] += int(row["Total Time (ns)"])
    assert ours == {n: tuple(v) for n, v in theirs.items()}


@pytest.mark.parametrize("stem", with_expected("cuda_api_sum"))
def test_api_call_count_per_name_equals_nsys_stats(stem, sqlite_of, cache_dir):
    a = nsightlab.open(sqlite_of(stem)).cuda_api(["name", "duration_ns"])
    ours = a.groupby("name", observed=True)["duration_ns"].agg(["count", "sum"])
    theirs = collections.Counter()
    total = collections.Counter()
    for row in expected(stem, "cuda_api_sum"):
        theirs[row["Name"]] += int(row["Num Calls"])
        total[row["Name"]] += int(row["Total Time (ns)"])
    assert {n: int(c) for n, c in ours["count"].items() if c} == dict(theirs)
    assert {n: int(t) for n, t in ours["sum"].items() if n in total} == dict(total)


@pytest.mark.parametrize("stem", with_expected("nvtx_sum"))
def test_nvtx_range_count_per_name_equals_nsys_stats(stem, sqlite_of, cache_dir):
    n = nsightlab.open(sqlite_of(stem)).nvtx(["name", "kind", "duration_ns"])
    ranges = n[n["kind"] != "mark"]
    ours = {k: int(c) for k, c in ranges["name"].value_counts().items() if c}
    theirs = collections.Counter()
    style = {}
    for row in expected(stem, "nvtx_sum"):
        theirs[row["Range"]] += int(row["Instances"])
        style[row["Range"]] = row["Style"]
    assert ours == dict(theirs)
    kinds = ranges.groupby("name", observed=True)["kind"].first()
    assert {k: {"push_pop": "PushPop", "start_end": "StartEnd"}[v]
            for k, v in kinds.items()} == style


@pytest.mark.parametrize("stem", STEMS)
def test_every_table_has_the_contract_columns_and_dtypes(stem, sqlite_of, cache_dir):
    r = nsightlab.open(sqlite_of(stem))
    for name, spec in TABLES.items():
        df = r.table(name)
        assert list(df.columns) == [c.name for c in spec.columns], name
        for c in spec.columns:
            dtype = df[c.name].dtype
            if str(c.type).startswith("dictionary"):
                assert isinstance(dtype, pd.CategoricalDtype), (name, c.name, dtype)
            elif str(c.type).startswith(("int", "uint")):
                assert dtype.kind in "iu" or str(dtype) in ("Int32", "Int64", "UInt32"), (name, c.name, dtype)
                if c.nullable:
                    assert isinstance(dtype, pd.api.extensions.ExtensionDtype), (name, c.name)
        if name in ("kernels", "cuda_api", "memcpy", "memset", "syncs") and len(df):
            assert (df["duration_ns"] == df["end_ns"] - df["start_ns"]).all()
            assert (df["duration_ns"] >= 0).all()
        # row counts hold the rows every read leaves out (impossible GPU-metrics samples)
        left_out = r.db.query(gpu_metrics_impossible_sql())[0][0] \
            if name == "gpu_metrics" and len(df) else 0
        assert len(df) == r.row_counts[name] - left_out, name


def test_api_names_follow_the_nsys_stats_suffix_rule():
    """4-digit version suffixes are dropped, 5-digit ones kept: as nsys stats prints them
    (docs/tables.md says so)."""
    import pyarrow as pa

    from nsightlab.read.tables import strip_version

    got = strip_version(pa.array(["cudaLaunchKernel_v7000", "cudaGraphLaunch_v10000",
                                  "cuLaunchKernel", "cudaMemcpyAsync_v3020"])).to_pylist()
    assert got == ["cudaLaunchKernel", "cudaGraphLaunch_v10000", "cuLaunchKernel",
                   "cudaMemcpyAsync"]
