"""Small frictions a new user met (issue 62, items 7 and 8), each kept fixed:

- ``recipe run kernel_sum X --format csv`` prints plain CSV that ``pandas.read_csv`` reads with
  the right header (several tables: each after a ``# NAME`` line, and ``--help`` says ``-o DIR``);
- from the repository's root, ``captures`` lists the bundled examples and ``report vit-fp16``
  opens ``captures/examples/vit-fp16`` (a capture one level down in the store); a name found
  nowhere says where the lookup went;
- ``info`` says a trace without CUDA graphs has "none in this run", not a possibly lost trace;
- the HTML pages keep every table inside the page: a wide one scrolls in its own box (checked
  in headless Chromium at 1280 px where it is installed).
"""
from __future__ import annotations

import io
import json
import re
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from nsightlab.cli import cli

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "captures" / "examples"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def invoke(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


# ---- CSV on stdout --------------------------------------------------------------------------
def test_one_table_csv_reads_with_pandas(sqlite_of, cache_dir):
    res = invoke("recipe", "run", "kernel_sum", sqlite_of("h200-vit-fp16"), "--format", "csv")
    assert res.exit_code == 0, res.output
    assert not res.stdout.startswith("#")
    df = pd.read_csv(io.StringIO(res.stdout))
    assert list(df.columns[:3]) == ["name", "instances", "total_ns"]
    assert len(df) > 10 and df["total_ns"].dtype.kind == "i"


def test_several_tables_csv_are_named_and_help_says_how_to_part_them(sqlite_of, cache_dir):
    res = invoke("recipe", "run", "launch_compute", sqlite_of("h200-vit-fp16"), "--format", "csv")
    assert res.exit_code == 0, res.output
    names = [line[2:] for line in res.stdout.splitlines() if line.startswith("# ")]
    assert len(names) > 1 and res.stdout.startswith(f"# {names[0]}\n")
    helped = " ".join(invoke("recipe", "run", "--help").output.split())
    assert "one table as plain CSV" in helped and "-o DIR" in helped


# ---- captures by name, one level down -------------------------------------------------------
def test_captures_lists_the_examples_from_the_repository_root(monkeypatch):
    monkeypatch.chdir(ROOT)
    monkeypatch.delenv("NSIGHTLAB_STORE", raising=False)
    res = invoke("captures", "--json")
    assert res.exit_code == 0, res.output
    assert {"vit-fp16", "vit-fp8"} <= {r["name"] for r in json.loads(res.stdout)}


@pytest.fixture
def store_root(tmp_path, monkeypatch, cache_dir):
    """A folder like the repository's root: captures/examples/vit-fp16 (a copy: the report
    decompresses into the capture's cache), the current directory, the default store."""
    shutil.copytree(EXAMPLES / "vit-fp16", tmp_path / "captures" / "examples" / "vit-fp16",
                    ignore=shutil.ignore_patterns("cache"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("NSIGHTLAB_STORE", raising=False)
    return tmp_path


def test_report_opens_a_capture_one_level_down_by_name(store_root):
    res = invoke("report", "vit-fp16")
    assert res.exit_code == 0, res.output
    assert res.stdout.startswith("vit-fp16: 20 iteration(s)")
    assert (store_root / "captures" / "examples" / "vit-fp16" / "cache").is_dir()


def test_same_name_in_two_groups_asks_for_a_path(store_root):
    shutil.copytree(store_root / "captures" / "examples",
                    store_root / "captures" / "more")
    res = invoke("info", "vit-fp16")
    assert res.exit_code == 1 and "2 captures of that name" in res.output
    assert "give the path of one of them" in res.output


def test_a_name_found_nowhere_says_where_the_lookup_went(tmp_path, monkeypatch, cache_dir):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("NSIGHTLAB_STORE", raising=False)
    res = invoke("report", "vit-fp16")
    assert res.exit_code == 1 and len(res.output.strip().splitlines()) == 1
    store = str(tmp_path.resolve() / "captures")  # absolute: it depends on the current folder
    assert store in res.output and "NSIGHTLAB_STORE" in res.output
    listed = invoke("captures")
    assert listed.exit_code == 0 and store in listed.stderr


# ---- info: no CUDA graphs is no alarm -------------------------------------------------------
def test_info_says_none_in_this_run_for_a_trace_without_graphs(sqlite_of, cache_dir):
    res = invoke("info", sqlite_of("h200-vit-fp16"))
    assert res.exit_code == 0, res.output
    graphs = [line for line in res.stdout.splitlines() if "graph" in line]
    assert len(graphs) == 2 and all("none in this run" in line for line in graphs), graphs
    assert "trace was lost" not in res.stdout


def test_graphs_traced_one_way_name_the_other_option(sqlite_of, cache_dir):
    import nsightlab

    with nsightlab.open(sqlite_of("h200-vit-fp16-cudagraph")) as r:
        assert r.has("cuda_graph_nodes") and not r.has("graph_execs")
        hint = r.missing_hint("graph_execs")
    assert "profile with nsys profile --trace=cuda" in hint and "none in this run" not in hint


# ---- HTML: wide tables stay inside the page -------------------------------------------------
@pytest.fixture(scope="module")
def pages(sqlite_of, tmp_path_factory):
    """The HTML of ``report`` and ``diff`` on real fixtures, written by the CLI."""
    out = tmp_path_factory.mktemp("pages")
    with pytest.MonkeyPatch.context() as m:
        m.setenv("NSIGHTLAB_CACHE_DIR", str(out / "cache"))
        a, b = sqlite_of("h200-vit-fp16"), sqlite_of("h200-vit-fp8")
        for name, args in (("report", [a]), ("diff", [a, b])):
            res = invoke(name, *args, "--html", out / f"{name}.html")
            assert res.exit_code == 0, res.output
    return {name: out / f"{name}.html" for name in ("report", "diff")}


@pytest.mark.parametrize("name", ["report", "diff"])
def test_every_table_sits_in_a_scrolling_box(pages, name):
    text = pages[name].read_text()
    assert ".scroll{max-width:100%;overflow-x:auto}" in text
    tables = text.count("<table><thead>")  # (the inlined Vega JS writes "<table>" too)
    assert tables > 5 and text.count("<div class='scroll'><table><thead>") == tables


#: appended to a page: once drawn, the page's width and each table's box, as JSON in the DOM
MEASURE = """<script>window.addEventListener('load', () => setTimeout(() => {
  const boxes = [...document.querySelectorAll('table')].filter(t => t.offsetWidth).map(t => {
    const box = t.closest('.scroll') || t;
    return {table: Math.round(t.getBoundingClientRect().right),
            box: Math.round(box.getBoundingClientRect().right)};
  });
  const pre = document.createElement('pre');
  pre.id = 'measured';
  pre.textContent = JSON.stringify({view: document.documentElement.clientWidth,
                                    page: document.documentElement.scrollWidth, boxes});
  document.body.appendChild(pre);
}, 300));</script>"""


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed")
@pytest.mark.parametrize("name", ["report", "diff"])
def test_no_table_runs_past_the_edge_at_1280_px(pages, name, tmp_path):
    text = pages[name].read_text()
    at = text.rfind("</body>")
    page = tmp_path / f"{name}.html"
    page.write_text(text[:at] + MEASURE + text[at:])
    dom = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
                          "--hide-scrollbars", "--window-size=1280,4000",
                          "--virtual-time-budget=10000", f"--user-data-dir={tmp_path / 'p'}",
                          "--dump-dom", page.as_uri()],
                         capture_output=True, text=True, timeout=120)
    found = re.search(r'<pre id="measured">(.*?)</pre>', dom.stdout)
    assert found, dom.stderr[-2000:]
    m = json.loads(found.group(1).replace("&quot;", '"'))
    assert m["view"] == 1280 and m["page"] <= m["view"], m  # nothing wider than the window
    assert m["boxes"] and all(b["box"] <= m["view"] for b in m["boxes"]), m
    assert max(b["table"] for b in m["boxes"]) > m["view"]  # one is wider: it scrolls


def test_two_captures_with_one_report_name_are_two_reports_without_the_cache(tmp_path):
    """Two capture folders each holding report.sqlite.xz, diffed with --no-cache: each is
    decompressed into a folder of its own (before: both into one scratch report.sqlite, so B
    was read as A: "The same work in A and B")."""
    import shutil

    from click.testing import CliRunner

    from nsightlab.cli import cli

    nsys = Path(__file__).parent / "data" / "nsys"
    for name, src in (("a", "h200-vit-fp16.sqlite.xz"), ("b", "h200-vit-fp16-syncy.sqlite.xz")):
        (tmp_path / name).mkdir()
        shutil.copyfile(nsys / src, tmp_path / name / "report.sqlite.xz")
    out = CliRunner().invoke(cli, ["diff", str(tmp_path / "a"), str(tmp_path / "b"),
                                   "--no-cache", "--json"])
    assert out.exit_code == 0, out.output
    head = json.loads(out.output[out.output.index("{"):])["headline"]
    assert head["a_median_ns"] != head["b_median_ns"]  # syncy runs slower
