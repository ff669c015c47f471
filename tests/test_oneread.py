"""One run read right (issue 62), on H200 captures with the workloads' own truth
(tests/data/oneread: nsys 2025.3, CUDA events around each iteration) and a public 1-second
slice of a 2-GPU job (nsys-ai's test fixture, MIT).

A last step that runs less is not a death when the process goes on; a found loop that
contradicts itself is no loop; the same kernels growing over the loop are said first; a work
cycle is said before its pace; iterations go by the numbers the user's ranges carry.
(Minimal exports: tests/test_exports_gen.py; frictions and wide tables: tests/test_frictions.py.)
"""
from __future__ import annotations

import json
import lzma
from pathlib import Path

import numpy as np
import pytest

import nsightlab
import nsightlab.recipe_runner as R
from conftest import xz_fixtures
from nsightlab.analysis import kinds
from nsightlab.run import report as run_report

ONEREAD = Path(__file__).parent / "data" / "oneread"
PACE = Path(__file__).parent / "data" / "pace"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return xz_fixtures(tmp_path_factory, ONEREAD)


def truth(name: str) -> dict:
    with lzma.open(ONEREAD / "truth" / f"h200-{name}.truth.json.xz") as f:
        return json.load(f)


def summary(path) -> dict:
    return R.run("budget", nsightlab.open(path))["summary"].iloc[0]


# ---- 1. a last step that runs less, then more work: not a death -------------------------------

def test_a_shorter_last_step_then_more_work_is_no_death(run, cache_dir):
    """ResNet-18 training, 30 steps; the last stops after backward() (255 of 689 launch
    calls), then 100 evaluation batches run and the run exits 0. Before: 'PARTIAL: the run
    died inside its last iteration ... no performance verdict'."""
    t = truth("train_lastfast")
    assert len(t["windows"]) == 30 and t["windows"][-1]["kind"] == "last"
    rr = run_report.build(nsightlab.open(run("h200-train_lastfast")))
    assert not rr.warnings, rr.warnings
    assert rr.run_row()["iterations"] == 30
    assert not any("no performance verdict" in f for f in rr.findings)
    assert not any("cut short" in f for f in rr.findings)


def test_a_run_that_raised_is_still_called_dead(run, cache_dir):
    """The same training raising inside layer3 of step 20, its range closed on the way out
    (try/finally): nothing is launched after it, so the run died there; the 20 finished
    steps are the iterations."""
    assert len(truth("train_raise_closed")["windows"]) == 20
    rr = run_report.build(nsightlab.open(run("h200-train_raise_closed")))
    died = [w for w in rr.warnings if w["check"] == "run_died"]
    assert died and "it made 60 of the 689 launch calls" in died[0]["message"]
    assert rr.run_row()["iterations"] == 20


def test_the_rank_that_raised_is_dead_beside_the_one_stopped_for_it(run, cache_dir):
    """Two DDP ranks sharing one GPU (gloo): rank 1 raises inside step 20, torchrun then
    stops rank 0. Rank 1's report says it died; both keep their 20 whole steps."""
    assert [len(truth(f"ddp_raise.rank{r}")["windows"]) for r in (0, 1)] == [20, 20]
    pr = run_report.build(nsightlab.open(run("h200-ddp_raise")))
    dead = [rr for rr in pr.runs if any(w["check"] == "run_died" for w in rr.warnings)]
    assert len(dead) == 1
    assert [rr.run_row()["iterations"] for rr in pr.runs] == [20, 20]


# ---- 2. a slice whose found loop contradicts itself --------------------------------------------

def test_a_found_loop_that_contradicts_itself_is_no_loop(run, cache_dir):
    """nsys-ai's h100_2gpu_1s (one second of a 2-GPU job, mostly host-to-device copies): the
    sequence that repeats starts its iterations together (median 0). Before: '24 iterations
    of a 78-operation sequence ... median 0.00 ms ... CoV 360.6% ... host-bound'."""
    pr = run_report.build(nsightlab.open(run("pub-nsysai-h100_2gpu_1s")))
    for rr in pr.runs:
        first = rr.findings[0]
        assert first.startswith("no steady loop found: the sequence that repeats ("), first
        assert "contradicts itself" in first and "the trace holds" in first
        assert rr.run_row()["iterations"] == 1
        assert not any(f.startswith(("host-bound", "what to do", "1 outlier")) for f in
                       rr.findings)


def test_a_real_loop_holds_together():
    """The check's rule: a loop whose kernels fit their iterations passes; windows whose
    median is under a microsecond, or whose one stream runs longer than they last, fail."""
    import pandas as pd

    from nsightlab.analysis import iterations

    class K:  # a report's kernels: one stream, 1 ms kernels every 2 ms
        def has_rows(self, t):
            return True

        def kernels(self, cols):
            s = np.arange(10) * 2_000_000
            return pd.DataFrame({"device_id": 0, "stream_id": 7, "start_ns": s,
                                 "end_ns": s + 1_000_000})[cols]

        def take(self, t, cols, rows):
            return self.kernels(cols).iloc[rows].reset_index(drop=True)

    start = np.arange(10) * 2_000_000
    assert iterations.contradiction(K(), start, start + 2_000_000) is None
    assert "median iteration" in iterations.contradiction(K(), start, start + 500)
    narrow = iterations.contradiction(K(), start, start + 400_000)
    assert narrow and "on one stream" in narrow


