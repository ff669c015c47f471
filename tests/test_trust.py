"""Trust: real work is never called damage, damage is said where the user looks, and no answer
depends on row order (issue 27).

Real inputs: a slice of a longer two-GPU capture (nsys 2026.2, nsys-ai's test fixture, MIT) and
an H100 capture bounded by cudaProfilerStart/Stop with work in flight at both edges, with what
NVIDIA's ``nsys stats`` counted for it (tests/data/edges/README.md says how each was made).
"""
from __future__ import annotations

import csv
import json
import sqlite3
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

import nsightlab
import nsightlab.recipe_runner as R
from conftest import AS_VIEW, edited_copy, xz_fixtures
from nsightlab.analysis import completeness
from nsightlab.cli import cli

EDGES = Path(__file__).resolve().parent / "data" / "edges"
K = "CUPTI_ACTIVITY_KIND_KERNEL"


@pytest.fixture(scope="module")
def edge(tmp_path_factory):
    return xz_fixtures(tmp_path_factory, EDGES)


def _stderr_warnings(res) -> list[str]:
    return [line for line in res.stderr.splitlines() if "WARNING" in line]


def test_a_slice_of_a_longer_capture_is_counted_as_nsys_stats_counts_it(edge, cache_dir):
    """nsys-ai's mfu_2gpu_after holds 0.3 s of a 138 s session: 10 kernels, 4 memcpy and 2
    memset were running when the slice opens. They are real: every kernel is counted (NCCL
    SendRecv 62 times, as nsys stats counts it), nothing is called damage, and a note says
    which work was in flight at the edges."""
    path = edge("nsysai-mfu_2gpu_after")
    rows = sqlite3.connect(path).execute(f"SELECT count(*) FROM {K}").fetchone()[0]
    ks = R.run("kernel_sum", path)["kernel_sum"]
    assert ks["instances"].sum() == rows == 3587
    assert ks.loc[ks["name"].str.contains("SendRecv"), "instances"].sum() == 62
    found = completeness.check(nsightlab.open(path))
    assert [f for f in found if f["severity"] != "note"] == []
    edges = [f["message"] for f in found if f["check"] == "capture_edges"]
    assert any(m.startswith("10 kernels, 4 memcpy, 2 memset already running") for m in edges)
    for args in (["recipe", "run", "kernel_sum", str(path)], ["report", str(path)]):
        res = CliRunner().invoke(cli, args)
        assert res.exit_code == 0 and _stderr_warnings(res) == [], res.stderr


def test_a_capture_range_counts_every_kernel_as_nsys_stats_does(edge, cache_dir):
    """An H100 capture bounded by cudaProfilerStart/Stop around a busy loop (no sync at either
    edge): kernel_sum's instances per kernel equal NVIDIA's cuda_gpu_kern_sum, and the
    commands print no warning (nsys's own "not all events might have been collected", said
    whenever collection stops before the application ends, is a note)."""
    path = edge("h100-profiler-range")
    with open(EDGES / "nsys" / "h100-profiler-range_cuda_gpu_kern_sum.csv") as f:
        want = {r["Name"]: int(r["Instances"]) for r in csv.DictReader(f)}
    ks = R.run("kernel_sum", path)["kernel_sum"]
    assert dict(zip(ks["name"], ks["instances"].astype(int))) == want
    assert sum(want.values()) == 29862
    for args in (["recipe", "run", "kernel_sum", str(path)], ["info", str(path)],
                 ["recipe", "run", "launch_compute", str(path), "--format", "json"]):
        res = CliRunner().invoke(cli, args)
        assert res.exit_code == 0 and _stderr_warnings(res) == [], res.stderr


@pytest.fixture
def doubled(sqlite_of, tmp_path):
    """h200-vit-fp16 with 100 of its 3120 kernels recorded twice, and half its API calls."""
    path = tmp_path / "doubled.sqlite"
    path.write_bytes(sqlite_of("h200-vit-fp16").read_bytes())
    with sqlite3.connect(path) as c:
        c.execute(f"INSERT INTO {K} SELECT * FROM {K} WHERE rowid % 31 = 0")
        api = "CUPTI_ACTIVITY_KIND_RUNTIME"
        c.execute(f"INSERT INTO {api} SELECT * FROM {api} WHERE rowid % 2 = 0")
    return path


