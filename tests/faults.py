"""Damaged and unusual inputs, made from a real fixture: the cases of the fault suite.

    python tests/faults.py SRC.sqlite OUTDIR      # writes one case per file/folder, lists them

Each case is (name, path, kind) where kind says what a correct run does with it:
``error`` (a one-line error naming the file, exit 1), ``warn:<table>:<rows left out>`` (a result,
with those rows left out and a data-quality warning on stderr), ``damaged`` (a result, and one
warning naming the file and its damaged kernel rows), ``partial`` (a result and a
warning that part of the trace is lost), ``ok`` (a result, no warning; the
answer may differ from the intact fixture's) or ``missing`` (a table nsightlab reads dropped: a
result or a clean error). Nothing here is checked in: the cases are generated from the real
fixture each time.

Every run is classified (``outcome``): a clean error, a result, a result with its warning, or
BAD: a traceback, a hang (``HANG_S``), an error that does not name the user's file, a result
from an input that cannot give one, or a silent change (the answer differs from the intact
fixture's and stderr holds no warning).
"""
from __future__ import annotations

import itertools
import json
import os
import shutil
import signal
import sqlite3
import sys
from pathlib import Path

K = "CUPTI_ACTIVITY_KIND_KERNEL"
#: the kernel table without its NOT NULL constraints, so that damage can be written into it
UNCONSTRAIN = (f"CREATE TABLE K_tmp AS SELECT * FROM {K}", f"DROP TABLE {K}",
               f"ALTER TABLE K_tmp RENAME TO {K}")


def _copy(src: Path, out: Path, name: str) -> Path:
    p = out / f"{name}.sqlite"
    shutil.copyfile(src, p)
    return p


def _sql(src: Path, out: Path, name: str, *statements: str) -> Path:
    p = _copy(src, out, name)
    con = sqlite3.connect(p)
    for st in statements:
        con.execute(st)
    con.commit()
    con.close()
    return p


def _bytes(src: Path, out: Path, name: str, edit) -> Path:
    p = out / f"{name}.sqlite"
    data = bytearray(src.read_bytes())
    p.write_bytes(bytes(edit(data)))
    return p


