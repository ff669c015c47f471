"""Recipes: one analysis question each, run on one report or fanned out over many.

A recipe is a folder ``<name>/`` holding ``metadata.json`` and ``recipe.py`` with a pure
``run(report, params) -> dict[str, DataFrame]`` and, optionally,
``reduce(results) -> dict[str, DataFrame]`` to combine the results of many reports.
``metadata.json`` says:

- ``name``, ``description`` (the question it answers);
- ``params``: name, type (int, float, str, bool, or path: a file whose identity is part of
  the cache key), unit, default, help;
- ``requires``: the tables it reads, e.g. ``{"table": "kernels", "columns": [...]}`` or
  ``{"any_of": ["kernels", "memcpy", "memset"]}``, optionally ``"unless": "<param>"`` (not
  needed when that parameter is given). A report lacking one is "no data" with the
  ``nsys profile`` option that records it, before the recipe runs;
- ``tables``: every output table with its columns, in order: checked on every run.

Everything else lives here, once: finding recipes (the built-in ``recipes/`` folder installed
as ``nsightlab._recipes``, then every folder of ``NSIGHTLAB_RECIPE_PATH``), parsing parameters,
checking inputs and outputs, turning category columns into plain text, caching results in the
report's result store, fanning out over a process pool (results in input order) and saving.

    >>> import nsightlab.recipe_runner
    >>> nsightlab.recipe_runner.run("kernel_sum", "report.sqlite")["kernel_sum"].head()
"""
from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import os
import time
from collections.abc import Iterator, Mapping
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from nsightlab.core.labels import run_labels
from nsightlab.core.result import Result
from nsightlab.errors import NoDataError, NsightlabError, RecipeError  # noqa: F401  (recipe errors)
from nsightlab.read import trace
from nsightlab.read.locate import expand_inputs
from nsightlab.read.table_cache import code_fingerprint

if TYPE_CHECKING:  # pandas and the report are imported where used: cached answers skip them
    import pandas as pd

    from nsightlab.read.report import Report

TYPES = {"int": int, "float": float, "str": str, "path": str,
         "bool": lambda v: str(v).lower() in ("1", "true", "yes", "on")}
#: seconds to wait for a Dask scheduler before saying it cannot be reached
CONNECT_TIMEOUT_S = 10


