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


def test_no_decision_reads_an_iteration_source_or_a_verdict():
    """Decisions read codes (``budget.HOW_*``, ``budget.VERDICTS``), never the words of an
    iteration source or a verdict (before: ``startswith("found")``, ``startswith("no ")``,
    ``startswith("launch")``). Findings' words are still matched in places (issue 63 (2))."""
    import re
    from pathlib import Path

    words = re.compile(r"(source|verdict)\w*[\]\)\"']*\)?\s*\.\s*(startswith|endswith)\(|"
                       r"startswith\(\"(found|no |launch)")
    root = Path(R.__file__).parent
    bad = [f"{p.relative_to(root)}:{i}: {line.strip()}"
           for p in sorted(root.rglob("*.py")) if "__pycache__" not in p.parts
           for i, line in enumerate(p.read_text().splitlines(), 1) if words.search(line)]
    assert not bad, "\n".join(bad)
