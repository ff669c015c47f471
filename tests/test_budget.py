"""The time budget, its verdicts and the trace-completeness checks, on scenarios captured on an
H100 for this purpose (tests/data/scenarios: each bound by one thing) and on every fixture."""
from __future__ import annotations

import csv
import re
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from nsightlab.analysis import completeness
import nsightlab
import nsightlab.recipe_runner as R
from nsightlab.analysis import budget
from nsightlab.cli import cli

from conftest import STEMS, xz_fixtures

SCENARIOS = Path(__file__).parent / "data" / "scenarios"


@pytest.fixture(scope="session")
def scenario(tmp_path_factory):
    """Function: scenario name -> path of its decompressed SQLite."""
    return xz_fixtures(tmp_path_factory, SCENARIOS, "h100-")


def summary(path) -> dict:
    return R.run("budget", path)["summary"].iloc[0].to_dict()


@pytest.mark.parametrize("name,verdict,advice", [
    ("h2d_pinned", "copy-bound (h2d pinned)", "already use pinned memory"),
    ("h2d_pageable", "copy-bound (h2d pageable)", "pin it"),
    ("d2h", "copy-bound (d2h pageable)", "pin it"),
    # trtexec's loop shape: the copy and the sync happen outside the enqueue range
    ("enqueue_copy", "copy-bound (d2h pageable)", "pin it"),
    ("compute", "compute-bound", ""),
    ("host", "host-bound", "launches nothing"),
    ("launch", "launch-bound", "capture the loop as a CUDA graph"),
    ("graph", "launch-bound", "already replays CUDA graphs"),
    ("sync_work", "sync-bound", "cudaStreamSynchronize (40 per iteration)"),
])
def test_each_scenario_gets_its_verdict_and_advice(name, verdict, advice, scenario, cache_dir):
    s = summary(scenario(name))
    assert s["verdict"] == verdict, s["evidence"]
    assert advice in s["advice"] if advice else s["advice"] == ""
    assert s["iterations"] == 24


def test_sync_scenario_names_the_sync(scenario, cache_dir):
    """200 .item() a step with tiny kernels: the GPU idles after each sync and while the next
    tiny kernels are launched; both are said, and the sync by name."""
    s = summary(scenario("sync"))
    assert s["verdict"].startswith("mixed (GPU idle after host syncs")
    assert s["idle_sync_pct"] > 30 and s["idle_launch_pct"] > 30
    assert "cudaStreamSynchronize (200 per iteration)" in s["advice"]


def test_overlapped_copies_count_once_and_are_reported_beside(scenario, cache_dir):
    s = summary(scenario("overlap"))
    assert s["verdict"] == "copy-bound (h2d pinned)"  # the copy outlasts the GEMMs it overlaps
    assert s["hidden_copy_ns"] > 0.9 * s["kernels_ns"]
    assert "do not overlap" not in s["advice"]


def test_warmup_and_compile_stay_out_of_the_iterations(scenario, cache_dir):
    path = scenario("warmup")
    it = R.run("budget", path)["iterations"]
    compile_range = nsightlab.open(path).nvtx(["name", "end_ns"]).query("name == ':compile' or name == 'compile'")
    assert len(it) == 24 and it["start_ns"].min() > compile_range["end_ns"].max()
    whole = R.run("kernel_sum", path)["kernel_sum"]["total_ns"].sum()
    assert it["kernels_ns"].sum() < 0.5 * whole  # most GPU time was warm-up


@pytest.mark.parametrize("name", ["h2d_pinned", "h2d_pageable", "d2h", "overlap", "sync"])
def test_copy_time_agrees_with_nsys_stats_and_brute_force(name, scenario, cache_dir):
    """Copies per kind total what NVIDIA's cuda_gpu_mem_time_sum prints, to the nanosecond;
    the budget's copy time (its parts plus what hid under kernels) equals the plain sum of the
    copies that start inside the iteration windows (copies here never overlap each other)."""
    path = scenario(name)
    mc = nsightlab.open(path).memcpy(["name", "start_ns", "end_ns", "duration_ns"])
    ours = mc.groupby("name", observed=True)["duration_ns"].agg(["sum", "size"])
    for row in csv.DictReader(open(SCENARIOS / "expected" / f"h100-{name}" /
                                   "stats_cuda_gpu_mem_time_sum.csv")):
        if row["Operation"].startswith("[CUDA memcpy"):
            assert ours.loc[row["Operation"], "sum"] == int(row["Total Time (ns)"])
            assert ours.loc[row["Operation"], "size"] == int(row["Count"])
    it = R.run("budget", path)["iterations"]
    inside = sum(mc.loc[(mc["start_ns"] >= a) & (mc["start_ns"] < b), "duration_ns"].sum()
                 for a, b in zip(it["start_ns"], it["end_ns"]))
    budgeted = sum(it[f"{p}_ns"].sum() for p in budget.COPY_PARTS) + it["hidden_copy_ns"].sum()
    assert budgeted == pytest.approx(inside, rel=0.005)


