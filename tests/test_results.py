"""The result store (recipes and run profiles) and what the recipe framework checks."""
from __future__ import annotations

import json

import pandas as pd
import pytest

import nsightlab
import nsightlab.recipe_runner as R
from nsightlab.read.frames import text_dtype_of_pandas
from nsightlab.read import result_store as results
from nsightlab.read.result_store import ResultStore


def computer(log: list, value: int = 1):
    def compute():
        log.append(value)
        return {"t": pd.DataFrame({"x": [value, value + 1]})}, {"value": value}
    return compute


def test_store_keys_on_code_params_and_input_identity(tmp_path):
    store = ResultStore(tmp_path / "results")
    src = tmp_path / "input.txt"
    src.write_text("one")
    log: list = []
    first = store.get_or_compute("r", {"p": 1}, [src], "code1", computer(log))
    again = store.get_or_compute("r", {"p": 1}, [src], "code1", computer(log))
    assert log == [1] and again[1] == {"value": 1} and again[0]["t"].equals(first[0]["t"])
    store.get_or_compute("r", {"p": 2}, [src], "code1", computer(log, 2))
    store.get_or_compute("r", {"p": 1}, [src], "code2", computer(log, 3))
    src.write_text("a different file")  # replaced input: new size and mtime
    store.get_or_compute("r", {"p": 1}, [src], "code2", computer(log, 4))
    assert log == [1, 2, 3, 4]


def test_store_recomputes_damaged_entries_and_prunes_old_ones(tmp_path, monkeypatch):
    store = ResultStore(tmp_path / "results")
    src = tmp_path / "input.txt"
    src.write_text("x")
    log: list = []
    store.get_or_compute("r", {}, [src], "code1", computer(log))
    (entry,) = [d for d in (tmp_path / "results").iterdir()]
    (entry / "t.parquet").write_bytes(b"PAR1 garbage")
    store.get_or_compute("r", {}, [src], "code1", computer(log))
    (entry / "meta.json").write_text("{not json")
    store.get_or_compute("r", {}, [src], "code1", computer(log))
    assert log == [1, 1, 1]
    # new code for the same name replaces the old entry; other names stay
    store.get_or_compute("other", {}, [src], "code1", computer(log))
    store.get_or_compute("r", {}, [src], "code2", computer(log))
    names = sorted(json.loads((d / "meta.json").read_text())["code"] + ":" + d.name.split("-")[0]
                   for d in (tmp_path / "results").iterdir())
    assert names == ["code1:other", "code2:r"]
    # beyond MAX_ENTRIES, the least recently used go
    monkeypatch.setattr(results, "MAX_ENTRIES", 3)
    for p in range(5):
        store.get_or_compute("r", {"p": p}, [src], "code2", computer(log))
    assert len(list((tmp_path / "results").iterdir())) == 3


def test_store_that_cannot_be_written_still_returns_results(tmp_path):
    blocked = tmp_path / "a-file"  # its "results" folder can never be created, even by root
    blocked.write_text("x")
    log: list = []
    out = ResultStore(blocked / "results").get_or_compute("r", {}, [], "c", computer(log))
    assert out[1] == {"value": 1} and log == [1]
    ResultStore(blocked / "results").get_or_compute("r", {}, [], "c", computer(log))
    assert log == [1, 1]  # nothing was kept, and nothing failed


def test_replacing_a_file_parameter_recomputes_the_recipe(tmp_path, sqlite_of, cache_dir,
                                                          monkeypatch):
    d = tmp_path / "mine" / "with_file"
    d.mkdir(parents=True)
    (d / "metadata.json").write_text(json.dumps({
        "name": "with_file", "description": "Reads a side file.",
        "params": [{"name": "side", "type": "path", "default": ""}],
        "requires": [{"table": "kernels", "columns": ["name"]}],
        "tables": {"out": {"columns": {"text": "", "kernels": ""}}}}))
    (d / "recipe.py").write_text(
        "import pandas as pd\n"
        "from pathlib import Path\n"
        "def run(report, params):\n"
        "    return {'out': pd.DataFrame({'text': [Path(params['side']).read_text()],\n"
        "                                 'kernels': [len(report.kernels(['name']))]})}\n")
    monkeypatch.setenv("NSIGHTLAB_RECIPE_PATH", str(tmp_path / "mine"))
    side = tmp_path / "side.txt"
    side.write_text("first")
    path = sqlite_of("h200-vit-fp16")
    assert R.run("with_file", path, {"side": str(side)})["out"]["text"][0] == "first"
    side.write_text("second, longer")
    assert R.run("with_file", path, {"side": str(side)})["out"]["text"][0] == "second, longer"
    with pytest.raises(nsightlab.NsightlabError, match="no such file"):
        R.run("with_file", path, {"side": str(tmp_path / "gone.txt")})


