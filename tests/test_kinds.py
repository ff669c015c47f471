"""Kinds of iteration, statistics without trimming and the right level (issue 45), checked
against the workloads' own truth: CUDA events around every iteration, and the kind the
workload knows each one to be (tests/data/kinds, captured on an H100 with plain
``nsys profile``; the truth never comes from nsightlab)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import nsightlab
import nsightlab.recipe_runner as R
from conftest import xz_fixtures
from nsightlab.analysis import kinds
from nsightlab.cli import cli
from nsightlab.run import report as run_report

KINDS = Path(__file__).parent / "data" / "kinds"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return xz_fixtures(tmp_path_factory, KINDS, prefix="h100-")


def truth(name: str, iterations: int | None = None) -> dict:
    """The workload's truth (the first ``iterations`` windows: a trimmed capture keeps the
    first ones): period start to start, per iteration and per kind."""
    t = json.loads((KINDS / "truth" / f"h100-{name}.truth.json").read_text())
    w = t["windows"][:iterations] if iterations else t["windows"]
    starts = np.array([x["host_start_ns"] for x in w], float)
    t["period"] = np.diff(starts) / 1e6  # iteration i: start i to start i+1
    t["kind"] = np.array([x["kind"] for x in w])
    return t


def budget(report) -> tuple:
    out = R.run("budget", nsightlab.open(report))
    it = out["iterations"]
    return out["summary"].iloc[0], it[it["device_id"] == it["device_id"].iloc[0]], out["kinds"]


# ---- the rules, on sequences whose answer is known -------------------------------------------

def test_every_nth_slow_iteration_is_a_kind_not_an_outlier():
    rng = np.random.default_rng(1)
    w = 7.1 * np.exp(rng.normal(0, 0.15, 40))
    w[3::4] = rng.uniform(165, 259, 10)
    loop = kinds.classify(w)
    assert loop.warmup == 0 and not len(loop.outliers)
    b = loop.kinds[1]
    assert b.pattern == "recurring" and b.period == 4 and list(b.rows) == list(range(3, 40, 4))


def test_a_loop_that_changes_speed_is_a_phase():
    rng = np.random.default_rng(2)
    w = np.r_[80.0, 5 + rng.normal(0, 0.05, 24), 9 + rng.normal(0, 0.05, 20)]
    loop = kinds.classify(w)
    assert loop.warmup == 1 and loop.kinds[1].pattern == "phase"
    assert list(loop.kinds[1].rows) == list(range(25, 45))


def test_a_gradual_slowdown_is_a_trend_and_not_split():
    rng = np.random.default_rng(3)
    w = 5 * (1 + 0.3 * np.arange(44) / 43) * np.exp(rng.normal(0, 0.01, 44))
    loop = kinds.classify(w)
    assert len(loop.kinds) == 1 and not len(loop.outliers) and loop.warmup == 0
    assert loop.trend["change_pct"] == pytest.approx(26, abs=6)


def test_noise_does_not_split_into_kinds():
    w = 5 * np.exp(np.random.default_rng(4).normal(0, 0.08, 100))
    loop = kinds.classify(w)
    assert len(loop.kinds) == 1 and loop.trend is None and len(loop.outliers) <= 5


def test_two_shapes_alternating_are_two_kinds_even_while_one_drifts():
    w = np.where(np.arange(44) % 2 == 0, 12.8 - 2.2 * np.arange(44) / 43, 14.7)
    loop = kinds.classify(w)
    assert [k.period for k in loop.kinds[1:]] == [2] and len(loop.kinds[1].rows) == 22


def test_the_loop_statistics_keep_every_iteration_after_warm_up():
    w = np.array([90.0, 10, 10.2, 9.9, 10.1, 30, 10, 9.8, 10.1, 10.0])
    loop = kinds.classify(w)
    st = kinds.stats(w, loop.label)
    assert loop.warmup == 1 and list(loop.outliers) == [5]
    assert st["mean_ns"] == pytest.approx(w[1:].mean()) and st["max_ns"] == 30.0
    assert st["p50_ns"] == pytest.approx(np.median(w[1:]))


# ---- real captures -----------------------------------------------------------------------------

def test_the_truth_set_covers_the_class():
    names = {p.name.removeprefix("h100-").removesuffix(".truth.json")
             for p in (KINDS / "truth").glob("*.truth.json")}
    assert {"periodic_d2h", "phase", "drift_copy", "hiccup", "hf_s32", "deit_fp16",
            "deit_bf16"} <= names


def test_every_4th_iteration_copying_to_pageable_memory_is_said_first(run, cache_dir):
    """ResNet-50 fp16, NVTX iterN ranges (28 kept); every 4th also copies a 256 MiB
    activation to pageable host memory. By its events the copying iterations take ~180 ms and
    hold most of the loop's time; the others ~7 ms. The first finding says so, time-weighted;
    the loop's verdict follows the time (copy-bound), the main kind's is its own."""
    s, it, _ = budget(run("periodic_d2h"))
    t = truth("periodic_d2h", len(it))
    loop = it["phase"].to_numpy() == "loop"
    copying = (t["kind"] == "copy")[:len(it)]
    # nsightlab's kind B is exactly the workload's copying iterations after warm-up
    assert set(np.flatnonzero(it["kind"].to_numpy() == "B")) == set(np.flatnonzero(copying & loop))
    rr = run_report.build(run("periodic_d2h"))
    first = rr.findings[0]
    assert first.startswith("every 4th iteration (") and "device-to-host copies into pageable " \
        "memory (256 MiB more an iteration)" in first
    share = float(first.rsplit(": ", 1)[1].split("%")[0])
    truth_share = 100 * t["period"][copying[:-1] & loop[:-1]].sum() / t["period"][loop[:-1]].sum()
    assert share == pytest.approx(truth_share, abs=3)
    assert s["verdict"] == "copy-bound (d2h pageable)"
    main = next(f for f in rr.findings if f.startswith("the main kind"))
    assert main.endswith("compute-bound")
    assert rr.findings.index(main) < next(i for i, f in enumerate(rr.findings)
                                          if f.startswith("the loop, every kind"))
    # the loop's numbers keep the copying iterations: the mean is what throughput sees
    wall = it["wall_ns"].to_numpy() / 1e6
    assert s["wall_ns"] / 1e6 == pytest.approx(wall[loop].mean())
    # every iteration the events time (the last one's period is not known to them)
    assert wall[:-1][loop[:-1]].mean() == pytest.approx(t["period"][loop[:-1]].mean(), rel=0.05)
    assert s["wall_med_ns"] / 1e6 == pytest.approx(np.median(t["period"][loop[:-1]]), rel=0.05)
    assert s["outlier_iterations"] == 0 and s["kinds"] == 2


def test_a_loop_that_slows_after_iteration_24_is_a_phase_with_its_cause(run, cache_dir):
    """ViT-S fp16: from pass 24 the host also does 4 ms of Python work before each pass."""
    s, it, k = budget(run("phase"))
    t = truth("phase")
    host = np.flatnonzero(t["kind"] == "host")
    b = k[k["kind"] == "B"].iloc[0]
    assert b["pattern"] == "phase" and b["which"].startswith(f"from iteration {host[0]} on")
    assert "host work with the GPU idle" in b["cause"]
    assert b["med_ns"] / 1e6 == pytest.approx(np.median(t["period"][host[:-1]]), rel=0.05)
    assert s["outlier_iterations"] <= 2  # at most 5% of the loop


def test_a_growing_copy_is_a_trend_with_the_part_that_grows(run, cache_dir):
    """A pinned H2D copy growing 2 MiB a pass before a fixed GEMM chain: one kind, a trend,
    copies the part that grows; no kinds and no more than 5% outliers."""
    s, it, k = budget(run("drift_copy"))
    t = truth("drift_copy")
    main = k[k["kind"] == "main"].iloc[0]
    assert main["pattern"] == "trend" and "slows down" in main["which"]
    assert "host-to-device copies (pinned)" in main["cause"]
    assert s["kinds"] == 1 and s["outlier_iterations"] <= 0.05 * s["steady_iterations"] + 1
    q = len(t["period"]) // 4
    grew = np.median(t["period"][-q:]) / np.median(t["period"][2:2 + q]) - 1
    said = float(main["which"].split("slows down ")[1].split("%")[0]) / 100
    assert said == pytest.approx(grew, rel=0.25)
    assert "UNSTABLE" not in s["evidence"]  # a trend is said as one, not as noise


def test_only_the_two_stalled_passes_are_outliers(run, cache_dir):
    """ViT-S fp16, passes 17 and 31 stall the host for 30 ms. The capture also holds two
    stretches of slower passes (9-16, 24-34, ~7.5 ms against ~4.6 ms by the events): a cluster
    kind, not outliers."""
    s, it, k = budget(run("hiccup"))
    t = truth("hiccup")
    odd = set(np.flatnonzero(it["kind"].to_numpy() == "outlier"))
    stalls = set(np.flatnonzero(t["kind"] == "stall"))
    # the stalls, and at most the first pass after the warm-up by work (5.4 ms against 4.6 by
    # the events: an isolated slow pass, not a significant slower start)
    assert stalls <= odd and odd - stalls <= {s["warmup_iterations"]}
    odd = k[k["kind"] == "outlier"].iloc[0]
    assert "host work with the GPU idle" in odd["cause"]
    cluster = k[k["pattern"] == "cluster"]
    assert len(cluster) == 1 and cluster.iloc[0]["which"].startswith("iterations 9-16, 24-34")


def test_decode_tokens_are_the_unit_with_generate(run, cache_dir):
    """Hugging Face ``generate`` (GPT-2 shaped, 4 layers), 4 calls x 32 tokens, no NVTX: the
    unit is one token (count within 1, median within 5% of the events' period), although the
    attention kernels change with the KV length; the first call is warm-up; the calls are the
    outer level and their prefills a recurring kind."""
    s, it, _ = budget(run("hf_s32"))
    t = truth("hf_s32")
    assert abs(int(s["iterations"]) - t["iterations"]) <= 1
    assert "but for kernels that change" in s["iteration_source"]
    loop = it["phase"].to_numpy() == "loop"
    assert s["wall_med_ns"] / 1e6 == pytest.approx(np.median(t["period"][loop[:-1]]), rel=0.05)
    assert 30 <= s["warmup_iterations"] <= 34
    # the generate() calls are the level around the tokens, and each call's prefill (its
    # first forward, over the whole prompt) is a kind of its own: one every 32 tokens
    assert "32 iterations x 4 outer units" in s["iteration_source"]
    # (the prefills are other work than the tokens: a kind of work of their own; so is each
    # call's last token, which prepares no next one)
    prefill = np.flatnonzero(t["kind"] == "prefill")
    prefill = set(prefill[prefill >= s["warmup_iterations"]])
    label = it["kind"].to_numpy()
    of = {x: set(np.flatnonzero(label == x)) for x in set(label) - {"main", "warm-up", "outlier"}}
    assert prefill in of.values()


def test_diff_of_two_precisions_compares_untrimmed_medians(run, cache_dir):
    """DeiT-S fp16 vs bf16 (24 passes kept each): the headline's ratio is the ratio of the
    events' medians, not of medians after one-sided trimming."""
    d = nsightlab.diff(run("deit_fp16"), run("deit_bf16"))
    a, b = truth("deit_fp16", 24), truth("deit_bf16", 24)
    ratio = np.median(b["period"][2:]) / np.median(a["period"][2:])
    assert 1 / d.headline["speedup"] == pytest.approx(ratio, rel=0.02)


def test_diff_says_when_the_runs_kinds_differ(run, cache_dir):
    d = nsightlab.diff(run("phase"), run("periodic_d2h"))
    v = d.headline["verdict"]
    assert "the runs' kinds of iteration differ" in v and "every 4th iteration" in v
    assert d.headline["b_main_ns"] < 0.2 * d.headline["b_mean_ns"]  # 7 ms against 54 ms


def test_report_prints_the_loop_mean_the_kinds_and_json_holds_them(run, cache_dir):
    res = CliRunner().invoke(cli, ["report", str(run("periodic_d2h"))])
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert lines[1].startswith("  runtime: PyTorch")  # then the iteration and the loop
    assert "the loop's mean: what throughput sees" in lines[2]
    assert lines[3].lstrip().startswith("loop: ") and "warm-up left out: 1 iteration(s)" in lines[3]
    assert "kinds of iteration (share: of the loop's time):" in res.output
    res = CliRunner().invoke(cli, ["report", str(run("periodic_d2h")), "--json"])
    out = json.loads(res.output)
    assert out["run"]["wall_med_ns"] <= out["run"]["mean_ns"]
    assert {r["kind"] for r in out["kinds"]} == {"main", "B", "warm-up"}