@dataclass(frozen=True)
class Param:
    """One recipe parameter as metadata.json declares it."""

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
    requires: list[dict] = field(default_factory=list)
    metadata: dict = field(default_factory=dict, repr=False)

    @classmethod
    def load(cls, path: Path) -> "Recipe":
        """Read ``path/metadata.json`` (RecipeError if it is unreadable or inconsistent)."""
        meta_path = path / "metadata.json"
        try:
            meta = json.loads(meta_path.read_text())
        except (OSError, ValueError) as e:
            raise RecipeError(f"{meta_path}: unreadable recipe metadata ({e})") from None
        params = {p["name"]: Param(p["name"], p.get("type", "str"), p.get("default"),
                                   p.get("unit", ""), p.get("help", ""))
                  for p in meta.get("params", [])}
        bad = [p.name for p in params.values() if p.type not in TYPES]
        if bad:
            raise RecipeError(f"{meta_path}: parameter(s) {', '.join(bad)} have an unknown type; "
                              f"use one of {', '.join(TYPES)}")
        requires = meta.get("requires", [])
        _check_requires(meta_path, requires, params)
        return cls(meta.get("name", path.name), path, meta.get("description", ""), params,
                   meta.get("tables", {}), requires, meta)

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
        return fingerprint(self.path)

    def prefetch(self) -> tuple[str, ...]:
        """The big tables this recipe reads (``requires``): opening a report for it starts
        reading those, and only those, at once (``nsightlab.open``'s ``prefetch``)."""
        return _prefetch(self.requires)

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

    def input_files(self, values: dict[str, Any]) -> list[Path]:
        """Files given as ``path`` parameters (their identity is part of the cache key)."""
        files = [Path(values[n]) for n, p in self.params.items() if p.type == "path" and values[n]]
        for f in files:
            if not f.is_file():
                raise NsightlabError(f"{f}: no such file (a parameter of recipe {self.name})")
        return files

    def run(self, report: Report | str | os.PathLike, params: dict[str, Any] | None = None,
            **open_options) -> dict[str, pd.DataFrame]:
        """Run on one report (a Report, or anything ``nsightlab.open`` takes with
        ``open_options``); results are kept in the report's result store.

        Raises:
            NoDataError: the report lacks a table the recipe requires.
            RecipeError: the recipe's output does not match its metadata.
        """
        from nsightlab.read.opener import as_report

        report = as_report(report, **{"prefetch": self.prefetch(), **open_options})
        values = self.parse_params(params)
        # once per open report and parameters: every later ask in this process is served
        # from memory (a `report` asks for the budget ten times), with or without the store
        key = (self.name, self.fingerprint, json.dumps(values, sort_keys=True, default=str),
               tuple(str(f) for f in self.input_files(values)))
        memo = report.answers
        if key not in memo:
            if report.results is None or self.metadata.get("stores_itself"):
                memo[key] = self._compute(report, values)
            else:
                memo[key] = report.results.get_or_compute(
                    *self._stored_as(report, values),
                    lambda: (self._compute(report, values), {}))[0]
        # frames of their own: a caller that changes one changes no other caller's
        return {t: df.copy() for t, df in memo[key].items()}

    def _stored_as(self, report: Report, values: dict[str, Any]) -> tuple:
        """The result store's key of this recipe on ``report`` with ``values``: name,
        params, inputs, code."""
        return (f"recipe-{self.name}", values, [report.path, *self.input_files(values)],
                self.fingerprint)

    def _compute(self, report: Report, values: dict[str, Any]) -> dict[str, pd.DataFrame]:
        self.check_inputs(report, values)
        trace.mark(f"computing {self.name}")
        from nsightlab.read.frames import plain_text, release_memory  # pandas: not for served answers

        out = {t: plain_text(df) for t, df in self.module.run(report, values).items()}
        self.check_outputs(out)
        # what the recipe's temporaries freed, back to the system before the next step (in
        # report at 8M kernels on 16 cores: 679 MB still held after kernel_sum, 340 MB once
        # given back, under sync_gaps' sort)
        release_memory()
        trace.mark(f"computed {self.name}")
        return out

    def check_inputs(self, report: Report, values: dict[str, Any]) -> None:
        """NoDataError unless every required table (or one of ``any_of``) has rows."""
        for req in self.requires:
            if req.get("unless") and values.get(req["unless"]):
                continue
            names = [req["table"]] if "table" in req else req["any_of"]
            if not any(report.has_rows(t) for t in names):
                hint = next((report.missing_hint(t) for t in names if not report.has(t)), None)
                raise NoDataError(hint or f"{report.source.name} has no rows in "
                                          f"{' or '.join(names)}")

    def check_outputs(self, out: dict[str, pd.DataFrame], leading: tuple[str, ...] = ()) -> None:
        """RecipeError unless every output table and its columns (in order, after the
        ``leading`` columns a reduce adds) are the ones metadata.json declares."""
        for t, df in out.items():
            if t not in self.tables:
                raise RecipeError(f"recipe {self.name} returned table {t!r}, which its "
                                  f"metadata.json does not declare ({', '.join(self.tables)})")
            want = [*leading, *self.tables[t].get("columns", {})]
            got = [str(c) for c in df.columns]
            if got != want:
                extra = [c for c in got if c not in want]
                missing = [c for c in want if c not in got]
                why = (f"undeclared {extra}" if extra else "") + \
                    (f"{'; ' if extra else ''}missing {missing}" if missing else "") or \
                    f"order {got}"
                raise RecipeError(f"recipe {self.name}, table {t}: columns differ from "
                                  f"metadata.json ({why}); fix the recipe or its metadata")

    def reduce(self, results: list[tuple[str, dict[str, pd.DataFrame]]]
               ) -> dict[str, pd.DataFrame]:
        """Combine per-report results: the recipe's own ``reduce`` if it has one, else every
        table concatenated with a leading ``report`` column, in input order."""
        import pandas as pd

        if hasattr(self.module, "reduce"):
            return self.module.reduce(results)
        out: dict[str, pd.DataFrame] = {}
        for table in dict.fromkeys(t for _, r in results for t in r):
            frames = [r[table].assign(report=label)[["report", *r[table].columns]]
                      for label, r in results if table in r]
            out[table] = pd.concat(frames, ignore_index=True)
        return out