def write_recipe(root, name, meta: dict, body: str):
    d = root / name
    d.mkdir(parents=True)
    (d / "metadata.json").write_text(json.dumps({"name": name, "description": "test", **meta}))
    (d / "recipe.py").write_text("import pandas as pd\ndef run(report, params):\n" + body)


def test_requirements_are_checked_before_the_recipe_runs(tmp_path, sqlite_of, cache_dir,
                                                         monkeypatch):
    write_recipe(tmp_path, "needs_metrics",
                 {"requires": [{"table": "gpu_metrics", "columns": ["value"]}],
                  "tables": {"t": {"columns": {"x": ""}}}},
                 "    raise AssertionError('must not run')\n")
    monkeypatch.setenv("NSIGHTLAB_RECIPE_PATH", str(tmp_path))
    with pytest.raises(R.NoDataError, match="GPU_METRICS.*--gpu-metrics-devices=all"):
        R.run("needs_metrics", sqlite_of("h200-vit-fp16"))
    res = R.run_many("needs_metrics", [str(sqlite_of("h200-vit-fp16"))])
    assert res.inputs[0]["status"] == "no data"


def test_outputs_must_match_the_metadata(tmp_path, sqlite_of, cache_dir, monkeypatch):
    write_recipe(tmp_path, "sloppy", {"tables": {"t": {"columns": {"x": "", "y": ""}}}},
                 "    return {'t': pd.DataFrame({'x': [1], 'z': [2]})}\n")
    write_recipe(tmp_path, "extra_table", {"tables": {"t": {"columns": {"x": ""}}}},
                 "    return {'t': pd.DataFrame({'x': [1]}), 'u': pd.DataFrame()}\n")
    monkeypatch.setenv("NSIGHTLAB_RECIPE_PATH", str(tmp_path))
    with pytest.raises(R.RecipeError, match=r"undeclared \['z'\]; missing \['y'\]"):
        R.run("sloppy", sqlite_of("h200-vit-fp16"))
    with pytest.raises(R.RecipeError, match="does not declare"):
        R.run("extra_table", sqlite_of("h200-vit-fp16"))


def test_a_recipe_loads_once_and_again_after_any_of_its_files_changes(tmp_path, monkeypatch):
    """Recipes load once per process (their module imported, their code hashed), and again
    when any file their fingerprint hashes changes: a helper module beside recipe.py too."""
    import os

    write_recipe(tmp_path, "helped", {"tables": {}}, "    return {}\n")
    helper = tmp_path / "helped" / "helper.py"
    helper.write_text("X = 1\n")
    monkeypatch.setenv("NSIGHTLAB_RECIPE_PATH", str(tmp_path))
    first = R.get("helped")
    assert R.get("helped") is first and first.fingerprint  # served, not loaded again
    helper.write_text("X = 2\n")
    os.utime(helper, ns=(helper.stat().st_atime_ns, helper.stat().st_mtime_ns + 10**9))
    again = R.get("helped")
    assert again is not first and again.fingerprint != first.fingerprint


def test_bad_requirements_in_metadata_are_named(tmp_path, monkeypatch):
    write_recipe(tmp_path, "typo", {"requires": [{"table": "kernel", "columns": []}],
                                    "tables": {}}, "    return {}\n")
    monkeypatch.setenv("NSIGHTLAB_RECIPE_PATH", str(tmp_path))
    with pytest.raises(R.RecipeError, match="typo/metadata.json.*nsightlab tables"):
        R.available()


def test_text_columns_come_out_as_plain_text(sqlite_of, cache_dir):
    for name, table in (("kernel_sum", "kernel_sum"), ("nvtx_gpu", "ranges")):
        df = R.run(name, sqlite_of("h200-vit-fp16"))[table]
        text = [c for c in df.columns if df[c].dtype == text_dtype_of_pandas()]
        assert not [c for c in df.columns if isinstance(df[c].dtype, pd.CategoricalDtype)]
        assert {"name"} <= set(text)


