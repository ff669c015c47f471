"""`nsightlab recipe list|show|run` and the recipe framework around the recipes."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

import nsightlab.recipe_runner as R
from nsightlab.cli import cli

BUILTIN = ["api_sum", "budget", "gpu_memory", "gpu_util", "kernel_sum", "launch_compute", "nvtx_gpu", "sync_gaps",
           "tensor_core"]


def invoke(*args, env=None):
    return CliRunner().invoke(cli, ["recipe", *args], env=env)


def test_list_and_show():
    res = invoke("list")
    assert res.exit_code == 0
    assert [line.split()[0] for line in res.output.splitlines()] == BUILTIN
    res = invoke("show", "sync_gaps")
    assert res.exit_code == 0 and "min_gap_ms (float [ms], default 0.1)" in res.output
    assert "gaps:" in res.output and "gpu_idle_after_ns" in res.output
    res = invoke("show", "nope")
    assert res.exit_code == 1 and "no recipe named 'nope'" in res.output


@pytest.mark.parametrize("name", BUILTIN)
def test_outputs_match_their_metadata(name, sqlite_of, cache_dir, tmp_path_factory):
    stem = "h200-vit-fp16-gpumetrics" if name == "tensor_core" else "h200-vit-fp16-syncy"
    recipe = R.get(name)
    if name == "gpu_memory":  # the shared fixtures hold no memory events; the model ones do
        from conftest import xz_fixtures
        path = xz_fixtures(tmp_path_factory, Path(__file__).parent / "data" / "models")(
            "h200-graphs4-fp16")
    else:
        path = sqlite_of(stem)
    out = recipe.run(path)
    assert set(out) <= set(recipe.tables)
    for table, df in out.items():
        documented = set(recipe.tables[table]["columns"])
        assert set(df.columns) <= documented | {"precision_confidence"}, (table, set(df.columns) - documented)


def test_run_json_and_outdir(sqlite_of, cache_dir, tmp_path):
    path = str(sqlite_of("h200-vit-fp16"))
    res = invoke("run", "kernel_sum", path, "--format", "json")
    assert res.exit_code == 0
    payload = json.loads(res.stdout)
    assert list(payload) == ["kernel_sum"] and payload["kernel_sum"][0]["instances"] == 1104
    out = tmp_path / "out"
    res = invoke("run", "launch_compute", path, "-o", str(out), "--format", "csv")
    assert res.exit_code == 0, res.output
    names = sorted(p.name for p in out.iterdir())
    assert names == sorted(["by_range.csv", "by_range.parquet", "manifest.json", "per_kernel.csv",
                            "per_kernel.parquet", "summary.csv", "summary.parquet"])
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["recipe"] == "launch_compute" and manifest["inputs"][0]["status"] == "ok"
    assert manifest["inputs"][0]["nsys_version"] == "2025.3.2.0"
    assert manifest["params"]["busy_high_pct"] == 80.0
    assert pd.read_parquet(out / "summary.parquet").iloc[0]["verdict"] == "compute-bound"
    # an existing output folder is kept unless --force
    res = invoke("run", "launch_compute", path, "-o", str(out))
    assert res.exit_code == 2 and "--force" in res.output
    assert invoke("run", "launch_compute", path, "-o", str(out), "--force").exit_code == 0


def test_params_are_typed_and_checked(sqlite_of, cache_dir):
    path = str(sqlite_of("h200-vit-fp16-syncy"))
    res = invoke("run", "sync_gaps", path, "-p", "min_gap_ms=5", "--format", "json")
    gaps = json.loads(res.stdout)["gaps"]
    assert gaps and min(g["duration_ns"] for g in gaps) >= 5_000_000
    res = invoke("run", "sync_gaps", path, "-p", "min_gap_ms=lots")
    assert res.exit_code == 1 and "not a float" in res.output
    res = invoke("run", "sync_gaps", path, "-p", "bogus=1")
    assert res.exit_code == 1 and "no parameter bogus" in res.output


def test_many_reports_in_parallel_with_no_data_and_errors(sqlite_of, cache_dir, tmp_path):
    folder = tmp_path / "reports"
    folder.mkdir()
    for stem in ("h200-vit-fp16", "pub-pipit-saxpy-a100", "pub-centerformer-trt-nvtx"):
        shutil.copyfile(sqlite_of(stem), folder / f"{stem}.sqlite")
    (folder / "broken.sqlite").write_text("not a database")
    out = tmp_path / "out"
    res = invoke("run", "kernel_sum", str(folder), "-o", str(out), "--jobs", "2")
    assert res.exit_code == 0, res.output
    manifest = json.loads((out / "manifest.json").read_text())
    status = {i["input"].split("/")[-1]: i["status"] for i in manifest["inputs"]}
    assert status == {"broken.sqlite": "error", "h200-vit-fp16.sqlite": "ok",
                      "pub-centerformer-trt-nvtx.sqlite": "no data", "pub-pipit-saxpy-a100.sqlite": "ok"}
    ks = pd.read_parquet(out / "kernel_sum.parquet")
    assert list(ks["report"].unique()) == ["h200-vit-fp16", "pub-pipit-saxpy-a100"]  # input order
    res = invoke("run", "kernel_sum", str(folder), "--strict", "--format", "csv")
    assert res.exit_code == 1


def test_single_report_errors_are_one_line(tmp_path, cache_dir):
    bad = tmp_path / "x.sqlite"
    bad.write_text("nope")
    res = invoke("run", "kernel_sum", str(bad))
    assert res.exit_code == 1 and res.output.strip().startswith("Error: ")
    assert "Traceback" not in res.output


def test_recipe_path_adds_recipes(tmp_path, sqlite_of, cache_dir, monkeypatch):
    d = tmp_path / "mine" / "kernel_count"
    d.mkdir(parents=True)
    (d / "metadata.json").write_text(json.dumps({
        "name": "kernel_count", "description": "How many kernels?", "params": [],
        "tables": {"count": {"columns": {"kernels": "number of kernels"}}}}))
    (d / "recipe.py").write_text(
        "import pandas as pd\n"
        "def run(report, params):\n"
        "    return {'count': pd.DataFrame({'kernels': [len(report.kernels(['name']))]})}\n")
    monkeypatch.setenv("NSIGHTLAB_RECIPE_PATH", str(tmp_path / "mine"))
    assert "kernel_count" in R.available()
    assert R.run("kernel_count", sqlite_of("h200-vit-fp16"))["count"].iloc[0, 0] == 3120


def test_results_are_cached_and_invalidated_by_params(sqlite_of, cache_dir, monkeypatch):
    path = sqlite_of("h200-vit-fp16-syncy")
    first = R.run("sync_gaps", path, {"min_gap_ms": 1})
    calls = []
    compute = R.Recipe._compute
    monkeypatch.setattr(R.Recipe, "_compute", lambda *a: calls.append(1) or compute(*a))
    again = R.run("sync_gaps", path, {"min_gap_ms": 1})
    assert not calls and again["gaps"].equals(first["gaps"])
    other = R.run("sync_gaps", path, {"min_gap_ms": 2})
    assert calls and len(other["gaps"]) <= len(first["gaps"])


def test_docs_recipes_md_is_current():
    from pathlib import Path

    doc = Path(__file__).parent.parent / "docs" / "recipes.md"
    assert doc.read_text() == R.recipes_markdown(), "regenerate docs/recipes.md (see its header)"


def test_kernel_sum_over_the_whole_shared_fixture_folder(cache_dir, tmp_path):
    from conftest import SHARED

    folder = SHARED / "nsys"
    if not folder.is_dir():
        pytest.skip("../shared/fixtures is not present")
    res = invoke("run", "kernel_sum", str(folder), "-o", str(tmp_path / "all"), "--jobs", "2")
    assert res.exit_code == 0, res.output
    manifest = json.loads((tmp_path / "all" / "manifest.json").read_text())
    status = {i["input"].split("/")[-1]: i["status"] for i in manifest["inputs"]}
    # every export is read (.sqlite and .sqlite.xz); an .nsys-rep with its export beside it
    # counts once; the report without kernels is "no data"
    assert status["pub-centerformer-trt-nvtx.sqlite"] == "no data"
    assert status["h200-launchbound.sqlite.xz"] == "ok" and "h200-launchbound.nsys-rep" not in status
    exports = [k for k in status if ".sqlite" in k]
    assert len(exports) == 11 and all(status[k] in ("ok", "no data") for k in exports)
    ks = pd.read_parquet(tmp_path / "all" / "kernel_sum.parquet")
    assert ks["report"].nunique() == 10


def test_reports_are_labelled_apart():
    """Rows of different reports never share a label (resnet.fp16 and resnet.fp8 are not both
    'resnet'); two files of one name get their folders in front, only as many as needed."""
    assert R.report_labels(["a/resnet.fp16.sqlite", "b/resnet.fp8.nsys-rep", "c.sqlite.xz"]) == \
        ["resnet.fp16", "resnet.fp8", "c"]
    assert R.report_labels(["a/x.sqlite", "b/x.sqlite"]) == ["a/x", "b/x"]
    assert R.report_labels(["r/a/x.sqlite", "s/a/x.sqlite", "t.sqlite"]) == ["r/a/x", "s/a/x", "t"]


def test_many_reports_on_a_dask_local_cluster_equal_the_process_pool(sqlite_of, cache_dir, tmp_path):
    distributed = pytest.importorskip("distributed")
    folder = tmp_path / "reports"
    folder.mkdir()
    for stem in ("h200-vit-fp16", "h200-vit-fp8", "pub-pipit-saxpy-a100", "pub-centerformer-trt-nvtx"):
        shutil.copyfile(sqlite_of(stem), folder / f"{stem}.sqlite")
    (folder / "broken.sqlite").write_text("not a database")
    local = R.run_many("sync_gaps", [str(folder)], jobs=2, open_kwargs={"cache": False})
    notes: list[str] = []
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster:
        remote = R.run_many("sync_gaps", [str(folder)], open_kwargs={"cache": False},
                            dask=cluster.scheduler_address, progress=notes.append)
    assert [i["status"] for i in remote.inputs] == [i["status"] for i in local.inputs] == \
        ["error", "ok", "ok", "no data", "ok"]
    assert [i.get("rows_read") for i in remote.inputs] == [i.get("rows_read") for i in local.inputs]
    assert list(remote) == list(local)
    for table in local:
        pd.testing.assert_frame_equal(remote[table], local[table])
    assert any(n.startswith("\r[") and "5/5 reports" in n for n in notes), notes
    assert notes[-1].startswith("5 reports in") and "1 could not be read" in notes[-1]


def test_an_unreachable_dask_scheduler_is_a_one_line_error(sqlite_of, cache_dir, tmp_path):
    pytest.importorskip("distributed")
    a, b = (str(sqlite_of(s)) for s in ("h200-vit-fp16", "h200-vit-fp8"))
    res = invoke("run", "kernel_sum", a, b, "--dask", "tcp://127.0.0.1:9")
    assert res.exit_code == 1
    assert "cannot reach the Dask scheduler at tcp://127.0.0.1:9" in res.output


def test_report_workers_share_the_cores(monkeypatch):
    """``recipe run NAME FOLDER...``'s local pool: each report worker reads with its share of
    the cores (NSIGHTLAB_READERS), unless the user set it."""
    import os

    from nsightlab import recipe_runner as recipes
    from nsightlab.read import parallel

    monkeypatch.setattr(parallel, "readers", lambda rows=None: 16)
    monkeypatch.delenv("NSIGHTLAB_READERS", raising=False)
    recipes.share_cores(4)
    assert os.environ["NSIGHTLAB_READERS"] == "4"
    recipes.share_cores(32)  # set now: left alone
    assert os.environ["NSIGHTLAB_READERS"] == "4"
    monkeypatch.delenv("NSIGHTLAB_READERS")
    recipes.share_cores(32)  # more workers than cores: one reader each
    assert os.environ["NSIGHTLAB_READERS"] == "1"
    monkeypatch.delenv("NSIGHTLAB_READERS")
