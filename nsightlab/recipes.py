"""Recipes: one analysis question each, run on one report or fanned out over many.

A recipe is a folder ``<name>/`` holding ``metadata.json`` (name, the question it answers,
parameters with types, units and defaults, output tables and their columns) and ``recipe.py``
with a pure ``run(report, params) -> dict[str, DataFrame]`` and, optionally,
``reduce(results) -> dict[str, DataFrame]`` to combine the results of many reports. Everything
else lives here, once: finding recipes (the built-in ``recipes/`` folder installed as
``nsightlab._recipes``, then every folder of ``NSIGHTLAB_RECIPE_PATH``), parsing parameters,
caching results beside the report's tables, fanning out over a process pool (results in input
order), and writing ``<outdir>/<table>.parquet`` (+ CSV/JSON) and ``manifest.json``.

    >>> import nsightlab.recipes
    >>> nsightlab.recipes.run("kernel_sum", "report.sqlite")["kernel_sum"].head()
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from types import ModuleType
from typing import Any

import pandas as pd

from .errors import NsightlabError
from .report import Report, open as open_report
from .cache import code_fingerprint

TYPES = {"int": int, "float": float, "str": str, "bool": lambda v: str(v).lower() in
         ("1", "true", "yes", "on")}
REPORT_PATTERNS = ("*.sqlite", "*.sqlite.xz", "*.nsys-rep", "*.qdrep")


class NoDataError(NsightlabError):
    """The report lacks what the recipe needs (e.g. no kernels): "no data", not a failure."""


@dataclass(frozen=True)
class Param:
    name: str
    type: str
    default: Any
    unit: str = ""
    help: str = ""

    def parse(self, value: Any) -> Any:
        try:
            return TYPES[self.type](value)
        except (TypeError, ValueError):
            raise NsightlabError(f"parameter {self.name}: {value!r} is not a {self.type}"
                                 f"{' (' + self.unit + ')' if self.unit else ''}") from None


@dataclass
class Recipe:
    """A recipe folder: its metadata and (loaded on first use) its module."""

    name: str
    path: Path
    description: str
    params: dict[str, Param]
    tables: dict[str, dict]
    metadata: dict = field(repr=False)

    @classmethod
    def load(cls, path: Path) -> "Recipe":
        meta_path = path / "metadata.json"
        try:
            meta = json.loads(meta_path.read_text())
        except (OSError, ValueError) as e:
            raise NsightlabError(f"{meta_path}: unreadable recipe metadata ({e})") from None
        params = {p["name"]: Param(p["name"], p.get("type", "str"), p.get("default"),
                                   p.get("unit", ""), p.get("help", ""))
                  for p in meta.get("params", [])}
        return cls(meta.get("name", path.name), path, meta.get("description", ""), params,
                   meta.get("tables", {}), meta)

    @cached_property
    def module(self) -> ModuleType:
        spec = importlib.util.spec_from_file_location(f"nsightlab_recipe_{self.name}",
                                                      self.path / "recipe.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod

    @cached_property
    def fingerprint(self) -> str:
        """Changes whenever the recipe's code or metadata, or nsightlab, changes."""
        h = hashlib.sha1(code_fingerprint().encode())
        for f in sorted(self.path.glob("*")):
            if f.suffix in (".py", ".json"):
                h.update(f.read_bytes())
        return h.hexdigest()[:16]

    def parse_params(self, given: dict[str, Any] | None = None) -> dict[str, Any]:
        """Typed parameters: defaults from metadata.json, overridden by ``given``."""
        given = dict(given or {})
        unknown = sorted(set(given) - set(self.params))
        if unknown:
            known = ", ".join(self.params) or "none"
            raise NsightlabError(f"recipe {self.name} has no parameter {', '.join(unknown)} "
                                 f"(its parameters: {known})")
        return {n: p.parse(given[n]) if n in given else p.default
                for n, p in self.params.items()}

    def run(self, report: Report | str | os.PathLike, **params) -> dict[str, pd.DataFrame]:
        """Run on one report; results are cached beside the report's table cache."""
        if not isinstance(report, Report):
            report = open_report(report)
        values = self.parse_params(params)
        key = hashlib.sha1(json.dumps([self.fingerprint, values], sort_keys=True,
                                      default=str).encode()).hexdigest()[:16]
        cached = _load_result(report, self.name, key)
        if cached is not None:
            return cached
        out = self.module.run(report, values)
        _store_result(report, self.name, key, out)
        return out

    def reduce(self, results: list[tuple[str, dict[str, pd.DataFrame]]]
               ) -> dict[str, pd.DataFrame]:
        """Combine per-report results: the recipe's own ``reduce`` if it has one, else every
        table concatenated with a leading ``report`` column, in input order."""
        if hasattr(self.module, "reduce"):
            return self.module.reduce(results)
        out: dict[str, pd.DataFrame] = {}
        for table in dict.fromkeys(t for _, r in results for t in r):
            frames = [r[table].assign(report=label)[["report", *r[table].columns]]
                      for label, r in results if table in r]
            out[table] = pd.concat(frames, ignore_index=True)
        return out