def _check_requires(meta_path: Path, requires: list, params: dict[str, Param]) -> None:
    """``requires`` names real tables, columns of their contract and real parameters."""
    from nsightlab.read.tables import TABLES

    for req in requires if isinstance(requires, list) else [requires]:
        names = [req.get("table")] if isinstance(req, dict) and "table" in req else \
            (req.get("any_of") if isinstance(req, dict) else None)
        if not names or any(n not in TABLES for n in names):
            raise RecipeError(f"{meta_path}: requires entry {req!r} must name nsightlab tables "
                              f"({', '.join(TABLES)}) as 'table' or 'any_of'")
        for n in names:
            bad = [c for c in req.get("columns", []) if c not in TABLES[n].schema.names]
            if bad:
                raise RecipeError(f"{meta_path}: table {n} has no column(s) {', '.join(bad)}")
        if req.get("unless") and req["unless"] not in params:
            raise RecipeError(f"{meta_path}: 'unless' names {req['unless']!r}, not a parameter")


# ---- discovery -------------------------------------------------------------------------------
def builtin_dir() -> Path:
    """The built-in recipes' folder: installed as ``nsightlab._recipes``; in a source checkout
    run without installing (``python -m pytest`` from the repository), the top-level recipes/.
    Found as data, not imported: the recipes sit above this runner in the layer order."""
    spec = importlib.util.find_spec("nsightlab._recipes")
    if spec is None or not spec.submodule_search_locations:
        return Path(__file__).resolve().parent.parent / "recipes"
    return Path(list(spec.submodule_search_locations)[0])


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
                r = _loaded(meta.parent.resolve(), *(f.stat().st_mtime_ns for f in sorted(
                    meta.parent.glob("*")) if f.suffix in (".py", ".json")))
                found[r.name] = r
    return dict(sorted(found.items()))


@functools.lru_cache(maxsize=256)
def _loaded(path: Path, *_changed: int) -> Recipe:
    """``Recipe.load(path)`` once per version of its files (``_changed``: the mtimes of the
    files its fingerprint hashes), so that a recipe's module is imported and its code hashed
    once per process, not per ask."""
    return Recipe.load(path)


def folder(name: str) -> Path | None:
    """The folder of recipe ``name`` as ``available()`` would pick it, found from the
    metadata.json names alone (no recipe loaded, nothing imported: for cached answers)."""
    hit = None
    for root in search_path():
        for meta in sorted(root.glob("*/metadata.json")):
            if (meta.parent / "recipe.py").is_file():
                try:
                    named = json.loads(meta.read_text()).get("name", meta.parent.name)
                except (OSError, ValueError, AttributeError):
                    continue
                if named == name:
                    hit = meta.parent
    return hit


def _prefetch(requires: list) -> tuple[str, ...]:
    names = [t for q in requires if isinstance(q, dict)
             for t in ([q["table"]] if "table" in q else q.get("any_of") or [])]
    return tuple(t for t in ("kernels", "cuda_api") if t in names)


