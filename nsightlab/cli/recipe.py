"""``nsightlab recipe``: list, show and run analysis recipes."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from .. import recipes as R
from ..render import render, table_text
from . import cli
from .options import report_options


@cli.group()
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
    r = R.get(name)
    click.echo(f"{r.name}: {r.description}\n  folder: {r.path}")
    click.echo("\nparameters:" if r.params else "\nparameters: none")
    for p in r.params.values():
        unit = f" [{p.unit}]" if p.unit else ""
        click.echo(f"  {p.name} ({p.type}{unit}, default {p.default!r}): {p.help}")
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
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json", "parquet"]),
              default="table", show_default=True,
              help="Printed format; with -o, csv/json are written beside the Parquet files.")
@click.option("-o", "--output", "outdir", type=click.Path(file_okay=False),
              help="Write <OUTDIR>/<table>.parquet and manifest.json (like nsys recipe).")
@click.option("--force", is_flag=True, help="Replace an existing, non-empty OUTDIR.")
@click.option("--ncu", "ncu_file", type=click.Path(exists=True, dir_okay=False),
              help="Nsight Compute report for recipes that take one (same as -p ncu=FILE).")
@click.option("--limit", type=click.IntRange(min=1), default=25, show_default=True,
              help="Rows per table printed with --format table.")
@click.option("-j", "--jobs", type=click.IntRange(min=1),
              help="Worker processes for many reports [one per core].")
@click.option("--strict", is_flag=True, help="Exit 1 if any report fails (not for 'no data').")
@report_options
def run(name: str, inputs: tuple[str, ...], params: tuple[str, ...], fmt: str,
        outdir: str | None, force: bool, ncu_file: str | None, limit: int, jobs: int | None,
        strict: bool, opener) -> None:
    """Run recipe NAME on INPUT reports: report files, capture names or directories, or
    directories of reports (run in parallel, one row block per report).

    Reports without the data a recipe needs are reported as "no data", not as failures.

    \b
    Examples:
      nsightlab recipe run kernel_sum report.sqlite --limit 10
      nsightlab recipe run launch_compute fp16 --format json
      nsightlab recipe run sync_gaps syncy.sqlite -p min_gap_ms=0.5 -o gaps/ --format csv
      nsightlab recipe run tensor_core fp16 --ncu gemm.ncu-rep
    """
    if fmt == "parquet" and not outdir:
        raise click.UsageError("--format parquet needs -o OUTDIR")
    if outdir and Path(outdir).is_dir() and any(Path(outdir).iterdir()) and not force:
        raise click.UsageError(f"{outdir} exists and is not empty; use --force to replace it")
    given = _parse_params(params)
    if ncu_file:
        given["ncu"] = str(Path(ncu_file).resolve())
    result = R.run_many(name, list(inputs), given, jobs=jobs,
                        open_kwargs=opener.open_kwargs,
                        progress=lambda m: click.echo(f"nsightlab: {m}", err=True))
    for e in result.manifest["inputs"]:
        if e["status"] != "ok" and len(result.manifest["inputs"]) == 1:
            if e["status"] == "error":
                raise click.ClickException(e["message"])
            click.echo(f"nsightlab: {e['input']}: no data: {e['message']}", err=True)
    if outdir:
        files = R.write_outputs(result, outdir, (fmt,) if fmt in ("csv", "json") else ())
        click.echo(f"wrote {len(files)} files to {outdir}", err=True)
    elif fmt == "json":
        payload = {t: json.loads(df.to_json(orient="records")) for t, df in result.tables.items()}
        click.echo(json.dumps(payload, indent=1))
    elif fmt == "csv":
        for t, df in result.tables.items():
            if len(result.tables) > 1:
                click.echo(f"# {t}")
            render(df, "csv")
    else:
        for t, df in result.tables.items():
            more = f" (first {limit} of {len(df)})" if len(df) > limit else ""
            click.echo(f"== {t}{more} ==")
            click.echo(table_text(df.head(limit)))
    if strict and result.failed:
        sys.exit(1)