@pytest.mark.parametrize("fmt", ["table", "csv", "json"])
def test_duplicate_kernels_are_dropped_once_counted_and_said_in_every_format(doubled, fmt,
                                                                              cache_dir):
    """Exact duplicate kernel rows count once everywhere; stderr says how many were left out,
    once, in every format, and again when the answer is served from the cache. The API
    table's duplicate rows are left alone (2022-era exports hold two rows per call)."""
    args = ["recipe", "run", "kernel_sum", str(doubled), "--format", fmt, "--limit", "100"]
    first, served = CliRunner().invoke(cli, args), CliRunner().invoke(cli, args)
    for res in (first, served):
        assert res.exit_code == 0, res.output
        said = _stderr_warnings(res)
        assert len(said) == 1 and "100 kernels recorded twice" in said[0], res.stderr
    assert first.stdout == served.stdout
    if fmt == "json":
        total = sum(r["instances"] for r in json.loads(first.stdout)["kernel_sum"])
        assert total == 3120
    r = nsightlab.open(doubled)
    assert len(r.kernels(["start_ns", "short_name"])) == 3120  # first and later columns agree
    calls = sqlite3.connect(doubled).execute(
        "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME").fetchone()[0]
    assert len(r.cuda_api(["start_ns"])) == calls


def test_the_same_record_of_two_processes_is_not_a_duplicate(sqlite_of, tmp_path):
    """A kernel row whose copy differs only in its process (its correlation id, GPU, stream
    and times equal: two processes' records, as a tiler of traces might leave them) is two
    kernels, not one recorded twice."""
    path = tmp_path / "two.sqlite"
    path.write_bytes(sqlite_of("h200-vit-fp16").read_bytes())
    with sqlite3.connect(path) as c:
        cols = [r[1] for r in c.execute(f"PRAGMA table_info({K})")]
        moved = ", ".join("globalPid + (1 << 24)" if x == "globalPid" else x for x in cols)
        c.execute(f"INSERT INTO {K} SELECT {moved} FROM {K} WHERE rowid % 31 = 0")
    for cache in (True, False):
        r = nsightlab.open(path, cache=cache)
        k = r.kernels(["start_ns", "pid"])
        assert len(k) == 3220 and k["pid"].nunique() == 2


def test_duplicates_are_left_out_without_a_cache_too(doubled, monkeypatch):
    monkeypatch.setenv("NSIGHTLAB_NO_CACHE", "1")
    r = nsightlab.open(doubled, cache=False)
    assert len(r.kernels(["start_ns", "name"])) == 3120
    assert R.run("kernel_sum", doubled, cache=False)["kernel_sum"]["instances"].sum() == 3120


# ---- row order -------------------------------------------------------------------------------
#: the activity and NVTX tables whose rows are shuffled
SHUFFLED = (K, "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_MEMCPY",
            "CUPTI_ACTIVITY_KIND_MEMSET", "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
            "CUPTI_ACTIVITY_KIND_GRAPH_TRACE", "NVTX_EVENTS")