def prefetch_of(name: str) -> tuple[str, ...]:
    """``Recipe.prefetch`` of recipe ``name`` from its metadata.json alone (nothing imported,
    nothing checked: the CLI starts the reads with it before the recipe is loaded); empty
    when there is no such recipe or its metadata is unreadable (loading it says why)."""
    path = folder(name)
    try:
        return _prefetch(json.loads((path / "metadata.json").read_text()).get("requires", []))
    except (TypeError, OSError, ValueError, AttributeError):
        return ()


def fingerprint(path: Path) -> str:
    """Fingerprint of the recipe in folder ``path``: changes whenever its code or metadata,
    or nsightlab, changes."""
    h = hashlib.sha1(code_fingerprint().encode())
    for f in sorted(path.glob("*")):
        if f.suffix in (".py", ".json"):
            h.update(f.read_bytes())
    return h.hexdigest()[:16]


def get(name: str) -> Recipe:
    """The recipe called ``name`` (NsightlabError listing the available ones otherwise)."""
    recipes = available()
    if name not in recipes:
        raise NsightlabError(f"no recipe named {name!r}; available: {', '.join(recipes)} "
                             "(add folders with NSIGHTLAB_RECIPE_PATH)")
    return recipes[name]


def run(name: str, report: Report | str | os.PathLike, params: dict[str, Any] | None = None,
        **open_options) -> "RunResult":
    """Run recipe ``name`` on one report (a Report, or anything ``nsightlab.open`` takes, with
    its ``open_options``: cache, cache_dir, nsys, progress).

    Returns a RunResult: its tables by name (``run(...)["summary"]``), ``save(dir)`` and the
    rest of ``Result``. Raises NoDataError when the report lacks what the recipe needs.
    """
    from nsightlab.read.opener import as_report

    recipe = get(name)
    t0 = time.perf_counter()
    r = as_report(report, **{"prefetch": recipe.prefetch(), **open_options})
    values = recipe.parse_params(params)
    tables = recipe.run(r, values)
    entry = {"input": str(r.source), "status": "ok", **_about(r),
             "seconds": round(time.perf_counter() - t0, 3)}
    return RunResult(recipe.name, tables, _info(recipe, values, [entry], t0))


def _info(recipe: Recipe, values: dict, entries: list[dict], t0: float) -> dict:
    """The manifest of a run: recipe, parameters, every input with its outcome, timing."""
    return {"recipe": recipe.name, "description": recipe.description, "params": values,
            "inputs": entries, "seconds": round(time.perf_counter() - t0, 3)}


# ---- many reports ----------------------------------------------------------------------------
def _about(report: Report) -> dict:
    """What a manifest says of each input report: versions, completeness warnings (and
    partial findings) and notes."""
    from nsightlab.analysis import completeness

    found = completeness.check(report)
    return {"nsys_version": report.nsys_version, "schema_version": report.schema_version,
            "warnings": [w["message"] for w in found if w["severity"] != "note"],
            "notes": [w["message"] for w in found if w["severity"] == "note"]}


def _start_checks(report: Report, reading: tuple[str, ...]) -> None:
    """Start the scan of the completeness checks (``_about``) while the recipe runs."""
    from nsightlab.analysis import completeness

    completeness.start(report, tuple(reading))


def _run_one(recipe_path: str, source: str, params: dict, open_kwargs: dict) -> dict:
    """Worker: run one recipe on one report and classify the outcome (picklable)."""
    t0 = time.perf_counter()
    entry: dict[str, Any] = {"input": source}
    from nsightlab.read.opener import as_report

    try:
        recipe = Recipe.load(Path(recipe_path))
        report = as_report(source, **{"prefetch": recipe.prefetch(), **open_kwargs})
        try:
            _start_checks(report, recipe.prefetch())
            trace.mark(f"recipe {recipe.name}")
            entry["tables"] = recipe.run(report, params)
            trace.mark(f"recipe {recipe.name} done")
            entry["status"] = "ok"
            entry["rows_read"] = report.rows_read
        except NoDataError as e:
            entry.update(status="no data", message=str(e))
        entry.update(_about(report))  # after the run: duplicates of the tables it read
        trace.mark("checks done")
    except RecipeError:
        raise  # the recipe is broken, not the report
    except NsightlabError as e:
        entry.update(status="error", message=str(e))
    entry["seconds"] = round(time.perf_counter() - t0, 3)
    return entry


