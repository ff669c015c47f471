"""The classes issue 57 found still missed, on H200 captures with the workloads' own truth
(tests/data/missed: nsys 2025.3, CUDA events around each iteration or decode step).

A run that ended before its loop and a trace of almost no GPU work get no steady-state verdict;
numbered NVTX ranges (reqN, replayN) are iterations, and an old tracer's unrecorded launches are
said with or without them; decode steps are found at their own level; a graph-level trace is
not compared kernel by kernel with a node-level one; a straggler is named by the wait it causes.
(Ctrl-C at the start of a capture: tests/test_capture.py; damaged rows: tests/faults.py.)
"""
from __future__ import annotations

import json
import lzma
from pathlib import Path

import numpy as np
import pytest

import nsightlab
import nsightlab.recipe_runner as R
from conftest import edited_copy, xz_fixtures
from nsightlab.analysis import processes
from nsightlab.run import report as run_report

MISSED = Path(__file__).parent / "data" / "missed"
PARTIAL = Path(__file__).parent / "data" / "partial"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return xz_fixtures(tmp_path_factory, MISSED, prefix="h200-")


@pytest.fixture(scope="module")
def old(tmp_path_factory):
    return xz_fixtures(tmp_path_factory, PARTIAL, prefix="h100-")


def truth(name: str) -> dict:
    with lzma.open(MISSED / "truth" / f"h200-{name}.truth.json.xz") as f:
        return json.load(f)


def periods(name: str, n: int | None = None) -> np.ndarray:
    """The workload's iteration periods (start to start, ms), of its first ``n`` windows."""
    w = truth(name)["windows"][:n]
    return np.diff([x["host_start_ns"] for x in w]) / 1e6


def summary(path) -> dict:
    return R.run("budget", nsightlab.open(path))["summary"].iloc[0]


# ---- 1. a run that ended before its loop; almost no GPU work ------------------------------

@pytest.mark.parametrize("name", ["dies", "dies_bare"])
def test_a_run_that_ended_before_its_loop_gets_no_steady_state_verdict(name, run, cache_dir):
    """ViT-S: weights copied in, then the run raised in its first pass (with NVTX block ranges,
    and bare). Before: '76 iterations of a 1-operation sequence ... copy-bound' and '13
    iterations of an 11-operation sequence ... launch-bound'."""
    s = summary(run(name))
    assert s["verdict"] == "no loop" and s["iterations"] == 1 and s["advice"] == ""
    rr = run_report.build(nsightlab.open(run(name)))
    assert rr.findings[0].startswith("no loop: nothing repeats in the trace: set-up and one pass")
    assert not any(f.startswith(("what to do", "copy-bound", "launch-bound")) for f in rr.findings)


def test_almost_no_gpu_work_is_not_launch_bound(run, cache_dir):
    """2 math kernels, a fill and a 4-byte copy in 37 ms: no loop, nothing to speed up, no
    CUDA-graph advice (before: 'launch-bound ... capture the loop as a CUDA graph')."""
    assert truth("tiny")["iterations"] == 0
    rr = run_report.build(nsightlab.open(run("tiny")))
    assert rr.findings[0].startswith("no loop: almost no GPU work in the trace (3 kernels and 1 "
                                     "copy (4 bytes)")
    assert not any("CUDA graph" in f for f in rr.findings)


# ---- 2. numbered ranges; an old tracer's unrecorded launches ----------------------------------

def test_numbered_ranges_are_the_iterations(run, cache_dir):
    """req0..req15 around ViT-S requests with host work between them, and replay0..replay9
    around CUDA graph replays: those are the iterations, and their median is the workload's."""
    s = summary(run("req"))
    assert s["iterations"] == 16 and "req0..., numbered ranges" in s["iteration_source"]
    assert s["wall_med_ns"] / 1e6 == pytest.approx(np.median(periods("req", 16)[1:]), rel=0.1)
    s = summary(run("replay"))
    assert s["iterations"] == truth("replay")["iterations"] == 10
    assert "replay0..." in s["iteration_source"]


def test_an_old_tracer_with_unnamed_iterations_says_launches_went_unrecorded(old, tmp_path,
                                                                             cache_dir):
    """nsys 2023.4 around a CUDA 13 graph replay loop: its iter ranges renamed replayN, and
    removed: both say the launches went unrecorded (880 cuGetProcAddress look-ups)."""
    src = old("old-graph")
    renamed = edited_copy(src, tmp_path / "replay.sqlite", "NVTX_EVENTS",
                          ("UPDATE {t} SET text = replace(text, 'iter', 'replay')",))
    bare = edited_copy(src, tmp_path / "bare.sqlite", "NVTX_EVENTS", ("DELETE FROM {t}",))
    for path, words in ((renamed, "10 of 10 iterations"), (bare, "no iterations were found")):
        w = {x["check"]: x for x in run_report.build(nsightlab.open(path)).warnings}
        msg = w["launches_untraced"]["message"]
        assert w["launches_untraced"]["severity"] == "partial"
        assert words in msg and "880" in msg and "cuGetProcAddress" in msg