# ---- 4. the same kernels growing -------------------------------------------------------------

def test_kernels_growing_over_the_loop_are_said_first(run, cache_dir):
    """Flash attention over a KV cache that grows 320 tokens an iteration (8,512 -> 20,992):
    the same kernels, longer each time (truth 4.3 -> 8.0 ms of GPU time). Said first, with
    its size; no UNSTABLE."""
    w = truth("kvgrow")["windows"]
    gpu = np.array([x["gpu_ms"] for x in w[1:]])
    q = len(gpu) // 4
    rr = run_report.build(nsightlab.open(run("h200-kvgrow")))
    first = rr.findings[0]
    assert first.startswith("kernel time grows ") and "the same kernels take longer" in first
    k = rr.tables["kinds"] if isinstance(rr.tables, dict) else rr.tables()["kinds"]
    m = k[k["kind"] == kinds.MAIN].iloc[0]
    assert m["kernel_first_ns"] / 1e6 == pytest.approx(np.median(gpu[:q]), rel=0.1)
    assert m["kernel_last_ns"] / 1e6 == pytest.approx(np.median(gpu[-q:]), rel=0.1)
    assert not any("UNSTABLE" in f for f in rr.findings)


def test_no_kernel_trend_in_noise():
    """Pure noise (independent, and wandering: AR(1) 0.9) names no trend in more than 2% of
    loops; a 60% growth is found (benchmarks/trend_eval.py measures the whole grid)."""
    rng = np.random.default_rng(3)
    false = 0
    for i in range(200):
        n = int(rng.integers(18, 200))
        e = rng.normal(0, 1, n)
        if i % 2:
            for j in range(1, n):
                e[j] = 0.9 * e[j - 1] + np.sqrt(1 - 0.81) * e[j]
        false += kinds.kernel_trend(2e6 * np.exp(0.15 * e)) is not None
    assert false <= 4
    grow = 2e6 * np.exp(0.05 * rng.normal(0, 1, 40)) * np.linspace(1, 1.6, 40)
    assert kinds.kernel_trend(grow)["last_ns"] > 1.4 * kinds.kernel_trend(grow)["first_ns"]


# ---- 5. the work cycle first ---------------------------------------------------------------

def test_a_work_cycle_is_said_before_its_pace(tmp_path_factory, cache_dir):
    """ResNet-50 with Adam stepping every 4th micro-batch (tests/data/pace): the first words
    are the cycle, what each place in it runs and its time; the optimizer's place is the
    truth's 'step' iterations."""
    path = xz_fixtures(tmp_path_factory, PACE, prefix="h200-")("gradaccum")
    t = json.loads((PACE / "truth" / "h200-gradaccum.truth.json").read_text())
    step = [i for i, x in enumerate(t["windows"][:20]) if x["kind"] == "step"]
    rr = run_report.build(nsightlab.open(path))
    first = rr.findings[0]
    assert first.startswith("the work repeats in a cycle of 4 iterations: ")
    assert f"kernels in iterations {', '.join(map(str, step))} (+" in first
    assert first.count("median") == 3


# ---- 6. the user's numbers -----------------------------------------------------------------

def test_iterations_go_by_the_numbers_their_ranges_carry(run, cache_dir):
    """Ranges iter5 ... iter84 after 5 unnamed warm-up passes; 12 ms stalls in iter8, iter36,
    iter37, iter50, iter71: said by those numbers (before: 'iterations 3, 31, 32, 45, 66')."""
    stalls = [x["name"] for x in truth("nvtxoff")["windows"] if x["kind"] == "stall"]
    assert stalls == ["iter8", "iter36", "iter37", "iter50", "iter71"]
    rr = run_report.build(nsightlab.open(run("h200-nvtxoff")))
    said = next(f for f in rr.findings if "no pattern" in f)
    assert "iterations 8, 36, 37, 50, 71 " in said
    assert "go by the numbers their ranges carry" in rr.run_row()["iteration_source"]


def test_user_numbers_only_where_the_ranges_carry_other_numbers():
    assert kinds.user_numbers(["iter5", "iter6", "iter8"]).tolist() == [5, 6, 8]
    assert kinds.user_numbers(["iter0", "iter1"]) is None  # nsightlab's own
    assert kinds.user_numbers(["step3", "iter4"]) is None and kinds.user_numbers(["a", "b"]) is None
    assert kinds.user_numbers(["iter9", "iter3"]) is None


def test_a_rank_whose_cuda_records_were_lost_is_partial(run, cache_dir):
    """A 1-second `--duration` slice of 2-rank training: nsys kept rank 1's CUDA records for
    the window's first 155 ms only, its NVTX ranges for the whole second (26 steps each in
    the truth's window). Before: 'GPU idle (no cause known) 100%' and a verdict."""
    pr = run_report.build(nsightlab.open(run("h200-ddp_slice")))
    lost = [rr for rr in pr.runs if any(w["check"] == "cuda_trace_lost" for w in rr.warnings)]
    kept = [rr for rr in pr.runs if not rr.partial]
    assert len(lost) == 1 and len(kept) == 1
    w = next(w for w in lost[0].warnings if w["check"] == "cuda_trace_lost")
    assert "hold no CUDA call" in w["message"] and "Not all CUDA events" in w["message"]
    assert kept[0].run_row()["iterations"] == 26
