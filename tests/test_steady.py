"""Iterations found in runs without iteration ranges, and the steady state, checked against
the workloads' own truth: CUDA events around every iteration (tests/data/steady, captured on
an H100 with plain ``nsys profile``; the truth never comes from nsightlab)."""
from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import nsightlab
import nsightlab.recipe_runner as R
from conftest import xz_fixtures
from nsightlab.analysis import completeness, iterations, kinds
from nsightlab.cli import cli

STEADY = Path(__file__).parent / "data" / "steady"
WITH_TRUTH = sorted(p.name.removeprefix("h100-").removesuffix(".truth.json")
                    for p in (STEADY / "truth").glob("h100-*.truth.json")
                    if "nvtx" not in p.name)  # nvtx_warmup has iteration ranges


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return xz_fixtures(tmp_path_factory, STEADY, prefix="h100-")


def truth(name: str) -> dict:
    t = json.loads((STEADY / "truth" / f"h100-{name}.truth.json").read_text())
    starts = np.array([w["host_start_ns"] for w in t["windows"]], float)
    # the loop's period: window start to window start (a loop iteration holds the sync and
    # the host's own work between the timed calls, as nsightlab's wall-clock windows do)
    t["period_ms"] = float(np.median(np.diff(starts))) / 1e6
    return t


def test_the_truth_set_covers_the_class():
    """Decode, training, graph replay (graph- and node-level tracing), serving with pageable
    copies, synchronized and asynchronous inference, torch.compile and autotuning."""
    assert {"decode", "train", "graph", "graph-node", "serve", "infer_sync", "infer_async",
            "compile", "autotune"} <= set(WITH_TRUTH)


@pytest.mark.parametrize("name", WITH_TRUTH)
def test_iterations_found_match_the_workloads_events(name, run, cache_dir):
    """Within 10% of the events' count, and the median steady iteration within 10% of the
    events' loop period."""
    t = truth(name)
    s = R.run("budget", run(name))["summary"].iloc[0]
    assert "found in the trace" in s["iteration_source"]
    assert abs(s["iterations"] - t["iterations"]) <= 0.1 * t["iterations"], s["iteration_source"]
    assert s["wall_med_ns"] / 1e6 == pytest.approx(t["period_ms"], rel=0.1)
    assert s["steady_iterations"] >= 0.5 * s["iterations"]


@pytest.mark.parametrize("name,evidence", [
    ("decode", "synchronizing call"), ("train", "synchronizing call"),
    ("infer_sync", "synchronizing call"), ("infer_async", "asynchronous loop"),
])
def test_the_source_says_what_marked_the_iterations(name, evidence, run, cache_dir):
    found = iterations.find(nsightlab.open(run(name)))
    assert evidence in found.source and found.alike_pct >= 60


def test_decode_steps_are_iterations_not_the_layers_inside_or_the_calls_around(run, cache_dir):
    """A GPT-2-shaped decoder, 3 calls x 24 tokens: a token (one .item() sync each) is the
    iteration; the first call is warm-up (cuBLAS and allocator start-up, 48-1844 ms a token
    by its events); the verdict is about the GPU idle between launches (busy ~5%)."""
    s = R.run("budget", run("decode"))["summary"].iloc[0]
    assert 66 <= s["iterations"] <= 78 and s["warmup_iterations"] >= 20
    assert s["verdict"] == "launch-bound"
    assert s["kernels_pct"] < 10


def test_graph_level_traces_are_gpu_work_and_not_partial(run, cache_dir):
    """nsys's default --cuda-graph-trace=graph: the 30 replays are graph executions, which
    count as GPU work; launches made inside the stream capture are not missing kernels."""
    r = nsightlab.open(run("graph"))
    assert r.row_count("graph_execs") == 30
    assert not completeness.partial(completeness.check(r))
    s = R.run("budget", r)["summary"].iloc[0]
    assert s["kernels_pct"] > 20 and s["iterations"] == 30
    node = R.run("budget", run("graph-node"))["summary"].iloc[0]
    assert node["kernels_pct"] > 20 and node["iterations"] == 30


def test_a_killed_run_gets_no_verdict(tmp_path_factory, cache_dir):
    """A loop without NVTX ranges SIGKILLed from outside 3 s in (tests/data/partial's
    h100-killed-bare): nsys kept 3 API calls, no kernel."""
    partial = xz_fixtures(tmp_path_factory, STEADY.parent / "partial", prefix="h100-")
    res = CliRunner().invoke(cli, ["report", str(partial("killed-bare"))])
    assert res.exit_code == 0, res.output
    assert "PARTIAL" in res.output and "no performance verdict" in res.output


