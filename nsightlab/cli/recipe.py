"""``nsightlab recipe``: list, show and run analysis recipes."""
from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path

import click

from nsightlab.cli.options import output_options, progress, report_options, say_warnings, wrote


@click.group()
def recipe() -> None:
    """Analysis recipes: each answers one question about one or many reports.

    \b
    Examples:
      nsightlab recipe list
      nsightlab recipe show launch_compute
      nsightlab recipe run kernel_sum report.sqlite
      nsightlab recipe run sync_gaps fp16 --param min_gap_ms=0.5 -o out/
      nsightlab recipe run kernel_sum ../shared/fixtures/nsys/ --format csv -o all/
    """


@recipe.command("list")
def list_() -> None:
    """List the recipes and the question each answers.

    \b
    Example:
      nsightlab recipe list
    """
    from nsightlab import recipe_runner as R

    recipes = R.available()
    width = max(len(n) for n in recipes)
    for name, r in recipes.items():
        click.echo(f"{name:<{width}}  {r.description}")


@recipe.command()
@click.argument("name")
def show(name: str) -> None:
    """Describe recipe NAME: its question, parameters (with units and defaults) and the
    tables and columns it outputs.

    \b
    Example:
      nsightlab recipe show sync_gaps
    """
    from nsightlab import recipe_runner as R

    r = R.get(name)
    click.echo(f"{r.name}: {r.description}\n  folder: {r.path}")
    click.echo("\nparameters:" if r.params else "\nparameters: none")
    for p in r.params.values():
        unit = f" [{p.unit}]" if p.unit else ""
        click.echo(f"  {p.name} ({p.type}{unit}, default {p.default!r}): {p.help}")
    if r.requires:
        click.echo("\nreads: " + "; ".join(R.requirement_text(q).replace("`", "")
                                            for q in r.requires))
    click.echo("\noutput tables:")
    for t, spec in r.tables.items():
        click.echo(f"  {t}: {spec.get('doc', '')}")
        for col, doc in spec.get("columns", {}).items():
            click.echo(f"    {col:<24} {doc}")


def _parse_params(values: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for v in values:
        if "=" not in v:
            raise click.BadParameter(f"{v!r} is not KEY=VALUE", param_hint="--param")
        k, _, val = v.partition("=")
        out[k.strip()] = val.strip()
    return out


@recipe.command()
@click.argument("name")
@click.argument("inputs", nargs=-1, required=True)
@click.option("-p", "--param", "params", multiple=True, metavar="KEY=VALUE",
              help="Recipe parameter (see `nsightlab recipe show NAME`); repeatable.")
@click.option("--ncu", "ncu_file", type=click.Path(exists=True, dir_okay=False),
              help="Nsight Compute report for recipes that take one (same as -p ncu=FILE).")
@click.option("--limit", type=click.IntRange(min=1), default=25, show_default=True,
              help="Rows per table printed with --format table.")
@click.option("-j", "--jobs", type=click.IntRange(min=1),
              help="Worker processes for many reports [one per core].")
@click.option("--dask", "dask_address", metavar="ADDRESS", envvar="NSIGHTLAB_DASK",
              help="Run many reports on the Dask cluster at ADDRESS (tcp://host:8786) instead "
                   "of local processes; its workers must see the same paths [NSIGHTLAB_DASK].")
@click.option("--strict", is_flag=True, help="Exit 1 if any report fails (not for 'no data').")
@click.option("--process", type=int, metavar="PID",
              help="One CUDA process of a report of several: the recipe sees only its rows.")
@output_options("dir")
@report_options
def run(name: str, inputs: tuple[str, ...], params: tuple[str, ...], ncu_file: str | None,
        limit: int, jobs: int | None, dask_address: str | None, strict: bool, process: int | None,
        fmt: str, output: str | None, open_options: dict) -> None:
    """Run recipe NAME on INPUT reports: report files, capture names or directories, or
    directories of reports (run in parallel, one row block per report; a meter shows reports
    done and rows read on a terminal).

    Reports without the data a recipe needs are reported as "no data", not as failures.
    Reports of 2M kernels or more are analysed out of core in DuckDB where a recipe can be
    (kernel_sum, sync_gaps, budget, launch_compute): NSIGHTLAB_MEMORY_MB sets its memory limit [480],
    NSIGHTLAB_ENGINE=numpy|duckdb|auto chooses [auto].

    \b
    Examples:
      nsightlab recipe run kernel_sum report.sqlite --limit 10
      nsightlab recipe run launch_compute fp16 --format json
      nsightlab recipe run kernel_sum fp16 --format csv > kernels.csv   # one table: plain CSV
      nsightlab recipe run sync_gaps syncy.sqlite -p min_gap_ms=0.5 -o gaps/ --format csv
      nsightlab recipe run tensor_core fp16 --ncu gemm.ncu-rep
      nsightlab recipe run kernel_sum reports/ --dask tcp://scheduler:8786 -o sums/
      nsightlab recipe run budget ddp.sqlite --process 4242   # one rank of a torchrun trace
    """
    from nsightlab import recipe_runner as R

    given = _parse_params(params)
    if ncu_file:
        given["ncu"] = str(Path(ncu_file).resolve())
    spot = _served_spot(name, inputs, given, fmt, output, limit, open_options, process)
    if spot is not None and spot.replay():
        return
    if len(inputs) == 1 and process is None:  # reader processes first: loading recipes
        from nsightlab.read.opener import start_reading  # imports pyarrow, then pandas

        start_reading(inputs[0], R.prefetch_of(name), **open_options)
    if process is not None:
        open_options = {**open_options, "process": process}
    with spot.recording() if spot is not None else contextlib.nullcontext():
        # renderers (pandas) after run_many: the report's reader processes start first
        result = R.run_many(name, list(inputs), given, jobs=jobs, open_kwargs=open_options,
                            progress=progress, dask=dask_address or "")
        if len(result.inputs) == 1 and result.inputs[0]["status"] != "ok":
            e = result.inputs[0]
            if spot is not None:
                spot.keep = False
            if e["status"] == "error":
                raise click.ClickException(e["message"])
            progress(f"{e['input']}: no data: {e['message']}")
        from nsightlab.renderers import emit

        wrote(emit(result, fmt, output, limit=limit), output)
        say_warnings(result)
    if strict and result.failed:
        sys.exit(1)


def _served_spot(name: str, inputs: tuple[str, ...], given: dict, fmt: str, output: str | None,
                 limit: int, open_options: dict, process: int | None = None):
    """Where the printed answer of this run is kept (``nsightlab.read.answer_cache``): for one report
    printed to stdout; None otherwise (several reports, files written, recipe not found)."""
    from nsightlab import recipe_runner as R
    from nsightlab.read import answer_cache as served

    folder = R.folder(name)
    if len(inputs) != 1 or output is not None or fmt == "parquet" or folder is None:
        return None
    files = sorted(v for v in given.values() if os.path.isfile(v))
    return served.spot("recipe run", [name, R.fingerprint(folder), given, fmt, limit, process],
                       inputs[0], open_options, files)


COMMANDS = (recipe,)