def test_run_profile_is_kept_in_the_result_store(sqlite_of, cache_dir):
    from nsightlab.run.model import profile

    r = nsightlab.open(sqlite_of("h200-vit-fp16"))
    first = profile(r, "x")
    kept = [d.name for d in r.results.root.iterdir() if d.name.startswith("profile-")]
    again = profile(nsightlab.open(sqlite_of("h200-vit-fp16")), "y")
    assert len(kept) == 1 and again.label == "y"
    assert again.median_ns == first.median_ns
    pd.testing.assert_frame_equal(again.by_layer, first.by_layer, check_dtype=False)
    assert again.overheads == first.overheads


def test_every_result_object_saves_the_same_way(sqlite_of, cache_dir, tmp_path):
    """A recipe run, a diff and a run report: tables(), to_json() and an atomic save(dir)
    with one manifest shape."""
    from nsightlab.run import report as summary

    path = sqlite_of("h200-vit-fp16-syncy")
    results_ = {"recipe": R.run("sync_gaps", path), "diff": nsightlab.diff(path, path),
                "report": summary.build(path)}
    assert set(results_["recipe"]) == {"syncs", "gaps", "by_api"}  # a mapping of its tables
    for kind, res in results_.items():
        tables = res.tables()
        files = res.save(tmp_path / kind, ("csv",))
        manifest = json.loads((tmp_path / kind / "manifest.json").read_text())
        assert {"nsightlab_version", "written", "tables", "outputs"} <= set(manifest), kind
        assert manifest["tables"] == {t: len(df) for t, df in tables.items()}
        assert sorted(f.name for f in files) == sorted(manifest["outputs"] + ["manifest.json"])
        for t, df in tables.items():
            back = pd.read_parquet(tmp_path / kind / f"{t}.parquet")
            assert list(back.columns) == [str(c) for c in df.columns] and len(back) == len(df)
        json.dumps(res.to_json())  # plain JSON data
        assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp left
    assert results_["recipe"].manifest()["inputs"][0]["status"] == "ok"
    assert results_["diff"].manifest()["kind"] == "diff"
    # units in every column name of the overheads
    assert list(results_["diff"].overheads.columns) == ["overhead", "a_ns", "b_ns", "delta_ns",
                                                         "a_count", "b_count"]


def test_results_show_themselves_in_a_notebook(sqlite_of, cache_dir):
    """A short repr (the verdict and the table names) and an HTML view for every result, the
    Report included; help(nsightlab) lists the entry points; counts are integers."""
    import pydoc

    import nsightlab
    from nsightlab.run import report as run_report

    path = sqlite_of("h200-vit-fp16")
    d = nsightlab.diff(path, path)
    objects = [d, R.run("kernel_sum", path), run_report.build(path),
               nsightlab.compare([path, path], labels=["a", "b"])]
    for obj in objects:
        assert len(repr(obj)) < 400 and "tables:" in repr(obj)
        assert obj._repr_html_().startswith("<div>") and "<table" in obj._repr_html_()
    assert "The same work in A and B" in repr(d)
    assert "<table" in nsightlab.open(path)._repr_html_()
    text = pydoc.render_doc(nsightlab, renderer=pydoc.plaintext)
    assert all(f"{name}(" in text for name in ("open", "diff", "compare", "open_ncu"))
    assert isinstance(d.headline["a_kernels"], int)


def test_report_error_beside_the_profile_does_not_wait_for_it(sqlite_of, cache_dir, monkeypatch):
    """``report`` runs the run profile on a thread beside the other recipes: when one of them
    fails (or Ctrl-C arrives) the error comes out while the profile is still running."""
    import threading

    from nsightlab import recipe_runner
    from nsightlab.run import report as run_report

    path = sqlite_of("h200-vit-fp16")
    started, release, finished = threading.Event(), threading.Event(), threading.Event()

    def slow_profile(r, label, light=None):
        started.set()
        release.wait(20)  # until the test lets it go (20 s at most)
        finished.set()
        return None

    real = recipe_runner.run

    def failing(name, report, params=None):
        if name == "sync_gaps":
            started.wait(20)
            raise KeyboardInterrupt
        return real(name, report, params)

    monkeypatch.setattr(run_report, "profile", slow_profile)
    monkeypatch.setattr(recipe_runner, "run", failing)
    try:
        with pytest.raises(KeyboardInterrupt):
            run_report.build(path)
        assert started.is_set() and not finished.is_set()  # the profile was still running
    finally:
        release.set()
