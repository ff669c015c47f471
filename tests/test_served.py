"""Answers served again (nsightlab.read.answer_cache): a repeated command prints the same text without
importing pandas or pyarrow, and never a stale or damaged answer."""
import json
import os
import subprocess
import sys

import pytest

#: runs the CLI in-process, then reports on stderr which heavy modules it imported
WRAPPER = ("import sys, json; from nsightlab.cli import cli\n"
           "try:\n    cli(sys.argv[1:], prog_name='nsightlab')\n"
           "except SystemExit as e:\n    code = e.code\n"
           "print('IMPORTED=' + json.dumps(sorted(m for m in ('pandas', 'pyarrow', 'numpy', "
           "'altair') if m in sys.modules)), file=sys.stderr)\nsys.exit(code or 0)\n")


def cli(args, cache_dir, cwd):
    env = {**os.environ, "NSIGHTLAB_CACHE_DIR": str(cache_dir)}
    env.pop("NSIGHTLAB_NO_CACHE", None)
    proc = subprocess.run([sys.executable, "-c", WRAPPER, *map(str, args)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    imported = json.loads(proc.stderr.rsplit("IMPORTED=", 1)[1])
    return proc.stdout, imported


@pytest.fixture
def report(sqlite_of, tmp_path):
    """A private copy (its mtime may be changed)."""
    dst = tmp_path / "vit.sqlite"
    dst.write_bytes(sqlite_of("h200-vit-fp16").read_bytes())
    return dst


@pytest.mark.parametrize("args", [["recipe", "run", "kernel_sum", "{r}", "--limit", "5"],
                                  ["recipe", "run", "sync_gaps", "{r}", "--format", "json"],
                                  ["info", "{r}"]])
def test_a_repeated_command_prints_the_same_answer_without_pandas(report, tmp_path, args):
    args = [a.replace("{r}", str(report)) for a in args]
    first, imported_first = cli(args, tmp_path / "cache", tmp_path)
    assert "pandas" in imported_first and first.strip()
    again, imported_again = cli(args, tmp_path / "cache", tmp_path)
    assert again == first
    assert imported_again == [], imported_again


def test_other_options_or_an_edited_report_are_not_served_the_old_answer(report, tmp_path):
    cache = tmp_path / "cache"
    five, _ = cli(["recipe", "run", "kernel_sum", report, "--limit", "5"], cache, tmp_path)
    two, imported = cli(["recipe", "run", "kernel_sum", report, "--limit", "2"], cache, tmp_path)
    assert two != five and "first 2 of" in two and "pandas" in imported
    st = report.stat()
    os.utime(report, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # "edited"
    again, imported = cli(["recipe", "run", "kernel_sum", report, "--limit", "5"], cache, tmp_path)
    assert again == five and "pandas" in imported  # recomputed, not served


def test_a_damaged_served_answer_is_dropped_and_recomputed(report, tmp_path):
    cache = tmp_path / "cache"
    args = ["recipe", "run", "kernel_sum", report, "--limit", "3"]
    first, _ = cli(args, cache, tmp_path)
    [kept] = list(cache.rglob("served-*.json"))
    entry = json.loads(kept.read_text())
    kept.write_text(json.dumps({**entry, "stdout": entry["stdout"].replace("gemm", "conv")}))
    again, imported = cli(args, cache, tmp_path)
    assert again == first and "pandas" in imported
    assert json.loads(kept.read_text())["stdout"] == first  # kept again, intact


def test_no_cache_keeps_nothing(report, tmp_path):
    cache = tmp_path / "cache"
    cli(["recipe", "run", "kernel_sum", report, "--no-cache"], cache, tmp_path)
    assert not list(cache.rglob("served-*.json")) if cache.exists() else True