def _shuffled(src: Path, out: Path) -> Path:
    out.write_bytes(src.read_bytes())
    out.chmod(0o644)
    with sqlite3.connect(out) as c:
        have = {r[0] for r in c.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        for t in (t for t in SHUFFLED if t in have):
            c.execute(f"CREATE TABLE s AS SELECT * FROM {t} ORDER BY (rowid * 7919) % 10007, rowid DESC")
            c.execute(f"DROP TABLE {t}")
            c.execute(f"ALTER TABLE s RENAME TO {t}")
    return out


def _canonical(df: pd.DataFrame) -> list[str]:
    """A table as sorted text rows: floats rounded to 6 significant digits, ties in any order."""
    def cell(v) -> str:
        if isinstance(v, float):
            return "nan" if v != v else f"{v:.6g}"
        return str(v)
    return sorted("|".join(cell(v) for v in row) for row in df.astype(object).itertuples(index=False))


def _answers(path: Path) -> dict[str, object]:
    out: dict[str, object] = {}
    for name in R.available():
        try:
            tables = R.run(name, path).tables()
        except Exception as e:  # "no data" and the like: the same outcome is the answer
            out[name] = f"{type(e).__name__}: {str(e).replace(str(path), '{}')}"
            continue
        for t, df in tables.items():
            out[f"{name}/{t}"] = _canonical(df)
    from nsightlab.run import report as run_report

    for t, df in run_report.build(path).tables().items():
        out[f"report/{t}"] = _canonical(df)
    return out


@pytest.mark.parametrize("stem", ["h200-vit-fp16-syncy", "h200-vit-fp16-cudagraph",
                                  "pub-centerformer-trt-nvtx", "h200-launchbound"])
def test_no_answer_depends_on_row_order(stem, sqlite_of, tmp_path, cache_dir):
    """nsys 2025.6 and later export rows out of time order: the rows of every activity and NVTX
    table of real fixtures shuffled give the same answer from every recipe and from report."""
    src = sqlite_of(stem)
    shuffled = _shuffled(src, tmp_path / f"{stem}.sqlite")
    a, b = _answers(src), _answers(shuffled)
    assert a.keys() == b.keys()
    differ = [k for k in a if a[k] != b[k]]
    assert differ == [], differ


def test_diff_and_compare_do_not_depend_on_row_order(sqlite_of, tmp_path, cache_dir):
    from nsightlab.comparison import diff, lineup

    a, b = sqlite_of("h200-vit-fp16"), sqlite_of("h200-vit-fp8")
    sa = _shuffled(a, tmp_path / "h200-vit-fp16.sqlite")
    sb = _shuffled(b, tmp_path / "h200-vit-fp8.sqlite")
    for build in (lambda x, y: diff.diff(x, y), lambda x, y: lineup.compare([x, y])):
        want, got = build(a, b), build(sa, sb)
        for t, df in want.tables().items():
            moved = [r.replace(str(sa.parent), str(a.parent)) for r in _canonical(got.tables()[t])]
            assert _canonical(df) == sorted(moved), t


def test_errors_about_a_compressed_exports_content_name_the_users_file(sqlite_of, tmp_path,
                                                                       cache_dir):
    """A .sqlite.xz is read from a decompressed copy in the cache: an error found while reading
    its tables (here a renamed column) names the user's file, never the cache's copy."""
    import lzma

    plain = tmp_path / "renamed.sqlite"
    plain.write_bytes(sqlite_of("h200-vit-fp16").read_bytes())
    with sqlite3.connect(plain) as c:
        c.execute(f"ALTER TABLE {K} RENAME COLUMN start TO start_x")
    packed = tmp_path / "user" / "renamed.sqlite.xz"
    packed.parent.mkdir()
    packed.write_bytes(lzma.compress(plain.read_bytes()))
    for args in (["recipe", "run", "kernel_sum", str(packed)], ["report", str(packed)]):
        res = CliRunner().invoke(cli, args)
        errors = [line for line in res.output.splitlines() if line.startswith("Error:")]
        assert res.exit_code == 1 and len(errors) == 1, res.output
        assert errors[0].startswith(f"Error: {packed}:") and str(cache_dir) not in errors[0]


@pytest.mark.parametrize("stem", ["edge:nsysai-mfu_2gpu_after", "edge:h100-profiler-range",
                                  "view:h200-vit-fp16", *(s for s in __import__("conftest").STEMS)])
def test_api_facts_without_the_api_cache_give_the_findings_of_the_cached_table(
        stem, edge, sqlite_of, tmp_path, monkeypatch):
    """A command that reads no API table (kernel_sum) counts its launch calls in SQL and
    takes bounds of its extent from its first and last rows, scanning for the extent only
    where a table reaches past them. On every real fixture (slices and capture ranges with
    work in flight at the edges among them) the findings equal those from the cached API
    table (its names' codes and statistics), and the launch calls are the same counts."""
    path = edge(stem[5:]) if stem.startswith("edge:") else sqlite_of(stem.split(":")[-1])
    if stem.startswith("view:"):  # the API table as a view: no rowid, the extent scanned
        path = edited_copy(path, tmp_path / "view.sqlite", "CUPTI_ACTIVITY_KIND_RUNTIME",
                           AS_VIEW)
    scans, uncached = [], []
    real, real_facts = completeness._api_extent, completeness._api_facts
    monkeypatch.setattr(completeness, "_api_extent",
                        lambda report: scans.append(1) or real(report))
    monkeypatch.setattr(completeness, "_api_facts",
                        lambda report, source: uncached.append(1) or real_facts(report, source))
    found = {}
    for cached in (False, True):
        r = nsightlab.open(path, cache_dir=tmp_path / f"c{cached}")
        r.prefetch(["kernels", "memcpy", "memset", *(["cuda_api"] if cached else [])])
        assert r.is_cached("cuda_api") is (cached and r.has_rows("cuda_api"))
        found[cached] = (completeness._check(r),
                         completeness._launch_calls(r, r.row_count("kernels")))
    assert found[False] == found[True]
    assert len(uncached) == 1 or not nsightlab.open(path, cache=False).has_rows("cuda_api")
    edges = [f for f in found[True][0] if f["check"] == "capture_edges"]
    assert bool(scans) >= bool(edges)  # the extent was scanned for wherever work crossed it
