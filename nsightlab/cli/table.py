"""``nsightlab table``: any table of a report, as a terminal table, CSV, JSON or Parquet."""
from __future__ import annotations

import click

from ..render import render
from ..tables import TABLES
from . import cli
from .options import output_options, report_options

TABLE_HELP = "\n".join(f"  {name:<17} {spec.doc}" for name, spec in TABLES.items())


@cli.command(help=f"""Print table NAME of the report at PATH.

Columns are snake_case with units in their names (start_ns, duration_ns, bytes); names of
kernels, APIs and NVTX ranges are as `nsys stats` prints them. A table the report did not
record prints no rows and says which nsys option records it.

\b
Tables:
{TABLE_HELP}

\b
Examples:
  nsightlab table kernels report.sqlite --columns name,duration_ns --limit 10
  nsightlab table nvtx report.nsys-rep --format csv -o nvtx.csv
  nsightlab table cuda_api fp16 --format parquet -o api.parquet
""")
@click.argument("name", type=click.Choice(list(TABLES)), metavar="NAME")
@click.argument("path")
@click.option("--columns", help="Comma-separated columns to keep, in this order [all].")
@click.option("--limit", type=click.IntRange(min=0), help="Print at most N rows.")
@output_options
@report_options
def table(name: str, path: str, columns: str | None, limit: int | None, fmt: str,
          output: str | None, opener) -> None:
    if fmt == "parquet" and not output:
        raise click.UsageError("--format parquet needs -o FILE")
    cols = [c.strip() for c in columns.split(",") if c.strip()] if columns else None
    with opener(path) as report:
        hint = report.missing_hint(name)
        df = report.table(name, cols)
    if hint:
        click.echo(f"note: {hint}", err=True)
    if limit is not None:
        df = df.head(limit)
    render(df, fmt, output)
