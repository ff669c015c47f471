"""The installed package is the whole package: every module and recipe of the source tree
ships, and CI runs these tests against the wheel, not the source tree."""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import nsightlab
import nsightlab.recipe_runner as R

SOURCE = Path(__file__).resolve().parent.parent


def source_modules() -> list[str]:
    out = []
    for f in sorted((SOURCE / "nsightlab").rglob("*.py")):
        parts = f.relative_to(SOURCE).with_suffix("").parts
        out.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return out


def test_every_source_module_is_importable_from_the_package():
    missing = [m for m in source_modules() if importlib.util.find_spec(m) is None]
    assert not missing, f"not in the installed package: {missing}"


def test_every_builtin_recipe_ships():
    shipped = {p.parent.name for p in R.builtin_dir().glob("*/metadata.json")}
    in_source = {p.parent.name for p in (SOURCE / "recipes").glob("*/metadata.json")}
    assert shipped == in_source and {"kernel_sum", "sync_gaps"} <= shipped


def test_ci_tests_the_installed_wheel():
    installed = Path(nsightlab.__file__).resolve().parent
    if os.environ.get("CI"):
        assert installed != SOURCE / "nsightlab", f"CI imported the source tree ({installed})"
        assert "site-packages" in installed.parts, installed
    assert (installed / "runners" / "ort.py").is_file()


def test_ort_runner_runs_as_a_module_outside_the_source_tree(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "nsightlab.runners.ort", "--help"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "--ep" in proc.stdout


def test_cli_registers_every_command_on_import():
    from nsightlab.cli import cli

    assert set(cli.commands) == {"capture", "captures", "compare", "diff", "export", "info", "layers", "ort", "recipe",
                                 "report", "table"}


def test_importing_the_package_and_cli_does_not_load_pandas(tmp_path):
    code = ("import sys, nsightlab, nsightlab.cli; "
            "print(sorted(m for m in ('pandas', 'pyarrow', 'altair') if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert proc.stdout.strip() == "[]", proc.stdout + proc.stderr
