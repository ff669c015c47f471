"""``nsightlab info``: what is in a report."""
from __future__ import annotations

import contextlib

import click

from nsightlab.cli.options import output_options, report_options, say_warnings


@click.command()
@click.argument("paths", nargs=-1, required=True)
@output_options("file", formats=("table", "json"))
@report_options
def info(paths: tuple[str, ...], fmt: str, output: str | None, open_options: dict) -> None:
    """Summarize reports: nsys and schema versions, GPUs, processes, time span and the row
    count of every table (with the nsys option that would record the missing ones).

    JSON keys: path, sqlite, nsys_version, schema_version, gpus, processes, span_ns,
    start_ns, end_ns, tables {name: rows}, missing {name: how to record it}, runtimes [{pid,
    runtime, evidence, libraries, kernels}: which runtime ran each process's kernels, from
    the trace itself ("unknown" without a runtime's own kernels or ranges)], warnings
    [{check, severity, message}: what the trace lacks] (a list of these for several reports).

    \b
    Examples:
      nsightlab info report.sqlite
      nsightlab info captures/examples/*/ --json
    """
    from nsightlab.read import answer_cache as served

    spot = served.spot("info", [fmt], paths[0], open_options) \
        if len(paths) == 1 and output is None else None
    if spot is not None and spot.replay():
        return
    with spot.recording() if spot is not None else contextlib.nullcontext():
        import nsightlab
        from nsightlab.analysis import completeness, runtime
        from nsightlab.read.metadata import ReportInfos
        from nsightlab.renderers import emit

        infos = []
        for p in paths:
            with nsightlab.open(p, **open_options) as report:
                infos.append({**report.info(),
                              "runtimes": runtime.identify(report).to_dict("records"),
                              "warnings": completeness.check(report, every_table=True)})
        emit(ReportInfos(infos), fmt, output)
        say_warnings(ReportInfos(infos))


COMMANDS = (info,)