def test_iterations_without_gpu_work_make_the_trace_partial(sqlite_of, cache_dir, tmp_path):
    """Generated from a real GPU-metrics capture: the kernels of iterations 5-9 deleted (as
    when the kernel trace stops): PARTIAL, and no verdict, where the counts alone pass."""
    src = sqlite_of("h200-vit-fp16-gpumetrics")
    cut = tmp_path / "cut.sqlite"
    cut.write_bytes(src.read_bytes())
    with sqlite3.connect(cut) as c:
        lo, hi = c.execute("SELECT min(start), max([end]) FROM NVTX_EVENTS "
                           "WHERE text IN ('iter5', 'iter9')").fetchone()
        c.execute("DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE start BETWEEN ? AND ?",
                  (lo, hi + 5_000_000))
    res = CliRunner().invoke(cli, ["report", str(cut)])
    assert res.exit_code == 0, res.output
    assert "iterations hold no kernel although" in res.output and "no performance verdict" in res.output


def test_with_ranges_the_warm_up_does_not_decide_the_verdict(run, cache_dir):
    """NVTX iterN ranges around a GEMM and a 32 MiB pinned D2H, synchronized: the first
    iteration carries cuBLAS initialisation (181.5 ms by its events, then ~0.95 ms). The mean
    of all 16 would be 12 ms and host-bound; the steady state is copy-bound."""
    t = truth("nvtx_warmup")
    s = R.run("budget", run("nvtx_warmup"))["summary"].iloc[0]
    assert s["iterations"] == t["iterations"] == 16 and 1 <= s["warmup_iterations"] <= 2
    assert s["verdict"] == "copy-bound (d2h pinned)"
    assert s["wall_med_ns"] / 1e6 == pytest.approx(t["period_ms"], rel=0.1)
    assert s["wall_ns"] < 1.1 * s["wall_med_ns"]


def test_warm_up_is_a_prefix_and_isolated_iterations_are_outliers():
    w = np.array([90.0, 40] + [10, 10.2, 9.9, 10.1] * 10)
    w[6], w[30] = 30, 2.0
    loop = kinds.classify(w)
    assert loop.warmup == 2 and list(loop.outliers) == [6, 30]
    st = kinds.stats(w, loop.label)
    # the loop's statistics keep the outliers: never taken after trimming
    assert st["steady_iterations"] == 40 and st["p50_ns"] == pytest.approx(np.median(w[2:]))
    assert st["mean_ns"] == pytest.approx(w[2:].mean()) and st["max_ns"] == 30.0


def test_outliers_are_never_more_than_5_percent_of_the_loop():
    """Two extreme iterations in a loop of 9 are not "outliers" (22%): the most extreme one
    at most, the other the main kind's."""
    w = np.array([90.0, 40, 10, 10.2, 9.9, 10.1, 30, 10, 9.8, 10.1, 2.0])
    loop = kinds.classify(w)
    assert loop.warmup == 2 and len(loop.outliers) <= 1


def test_a_regular_loop_is_one_kind():
    w = 5.0 + 0.05 * np.sin(np.arange(30))
    loop = kinds.classify(w)
    assert (loop.label == kinds.MAIN).all() and loop.trend is None


def test_the_budget_is_the_mean_of_the_loop_after_warm_up(run, cache_dir):
    """The parts add up to the loop's mean (every iteration after warm-up), not to a mean the
    warm-up decides."""
    out = R.run("budget", run("compile"))
    s, it = out["summary"].iloc[0], out["iterations"]
    st = it[it["phase"] == "loop"]
    assert s["wall_ns"] == pytest.approx(st["wall_ns"].mean())
    parts = sum(s[f"{p}_ns"] for p in ("kernels", "h2d_pageable", "h2d_pinned", "d2h_pageable",
                                       "d2h_pinned", "d2d", "peer", "copy_other", "memset",
                                       "idle_sync", "idle_launch", "idle_host",
                                       "idle_unattributed"))
    assert parts == pytest.approx(s["wall_ns"])
    assert it["wall_ns"].max() > 100 * s["wall_med_ns"]  # the compiling call, left out


def test_report_says_the_loop_and_what_was_left_out(run, cache_dir):
    res = CliRunner().invoke(cli, ["report", str(run("compile"))])
    assert res.exit_code == 0, res.output
    assert "loop: " in res.output and "warm-up left out: " in res.output
    assert "warm-up and outlier iterations:" in res.output


