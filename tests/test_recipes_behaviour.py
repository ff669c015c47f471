"""Recipes on the real workloads: the answers a performance engineer expects from each."""
from __future__ import annotations

import pandas as pd
import pytest

import nsightlab
import nsightlab.recipes as R


def test_launchbound_workload_is_launch_bound(sqlite_of, cache_dir):
    out = R.run("launch_compute", sqlite_of("h200-launchbound"))
    s = out["summary"].iloc[0]
    assert s["verdict"] == "launch-bound" and s["gpu_busy_pct"] < 25
    assert s["short_kernel_pct"] > 99 and s["kernel_avg_ns"] < s["launch_api_avg_ns"]
    iters = out["by_range"][out["by_range"]["name"].str.fullmatch(r"iter\d+")]
    assert len(iters) == 20 and (iters["verdict"] == "launch-bound").all()
    assert (iters["kernel_count"] == 4000).all()


@pytest.mark.parametrize("stem", ["h200-vit-fp16", "h200-vit-fp8", "h200-vit-fp16-cudagraph"])
def test_vit_iterations_are_compute_bound(stem, sqlite_of, cache_dir):
    out = R.run("launch_compute", sqlite_of(stem))
    assert out["summary"].iloc[0]["verdict"] == "compute-bound"
    iters = out["by_range"][out["by_range"]["name"].str.fullmatch(r"iter\d+")]
    assert len(iters) == 20 and (iters["verdict"] == "compute-bound").all()
    assert iters["gpu_busy_pct"].min() > 85


def test_graph_replayed_kernels_belong_to_their_graph_launch(sqlite_of, cache_dir):
    out = R.run("launch_compute", sqlite_of("h200-vit-fp16-cudagraph"))
    per = out["per_kernel"]
    assert per.loc[per["api_name"].str.startswith("cudaGraphLaunch"), "count"].sum() > 2500
    iters = out["by_range"][out["by_range"]["name"].str.fullmatch(r"iter\d+")]
    # one cudaGraphLaunch per iteration launches all of its 129 kernels
    assert (iters["launch_calls"] == 1).all() and (iters["kernel_count"] == 129).all()


def test_syncy_workload_has_one_host_sync_per_block(sqlite_of, cache_dir):
    path = sqlite_of("h200-vit-fp16-syncy")
    out = R.run("sync_gaps", path)
    nvtx = nsightlab.open(path).nvtx(["name", "start_ns", "end_ns"])
    iters = nvtx[nvtx["name"].astype(str).str.fullmatch(r"iter\d+")]
    syncs = out["syncs"]
    stream = syncs[syncs["api_name"] == "cudaStreamSynchronize"]
    per_iter = [((stream["start_ns"] >= it.start_ns) & (stream["end_ns"] <= it.end_ns)).sum()
                for it in iters.itertuples()]
    assert per_iter == [12] * 20
    # and the GPU idles after them: each returns into a gap the host then fills
    inside = stream[(stream["start_ns"] >= iters["start_ns"].min())]
    assert (inside["gpu_idle_after_ns"] > 0).mean() > 0.9
    by_api = out["by_api"].set_index("api_name")
    assert by_api.loc["cudaStreamSynchronize", "gpu_idle_after_ns"] > 0
    gaps = out["gaps"]
    assert (gaps["cause"] == "sync").sum() > 0 and set(gaps["cause"]) <= {"sync", "launch", "host"}


def test_fp16_run_has_few_syncs_in_iterations(sqlite_of, cache_dir):
    path = sqlite_of("h200-vit-fp16")
    syncs = R.run("sync_gaps", path)["syncs"]
    nvtx = nsightlab.open(path).nvtx(["name", "start_ns", "end_ns"])
    iters = nvtx[nvtx["name"].astype(str).str.fullmatch(r"iter\d+")]
    inside = [((syncs["start_ns"] >= it.start_ns) & (syncs["end_ns"] <= it.end_ns)).sum()
              for it in iters.itertuples()]
    assert max(inside) == 0