# ---- result cache ----------------------------------------------------------------------------
def _result_dir(report: Report, name: str, key: str) -> Path | None:
    return None if report.cache is None else report.cache.root / "recipes" / f"{name}-{key}"


def _load_result(report: Report, name: str, key: str) -> dict[str, pd.DataFrame] | None:
    d = _result_dir(report, name, key)
    if d is None or not (d / "meta.json").is_file():
        return None
    try:
        meta = json.loads((d / "meta.json").read_text())
        if meta.get("source") != report.cache.ident:
            raise ValueError("stale")
        return {t: pd.read_parquet(d / f"{t}.parquet") for t in meta["tables"]}
    except Exception:  # damaged or stale: recompute, never trust
        shutil.rmtree(d, ignore_errors=True)
        return None


def _store_result(report: Report, name: str, key: str, tables: dict[str, pd.DataFrame]) -> None:
    d = _result_dir(report, name, key)
    if d is None:
        return
    tmp = None
    try:
        d.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=d.parent))
        for t, df in tables.items():
            df.to_parquet(tmp / f"{t}.parquet", index=False)
        (tmp / "meta.json").write_text(json.dumps({"tables": list(tables),
                                                   "source": report.cache.ident}))
        shutil.rmtree(d, ignore_errors=True)
        os.replace(tmp, d)
    except OSError:  # a read-only cache is not an error
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


# ---- discovery -------------------------------------------------------------------------------
def builtin_dir() -> Path:
    """The built-in recipes: installed as ``nsightlab._recipes``; in a source checkout run
    without installing (``python -m pytest`` from the repository), the top-level recipes/."""
    try:
        from . import _recipes
    except ImportError:
        return Path(__file__).resolve().parent.parent / "recipes"
    return Path(_recipes.__file__).parent


def search_path() -> list[Path]:
    """Built-in recipes first, then NSIGHTLAB_RECIPE_PATH folders (later ones win)."""
    paths = [builtin_dir()]
    for p in os.environ.get("NSIGHTLAB_RECIPE_PATH", "").split(os.pathsep):
        if p:
            paths.append(Path(p))
    return paths


def available() -> dict[str, Recipe]:
    """All recipes by name."""
    found: dict[str, Recipe] = {}
    for root in search_path():
        for meta in sorted(root.glob("*/metadata.json")):
            if (meta.parent / "recipe.py").is_file():
                r = Recipe.load(meta.parent)
                found[r.name] = r
    return dict(sorted(found.items()))


def get(name: str) -> Recipe:
    recipes = available()
    if name not in recipes:
        raise NsightlabError(f"no recipe named {name!r}; available: {', '.join(recipes)} "
                             "(add folders with NSIGHTLAB_RECIPE_PATH)")
    return recipes[name]


def run(name: str, report: Report | str | os.PathLike, **params) -> dict[str, pd.DataFrame]:
    """Run recipe ``name`` on one report (a Report or anything ``nsightlab.open`` takes)."""
    return get(name).run(report, **params)


# ---- many reports ----------------------------------------------------------------------------
def expand_inputs(inputs: list[str]) -> list[str]:
    """Report files, capture names/directories, and directories of reports, flattened in
    order. A directory that is a capture (manifest.json, or exactly one report) counts as one
    report; any other directory contributes every report file in it (sorted)."""
    out: list[str] = []
    for item in inputs:
        p = Path(item)
        if p.is_dir() and not (p / "manifest.json").is_file():
            files = sorted({f for pat in REPORT_PATTERNS for f in p.glob(pat)})
            exports = {f.name.split(".sqlite")[0] for f in files if ".sqlite" in f.name}
            # an X.nsys-rep beside its X.sqlite(.xz) export is one report, not two
            files = [f for f in files if ".sqlite" in f.name or f.stem not in exports]
            if len(files) > 1:
                out += [str(f) for f in files]
                continue
        out.append(item)
    return out


def _run_one(recipe_path: str, source: str, params: dict, open_kwargs: dict) -> dict:
    """Worker: run one recipe on one report and classify the outcome (picklable)."""
    t0 = time.perf_counter()
    entry: dict[str, Any] = {"input": source}
    try:
        recipe = Recipe.load(Path(recipe_path))
        report = open_report(source, **open_kwargs)
        entry.update(nsys_version=report.nsys_version, schema_version=report.schema_version)
        entry["tables"] = recipe.run(report, **params)
        entry["status"] = "ok"
    except NoDataError as e:
        entry.update(status="no data", message=str(e))
    except NsightlabError as e:
        entry.update(status="error", message=str(e))
    entry["seconds"] = round(time.perf_counter() - t0, 3)
    return entry