def cases(src: Path, out: Path, missing: bool = False) -> list[tuple[str, Path, str]]:
    """Every case (see the module docstring), written under ``out``; ``missing``: with the
    cases of missing tables (one and two at a time: ~250 copies of the fixture)."""
    out.mkdir(parents=True, exist_ok=True)
    size = src.stat().st_size
    rows = sqlite3.connect(src).execute(f"SELECT count(*) FROM {K}").fetchone()[0]
    c: list[tuple[str, Path, str]] = []

    def add(name, path, kind):
        c.append((name, path, kind))

    # damage to the file itself
    for frac in (0.1, 0.5, 0.9):
        add(f"truncated-{int(frac * 100)}", _bytes(src, out, f"truncated-{int(frac * 100)}",
                                                   lambda d, f=frac: d[: int(len(d) * f)]), "error")
    add("truncated-header", _bytes(src, out, "truncated-header", lambda d: d[:50]), "error")
    add("empty", _bytes(src, out, "empty", lambda d: b""), "error")

    def flip(d, at):
        d[at:at + 4096] = bytes(b ^ 0xA5 for b in d[at:at + 4096])
        return d
    add("flipped-page-first", _bytes(src, out, "flipped-page-first", lambda d: flip(d, 0)), "error")
    add("not-sqlite-json", _bytes(src, out, "not-sqlite-json", lambda d: b'{"a": 1}\n'), "error")
    add("not-sqlite-png", _bytes(src, out, "not-sqlite-png", lambda d: b"\x89PNG\r\n\x1a\n" + d[8:2000]),
        "error")
    # schema damage
    add("no-kernel-table", _sql(src, out, "no-kernel-table", f"DROP TABLE {K}"), "partial")
    add("kernel-column-renamed", _sql(src, out, "kernel-column-renamed",
                                      f"ALTER TABLE {K} RENAME COLUMN start TO start_x"), "error")
    add("kernel-table-is-view", _sql(src, out, "kernel-table-is-view",
                                     f"ALTER TABLE {K} RENAME TO K2",
                                     f"CREATE VIEW {K} AS SELECT * FROM K2"), "ok")
    add("no-stringids", _sql(src, out, "no-stringids", "DROP TABLE StringIds"), "error")
    # values that still allow an answer: left out and reported
    add("null-starts", _sql(src, out, "null-starts", *UNCONSTRAIN,
                            f"UPDATE {K} SET start = NULL WHERE rowid % 312 = 1"), "warn:kernels:10")
    add("null-ends", _sql(src, out, "null-ends", *UNCONSTRAIN,
                          f'UPDATE {K} SET "end" = NULL WHERE rowid % 312 = 2'), "warn:kernels:10")
    add("all-null-starts", _sql(src, out, "all-null-starts", *UNCONSTRAIN, f"UPDATE {K} SET start = NULL"),
        f"warn:kernels:{rows}")
    add("end-before-start", _sql(src, out, "end-before-start", *UNCONSTRAIN,
                                 f'UPDATE {K} SET "end" = start - 1000 WHERE rowid % 312 = 3'),
        "warn:kernels:10")
    add("end-at-2^63", _sql(src, out, "end-at-2^63", *UNCONSTRAIN,
                            f'UPDATE {K} SET "end" = 9223372036854775807 WHERE rowid = 7'),
        "warn:kernels:1")
    add("longer-than-trace", _sql(src, out, "longer-than-trace", *UNCONSTRAIN,
                                  f"UPDATE {K} SET start = start - 100000000000 WHERE rowid = 9"),
        "warn:kernels:1")
    add("duplicated-kernels", _sql(src, out, "duplicated-kernels",
                                   f"INSERT INTO {K} SELECT * FROM {K} WHERE rowid % 31 = 0"),
        f"warn:kernels:{rows // 31}")
    # rows no run records (issue 57): counted as they are, and said once, naming the file
    add("start-at-zero", _sql(src, out, "start-at-zero", *UNCONSTRAIN,
                              f"UPDATE {K} SET start = 0 WHERE rowid = 500"), "damaged")
    add("end-bits-flipped", _sql(src, out, "end-bits-flipped", *UNCONSTRAIN,
                                 f'UPDATE {K} SET "end" = ("end" | 2863311530) '
                                 "WHERE rowid IN (700, 1900)"), "damaged")
    add("names-of-nothing", _sql(src, out, "names-of-nothing", *UNCONSTRAIN,
                                 f"UPDATE {K} SET demangledName = NULL, shortName = NULL "
                                 "WHERE rowid % 312 = 5",
                                 f"UPDATE {K} SET demangledName = 99999999, shortName = 99999999 "
                                 "WHERE rowid % 312 = 6"), "damaged")
    # a minimal export (other tools' fixture generators): the kernels without globalPid are
    # the one process whose calls are traced
    cols = ", ".join(f'"{r[1]}"' for r in sqlite3.connect(src).execute(
        f"PRAGMA table_info({K})") if r[1] != "globalPid")
    add("kernels-without-globalpid", _sql(src, out, "kernels-without-globalpid",
                                          f"CREATE TABLE K_tmp AS SELECT {cols} FROM {K}",
                                          f"DROP TABLE {K}", f"ALTER TABLE K_tmp RENAME TO {K}"),
        "ok")
    # real data that looks odd: no warning, every row counted
    api = "CUPTI_ACTIVITY_KIND_RUNTIME"
    add("duplicated-api-calls", _sql(src, out, "duplicated-api-calls",
                                     f"INSERT INTO {api} SELECT * FROM {api} WHERE rowid % 2 = 0"), "ok")
    add("sliced-after-launches", _sql(  # kernels in flight when the slice opens: real work
        src, out, "sliced-after-launches",
        f"DELETE FROM {api} WHERE start < (SELECT start FROM {K} ORDER BY start LIMIT 1 OFFSET 20)"),
        "ok")
    add("text-in-start", _sql(src, out, "text-in-start", *UNCONSTRAIN,
                              f"UPDATE {K} SET start = 'abc' WHERE rowid = 11"), "warn:kernels:1")
    add("non-utf8-name", _sql(src, out, "non-utf8-name",
                              "UPDATE StringIds SET value = CAST(X'fffe41c328' AS TEXT) "
                              f"WHERE id = (SELECT demangledName FROM {K} LIMIT 1)"), "ok")
    add("huge-name", _sql(src, out, "huge-name",
                          "UPDATE StringIds SET value = printf('%.*c', 20000000, 'x') "
                          f"WHERE id = (SELECT demangledName FROM {K} LIMIT 1)"), "ok")
    # what surrounds the file
    wal = _copy(src, out, "pending-wal")
    (out / "pending-wal.sqlite-wal").write_bytes(b"\x37\x7f\x06\x82" + b"\0" * 28)
    add("pending-wal", wal, "error")
    fifo = out / "fifo.sqlite"
    os.mkfifo(fifo)
    add("fifo", fifo, "error")
    loop = out / "loop.sqlite"
    os.symlink(loop.name, loop)
    add("symlink-loop", loop, "error")
    dangling = out / "dangling.sqlite"
    os.symlink("nothing-here.sqlite", dangling)
    add("dangling-symlink", dangling, "error")
    for name, manifest in (("manifest-array", ["report.sqlite"]),
                           ("manifest-escapes", {"sqlite": "/etc/passwd"}),
                           ("manifest-not-json", None)):
        d = out / name
        d.mkdir()
        (d / "manifest.json").write_text("{not json" if manifest is None else json.dumps(manifest))
        add(name, d, "error")
    empty_dir = out / "empty-dir"
    empty_dir.mkdir()
    add("empty-dir", empty_dir, "error")
    add("missing", out / "missing.sqlite", "error")
    # each table nsightlab reads missing in turn, and each pair (``PAIR_COMMANDS`` only)
    have = {r[0] for r in sqlite3.connect(src).execute(
        "SELECT name FROM sqlite_master WHERE type = 'table'")}
    read = sorted(t for t in read_tables() if t in have) if missing else []
    for t in read:  # written when run (``without``): one copy at a time on disk
        add(f"without-{t}", out / f"without-{t}.sqlite", "missing")
    for t1, t2 in itertools.combinations(read, 2):
        add(f"without-{t1}+{t2}", out / f"without-{t1}+{t2}.sqlite", "missing-pair")
    return c


