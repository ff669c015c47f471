"""``nsightlab diff`` and ``nsightlab report``."""
from __future__ import annotations

import json
from pathlib import Path

import click

from .. import charts, summary
from ..diff import diff as run_diff
from ..render import table_text
from . import cli
from .options import report_options


def _ms_table(df, cols):
    out = df[cols].copy()
    for c in cols:
        if c.endswith("_ns"):
            out[c.replace("_ns", "_ms")] = out.pop(c) / 1e6
    return table_text(out)


@cli.command()
@click.argument("a")
@click.argument("b")
@click.option("--json", "as_json", is_flag=True, help="Print every section as one JSON object.")
@click.option("-o", "--output", "outdir", type=click.Path(file_okay=False),
              help="Write each section as Parquet, plus manifest.json, into OUTDIR.")
@click.option("--html", "html_file", type=click.Path(dir_okay=False),
              help="Write a self-contained HTML report with charts (opens offline).")
@click.option("--png", "png_dir", type=click.Path(file_okay=False), help="Save the charts as PNG here.")
@report_options
def diff(a, b, as_json, outdir, html_file, png_dir, opener) -> None:
    """Compare run B with run A (capture names, capture folders or reports) where they line
    up: per iteration, kernel class, precision, NVTX/TensorRT layer and kernel, with the
    precision-conversion work B added, launch/sync/idle overheads and Tensor Core activity.

    \b
    Examples:
      nsightlab diff fp16 nvfp4
      nsightlab diff captures/examples/vit-fp16 captures/examples/vit-fp8 --html diff.html
      nsightlab diff a.sqlite b.nsys-rep --json > diff.json
      nsightlab diff fp16 fp8 -o diff/ --png diff/charts
    """
    d = run_diff(opener(a), opener(b))
    d.headline["a"], d.headline["b"] = a, b
    if as_json:
        click.echo(json.dumps(d.to_json(), indent=1))
    else:
        h = d.headline
        click.echo(h["verdict"])
        click.echo(f"\nA {a}: {h['a_iterations']} iterations ({h['a_iteration_source']})")
        click.echo(f"B {b}: {h['b_iterations']} iterations ({h['b_iteration_source']})")
        click.echo(f"per iteration: {h['a_iteration_ns'] / 1e6:.3f} ms -> {h['b_iteration_ns'] / 1e6:.3f} ms "
                   f"(speedup {h['speedup']:.2f}x), kernels {h['a_kernels']:.0f} -> {h['b_kernels']:.0f}, "
                   f"GPU busy {h['a_busy_pct']:.0f}% -> {h['b_busy_pct']:.0f}%, "
                   f"conversion overhead {h['conversion_overhead_ns'] / 1e6:.3f} ms\n")
        click.echo("by kernel class (ms per iteration):")
        click.echo(_ms_table(d.by_class, ["kernel_class", "a_ns", "b_ns", "delta_ns", "a_count", "b_count"]))
        if (d.by_layer["layer"] != "(outside layers)").any():
            click.echo("by layer (largest changes):")
            click.echo(_ms_table(d.by_layer.head(12), ["layer", "a_ns", "b_ns", "delta_ns",
                                                       "a_math_precision", "b_math_precision"]))
        if len(d.conversion):
            click.echo("precision-conversion kernels (only in B):")
            click.echo(_ms_table(d.conversion.head(8), ["kernel_class", "b_name", "time_ns"]))
        click.echo("overheads (median per iteration; times in ms):")
        ov = d.overheads.copy()
        scale = [1e6 if k.endswith("_ns") else 1 for k in ov["overhead"]]
        ov["a"], ov["b"] = ov["a"] / scale, ov["b"] / scale
        ov["overhead"] = ov["overhead"].str.replace("_ns", "", regex=False)
        click.echo(table_text(ov[["overhead", "a", "b"]]))
    if outdir:
        out = Path(outdir)
        out.mkdir(parents=True, exist_ok=True)
        for name, df in d.tables().items():
            df.to_parquet(out / f"{name}.parquet", index=False)
        (out / "manifest.json").write_text(json.dumps(
            {"a": a, "b": b, "headline": d.to_json()["headline"],
             "sections": list(d.tables())}, indent=1))
        click.echo(f"wrote {len(d.tables())} sections to {out}", err=True)
    if html_file:
        Path(html_file).write_text(charts.diff_page(d))
        click.echo(f"wrote {html_file}", err=True)
    if png_dir:
        for p in charts.save_pngs(charts.diff_charts(d), png_dir):
            click.echo(f"wrote {p}", err=True)


@cli.command()
@click.argument("path")
@click.option("--html", "html_file", type=click.Path(dir_okay=False),
              help="Write a self-contained HTML report with charts.")
@report_options
def report(path, html_file, opener) -> None:
    """Everything about one run: per-iteration time, top kernels, launch-vs-compute verdict,
    host syncs and GPU gaps, Tensor Core activity, layers, and the findings that matter.

    \b
    Examples:
      nsightlab report captures/examples/vit-fp16
      nsightlab report syncy.sqlite --html syncy.html
    """
    rr = summary.build(opener(path))
    rr.profile.label = path
    click.echo(summary.text(rr))
    if html_file:
        Path(html_file).write_text(summary.html_page(rr))
        click.echo(f"wrote {html_file}", err=True)
