"""The fault suite: damaged and unusual inputs made from a real fixture (tests/faults.py) through
every command, and the numbers nsightlab gives where the damage still allows an answer."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

import nsightlab
import nsightlab.recipes as R
from faults import cases, run_all, summary_line
from nsightlab.cli import cli


@pytest.fixture(scope="module")
def fault_cases(sqlite_of, tmp_path_factory):
    src = sqlite_of("h200-vit-fp16")
    return src, {name: (path, kind) for name, path, kind in cases(src, tmp_path_factory.mktemp("faults"))}


def test_every_command_on_every_case(sqlite_of, tmp_path, cache_dir):
    """A clean one-line error naming the file (exit 1) or a result; never a traceback, a
    hang, an unnamed file or a result from an input that cannot give one."""
    tally, problems, n = run_all(sqlite_of("h200-vit-fp16"), tmp_path / "cases")
    print(summary_line(tally, n))
    assert not problems, "\n".join(problems)
    assert n >= 30 and tally.get("error", 0) >= 100 and tally.get("warning", 0) >= 6


@pytest.mark.parametrize("name,left_out", [
    ("null-starts", 10), ("null-ends", 10), ("end-before-start", 10), ("end-at-2^63", 1),
    ("start-at-0", 1), ("text-in-start", 1)])
def test_impossible_timestamps_are_left_out_everywhere(name, left_out, fault_cases, cache_dir,
                                                       tmp_path):
    """Rows with a NULL, reversed, out-of-session or non-integer start/end are left out of every
    table read (the same 3110 kernels for every recipe, no negative or absurd durations) and
    counted in the completeness warning of info, JSON and recipe manifests."""
    path, _ = fault_cases[1][name]
    k = nsightlab.open(path).kernels(["start_ns", "end_ns", "duration_ns"])
    assert len(k) == 3120 - left_out
    assert (k["duration_ns"] >= 0).all() and k["duration_ns"].max() < 1e8
    ks = R.run("kernel_sum", path)["kernel_sum"]
    assert ks["instances"].sum() == 3120 - left_out and ks["min_ns"].min() >= 0
    budget = R.run("budget", path)["summary"]
    assert budget["kernels_ns"].iloc[0] < budget["wall_ns"].iloc[0]
    warning = f"{left_out:,} kernels with a missing or impossible start/end"
    assert any(warning in w["message"] for w in nsightlab.open(path).completeness)
    info = json.loads(CliRunner().invoke(cli, ["info", str(path), "--json"]).stdout)
    assert any(warning in w["message"] for w in info["warnings"])
    out = tmp_path / "ks"
    assert CliRunner().invoke(cli, ["recipe", "run", "kernel_sum", str(path), "-o", str(out)]).exit_code == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert warning in json.dumps(manifest)


def test_a_kernel_table_that_is_a_view_reads_every_row(fault_cases, cache_dir):
    path, _ = fault_cases[1]["kernel-table-is-view"]
    assert R.run("kernel_sum", path)["kernel_sum"]["instances"].sum() == 3120


def test_all_null_starts_leave_no_kernels_and_say_why(fault_cases, cache_dir):
    path, _ = fault_cases[1]["all-null-starts"]
    res = CliRunner().invoke(cli, ["diff", str(fault_cases[0]), str(path)])
    assert res.exit_code == 1 and "no kernel launches to compare" in res.output
    assert "3,120 kernels with a missing or impossible" in CliRunner().invoke(
        cli, ["info", str(path)]).stdout
