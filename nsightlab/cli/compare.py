"""``nsightlab diff`` and ``nsightlab report``."""
from __future__ import annotations

import click

from . import cli
from .options import output_options, report_options, wrote

FORMATS = ("table", "json", "csv", "parquet")


def chart_options(f):
    """--html FILE / --png DIR, for commands whose result has charts."""
    f = click.option("--png", "png_dir", type=click.Path(file_okay=False),
                     help="Save the charts as PNG here.")(f)
    return click.option("--html", "html_file", type=click.Path(dir_okay=False),
                        help="Write a self-contained HTML report with charts (opens offline).")(f)


def _charts_out(result, html_file: str | None, png_dir: str | None) -> None:
    """--html FILE and --png DIR, for any result with charts."""
    from ..renderers import emit

    if html_file:
        wrote(emit(result, "html", html_file), html_file)
    if png_dir:
        from .. import charts

        wrote(charts.save_pngs(charts.charts_for(result), png_dir), png_dir)


@cli.command()
@click.argument("a")
@click.argument("b")
@output_options("dir", FORMATS)
@chart_options
@report_options
def diff(a: str, b: str, fmt: str, output: str | None, html_file: str | None,
         png_dir: str | None, open_options: dict) -> None:
    """Compare run B with run A (capture names, capture folders or reports) where they line
    up: per iteration, kernel class, precision, NVTX/TensorRT layer and kernel, with the
    precision-conversion work B added, launch/sync/idle overheads and Tensor Core activity.

    Sections (with -o DIR, one Parquet file each): headline, by_class, by_precision,
    by_layer, kernels, conversion, overheads, tensor_core; times in ns per iteration.

    \b
    Examples:
      nsightlab diff fp16 nvfp4
      nsightlab diff captures/examples/vit-fp16 captures/examples/vit-fp8 --html diff.html
      nsightlab diff a.sqlite b.nsys-rep --json > diff.json
      nsightlab diff fp16 fp8 -o diff/ --png diff/charts
    """
    import nsightlab
    from ..renderers import emit

    d = nsightlab.diff(a, b, **open_options)
    wrote(emit(d, fmt, output), output)
    _charts_out(d, html_file, png_dir)


@cli.command()
@click.argument("path")
@output_options("dir", FORMATS)
@chart_options
@report_options
def report(path: str, fmt: str, output: str | None, html_file: str | None,
           png_dir: str | None, open_options: dict) -> None:
    """Everything about one run: per-iteration time, top kernels, launch-vs-compute verdict,
    host syncs and GPU gaps, Tensor Core activity, layers, and the findings that matter.

    Tables (with -o DIR, one Parquet file each): run, findings, by_class, by_layer,
    top_kernels, launch, syncs, gaps, tensor_core.

    \b
    Examples:
      nsightlab report captures/examples/vit-fp16
      nsightlab report syncy.sqlite --html syncy.html
      nsightlab report fp16 --json > fp16.json
    """
    from .. import summary
    from ..renderers import emit

    rr = summary.build(path, **open_options)
    wrote(emit(rr, fmt, output), output)
    _charts_out(rr, html_file, png_dir)