@dataclass
class RunResult:
    tables: dict[str, pd.DataFrame]
    manifest: dict

    @property
    def failed(self) -> list[dict]:
        return [i for i in self.manifest["inputs"] if i["status"] == "error"]


def run_many(name: str, inputs: list[str], params: dict | None = None, *, jobs: int | None = None,
             open_kwargs: dict | None = None, progress=None) -> RunResult:
    """Run recipe ``name`` on every input (see ``expand_inputs``), in a process pool when
    there are several, and reduce the results. Reports without the data the recipe needs
    are listed as "no data"; unreadable ones as "error"; neither stops the others."""
    from . import __version__

    recipe = get(name)
    values = recipe.parse_params(params)
    sources = expand_inputs(inputs)
    open_kwargs = dict(open_kwargs or {})
    t0 = time.perf_counter()
    started = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    if len(sources) == 1:
        entries = [_run_one(str(recipe.path), sources[0], values, open_kwargs)]
    else:
        workers = max(1, min(jobs or os.cpu_count() or 1, len(sources)))
        with ProcessPoolExecutor(max_workers=workers) as pool:
            futures = [pool.submit(_run_one, str(recipe.path), s, values, open_kwargs)
                       for s in sources]
            entries = []
            for f in futures:  # in input order
                entries.append(f.result())
                if progress is not None:
                    e = entries[-1]
                    progress(f"{e['input']}: {e['status']}"
                             + (f" ({e['message']})" if e.get("message") else ""))
    ok = [(Path(e["input"]).name.split(".")[0] if len(sources) > 1 else e["input"], e.pop("tables"))
          for e in entries if e["status"] == "ok"]
    if len(sources) == 1 and ok:
        tables = ok[0][1]
    else:
        tables = recipe.reduce(ok) if ok else {}
    manifest = {
        "recipe": recipe.name, "description": recipe.description,
        "nsightlab_version": __version__, "params": values,
        "inputs": entries, "started": started,
        "seconds": round(time.perf_counter() - t0, 3),
        "tables": {t: len(df) for t, df in tables.items()},
    }
    return RunResult(tables, manifest)


def write_outputs(result: RunResult, outdir: str | os.PathLike, formats: tuple[str, ...] = ()
                  ) -> list[Path]:
    """``<outdir>/<table>.parquet`` for every table (+ .csv/.json for ``formats``) and
    ``manifest.json``; written to a temporary folder and renamed into place."""
    outdir = Path(outdir)
    outdir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{outdir.name}-", dir=outdir.parent))
    files = []
    try:
        for t, df in result.tables.items():
            df.to_parquet(tmp / f"{t}.parquet", index=False)
            files.append(f"{t}.parquet")
            if "csv" in formats:
                df.to_csv(tmp / f"{t}.csv", index=False)
                files.append(f"{t}.csv")
            if "json" in formats:
                df.to_json(tmp / f"{t}.json", orient="records", indent=1)
                files.append(f"{t}.json")
        manifest = dict(result.manifest, outputs=files)
        (tmp / "manifest.json").write_text(json.dumps(manifest, indent=1, default=str))
        if outdir.exists():
            shutil.rmtree(outdir)
        os.replace(tmp, outdir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return [outdir / f for f in files] + [outdir / "manifest.json"]


def recipes_markdown() -> str:
    """The built-in recipes as Markdown (docs/recipes.md is this text; a test keeps it current)."""
    out = ["# nsightlab recipes", "",
           "Generated from each recipe's `metadata.json` (`python -c 'import nsightlab.recipes "
           "as R; print(R.recipes_markdown(), end=\"\")' > docs/recipes.md`).",
           "Run one with `nsightlab recipe run NAME REPORT...` or `nsightlab.recipes.run(NAME, report)`.", ""]
    builtin = builtin_dir()
    for name, r in available().items():
        if r.path.parent != builtin:
            continue
        out += [f"## `{name}`", "", r.description, ""]
        if r.params:
            out += ["| parameter | type | unit | default | meaning |", "|---|---|---|---|---|"]
            out += [f"| `{p.name}` | {p.type} | {p.unit} | `{p.default!r}` | {p.help} |"
                    for p in r.params.values()]
            out.append("")
        for table, spec in r.tables.items():
            out += [f"### table `{table}`", "", spec.get("doc", ""), "",
                    "| column | meaning |", "|---|---|"]
            out += [f"| `{c}` | {d} |" for c, d in spec.get("columns", {}).items()]
            out.append("")
    return "\n".join(out)
