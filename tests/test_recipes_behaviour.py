"""Recipes on the real workloads: the answers a performance engineer expects from each."""
from __future__ import annotations

import pytest

import nsightlab
import nsightlab.recipe_runner as R
from nsightlab.read.frames import plain_text


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


def test_tensor_core_from_gpu_metrics_is_high_in_gemms_and_near_zero_in_elementwise(sqlite_of, cache_dir):
    out = R.run("tensor_core", sqlite_of("h200-vit-fp16-gpumetrics"))
    assert out["summary"].iloc[0]["source"] == "gpu_metrics"
    bk = out["by_kernel"].set_index("kernel_class")
    measured = out["by_kernel"][out["by_kernel"]["source"] == "gpu_metrics"]
    gemm = measured[measured["kernel_class"] == "gemm"].nlargest(1, "total_ns").iloc[0]
    assert gemm["tensor_active_avg_pct"] > 60
    for cls in ("norm", "elementwise"):
        top = measured[measured["kernel_class"] == cls].nlargest(1, "total_ns").iloc[0]
        assert top["tensor_active_avg_pct"] < 5, cls
    assert len(bk) > 0
    # per block: every block range of the timed iterations has Tensor Core activity
    br = out["by_range"]
    blocks = br[br["name"].str.fullmatch(r"block\d+") & (br["depth"] == 1)]
    assert len(blocks) == 240 and (blocks["tensor_active_avg_pct"] > 10).all()
    assert len(out["over_time"]) > 100


def test_tensor_core_from_ncu_reports(sqlite_of, cache_dir):
    from conftest import SHARED

    fp16 = SHARED / "ncu" / "h200-gemm-fp16.ncu-rep"
    block3 = SHARED / "ncu" / "h200-vit-fp16-block3.ncu-rep.xz"
    if not fp16.is_file():
        pytest.skip("../shared/fixtures/ncu is not present")
    pytest.importorskip("ncu_report")
    k = R.run("tensor_core", sqlite_of("h200-vit-fp16"), {"ncu": str(fp16)})["ncu_kernels"]
    assert len(k) == 1 and k.iloc[0]["kernel_class"] == "gemm"
    assert 93 < k.iloc[0]["tensor_active_pct"] < 98  # the FP16 GEMM keeps the tensor pipe ~95% busy
    k3 = R.run("tensor_core", sqlite_of("h200-vit-fp16"), {"ncu": str(block3)})["ncu_kernels"]
    assert len(k3) == 40 and k3["nvtx"].str.endswith("block3").all()  # "block3" or "iter0/block3"
    gemms = k3[k3["kernel_class"] == "gemm"]["tensor_active_pct"]
    others = k3[k3["kernel_class"].isin(["norm", "elementwise"])]["tensor_active_pct"]
    assert gemms.min() > 50 and others.max() < 5


def test_tensor_core_without_metrics_is_an_estimate(sqlite_of, cache_dir):
    out = R.run("tensor_core", sqlite_of("h200-vit-fp8"))
    assert out["summary"].iloc[0]["source"] == "estimate"
    bk = out["by_kernel"]
    assert (bk["source"] == "estimate").all() and bk["tensor_active_avg_pct"].isna().all()
    fp8_gemms = bk[(bk["kernel_class"] == "gemm") & (bk["precision"] == "fp8")]
    assert len(fp8_gemms) >= 3 and fp8_gemms["uses_tensor_cores"].all()


def test_nvtx_gpu_projects_iterations_and_blocks(sqlite_of, cache_dir):
    out = R.run("nvtx_gpu", sqlite_of("h200-vit-fp16"))
    r = out["ranges"]
    iters = r[r["name"].str.fullmatch(r"iter\d+")]
    assert len(iters) == 20 and (iters["kernel_count"] == 129).all()
    # an iteration owns the kernels of its 12 blocks (and a few of its own)
    for it in iters.itertuples():
        blocks = r[(r["depth"] == 1) & (r["start_ns"] >= it.start_ns) & (r["end_ns"] <= it.end_ns)
                   & r["name"].str.fullmatch(r"block\d+")]
        assert len(blocks) == 12 and blocks["kernel_time_ns"].sum() <= it.kernel_time_ns
    assert (iters["gpu_span_ns"] > 6_000_000).all() and (iters["gpu_span_ns"] < 7_000_000).all()


