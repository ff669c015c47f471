"""Bad input: a one-line message naming the file and the fix, exit code 1, no traceback."""
from __future__ import annotations

import shutil
import sqlite3

import pytest
from click.testing import CliRunner

from nsightlab.cli import cli, main  # noqa: F401
from conftest import DATA, SHARED


def run_info(*args: str, env: dict | None = None):
    return CliRunner().invoke(cli, ["info", *args], env=env or {})


def assert_one_line_error(result, *needles: str) -> str:
    assert result.exit_code == 1, result.output
    # progress notes ("nsightlab: exporting ...") may precede the error; the error is one line
    lines = [x for x in result.output.strip().splitlines() if not x.startswith("nsightlab: ")]
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.output
    assert "Traceback" not in result.output
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return lines[0]


def test_not_sqlite(tmp_path):
    f = tmp_path / "notes.sqlite"
    f.write_text("hello\n" * 100)
    assert_one_line_error(run_info(str(f)), str(f), "not an SQLite file", ".nsys-rep")


def test_sqlite_that_is_not_an_nsys_export(tmp_path):
    f = tmp_path / "other.sqlite"
    with sqlite3.connect(f) as c:
        c.execute("CREATE TABLE foo (x)")
    assert_one_line_error(run_info(str(f)), str(f), "not an Nsight Systems export", "nsys export")


def test_truncated_export(sqlite_of, tmp_path, cache_dir):
    src = sqlite_of("h200-vit-fp16").read_bytes()
    f = tmp_path / "cut.sqlite"
    f.write_bytes(src[: len(src) // 2])
    assert_one_line_error(run_info(str(f)), str(f), "truncated", "export the report again")


def test_2021_era_export_without_metadata_synthetic_from_real(sqlite_of, tmp_path, cache_dir):
    """Synthetic: a real export cut down to the handful of tables a 2021 nsys wrote, with no
    META_DATA_EXPORT/EXPORT_META_DATA (no such real file could be found to redistribute)."""
    f = tmp_path / "old.sqlite"
    with sqlite3.connect(f) as c:
        c.execute("ATTACH DATABASE ? AS src", (f"file:{sqlite_of('h200-vit-fp16')}?mode=ro",))
        for t in ("StringIds", "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME",
                  "TARGET_INFO_GPU"):
            c.execute(f"CREATE TABLE {t} AS SELECT * FROM src.{t}")
    assert_one_line_error(run_info(str(f)), str(f), "without version metadata",
                          "export the .nsys-rep again")


def test_non_utf8_text_is_read_not_fatal(sqlite_of, cache_dir):
    # pub-pipit-saxpy-a100 has non-UTF-8 bytes in TARGET_INFO_SYSTEM_ENV
    res = run_info(str(sqlite_of("pub-pipit-saxpy-a100")))
    assert res.exit_code == 0, res.output
    assert "A100" in res.output


def test_missing_path_and_empty_directory(tmp_path):
    assert_one_line_error(run_info(str(tmp_path / "nope.sqlite")), "nope.sqlite", "no such file")
    assert_one_line_error(run_info(str(tmp_path)), str(tmp_path), "without an nsys report")


def test_nsight_compute_report_is_not_mistaken_for_nsys(tmp_path):
    src = SHARED / "ncu" / "h200-gemm-fp16.ncu-rep"
    if not src.is_file():
        pytest.skip("../shared/fixtures/ncu is not present")
    # info reads it as what it is; a command that needs an nsys report says what it got
    assert run_info(str(src)).exit_code == 0
    res = CliRunner().invoke(cli, ["recipe", "run", "kernel_sum", str(src)])
    assert_one_line_error(res, "h200-gemm-fp16.ncu-rep", "Nsight Compute report", ".nsys-rep")


def nsys_rep() -> str:
    for root in (SHARED, DATA):
        p = root / "nsys" / "h200-vit-fp16.nsys-rep"
        if p.is_file():
            return str(p)
    pytest.skip("no .nsys-rep fixture present")


def test_nsys_rep_without_nsys(tmp_path, cache_dir):
    rep = tmp_path / "r.nsys-rep"
    shutil.copyfile(nsys_rep(), rep)
    res = run_info(str(rep), env={"PATH": str(tmp_path), "NSIGHTLAB_NSYS": ""})
    assert_one_line_error(res, str(rep), "no nsys was found", "NSIGHTLAB_NSYS",
                          "nsys export --type sqlite")


@pytest.mark.skipif(shutil.which("nsys") is None, reason="nsys is not installed")
def test_nsys_rep_newer_than_the_local_nsys(tmp_path, cache_dir):
    """Real: the fixtures were recorded by nsys 2025.3; CI's Debian nsys is 2022.4."""
    import subprocess

    version = subprocess.run(["nsys", "--version"], capture_output=True, text=True).stdout
    if "2025" in version or "2026" in version:
        pytest.skip(f"local nsys ({version.strip()}) can read the fixture")
    rep = tmp_path / "r.nsys-rep"
    shutil.copyfile(nsys_rep(), rep)
    line = assert_one_line_error(run_info(str(rep)), str(rep), "newer Nsight Systems",
                                 "--nsys PATH")
    assert "2022" in line  # names the local version
    assert not list(tmp_path.glob("*.sqlite"))  # nothing half-written beside the input


def test_invalid_utf8_in_nvtx_text_synthetic_from_real(sqlite_of, tmp_path, cache_dir):
    """Synthetic: a copy of a real export with invalid UTF-8 bytes put into one NVTX text
    (nvtx strings come through the fast ADBC path, which does not check encodings)."""
    import nsightlab

    f = tmp_path / "bad-text.sqlite"
    f.write_bytes(sqlite_of("h200-vit-fp16").read_bytes())
    with sqlite3.connect(f) as c:
        c.execute("UPDATE NVTX_EVENTS SET text = CAST(X'626C6F636BFF30' AS TEXT) "
                  "WHERE rowid = (SELECT min(rowid) FROM NVTX_EVENTS WHERE text = 'block0')")
    n = nsightlab.open(f).nvtx()
    assert "block\ufffd0" in set(n["text"].dropna()) and len(n) == 297


def test_unwritable_output_is_one_line(sqlite_of, tmp_path, cache_dir):
    import nsightlab.cli.table  # noqa: F401

    blocker = tmp_path / "file"
    blocker.write_text("x")
    res = CliRunner().invoke(cli, ["table", "kernels", str(sqlite_of("h200-vit-fp16")), "--format",
                                   "csv", "-o", str(blocker / "out.csv")])
    assert_one_line_error(res, "out.csv", "check the path")


def test_a_bad_sqlite_xz_is_named_as_given(sqlite_of, tmp_path, cache_dir):
    """A .sqlite.xz is decompressed into the cache first: an error about its content names the
    user's file, not the decompressed copy."""
    import lzma

    from click.testing import CliRunner

    from nsightlab.cli import cli

    cut = tmp_path / "cut.sqlite.xz"
    cut.write_bytes(lzma.compress(sqlite_of("h200-vit-fp16").read_bytes()[:1_000_000]))
    junk = tmp_path / "junk.sqlite.xz"
    junk.write_bytes(lzma.compress(b"not sqlite at all" * 1000))
    for path, words in ((cut, "truncated SQLite file"), (junk, "not an SQLite file")):
        res = CliRunner().invoke(cli, ["report", str(path)])
        assert res.exit_code == 1 and words in res.output
        assert str(path) in res.output and str(cache_dir) not in res.output