def report_labels(sources: list[str]) -> list[str]:
    """Short, distinct labels for reports (``core.labels.run_labels``)."""
    return run_labels(sources)


@dataclass(repr=False)
class RunResult(Result, Mapping):
    """A recipe run over one or many reports: its tables (also as a read-only mapping:
    ``result["gaps"]``, ``list(result)``), and per input its status."""

    recipe: str
    results: dict[str, pd.DataFrame]
    info: dict

    def brief(self) -> str:
        n = len(self.info.get("inputs", []))
        return f"recipe {self.recipe} on {n} report(s)" + (
            f", {len(self.failed)} failed" if self.failed else "")

    def tables(self) -> dict[str, pd.DataFrame]:
        return self.results

    def __getitem__(self, table: str) -> pd.DataFrame:
        return self.results[table]

    def __iter__(self):
        return iter(self.results)

    def __len__(self) -> int:
        return len(self.results)

    def manifest(self) -> dict:
        return self.info

    @property
    def inputs(self) -> list[dict]:
        """Per input: input, status (ok / no data / error), message, versions, seconds."""
        return self.info["inputs"]

    @property
    def failed(self) -> list[dict]:
        """Inputs that could not be read (not those with no data)."""
        return [i for i in self.inputs if i["status"] == "error"]


def run_many(name: str, inputs: list[str], params: dict | None = None, *, jobs: int | None = None,
             open_kwargs: dict | None = None, progress=None, dask: str | None = None) -> RunResult:
    """Run recipe ``name`` on every input (see ``paths.expand_inputs``) and reduce the results.

    Several reports fan out over a local process pool (``jobs`` workers, one per core by
    default) or, with ``dask`` (a scheduler address; default ``NSIGHTLAB_DASK``), over a Dask
    cluster whose workers see the same paths; the results are the same either way, in input
    order. Reports without the data the recipe needs are listed as "no data"; unreadable
    ones as "error"; neither stops the others. ``progress`` gets one note per report that
    failed and a meter (``"\\r..."``: reports done, rows read, time left).
    """
    recipe = get(name)
    values = recipe.parse_params(params)
    sources = expand_inputs(inputs)
    open_kwargs = dict(open_kwargs or {})
    t0 = time.perf_counter()
    started = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    if len(sources) == 1:
        entries = [_run_one(str(recipe.path), sources[0], values, open_kwargs)]
    else:
        quiet = {**open_kwargs, "progress": None}  # workers' own notes would garble the meter
        jobs_ = [(str(recipe.path), s, values, quiet) for s in sources]
        address = dask if dask is not None else os.environ.get("NSIGHTLAB_DASK") or None
        finished = _on_dask(address, jobs_) if address else _on_pool(jobs, jobs_)
        entries = _collect(finished, sources, progress)
    labels = dict(zip(sources, report_labels(sources)))
    ok = [(labels[e["input"]], e.pop("tables")) for e in entries if e["status"] == "ok"]
    if len(sources) == 1:
        tables = ok[0][1] if ok else {}
    else:
        tables = recipe.reduce(ok) if ok else {}
        if not hasattr(recipe.module, "reduce"):
            recipe.check_outputs(tables, leading=("report",))
    return RunResult(recipe.name, tables, {**_info(recipe, values, entries, t0), "started": started})


def _on_pool(jobs: int | None, work: list[tuple]) -> Iterator[tuple[int, dict]]:
    """(input index, entry) as each report finishes, from a local process pool."""
    workers = max(1, min(jobs or os.cpu_count() or 1, len(work)))
    with ProcessPoolExecutor(max_workers=workers, initializer=share_cores,
                             initargs=(workers,)) as pool:
        futures = {pool.submit(_run_one, *w): i for i, w in enumerate(work)}
        for f in as_completed(futures):
            yield futures[f], f.result()