def without(src: Path, path: Path) -> None:
    """Write the case ``path`` (``without-A[+B].sqlite``): the fixture without those tables."""
    drops = path.name[len("without-"):-len(".sqlite")].split("+")
    _sql(src, path.parent, path.stem, *(f'DROP TABLE "{t}"' for t in drops))


def read_tables() -> set[str]:
    """Every SQLite table nsightlab's code names: the tables it reads."""
    import re

    import nsightlab

    names: set[str] = set()
    for f in Path(nsightlab.__file__).parent.rglob("*.py"):
        names |= set(re.findall(
            r"\b(?:TARGET_INFO_[A-Z_]+|ENUM_[A-Z_]+|META_DATA_[A-Z_]+|CUPTI_ACTIVITY_KIND_[A-Z_]+|"
            r"NVTX_EVENTS|ANALYSIS_DETAILS|StringIds|ThreadNames|PROCESSES|DIAGNOSTIC_EVENT|"
            r"GPU_METRICS|CUDA_GPU_MEMORY_USAGE_EVENTS|CUDA_GRAPH_NODE_EVENTS)\b", f.read_text()))
    return names


#: the commands every case goes through ({case} is the case's path, {good} the intact fixture)
COMMANDS = (("info", "{case}"), ("table", "kernels", "{case}"),
            ("recipe", "run", "kernel_sum", "{case}"), ("recipe", "run", "sync_gaps", "{case}"),
            ("recipe", "run", "launch_compute", "{case}"), ("report", "{case}"),
            ("diff", "{good}", "{case}"))
#: the commands a case without two tables goes through (the report reads every table it uses)
PAIR_COMMANDS = (("report", "{case}"),)
#: a run longer than this is a hang
HANG_S = 120


class Hang(Exception):
    pass


