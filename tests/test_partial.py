"""Partial traces (issue 46): runs that died, traces the capture cut, launches nsys did not
record, each said in the first lines with its evidence, checked against the workload's own
truth (tests/data/partial: one JSON line per finished pass, written as the loop ran; captured
on an H100 with plain ``nsys profile``, 2025.3 and 2023.4; the truth never comes from
nsightlab). The expected first lines were written down before nsightlab was run on them
(tests/data/partial/README.md)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

import nsightlab
import nsightlab.recipe_runner as R
from conftest import xz_fixtures
from nsightlab.analysis import completeness
from nsightlab.cli import cli
from nsightlab.run import report as run_report

PARTIAL = Path(__file__).parent / "data" / "partial"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return xz_fixtures(tmp_path_factory, PARTIAL, prefix="h100-")


def passes(name: str) -> list[int]:
    """The passes the workload finished (its truth lines with a pass number)."""
    lines = (PARTIAL / "truth" / f"h100-{name}.truth.jsonl").read_text().splitlines()
    return [r["i"] for r in map(json.loads, lines) if "i" in r]


def said(report) -> dict[str, dict]:
    """check -> finding, of everything the run report says about the trace."""
    return {w["check"]: w for w in run_report.build(nsightlab.open(report)).warnings}


def budget(report):
    out = R.run("budget", nsightlab.open(report))
    return out["summary"].iloc[0], out["iterations"], out["cut"]


@pytest.mark.parametrize("name", ["exception", "exception-bare"])
def test_a_run_that_died_inside_an_iteration_is_partial(run, name):
    """An uncaught exception inside layer 1 of pass 40: nsys flushed everything and hedges
    nothing, yet the last iteration ran only layer 0's kernels. NVTX or not, the run died:
    PARTIAL, no verdict; the 40 whole passes are the iterations (the bare one's finder also
    splits the first pass in two: 41)."""
    w = said(run(name))
    assert w["run_died"]["severity"] == "partial"
    # NVTX: the launch calls its range made; found iterations: the kernels in the window
    assert ("made 9 of the 19 launch calls" if name == "exception" else
            "ran 9 of the 19 kernels") in w["run_died"]["message"]
    s, it, cut = budget(run(name))
    assert len(cut) == 1 and cut["kernels"].iloc[0] < cut["expected_kernels"].iloc[0]
    assert len(it) - (name == "exception-bare") == len(passes(name)) == 40
    rr = run_report.build(nsightlab.open(run(name)))
    assert rr.partial and rr.findings[0].startswith("no performance verdict")


@pytest.mark.parametrize("name,first,whole", [
    ("duration", 0, 227), ("range", 20, 40), ("range-bare", 20, 40)])
def test_a_trace_the_capture_cut_drops_the_cut_iteration_and_keeps_the_verdict(
        run, name, first, whole):
    """--duration=14 (nsys stopped collection, then SIGTERMed the workload) and a
    cudaProfilerStop inside layer 1 of pass 60: the iteration in flight is left out (a note
    with nsys' own words first in the findings), every other one is a pass the workload
    finished, and the verdict stands."""
    w = said(run(name))
    assert w["capture_cut"]["severity"] == "note"
    assert "Not all CUDA events might have been collected" in w["capture_cut"]["message"]
    assert not [x for x in w.values() if x["severity"] == "partial"]
    s, it, cut = budget(run(name))
    assert len(cut) == 1 and len(it) == whole
    done = set(passes(name))
    if not name.endswith("bare"):  # NVTX iterN is pass N: each kept one finished
        assert {int(n[4:]) for n in it["name"]} <= done
        assert int(cut["name"].iloc[0][4:]) == first + whole
    rr = run_report.build(nsightlab.open(run(name)))
    assert not rr.partial and rr.findings[0].startswith("the capture ended while")
    assert "host-bound" in " ".join(rr.findings) or "sync-bound" in " ".join(rr.findings)


@pytest.mark.parametrize("name", ["duration-bare", "delay-bare"])
def test_found_iterations_cut_by_the_capture_are_left_out_too(run, name):
    w = said(run(name))
    assert "capture_cut" in w and not [x for x in w.values() if x["severity"] == "partial"]
    assert len(budget(run(name))[2]) == 1


@pytest.mark.parametrize("name", ["killed", "killed-bare"])
def test_a_run_killed_from_outside_is_partial(run, name):
    """SIGKILL 3 s into the loop: nsys kept the NVTX ranges but not one CUDA call of the
    loop. The NVTX capture names the class from its 82 empty iteration ranges."""
    w = said(run(name))["kernels_missing"]
    assert w["severity"] == "partial" and "died or was killed" in w["message"]
    if name == "killed":
        assert "82 NVTX iteration ranges" in w["message"]


@pytest.mark.parametrize("name", ["old-eager", "old-graph"])
def test_launches_nsys_did_not_record_are_partial(run, name):
    """nsys 2023.4 around the CUDA 13 runtime: 880 cuGetProcAddress look-ups, 25 launches
    before the loop, and 10 iteration ranges with no CUDA call at all (truth: 10 passes of
    19 kernels or one graph replay each). Before: 'mixed (GPU idle, no cause known 100%)'."""
    assert len(passes(name)) == 10
    w = said(run(name))["launches_untraced"]
    assert w["severity"] == "partial"
    assert "880 cuGetProcAddress" in w["message"] and "nsys 2023.4" in w["message"]
    assert "CUDA 13.0" in w["message"]


def test_the_healthy_control_says_nothing_is_wrong(run):
    """The same loop, run to its end: no finding above a note, no cut, the verdict."""
    w = said(run("healthy"))
    assert not [x for x in w.values() if x["severity"] != "note"], w
    s, it, cut = budget(run("healthy"))
    assert len(cut) == 0 and len(it) == len(passes("healthy")) == 60
    res = CliRunner().invoke(cli, ["report", str(run("healthy"))])
    assert res.exit_code == 0 and "WARNING" not in res.stderr and "PARTIAL" not in res.stdout


def test_the_first_lines_name_the_class(run):
    """What a person sees first: the died run's PARTIAL line within the report's first
    lines, the cut one's note as its first finding."""
    died = CliRunner().invoke(cli, ["report", str(run("exception"))]).stdout.splitlines()
    assert any("PARTIAL: the run died inside its last iteration" in x for x in died[:8])
    cut = CliRunner().invoke(cli, ["report", str(run("range"))]).stdout.splitlines()
    assert any("the capture ended while the application ran" in x for x in cut[:8])
    assert not any("PARTIAL" in x for x in cut)


def test_a_capture_whose_workload_failed_is_partial(run, tmp_path):
    """A capture's manifest that records the workload's exit code 1 (the exception run's)."""
    cap = tmp_path / "failed"
    cap.mkdir()
    shutil.copyfile(run("healthy"), cap / "report.sqlite")
    (cap / "manifest.json").write_text(json.dumps({"name": "failed", "sqlite": "report.sqlite",
                                                   "exit_code": 1}))
    w = said(cap)
    assert w["run_died"]["severity"] == "partial" and "exited with code 1" in w["run_died"]["message"]


def test_collection_span_is_on_the_events_clock(run):
    """Events are stamped from the session's start: a capture range opened 6.5 s into the
    process still spans 0 to its 1.38 s (the session time after the loop is tens of ms, not
    the process's whole life)."""
    r = nsightlab.open(run("range"))
    assert r.span_ns[0] == 0 and 1.3e9 < r.span_ns[1] < 1.5e9
    after = run_report.build(r).outside[1]
    assert after < 100e6
    assert completeness.check(r) is not None


# --- the rules against healthy runs made from the real captures (a review's cases) ---

ACTIVITY = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME",
            "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET",
            "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "NVTX_EVENTS")


def _end_of(path, name: str) -> int:
    import sqlite3

    with sqlite3.connect(path) as c:
        return c.execute("SELECT n.end FROM NVTX_EVENTS n LEFT JOIN StringIds s ON "
                         "n.textId = s.id WHERE coalesce(n.text, s.value) = ?", (name,)).fetchone()[0]


def test_a_run_that_ends_on_a_shorter_kind_did_not_die(tmp_path, tmp_path_factory):
    """ResNet-50's loop whose every 4th iteration copies a 256 MiB activation, ended after
    iter24 (an ordinary one after a copying one: its kernels are the start of iter23's): a
    kind the loop ran before, not a cut iteration."""
    from conftest import edited_copy

    kinds = xz_fixtures(tmp_path_factory, PARTIAL.parent / "kinds", prefix="h100-")
    src = kinds("periodic_d2h")
    end = _end_of(src, "iter24")
    path = tmp_path / "periodic-25.sqlite"
    host = ("CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION")
    edited_copy(src, path, "", (  # the calls after iter24, and the GPU work they launched
        *(f"DELETE FROM {t} WHERE start > {end}" for t in host),
        *(f"DELETE FROM {t} WHERE correlationId NOT IN (SELECT correlationId FROM "
          "CUPTI_ACTIVITY_KIND_RUNTIME)" for t in ACTIVITY if t not in host)))
    w = said(path)
    assert not [x for x in w.values() if x["severity"] == "partial"], w
    assert len(budget(path)[2]) == 0


def test_a_loop_on_the_cpu_is_not_launches_not_recorded(run, tmp_path):
    """The healthy capture with every CUDA row of iterations 1-59 deleted: a loop of host
    work in a process that used the GPU before. nsys 2025.3 loaded CUPTI 13 for this CUDA 13
    driver: nothing says the tracer missed launches."""
    from conftest import edited_copy

    src = run("healthy")
    start = _end_of(src, "iter0")
    path = tmp_path / "cpu-loop.sqlite"
    edited_copy(src, path, "", tuple(f'DELETE FROM {t} WHERE start > {start}'
                                     for t in ACTIVITY if t != "NVTX_EVENTS"))
    assert "launches_untraced" not in said(path)


def test_work_running_when_the_trace_begins_does_not_excuse_a_death(run, tmp_path):
    """The exception run with its first kernel moved before the first API call: nsys's own
    diagnostics are there and say nothing was left uncollected, so the run still died."""
    from conftest import edited_copy

    path = tmp_path / "startedge.sqlite"
    edited_copy(run("exception"), path, "CUPTI_ACTIVITY_KIND_KERNEL", (
        "UPDATE {t} SET start = 1000, end = 2000 WHERE rowid = (SELECT min(rowid) FROM {t})",))
    assert said(path)["run_died"]["severity"] == "partial"


def test_diff_counts_the_iterations_the_report_counts(run):
    d = nsightlab.diff(run("healthy"), run("duration"))
    assert d.headline["b_iterations"] == 227