def share_cores(workers: int) -> None:
    """Pool initializer: each of ``workers`` report workers reads its tables with its share of
    the cores (``NSIGHTLAB_READERS``, unless the user set it), not one reader process per core
    each: 16 workers on 16 cores would otherwise start 256 readers on big uncached reports."""
    from nsightlab.read.parallel import readers

    if not os.environ.get("NSIGHTLAB_READERS", "").strip():
        os.environ["NSIGHTLAB_READERS"] = str(max(1, readers() // workers))


def _on_dask(address: str, work: list[tuple]) -> Iterator[tuple[int, dict]]:
    """(input index, entry) as each report finishes, from the Dask cluster at ``address``."""
    try:
        from dask.distributed import Client, as_completed as finished
    except ImportError:
        raise NsightlabError("--dask / NSIGHTLAB_DASK needs Dask: pip install 'dask[distributed]'"
                             " (or unset NSIGHTLAB_DASK to use the local process pool)") from None
    try:
        client = Client(address, timeout=CONNECT_TIMEOUT_S)
    except (OSError, TimeoutError, ValueError) as e:
        raise NsightlabError(f"cannot reach the Dask scheduler at {address} ({e}); start one "
                             "(dask scheduler / dask worker) or unset NSIGHTLAB_DASK") from None
    with client:
        futures = {client.submit(_run_one, *w, pure=False): i for i, w in enumerate(work)}
        for f in finished(futures):
            yield futures[f], f.result()


def _collect(finished: Iterator[tuple[int, dict]], sources: list[str], progress
             ) -> list[dict]:
    """Entries in input order from ``finished``, with a note per failed report and a meter."""
    done: dict[int, dict] = {}
    rows = 0
    t0 = time.monotonic()
    for i, e in finished:
        done[i] = e
        rows += e.get("rows_read", 0)
        if progress is None:
            continue
        if e["status"] != "ok":
            progress(f"{e['input']}: {e['status']}" + (f" ({e['message']})" if e.get("message") else ""))
        took = time.monotonic() - t0
        left = took / len(done) * (len(sources) - len(done))
        bar = "#" * (20 * len(done) // len(sources))
        progress(f"\r[{bar:<20}] {len(done)}/{len(sources)} reports, {rows / 1e6:,.1f}M rows "
                 f"read, {took:.0f} s, ~{left:.0f} s left")
    if progress is not None:
        progress("\r")
        failed = sum(e["status"] == "error" for e in done.values())
        progress(f"{len(sources)} reports in {time.monotonic() - t0:.1f} s"
                 + (f", {failed} could not be read" if failed else ""))
    return [done[i] for i in range(len(sources))]


def recipes_markdown() -> str:
    """The built-in recipes as Markdown (docs/recipes.md is this text; a test keeps it current)."""
    out = ["# nsightlab recipes", "",
           "Generated from each recipe's `metadata.json` (`python -c 'import nsightlab.recipe_runner "
           "as R; print(R.recipes_markdown(), end=\"\")' > docs/recipes.md`).",
           "Run one with `nsightlab recipe run NAME REPORT...` or `nsightlab.recipe_runner.run(NAME, report)`.", ""]
    builtin = builtin_dir()
    for name, r in available().items():
        if r.path.parent != builtin:
            continue
        out += [f"## `{name}`", "", r.description, ""]
        if r.requires:
            out += ["Reads: " + "; ".join(requirement_text(q) for q in r.requires) + ".", ""]
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


def requirement_text(req: dict) -> str:
    names = [req["table"]] if "table" in req else req["any_of"]
    text = " or ".join(f"`{n}`" for n in names)
    if req.get("columns"):
        text += f" ({', '.join(req['columns'])})"
    return text + (f", unless `{req['unless']}` is given" if req.get("unless") else "")