def test_gpu_util_bins_add_up_to_busy_time(sqlite_of, cache_dir):
    path = sqlite_of("h200-launchbound")
    out = R.run("gpu_util", path, {"bin_ms": 5})
    dev = out["device"]
    k = nsightlab.open(path).kernels(["duration_ns"])
    # one stream, kernels never overlap: busy time over all bins = total kernel time
    assert dev["busy_ns"].sum() == k["duration_ns"].sum()
    assert dev["busy_pct"].between(0, 100).all() and dev["busy_pct"].mean() < 50
    assert dev["ops"].sum() == len(k)
    assert out["stream"]["busy_ns"].sum() == dev["busy_ns"].sum()


def test_sync_calls_carry_their_call_stacks(sqlite_of, cache_dir):
    """pub-pipit-saxpy-a100 recorded CUDA backtraces: each synchronous cudaMemcpy's stack
    goes through cudaMemcpy and main (not a neighbour's stack: the ids are offset by one)."""
    syncs = R.run("sync_gaps", sqlite_of("pub-pipit-saxpy-a100"))["syncs"]
    stacks = syncs.loc[(syncs["api_name"] == "cudaMemcpy") & syncs["call_stack"].notna(), "call_stack"]
    assert len(stacks) == 15
    assert all(" < cudaMemcpy < " in s and " < main < " in s for s in stacks)


def test_call_stacks_for_any_number_of_ids(sqlite_of, cache_dir):
    """Looked up in chunks: asking for 40,000 ids (more than one query takes) still finds the
    real stacks among them."""
    import nsightlab

    r = nsightlab.open(sqlite_of("pub-pipit-saxpy-a100"))
    ids = r.cuda_api(["callchain_id"])["callchain_id"].dropna().astype(int).unique()
    few = r.call_stacks(ids)
    many = r.call_stacks(list(range(40_000)) + list(ids))
    assert few and all(many[i] == s for i, s in few.items())


@pytest.mark.parametrize("stem", ["h200-vit-fp8", "h200-vit-fp16-cudagraph", "pub-realcugan-trt10",
                                  "pub-fuser-matmul-h100", "pub-pipit-cloverleaf-a100",
                                  "two-gpus"])
def test_tensor_core_estimate_per_name_equals_per_kernel(stem, sqlite_of, cache_dir, tmp_path):
    """Without GPU metrics, tensor_core sums kernels per (GPU, name) and labels the names
    (``per_name``); labelling every kernel and summing those (the path GPU metrics take) must
    give the same summary and by_kernel tables, exactly: real reports of several programs and
    nsys versions, and a two-GPU edit of one (every other kernel on device 1)."""
    import shutil
    import sqlite3

    import numpy as np
    import pandas as pd

    from nsightlab.recipe_api import annotate

    if stem == "two-gpus":
        path = tmp_path / "two-gpus.sqlite"
        shutil.copy(sqlite_of("h200-vit-fp8"), path)
        with sqlite3.connect(path) as c:
            c.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET deviceId = 1 WHERE correlationId % 2 = 1")
    else:
        path = sqlite_of(stem)
    report = nsightlab.open(path)
    got = R.run("tensor_core", report)
    mod = R.get("tensor_core").module
    k = annotate(report.kernels(["device_id", "name", "start_ns", "end_ns", "duration_ns"]))
    k["uses_tensor_cores"] = k["tensor_core"]
    want = {"summary": mod.summary(k, None, None),
            "by_kernel": mod.by_kernel(k, pd.DataFrame(columns=["activity_pct", "covered_ns"]))}
    assert sorted(got) == ["by_kernel", "summary"]
    if stem == "two-gpus":
        assert list(got["summary"]["gpu"]) == [0, 1]
    for table, frame in want.items():
        pd.testing.assert_frame_equal(got[table].reset_index(drop=True),
                                      plain_text(frame).reset_index(drop=True),
                                      check_dtype=False, obj=f"{stem} {table}")
        assert np.array_equal(got[table]["instances" if table == "by_kernel" else "gpu"],
                              frame["instances" if table == "by_kernel" else "gpu"])