def test_diff_of_runs_without_ranges_compares_their_steady_iterations(run, cache_dir):
    """Synchronized vs asynchronous ViT-S loops: the same kernels per pass; the diff lines up
    their found iterations."""
    d = nsightlab.diff(run("infer_sync"), run("infer_async"))
    h = d.headline
    assert "found in the trace" in h["a_iteration_source"]
    assert "found in the trace" in h["b_iteration_source"]
    assert h["a_kernels"] == pytest.approx(h["b_kernels"], rel=0.05)


def test_graph_rows_in_kernel_sum_and_per_kernel_comparisons_say_what_they_need(run, cache_dir):
    """Graph executions appear as graph rows in kernel_sum, after the kernels and outside
    their percentages; a diff against the node-level trace of the same program says that the
    graph-level run needs --cuda-graph-trace=node for per-kernel answers."""
    ks = R.run("kernel_sum", run("graph"))["kernel_sum"]
    graphs = ks[ks["kernel_class"] == "cuda graph"]
    assert len(graphs) == 1 and graphs["instances"].iloc[0] == 30
    assert graphs["time_pct"].isna().all()
    assert ks.loc[ks["kernel_class"] != "cuda graph", "time_pct"].sum() == pytest.approx(100)
    d = nsightlab.diff(run("graph"), run("graph-node"))
    assert any("--cuda-graph-trace=node" in w for w in d.headline["a_warnings"])
    assert d.headline["a_iterations"] == d.headline["b_iterations"] == 30


def test_blocks_inside_found_iterations_are_layers(run, cache_dir):
    """ViT-S has 12 transformer blocks a pass and no NVTX ranges: the repeated blocks inside
    each found iteration are layers (block0..block11), so a diff lines runs up by them."""
    found = iterations.find(nsightlab.open(run("infer_sync")))
    assert set(found.layers["name"]) == {f"block{j}" for j in range(12)}
    d = nsightlab.diff(run("infer_sync"), run("infer_async"))
    mid = d.by_layer[d.by_layer["layer"].isin([f"block{j}" for j in range(2, 11)])]
    assert len(mid) == 9 and (mid["status"] == "matched").all()
    assert (mid["b_ns"] / mid["a_ns"]).between(0.9, 1.1).all()  # the same kernels per block


def test_an_iteration_range_never_closed_around_work_is_partial(sqlite_of, cache_dir, tmp_path):
    """Generated from a real export: the process 'died' inside its first iteration (the
    iter0 range left open, the later iteration ranges gone): no verdict over what is left."""
    cut = tmp_path / "died.sqlite"
    cut.write_bytes(sqlite_of("h200-vit-fp16").read_bytes())
    with sqlite3.connect(cut) as c:
        c.execute("UPDATE NVTX_EVENTS SET [end] = NULL WHERE text = 'iter0'")
        c.execute("DELETE FROM NVTX_EVENTS WHERE text LIKE 'iter%' AND text != 'iter0'")
    found = completeness.check(nsightlab.open(cut))
    assert any(f["check"] == "iteration_open" and f["severity"] == "partial" for f in found)
    res = CliRunner().invoke(cli, ["report", str(cut)])
    assert "no performance verdict" in res.output


def test_an_int8_pair_without_ranges_is_explained(tmp_path_factory, cache_dir):
    """FP16 vs dynamic-int8 MLP (H200, no NVTX): the same 6 GEMMs a pass, so no workload
    warning; B is slower, and the headline names the conversion work, the launch idle that
    grew with 78 kernels a pass instead of 12, and the GEMM change; no per-layer rows when
    only one run has blocks."""
    h200 = xz_fixtures(tmp_path_factory, STEADY, prefix="h200-")
    d = nsightlab.diff(h200("mlp_fp16"), h200("mlp_int8"))
    h = d.headline
    assert h["a_iterations"] == h["b_iterations"] and abs(h["a_iterations"] - 20) <= 2
    assert h["workload_warnings"] == []
    assert "precision-conversion kernels only in B" in h["verdict"]
    assert "GPU idle waiting for launches rose" in h["verdict"] and "78 kernels" in h["verdict"]
    assert "its GEMMs take" in h["verdict"]
    assert list(d.by_layer["layer"]) == ["(outside layers)"]
    prec = d.by_precision.set_index(["precision", "kernel_class"])
    assert prec.loc[("int8", "gemm"), "b_ns"] > 0 and prec.loc[("fp16", "gemm"), "a_ns"] > 0
