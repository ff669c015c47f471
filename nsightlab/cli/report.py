"""``nsightlab report``: everything about one run (``nsightlab.run.report``)."""
from __future__ import annotations

import click

from nsightlab.cli.options import (chart_options, charts_out, output_options, report_options,
                                   say_warnings, wrote)

FORMATS = ("table", "json", "csv", "parquet")


@click.command()
@click.argument("paths", nargs=-1, required=True, metavar="PATH...")
@click.option("--process", "process", metavar="PID|NAME",
              help="One CUDA process of a report of several: its pid, or a name only one has.")
@click.option("--rank", type=int, metavar="N",
              help="One rank of an NCCL job (ranks are numbered by the GPU each process drives).")
@output_options("dir", FORMATS)
@chart_options
@report_options
def report(paths: tuple[str, ...], fmt: str, output: str | None, html_file: str | None,
           png_dir: str | None, process: str | None, rank: int | None, open_options: dict) -> None:
    """Everything about one run: per-iteration time, top kernels, launch-vs-compute verdict,
    host syncs and GPU gaps, Tensor Core activity, layers, and the findings that matter.

    A report of several CUDA processes (workers sharing a GPU, torchrun ranks) is one run per
    process: a line each first (GPUs, rank, runtime, iterations, verdict), whether processes
    sharing a GPU were time-sliced or ran at once (MPS) and how much the sharing stretched each
    (its iterations replayed without the others), and for the ranks of one NCCL job the
    communication each exposed (waiting for peers apart from transfer) and the straggler the
    others wait for, with its cause from its own budget; then each process's report.
    --process or --rank picks one. Several PATHs (or a folder of them) are the ranks of one job
    traced one report each (nsys profile -o rank_%q{RANK} under torchrun): opened together,
    their clocks aligned by the sessions' start times and checked on the collectives.

    Tables (with -o DIR, one Parquet file each): run, findings, by_class, by_layer,
    top_kernels, launch, syncs, gaps, tensor_core (several processes: processes, sharing,
    stretch, and each of those per process as pidN_TABLE).

    \b
    Examples:
      nsightlab report captures/examples/vit-fp16
      nsightlab report ddp.sqlite --rank 1
      nsightlab report rank_0.sqlite rank_1.sqlite
      nsightlab report syncy.sqlite --html syncy.html
      nsightlab report fp16 --json > fp16.json
    """
    from nsightlab.read.opener import start_reading

    for path in paths:  # reader processes first, then pandas' imports
        start_reading(path, by_process=len(paths) == 1 and process is None and rank is None,
                      **open_options)
    from nsightlab.run import report as one_run
    from nsightlab.errors import UsageError
    from nsightlab.renderers import emit

    paths = _rank_folder(paths)
    path = paths[0]
    if len(paths) > 1:
        if process is not None or rank is not None:
            raise UsageError("--process/--rank pick a process of one report: give that rank's "
                             "report alone")
        rr = one_run.build_ranks(list(paths), **open_options)
    else:
        rr = one_run.build(path, process, rank, **open_options)
    if (html_file or png_dir) and isinstance(rr, one_run.ProcessesReport):
        raise UsageError(f"{path}: --html/--png chart one run: this report holds "
                         f"{len(rr.runs)} CUDA processes; pick one with --process PID or --rank N")
    wrote(emit(rr, fmt, output), output)
    for one in getattr(rr, "runs", [rr]):
        say_warnings(one)
    charts_out(rr, html_file, png_dir)


def _rank_folder(paths: tuple[str, ...]) -> tuple[str, ...]:
    """A folder that is not a capture but holds several reports (one per rank, as
    ``nsys profile -o ranks/rank_%q{RANK}`` leaves them): its reports, in name order."""
    from pathlib import Path

    if len(paths) != 1 or not Path(paths[0]).is_dir() or (Path(paths[0]) / "manifest.json").exists():
        return paths
    found = sorted(f for f in Path(paths[0]).iterdir() if f.is_file() and f.name.endswith(
        (".sqlite", ".sqlite.xz", ".nsys-rep")))
    exported = {f.name.split(".")[0] for f in found if not f.name.endswith(".nsys-rep")}
    found = [str(f) for f in found  # a .nsys-rep beside its own export: the export
             if not (f.name.endswith(".nsys-rep") and f.name.split(".")[0] in exported)]
    return tuple(found) if len(found) > 1 else paths


COMMANDS = (report,)
