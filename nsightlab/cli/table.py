"""``nsightlab table``: any table of a report, as a terminal table, CSV, JSON or Parquet."""
from __future__ import annotations

import click

from nsightlab.cli.options import output_options, report_options, say_warnings

#: table names (``nsightlab.read.tables.TABLES`` is the source; a test keeps them equal)
TABLE_NAMES = ("kernels", "cuda_api", "memcpy", "memset", "syncs", "nvtx", "gpu_metrics",
               "graph_execs", "cuda_graph_nodes", "threads", "memory")
#: the tables of an Nsight Compute report (an .ncu-rep, or a capture holding one)
NCU_TABLES = {"ncu_kernels": "one row per profiled kernel: identity, launch, key metrics",
              "ncu_metrics": "every metric of every kernel, long: kernel, metric, value, text, "
                             "unit",
              "ncu_rules": "NVIDIA's rule results: rule, title, message, estimated speedup",
              "ncu_judged": "each kernel judged: limiter, unit, roofline, headroom, occupancy"}
HELP = """Print table NAME of the report at PATH.

Columns are snake_case with units in their names (start_ns, duration_ns, bytes); names of
kernels, APIs and NVTX ranges are as `nsys stats` prints them. A table the report did not
record prints no rows and says which nsys option records it.

\b
Tables:
{tables}

\b
Examples:
  nsightlab table kernels report.sqlite --columns name,duration_ns --limit 10
  nsightlab table nvtx report.nsys-rep --format csv -o nvtx.csv
  nsightlab table cuda_api fp16 --format parquet -o api.parquet
  nsightlab table ncu_rules gemm.ncu-rep --format csv
"""


class TableCommand(click.Command):
    """Lists the tables with their docs in --help, read from the column contract only when
    help is asked for (the contract imports pyarrow)."""

    def format_help_text(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        from nsightlab.read.tables import TABLES

        self.help = HELP.format(tables="\n".join(
            [f"  {n:<17} {s.doc}" for n, s in TABLES.items()] +
            [f"  {n:<17} {doc}" for n, doc in NCU_TABLES.items()]))
        super().format_help_text(ctx, formatter)


@click.command(cls=TableCommand, help=HELP.format(tables="  (see nsightlab table --help)"))
@click.argument("name", type=click.Choice(TABLE_NAMES + tuple(NCU_TABLES)), metavar="NAME")
@click.argument("path")
@click.option("--columns", help="Comma-separated columns to keep, in this order [all].")
@click.option("--limit", type=click.IntRange(min=0), help="Print at most N rows.")
@output_options("file")
@report_options
def table(name: str, path: str, columns: str | None, limit: int | None, fmt: str,
          output: str | None, open_options: dict) -> None:
    import nsightlab
    from nsightlab.analysis import completeness
    from nsightlab.renderers import emit

    cols = [c.strip() for c in columns.split(",") if c.strip()] if columns else None
    if name in NCU_TABLES:
        return _ncu_table(name, path, cols, limit, fmt, output, open_options)
    with nsightlab.open(path, **open_options) as report:
        hint = report.missing_hint(name)
        df = report.table(name, cols)
        found = completeness.quality(report, [name]) if not hint else []
    if hint:
        click.echo(f"note: {hint}", err=True)
    emit(df, fmt, output, limit=limit)
    say_warnings(df, [(path, w["message"]) for w in found])


def _ncu_table(name, path, cols, limit, fmt, output, open_options) -> None:
    from nsightlab.cli.options import served_answer

    with served_answer("table", [name, cols, limit, fmt], [path], open_options if output is None
                       else {**open_options, "cache": False}) as done:
        if not done:
            _ncu_table_now(name, path, cols, limit, fmt, output, open_options)


def _ncu_table_now(name, path, cols, limit, fmt, output, open_options) -> None:
    from nsightlab.cli.options import warn
    from nsightlab.errors import UsageError
    from nsightlab.kernels import judge, report
    from nsightlab.renderers import emit

    store = report.store_of(path, open_options.get("cache_dir"), open_options.get("progress"),
                            open_options.get("cache", True))
    df = {"ncu_kernels": store.kernels, "ncu_metrics": store.metrics, "ncu_rules": store.rules,
          "ncu_judged": lambda: judge.of(store).kernels.reset_index(drop=True)}[name]()
    if cols:
        unknown = [c for c in cols if c not in df.columns]
        if unknown:
            raise UsageError(f"{path}: table {name} has no column {', '.join(unknown)}; its "
                             f"columns: {', '.join(df.columns)}")
        df = df[cols]
    emit(df, fmt, output, limit=limit)
    for w in store.warnings:
        warn(w)


COMMANDS = (table,)
