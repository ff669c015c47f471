"""One owner for the loop's facts (issue 63): each command computes the time budget once,
with the cache and without it (before: `report` computed it 10 times without the cache and
read it back from the store 10 times with it)."""
from __future__ import annotations

from collections import Counter

import pytest
from click.testing import CliRunner

import nsightlab.recipe_runner as R
from nsightlab.cli import cli


@pytest.fixture
def computed(monkeypatch):
    """Counter of recipe computations (``Recipe._compute``) by recipe name, and of the
    loop's (the time budget's: ``loop.build``) as "budget"."""
    from nsightlab.analysis import loop

    got: Counter = Counter()
    orig, build = R.Recipe._compute, loop.build

    def counting(self, report, values):
        got[self.name] += self.name != "budget"  # a view of the loop
        return orig(self, report, values)

    def building(report, params):
        got["budget"] += 1
        return build(report, params)

    monkeypatch.setattr(R.Recipe, "_compute", counting)
    monkeypatch.setattr(loop, "build", building)
    return got


@pytest.mark.parametrize("cache", [False, True])
@pytest.mark.parametrize("command", ["report", "diff"])
def test_each_command_computes_the_budget_once(command, cache, computed, sqlite_of, cache_dir):
    path = str(sqlite_of("h200-vit-fp16-syncy"))
    other = str(sqlite_of("h200-vit-fp16"))
    args = [command, path] + ([other] if command == "diff" else []) + \
        ([] if cache else ["--no-cache"])
    out = CliRunner().invoke(cli, args)
    assert out.exit_code == 0, out.output
    assert computed["budget"] == (2 if command == "diff" else 1)  # once per report
    if cache:  # the next command is served from the store: nothing computed again
        computed.clear()
        assert CliRunner().invoke(cli, args).exit_code == 0
        assert computed["budget"] == 0


def test_an_answer_given_twice_is_two_frames(sqlite_of, cache_dir):
    """A caller that changes the frames it got changes no other caller's."""
    import nsightlab

    r = nsightlab.open(sqlite_of("h200-vit-fp16-syncy"))
    a = R.run("budget", r)["summary"]
    a.loc[:, "iterations"] = -1
    assert (R.run("budget", r)["summary"]["iterations"] > 0).all()


def test_no_decision_reads_generated_text():
    """Decisions read codes (``budget.HOW_*``, ``budget.VERDICTS``, the records' ``code``),
    never the words of an iteration source, a verdict, advice, a finding or a kinds table's
    'which' (before: ``startswith("found")``, ``startswith("top kernel")``, ``"remove it from
    the loop" not in advice``, ``which.split(' (')``, a kernel name split out of a message,
    ``str.replace`` over generic advice)."""
    import re
    from pathlib import Path

    named = r"(verdict|source|advice|finding|message|evidence|which|said|reason)"
    words = re.compile(  # a method on those words, or a string looked for in them
        named + r"\w*[\]\)\"']*\)?\s*\.\s*(startswith|endswith|replace|split)\(|"
        r"startswith\(\(?\"(found|no |launch|top |what to do|FP32)|"
        r"[\"']\s+(not\s+)?in\s+(\w+\[[\"'])?" + named + r"s?\b")
    root = Path(R.__file__).parent
    bad = [f"{p.relative_to(root)}:{i}: {line.strip()}"
           for p in sorted(root.rglob("*.py")) if "__pycache__" not in p.parts
           for i, line in enumerate(p.read_text().splitlines(), 1) if words.search(line)]
    assert not bad, "\n".join(bad)


@pytest.fixture(scope="module")
def pair(sqlite_of):
    """report, diff and compare of the bundled-style fp16/fp8 pair (the syncy run as A: host
    syncs in every iteration), and A's loop."""
    import nsightlab
    from nsightlab.analysis import loop
    from nsightlab.run import report as run_report

    a, b = str(sqlite_of("h200-vit-fp16-syncy")), str(sqlite_of("h200-vit-fp8"))
    return (run_report.build(a), nsightlab.diff(a, b), nsightlab.compare([a, b]),
            loop.of(nsightlab.open(a)))


def test_the_median_iteration_has_one_source(pair):
    rr, d, cmp, lp = pair
    median = float(lp.summary["wall_med_ns"].iloc[0])
    assert rr.run_row()["wall_med_ns"] == median
    assert d.a.median_ns == d.headline["a_median_ns"] == median
    assert cmp.summary["latency_p50_ns"].iloc[0] == pytest.approx(median)
    assert rr.run_row()["mean_ns"] == float(lp.summary["wall_ns"].iloc[0]) == d.a.mean_ns


def test_the_speedup_has_one_source(pair):
    """compare's speed-up is its diff's headline's (medians), said as the headline says it."""
    rr, d, cmp, lp = pair
    s = d.headline["speedup"]
    assert cmp.summary["speedup"].iloc[1] == pytest.approx(s)
    assert s == pytest.approx(d.headline["a_median_ns"] / d.headline["b_median_ns"])
    first = d.headline["parts"][0]
    assert first["code"] in ("faster", "slower") and first["values"]["speedup"] == pytest.approx(s)
    assert f"{1 / s:.2f}x slower" in first["text"] or f"{s:.2f}x faster" in first["text"]


def test_the_iteration_source_has_one_source(pair):
    rr, d, cmp, lp = pair
    assert rr.run_row()["iteration_source"] == d.headline["a_iteration_source"] == lp.source
    assert cmp.summary["iteration_source"].iloc[0] == lp.source
    assert rr.run_row()["iterations"] == d.headline["a_iterations"] == int(
        lp.summary["iterations"].iloc[0])


def test_the_sync_figures_are_three_figures_with_three_names(pair):
    """The host's time inside synchronizing calls (a median, CPU), the GPU's idle after them
    (the budget's mean part) and its median over the main kind: each from its source, under
    its own name, in the report and the diff."""
    import numpy as np

    rr, d, cmp, lp = pair
    idle_mean = float(lp.summary["idle_sync_ns"].iloc[0])
    it = lp.first_gpu()
    idle_median = float(np.median(it.loc[it["kind"] == "main", "idle_sync_ns"]))
    assert d.a.pace["idle_sync_ns"] == pytest.approx(idle_median)
    assert d.budget.set_index("part").loc["idle_sync", "a_ns"] == pytest.approx(idle_mean)
    host = d.overheads.set_index("overhead").loc["host_in_syncs"]
    assert host["a_ns"] == pytest.approx(d.a.overheads["host_in_syncs_ns"])
    assert host["a_ns"] > 2 * idle_mean  # the syncy run: the host waits far longer than the GPU idles
    note = next(f for f in rr.findings if f.code in ("host_syncs", "advice"))
    assert note.values  # the numbers behind the sentence