# ---- 3. decode steps at their own level --------------------------------------------------------

def test_decode_steps_are_the_iterations(run, cache_dir):
    """A Llama of 8 layers, greedy generate(), no NVTX, the first 2 of 3 calls kept (64 steps:
    2 prefills, 62 decode steps): one token is one iteration (before: 2 tokens), and the steady
    median is the decode steps' (their copy and cast kernels alternate from token to token)."""
    t = truth("decode")
    s = summary(run("decode"))
    assert abs(int(s["iterations"]) - 64) <= 2, s["iteration_source"]
    decode = [x["gpu_ms"] for x in t["steps"] if x["kind"] == "decode"]
    assert s["wall_med_ns"] / 1e6 == pytest.approx(np.median(decode), rel=0.1)


# ---- 4. graph level against node level ---------------------------------------------------------

def test_a_graph_level_trace_is_not_compared_kernel_by_kernel(run, cache_dir):
    """The same 8-layer MLP eager (16 kernels an iteration) and as a CUDA graph traced at
    graph level: the ratio holds the events' one, no class change, no 'same model?' warning,
    and --cuda-graph-trace=node is named."""
    d = nsightlab.diff(run("eager_mlp"), run("replay"))
    h = d.headline
    assert "B replays a CUDA graph whose kernels were not recorded" in h["verdict"]
    assert "--cuda-graph-trace=node" in h["verdict"]
    assert not any("math kernels differ" in w for w in h["workload_warnings"])
    assert d.by_class["delta_ns"].isna().all() and "GEMMs take" not in h["verdict"]
    ratio = np.median(periods("replay")[1:]) / np.median(periods("eager_mlp")[1:])
    assert h["interval"]["low"] <= ratio <= h["interval"]["high"]


# ---- 7. a straggler by GPU work -----------------------------------------------------------------

def test_a_straggler_by_gpu_work_is_named_with_its_cause(run, cache_dir):
    """2-rank DDP ResNet-50, rank 1 with twice rank 0's batch (8 of its 40 steps kept): rank 0
    waits in its all-reduces; rank 1 is the straggler and its cause is its GPU work."""
    steps = [np.median([x["gpu_ms"] for x in truth(f"ddp_uneq.rank{r}")["windows"][2:8]])
             for r in (0, 1)]
    assert steps[0] == pytest.approx(steps[1], rel=0.05)  # DDP: both step together
    pr = run_report.build(nsightlab.open(run("ddp_uneq")))
    assert pr.straggler.startswith("straggler: rank 1")
    assert "GPU work other than NCCL" in pr.straggler
    assert pr.collectives["straggler_caused_pct"] >= 200 / 3


def test_the_straggler_is_who_the_others_wait_for_not_who_arrives_last_most():
    """Collectives on made-up times: rank 1 arrives last to 6 of 10 collectives but by 5 ms,
    rank 0 to 4 by 0.1 ms: rank 1 caused the waiting (96%); arrivals alternating by the same
    margin name no one."""
    n = 10
    late1 = np.arange(n) < 6
    starts = np.zeros((2, n), np.int64)
    starts[1, late1] = 5_000_000
    starts[0, ~late1] = 100_000
    ends = starts.max(axis=0)[None, :] + np.array([[1_000_000], [1_000_000]])
    c = processes.matched({0: _kernels(starts[0], ends[0]), 1: _kernels(starts[1], ends[1])},
                          {0: _kernels([], []), 1: _kernels([], [])}, {0: 0, 1: 1})
    assert c["straggler"] == 1 and c["straggler_last_pct"] == 60
    assert c["straggler_caused_pct"] > 90
    even = np.where(np.arange(n) % 2, 100_000, 0)
    starts = np.vstack([even, 100_000 - even])
    ends = np.full((2, n), 2_000_000)
    c = processes.matched({0: _kernels(starts[0], ends[0]), 1: _kernels(starts[1], ends[1])},
                          {0: _kernels([], []), 1: _kernels([], [])}, {0: 0, 1: 1})
    assert c["straggler"] is None


def _kernels(starts, ends):
    import pandas as pd
    return pd.DataFrame({"start_ns": np.asarray(starts, np.int64),
                         "end_ns": np.asarray(ends, np.int64)})
