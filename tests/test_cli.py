"""CLI: info and table on real reports, every output format, help on every command."""
from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd
import pytest
from click.testing import CliRunner

from nsightlab.cli import cli


def invoke(*args):
    return CliRunner().invoke(cli, list(args))


def test_info_json_keys_and_counts(sqlite_of, cache_dir):
    res = invoke("info", str(sqlite_of("h200-vit-fp8")), "--json")
    assert res.exit_code == 0, res.output
    info = json.loads(res.output)
    assert {"nsys_version", "schema_version", "gpus", "span_ns", "tables"} <= set(info)
    assert info["tables"]["kernels"] == 12288 and info["tables"]["cuda_api"] == 31816
    assert info["gpus"][0]["name"] == "NVIDIA H200"
    assert info["span_ns"] == 7334423149


def test_info_many_reports_text(sqlite_of, cache_dir):
    res = invoke("info", str(sqlite_of("h200-vit-fp16")), str(sqlite_of("pub-centerformer-trt-nvtx")))
    assert res.exit_code == 0, res.output
    assert "NVIDIA H200" in res.output and "NVIDIA TITAN RTX" in res.output
    assert "not recorded (profile with nsys profile --trace=cuda)" in res.output


@pytest.mark.parametrize("fmt", ["table", "csv", "json", "parquet"])
def test_table_formats(fmt, sqlite_of, cache_dir, tmp_path):
    out = tmp_path / f"k.{fmt}"
    res = invoke("table", "kernels", str(sqlite_of("h200-vit-fp16")), "--columns",
                 "name,duration_ns", "--limit", "7", "--format", fmt, "-o", str(out))
    assert res.exit_code == 0, res.output
    if fmt == "parquet":
        df = pd.read_parquet(out)
    elif fmt == "csv":
        df = pd.read_csv(out)
    elif fmt == "json":
        df = pd.DataFrame(json.loads(out.read_text()))
    else:
        lines = out.read_text().splitlines()
        assert lines[0].split() == ["name", "duration_ns"] and len(lines) == 2 + 7
        return
    assert list(df.columns) == ["name", "duration_ns"] and len(df) == 7
    assert df["duration_ns"].gt(0).all()


def test_table_of_a_missing_table_says_how_to_record_it(sqlite_of, cache_dir):
    res = invoke("table", "gpu_metrics", str(sqlite_of("h200-vit-fp16")))
    assert res.exit_code == 0
    assert "(no rows)" in res.output and "--gpu-metrics-devices=all" in res.output


def test_usage_errors_exit_2(sqlite_of, cache_dir):
    assert invoke("table", "kernels", str(sqlite_of("h200-vit-fp16")), "--format", "parquet").exit_code == 2
    assert invoke("table", "kernelz", str(sqlite_of("h200-vit-fp16"))).exit_code == 2
    res = invoke("table", "kernels", str(sqlite_of("h200-vit-fp16")), "--columns", "bogus")
    assert res.exit_code == 1 and "no column(s) bogus" in res.output


def test_every_command_has_help_with_an_example():
    commands = [[]] + [[c] for c in cli.commands]
    commands += [["recipe", c] for c in cli.commands["recipe"].commands]
    for cmd in commands:
        res = invoke(*cmd, "--help")
        assert res.exit_code == 0 and "Example" in res.output, cmd


def test_every_command_is_in_the_readme():
    from pathlib import Path

    readme = (Path(__file__).parent.parent / "README.md").read_text()
    for name in cli.commands:
        assert f"nsightlab {name}" in readme, name


def test_console_script_runs_as_a_module(sqlite_of, cache_dir):
    out = subprocess.run([sys.executable, "-m", "nsightlab", "info", str(sqlite_of("h200-vit-fp16"))],
                         capture_output=True, text=True)
    assert out.returncode == 0 and "NVIDIA H200" in out.stdout


def test_the_command_leaves_through_its_exit_handlers_without_teardown(tmp_path):
    """``nsightlab.cli.leave`` skips the interpreter's teardown but not the exit handlers: a
    --no-cache decompression's scratch folder is removed, the whole answer reaches a pipe, and
    exit codes are kept (0; 1 with one line for a missing file; 2 for a usage error)."""
    import os
    from pathlib import Path

    data = Path(__file__).parent / "data" / "nsys" / "h200-launchbound.sqlite.xz"
    env = {**os.environ, "TMPDIR": str(tmp_path), "NSIGHTLAB_NO_CACHE": "1"}
    run = lambda *a: subprocess.run([sys.executable, "-m", "nsightlab", *a],  # noqa: E731
                                    capture_output=True, text=True, env=env, timeout=300)
    out = run("recipe", "run", "kernel_sum", str(data), "--format", "csv")
    assert out.returncode == 0, out.stderr[-1000:]
    # every row flushed before the exit: the same bytes as the command run in-process
    inside = CliRunner().invoke(cli, ["recipe", "run", "kernel_sum", str(data), "--format", "csv",
                                      "--no-cache"])
    assert inside.exit_code == 0 and out.stdout == inside.stdout and out.stdout.count("\n") > 3
    assert not list(tmp_path.glob("nsightlab-*")), "the scratch folder was left behind"
    missing = run("recipe", "run", "kernel_sum", str(tmp_path / "nope.sqlite"))
    assert missing.returncode == 1 and len(missing.stderr.strip().splitlines()) == 1
    assert run("recipe", "run").returncode == 2


def test_docs_precision_md_is_current():
    from pathlib import Path

    from nsightlab.analysis.classify import precision_markdown

    doc = Path(__file__).parent.parent / "docs" / "precision.md"
    assert doc.read_text() == precision_markdown(), \
        "run: python -m nsightlab.analysis.classify > docs/precision.md"


def test_docs_tables_md_is_current():
    from pathlib import Path

    from nsightlab.read.tables import tables_markdown

    doc = Path(__file__).parent.parent / "docs" / "tables.md"
    assert doc.read_text() == tables_markdown(), "run: python -m nsightlab.read.tables > docs/tables.md"