def outcome(kind: str, case: Path, args: list[str], res, good: str | None) -> tuple[str, str]:
    """(outcome, problem) of one command on one case, from a click CliRunner result: outcome is
    "error" (a clean one-line error naming the file, exit 1), "result", "warning" (a result with
    the data-quality warning on stderr) or "BAD"; problem says what was wrong for BAD. ``good``
    is the command's stdout on the intact fixture (the case's path written as the fixture's)."""
    if isinstance(res.exception, Hang):
        return "BAD", f"hang: no answer in {HANG_S} s"
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        return "BAD", f"traceback: {type(res.exception).__name__}: {res.exception}"
    out = res.output
    errors = [line for line in out.splitlines() if line.startswith("Error:")]
    if res.exit_code == 1:
        if len(errors) != 1:
            return "BAD", f"exit 1 without one 'Error:' line: {out[-300:]!r}"
        if case.name not in errors[0] and str(case) not in errors[0]:
            return "BAD", f"the error does not name the file: {errors[0]}"
        if kind.startswith("warn") and "no kernel" not in errors[0]:
            return "BAD", f"a usable report refused: {errors[0]}"
        return "error", ""
    if res.exit_code != 0:
        return "BAD", f"exit {res.exit_code}: {out[-300:]!r}"
    if kind == "error":
        return "BAD", f"a damaged input gave a result (exit 0): {out[:200]!r}"
    warned = [line for line in res.stderr.splitlines() if "WARNING" in line]
    if kind.startswith("warn"):
        n = int(kind.split(":")[2])
        if not any(f"{n:,} {kind.split(':')[1]}" in line for line in warned):
            changed = good is not None and res.stdout.replace(str(case), "{}") != good
            return "BAD", (f"{'silent change: ' if changed else ''}no warning on stderr "
                           f"for {n} {kind.split(':')[1]}: {res.stderr[-300:]!r}")
        return "warning", ""
    if kind == "partial":  # a trace that lost a part: a result, and a warning saying so
        # said on stderr, in the table's own note, or (report) in the first lines of its answer
        said = warned or args[0] == "table" and "note:" in res.stderr or \
            args[0] == "report" and "PARTIAL:" in "\n".join(res.stdout.splitlines()[:12])
        return ("warning", "") if said else ("BAD", "a partial trace with no warning")
    if kind == "damaged":  # said once, naming the file, by every command that reads kernels
        said = [line for line in warned if "damaged kernel rows" in line]
        if args[0] != "table" and (len(said) != 1 or case.name not in said[0]):
            return "BAD", f"damaged rows not said once with the file: {res.stderr[-300:]!r}"
        return "warning", ""
    if kind == "ok" and warned:
        return "BAD", f"real data called damage: {warned[0][:300]}"
    return "result", ""


def summary_line(tally: dict[str, int], n_cases: int) -> str:
    total = sum(tally.values())
    bad = tally.get("BAD", 0)
    return (f"fault suite: {n_cases} cases, {total} runs: {tally.get('error', 0)} clean errors, "
            f"{tally.get('result', 0)} results, {tally.get('warning', 0)} results with their "
            f"data-quality warning on stderr; {tally.get('traceback', 0)} tracebacks, "
            f"{tally.get('hang', 0)} hangs, {tally.get('silent', 0)} silent changes, "
            f"{bad} bad in all")


def _invoke(args: list[str]):
    """The CLI run in this process, stopped as a hang after ``HANG_S`` seconds."""
    from click.testing import CliRunner

    from nsightlab.cli import cli

    def alarm(*_):
        raise Hang()
    old = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(HANG_S)
    try:
        return CliRunner().invoke(cli, args)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def run_all(src: Path, out: Path) -> tuple[dict[str, int], list[str], int]:
    """Every command on every case, in-process: (tally of outcomes, problems, cases)."""
    all_cases = cases(src, out, missing=True)
    good = {cmd: _invoke([a.format(case=src, good=src) for a in cmd]).stdout.replace(str(src), "{}")
            for cmd in COMMANDS}
    tally: dict[str, int] = {}
    problems = []
    for name, path, kind in all_cases:
        if kind.startswith("missing"):
            without(src, path)
        for cmd in PAIR_COMMANDS if kind == "missing-pair" else COMMANDS:
            args = [a.format(case=path, good=src) for a in cmd]
            o, why = outcome(kind, path, args, _invoke(args), good[cmd])
            tally[o] = tally.get(o, 0) + 1
            for word, key in (("traceback", "traceback"), ("hang", "hang"),
                              ("silent change", "silent")):
                if why.startswith(word):
                    tally[key] = tally.get(key, 0) + 1
            if why:
                problems.append(f"{name} / {' '.join(cmd[:3])}: {why}")
        if kind.startswith("missing"):
            path.unlink()  # ~250 copies of the fixture: one at a time on disk
    return tally, problems, len(all_cases)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python tests/faults.py FIXTURE.sqlite OUTDIR   (prints the suite's summary)")
    os.environ.setdefault("NSIGHTLAB_CACHE_DIR", str(Path(sys.argv[2]) / "cache"))
    tally, problems, n = run_all(Path(sys.argv[1]), Path(sys.argv[2]))
    print("\n".join(problems))
    print(summary_line(tally, n))