def test_crashed_run_is_partial_and_gets_no_verdict(scenario, cache_dir):
    path = scenario("crash")
    r = nsightlab.open(path)
    checks = {w["check"]: w for w in completeness.check(r)}
    assert checks["kernels_missing"]["severity"] == "partial"
    assert any("Not all CUDA events" in w["message"] for w in completeness.check(r))
    assert "--trace=cuda" not in r.missing_hint("kernels")  # it was on
    res = CliRunner().invoke(cli, ["report", str(path)])
    assert res.exit_code == 0, res.output
    assert res.stdout.startswith(f"{path.stem}: 12 iteration(s) (12 NVTX iteration ranges, no GPU "
                                 "work traced)")
    assert res.stdout.index("PARTIAL:") < res.stdout.index("findings:")
    assert "no performance verdict" in res.stdout and "bound" not in res.stdout
    assert "iter0" in res.stdout  # what it has: the NVTX ranges


def test_gpu_metrics_without_kernel_trace_says_so(scenario, cache_dir):
    r = nsightlab.open(scenario("notrace-gpumetrics"))
    (w,) = [w for w in completeness.check(r) if w["check"] == "metrics_without_kernels"]
    assert w["severity"] == "partial" and "--trace=cuda" in w["message"]
    res = CliRunner().invoke(cli, ["info", str(scenario("notrace-gpumetrics"))])
    # said once, on stderr (info's answer on stdout lists the notes only)
    assert res.exit_code == 0 and "GPU metrics show the SMs" in res.stderr
    assert "GPU metrics show the SMs" not in res.stdout


SCENARIO_NAMES = sorted(p.name.split(".sqlite")[0].removeprefix("h100-")
                        for p in (SCENARIOS / "nsys").glob("*.sqlite.xz"))


@pytest.mark.parametrize("name", SCENARIO_NAMES)
def test_scenario_budgets_add_up_and_reports_have_no_nan(name, scenario, cache_dir):
    _check(scenario(name))


@pytest.mark.parametrize("stem", STEMS)
def test_fixture_budgets_add_up_and_reports_have_no_nan(stem, sqlite_of, cache_dir):
    _check(sqlite_of(stem))


def _check(path):
    r = nsightlab.open(path)
    if r.has_rows("kernels") or r.has_rows("memcpy"):
        table, _, _ = budget.compute(r)
        parts = table[[f"{p}_ns" for p in budget.PARTS]].sum(axis=1)
        assert (parts == table["wall_ns"]).all()  # exactly, not just within 0.1%
        assert (table[[f"{p}_ns" for p in budget.PARTS]] >= 0).all().all()
    res = CliRunner().invoke(cli, ["report", str(path)])
    assert res.exit_code == 0, res.output
    assert not re.search(r"\bnan\b", res.stdout, re.I), res.stdout
    verdicts = re.findall(r"^  - (?:GPU \d+: )?([a-z-]+-bound|mixed)", res.stdout, re.M)
    assert len(verdicts) <= max(1, len(r.gpus))


def test_report_counts_the_iterations_and_says_the_warmup_apart(scenario, cache_dir):
    """torch.compile and a long fill before the loop: the report's kernel tables hold the
    timed iterations only, and the warm-up is its own finding; kernel_sum stays whole-run."""
    path = scenario("warmup")
    whole = R.run("kernel_sum", path)["kernel_sum"]
    timed = R.run("kernel_sum", path, {"iterations_only": True})["kernel_sum"]
    assert timed["instances"].sum() == 24 * 2 and whole["instances"].sum() > 600
    res = CliRunner().invoke(cli, ["report", str(path)])
    assert res.exit_code == 0, res.output
    line = next(x for x in res.stdout.splitlines() if "outside the iterations" in x)
    assert "% of all kernel time" in line


@pytest.mark.parametrize("stem,verdict,words", [
    ("pub-realcugan-trt10", "compute-bound", ["137 NVTX iteration ranges (ExecutionContext"]),
    # CloverLeaf alternates its advection sweeps step by step (other kernel variants, the same
    # classes): one timestep is the unit, not two
    ("pub-pipit-cloverleaf-a100", "compute-bound", ["found in the trace", "a 150-operation"]),
    ("pub-pipit-saxpy-a100", "sync-bound", ["cudaMemcpyAsync", "pageable"]),
    ("h200-launchbound", "launch-bound", ["CUDA graph"]),
    ("h200-vit-fp16-cudagraph", "compute-bound", []),
])
def test_public_and_h200_fixtures_get_the_verdict_an_engineer_gives(stem, verdict, words, sqlite_of,
                                                                    cache_dir):
    s = R.run("budget", sqlite_of(stem))["summary"].iloc[0]
    assert s["verdict"] == verdict, s["evidence"]
    text = " ".join([s["iteration_source"], s["evidence"], s["advice"]])
    assert all(w in text for w in words), text


def test_iterations_tile_a_loop_whose_copies_are_outside_the_range(scenario, cache_dir):
    """Ranges named like TensorRT's (ExecutionContext::enqueue, no domain) are iterations, and
    the copy every iteration makes after its range belongs to it: the wall-clock iteration is
    the loop's period (start to start), not the enqueue, and the copy is in the budget."""
    path = scenario("enqueue_copy")
    it = R.run("budget", path)["iterations"]
    assert len(it) == 24 and (it["name"] == "ExecutionContext::enqueue").all()
    period = np.median(np.diff(it["start_ns"].to_numpy()))
    assert it["wall_ns"].iloc[:-1].median() == pytest.approx(period, rel=0.01)
    s = summary(path)
    assert s["d2h_pageable_pct"] > 80
