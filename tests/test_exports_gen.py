"""Generated exports with parts missing (tests/exports_gen.py) through every command: info,
report, diff against the intact fixture, and every recipe each answer, or stop with one line
that names the file and what is missing; never a traceback (issue 62).

The full matrix (~200 cases: the minimal sets of every committed capture; x 12 commands:
~6 min on 2 cores) runs with NSIGHTLAB_FULL_FAULTS=1. By default (~1.5 min):

- every case goes through ``info``;
- the minimal sets, made from ``SAMPLE_STEMS``, go through every command;
- of each other family, every ``SAMPLE``-th case (in generation order: the same sample on
  every machine) goes through every command.
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from conftest import SOURCES, STEMS
from exports_gen import SOURCE, Case, cases
from faults import _invoke, outcome
from nsightlab.recipe_runner import available

#: every recipe (``nsightlab recipe list``)
RECIPES = tuple(sorted(available()))
#: the commands every case goes through ({case}: its path, {good}: the intact fixture)
CHEAP = (("info", "{case}"),)
#: the commands the sampled cases go through as well (report before the recipes: they reuse
#: its answers, as a user's session does)
EXPENSIVE = (("report", "{case}"), ("diff", "{good}", "{case}")) + tuple(
    ("recipe", "run", r, "{case}") for r in RECIPES)
#: the captures the minimal sets are made from by default: two processes call CUDA (the
#: issue's traceback); a few kernels and copies
SAMPLE_STEMS = ("pub-fuser-crossentropy-h200", "pub-pipit-saxpy-a100")
#: every SAMPLE-th case of the table, column and null families gets every command by default
SAMPLE = 5


def full() -> bool:
    return os.environ.get("NSIGHTLAB_FULL_FAULTS", "") not in ("", "0")


def committed_stems() -> list[str]:
    """The captures committed under tests/data (not ../shared/fixtures)."""
    return [s for s in STEMS if SOURCES[s][0].parent.parent.name == "data"]


def planned(found: list[Case]) -> list[tuple[Case, tuple[tuple[str, ...], ...]]]:
    """Each case with the commands it goes through (the module docstring says which)."""
    seen: dict[str, int] = {}
    out = []
    for case in found:
        n = seen[case.family] = seen.get(case.family, -1) + 1
        every = full() or case.family == "minimal" or n % SAMPLE == 0
        out.append((case, CHEAP + EXPENSIVE if every else CHEAP))
    return out


def run_case(case: Case, cmds, src: Path, out: Path) -> list[str]:
    """Each of ``cmds`` on ``case`` written from ``src`` (diff: against ``src``): the
    problems, one line each (``faults.outcome``: a traceback, a hang, an error that does not
    name the file)."""
    path = case.write(src, out)
    problems = []
    for cmd in cmds:
        args = [a.format(case=path, good=src) for a in cmd]
        o, why = outcome("missing", path, args, _invoke(args), None)
        if o == "BAD" and not _names_fixture(why, args, src):
            problems.append(f"{case.name} / {' '.join(cmd[:3])}: {why}")
    path.unlink()
    return problems


def _names_fixture(why: str, args: list[str], good: Path) -> bool:
    """Whether ``why`` is diff's clean error about the intact fixture itself (one without
    kernels has no launches to compare, whatever the case lacks)."""
    return args[0] == "diff" and why.startswith("the error does not name the file") and \
        f"{good}:" in why


def all_cases(sqlite_of) -> list[tuple[Case, Path]]:
    """(case, its fixture) for every case of this run."""
    stems = committed_stems() if full() else list(SAMPLE_STEMS)
    return [(c, sqlite_of(c.stem)) for c in cases(sqlite_of(SOURCE), stems)]


@pytest.mark.filterwarnings("error:invalid value encountered in cast:RuntimeWarning")
def test_every_command_answers_or_names_what_is_missing(sqlite_of, tmp_path, cache_dir):
    """0 tracebacks, hangs or unnamed files over the generated exports (the module docstring
    says which commands each case goes through). A NULL that NumPy casts to an integer
    (RuntimeWarning "invalid value encountered in cast": a silent wrong number) counts as a
    traceback."""
    found = all_cases(sqlite_of)
    plan = planned([c for c, _ in found])
    problems = [p for (case, cmds), (_, src) in zip(plan, found)
                for p in run_case(case, cmds, src, tmp_path)]
    assert not problems, "\n".join(problems)
    assert {c.family for c, _ in found} == {"table", "column", "null", "minimal"}
    assert len(found) >= 140 and sum(len(cmds) > 1 for _, cmds in plan) >= 35


def test_the_minimal_export_of_two_processes_answers(sqlite_of, tmp_path, cache_dir):
    """The issue's export: kernels, copies and CUDA calls with no globalPid, no enum or sync
    tables, two processes calling CUDA. Each kernel is of the process that launched it (the
    same numbers as the intact export's), and info tells the memsets that did not happen
    from a table that was not traced."""
    from click.testing import CliRunner

    import nsightlab
    from nsightlab.cli import cli

    src = sqlite_of("pub-fuser-crossentropy-h200")
    path = Case("minimal", "cupti", src.stem).write(src, tmp_path)
    with nsightlab.open(src) as a, nsightlab.open(path) as b:
        cols = ["pid", "correlation_id", "start_ns"]
        assert b.kernels(cols).equals(a.kernels(cols))
    for args in (["report", str(path)], ["recipe", "run", "sync_gaps", str(path)],
                 ["diff", str(src), str(path)]):
        res = CliRunner().invoke(cli, args)
        assert res.exit_code == 0 and res.exception is None, (args, res.output)
    info = CliRunner().invoke(cli, ["info", str(path)]).stdout
    memset = next(line for line in info.splitlines() if line.split()[:1] == ["memset"])
    assert "none in this run (CUDA was traced" in memset, memset
    assert "profile with nsys profile --trace=nvtx" in info  # NVTX: nothing tells


def main(argv: list[str]) -> None:
    """``python tests/exports_gen.py OUTDIR [STEM ...]``: every case through every command,
    with the problems and the time each case took."""
    import lzma
    import shutil

    os.environ["NSIGHTLAB_FULL_FAULTS"] = "1"
    out = Path(argv[0])
    out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("NSIGHTLAB_CACHE_DIR", str(out / "cache"))

    def sqlite_of(stem: str) -> Path:
        p = out / f"{stem}.sqlite"
        if not p.exists():
            with lzma.open(SOURCES[stem][0]) as a, open(p, "wb") as b:
                shutil.copyfileobj(a, b)
        return p

    found = [(c, sqlite_of(c.stem)) for c in cases(sqlite_of(SOURCE), argv[1:] or committed_stems())]
    bad = 0
    for (case, cmds), (_, src) in zip(planned([c for c, _ in found]), found):
        t0 = time.monotonic()
        problems = run_case(case, cmds, src, out)
        bad += len(problems)
        print(f"{time.monotonic() - t0:6.2f} s  {case.name}", *problems, sep="\n    ", flush=True)
    print(f"{len(found)} cases, {bad} problems")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    main(sys.argv[1:])
