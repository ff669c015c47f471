"""``nsightlab info``: what is in a report."""
from __future__ import annotations

import contextlib

import click

from nsightlab.cli.options import ncu_input, output_options, report_options, say_warnings


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

    if any(ncu_input(p) for p in paths):
        from nsightlab.cli.options import served_answer

        with served_answer("info", [fmt], list(paths), open_options if output is None else
                           {**open_options, "cache": False}) as done:
            if not done:
                _ncu_info(paths, fmt, output, open_options)
        return
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


def _ncu_info(paths, fmt: str, output: str | None, open_options: dict) -> None:
    """What Nsight Compute reports hold (with nsys reports beside them: each on its own)."""
    import json

    import nsightlab
    from nsightlab.cli.options import warn

    infos = []
    for p in paths:
        if ncu_input(p):
            with nsightlab.open(p, cache=open_options["cache"], cache_dir=open_options["cache_dir"],
                                progress=open_options["progress"]) as store:
                infos.append(store.info())
                for w in store.warnings:
                    warn(w)
        else:
            with nsightlab.open(p, **open_options) as report:
                infos.append(report.info())
    if fmt == "json":
        emit_text = json.dumps(infos if len(infos) > 1 else infos[0], indent=1, default=str) + "\n"
    else:
        lines = []
        for i in infos:
            lines += [f"{i['path']}"] + [f"  {k}: {v}" for k, v in i.items()
                                         if k not in ("path", "warnings")]
        emit_text = "\n".join(lines) + "\n"
    if output:
        from pathlib import Path

        Path(output).write_text(emit_text)
    else:
        import sys

        sys.stdout.write(emit_text)


COMMANDS = (info,)
