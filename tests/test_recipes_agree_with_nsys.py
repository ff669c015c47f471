"""Recipes against NVIDIA's own numbers on every fixture (as printed by nsys stats/analyze)."""
from __future__ import annotations

import collections

import pytest

import nsightlab.recipe_runner as R

from conftest import STEMS
from test_fixtures_agree_with_nsys import expected, with_expected


def close(ours: float, printed: str) -> bool:
    """nsys prints averages/medians/stddevs/percentages rounded to 0.1 (half away from 0)."""
    return abs(float(ours) - float(printed)) <= 0.05 + 1e-6


def rows_by_name(rows, key):
    out = collections.defaultdict(list)
    for r in rows:
        out[r[key]].append(r)
    return out


@pytest.mark.parametrize("stem", with_expected("cuda_gpu_kern_sum"))
def test_kernel_sum_equals_cuda_gpu_kern_sum(stem, sqlite_of, cache_dir):
    ours = R.run("kernel_sum", sqlite_of(stem))["kernel_sum"].set_index("name")
    theirs = expected(stem, "cuda_gpu_kern_sum")
    assert len(ours) == len(theirs)
    for row in theirs:
        o = ours.loc[row["Name"]]
        assert (o.instances, o.total_ns, o.min_ns, o.max_ns) == (
            int(row["Instances"]), int(row["Total Time (ns)"]), int(row["Min (ns)"]),
            int(row["Max (ns)"])), row["Name"]
        for col, printed in (("avg_ns", "Avg (ns)"), ("med_ns", "Med (ns)"),
                             ("stddev_ns", "StdDev (ns)"), ("time_pct", "Time (%)")):
            assert close(o[col], row[printed]), (row["Name"], col, o[col], row[printed])


@pytest.mark.parametrize("stem", with_expected("cuda_api_sum"))
def test_api_sum_equals_cuda_api_sum(stem, sqlite_of, cache_dir):
    ours = rows_by_name(R.run("api_sum", sqlite_of(stem))["api_sum"].to_dict("records"), "name")
    theirs = rows_by_name(expected(stem, "cuda_api_sum"), "Name")
    assert set(ours) == set(theirs)
    for name, rows in theirs.items():
        mine = sorted(ours[name], key=lambda r: r["total_ns"])
        rows = sorted(rows, key=lambda r: int(r["Total Time (ns)"]))
        assert len(mine) == len(rows), name
        for o, t in zip(mine, rows):
            assert (o["calls"], o["total_ns"], o["min_ns"], o["max_ns"]) == (
                int(t["Num Calls"]), int(t["Total Time (ns)"]), int(t["Min (ns)"]),
                int(t["Max (ns)"])), name
            for col, printed in (("avg_ns", "Avg (ns)"), ("med_ns", "Med (ns)"),
                                 ("stddev_ns", "StdDev (ns)"), ("time_pct", "Time (%)")):
                assert close(o[col], t[printed]), (name, col)


def test_every_fixture_runs_kernel_sum_or_says_no_data(cache_dir, sqlite_of):
    for stem in STEMS:
        res = R.run_many("kernel_sum", [str(sqlite_of(stem))])
        (entry,) = res.inputs
        assert entry["status"] in ("ok", "no data"), entry
        if stem == "pub-centerformer-trt-nvtx":
            assert entry["status"] == "no data" and "--trace=cuda" in entry["message"]


@pytest.mark.parametrize("stem", with_expected("cuda_kern_exec_sum"))
def test_launch_compute_per_kernel_equals_cuda_kern_exec_sum(stem, sqlite_of, cache_dir):
    ours = R.run("launch_compute", sqlite_of(stem))["per_kernel"]
    ours = {(r["pid"], r["tid"], r["device"], r["api_name"], r["name"]): r
            for r in ours.to_dict("records")}
    theirs = expected(stem, "cuda_kern_exec_sum")
    assert len(ours) == len(theirs)
    for t in theirs:
        key = (int(t["PID"]), int(t["TID"]), int(t["DevId"]), t["API Name"], t["Kernel Name"])
        o = ours[key]
        assert (o["count"], o["queue_count"]) == (int(t["Count"]), int(t["QCount"])), key
        for metric, letter in (("api", "A"), ("queue", "Q"), ("kernel", "K"), ("total", "T")):
            if metric == "queue" and o["queue_count"] == 0:
                assert t["QAvg (ns)"] == ""  # nsys prints nothing when no launch queued
                continue
            for stat, col in (("min", "Min"), ("max", "Max")):
                assert int(o[f"{metric}_{stat}_ns"]) == int(t[f"{letter}{col} (ns)"]), (key, metric)
            for stat, col in (("avg", "Avg"), ("med", "Med"), ("stddev", "StdDev")):
                assert close(o[f"{metric}_{stat}_ns"], t[f"{letter}{col} (ns)"]), (key, metric, stat)


@pytest.mark.parametrize("stem", with_expected("analyze_cuda_api_sync"))
def test_sync_gaps_finds_the_syncs_nsys_analyze_finds(stem, sqlite_of, cache_dir):
    syncs = R.run("sync_gaps", sqlite_of(stem))["syncs"]
    mine = syncs[syncs["api_name"].isin(["cudaDeviceSynchronize", "cudaStreamSynchronize"])]
    theirs = expected(stem, "analyze_cuda_api_sync")  # nsys prints the longest 50 at most
    got = {(int(r.start_ns), int(r.duration_ns), int(r.pid), int(r.tid)) for r in mine.itertuples()}
    want = {(int(t["Start (ns)"]), int(t["Duration (ns)"]), int(t["PID"]), int(t["TID"]))
            for t in theirs}
    assert want <= got
    top = sorted((d for _, d, _, _ in got), reverse=True)[: len(want)]
    assert top == sorted((d for _, d, _, _ in want), reverse=True)
    if len(theirs) < 50:
        assert len(got) == len(want)


@pytest.mark.parametrize("stem", with_expected("analyze_gpu_gaps"))
def test_sync_gaps_at_500ms_equals_nsys_analyze_gpu_gaps(stem, sqlite_of, cache_dir):
    gaps = R.run("sync_gaps", sqlite_of(stem), {"min_gap_ms": 500})["gaps"]
    got = sorted((int(g.duration_ns), int(g.start_ns), int(g.pid), int(g.device_id),
                  int(g.context_id)) for g in gaps.itertuples())
    want = sorted((int(t["Duration (ns)"]), int(t["Start (ns)"]), int(t["PID"]),
                   int(t["Device ID"]), int(t["Context ID"]))
                  for t in expected(stem, "analyze_gpu_gaps"))
    assert got == want


@pytest.mark.parametrize("stem", with_expected("nvtx_sum"))
def test_nvtx_gpu_range_counts_equal_nvtx_sum(stem, sqlite_of, cache_dir):
    by_name = R.run("nvtx_gpu", sqlite_of(stem))["by_name"]
    ours = {(r["name"], r["kind"]): r["instances"] for r in by_name.to_dict("records")}
    theirs = collections.Counter()
    for t in expected(stem, "nvtx_sum"):
        theirs[(t["Range"], {"PushPop": "push_pop", "StartEnd": "start_end"}[t["Style"]])] += int(t["Instances"])
    assert ours == dict(theirs)
