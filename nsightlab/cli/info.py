"""``nsightlab info``: what is in a report."""
from __future__ import annotations

import json

import click

from ..render import info_text
from . import cli
from .options import report_options


@cli.command()
@click.argument("paths", nargs=-1, required=True)
@click.option("--json", "as_json", is_flag=True,
              help="Print JSON: nsys_version, schema_version, gpus, span_ns, tables {name: rows}.")
@report_options
def info(paths: tuple[str, ...], as_json: bool, opener) -> None:
    """Summarize reports: nsys and schema versions, GPUs, processes, time span and the row
    count of every table (with the nsys option that would record the missing ones).

    \b
    Examples:
      nsightlab info report.sqlite
      nsightlab info captures/examples/*/ --json
    """
    infos = []
    for p in paths:
        with opener(p) as report:
            infos.append(report.info())
        if not as_json:
            click.echo(info_text(infos[-1]))
    if as_json:
        click.echo(json.dumps(infos[0] if len(infos) == 1 else infos, indent=1, default=str))
