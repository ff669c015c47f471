"""``nsightlab report``: everything about one run (``nsightlab.run.report``)."""
from __future__ import annotations

import click

from nsightlab.cli.options import (chart_options, charts_out, has_ncu, ncu_input, ncu_reader,
                                   output_options, report_options, say_warnings, served_answer,
                                   warn, wrote)

FORMATS = ("table", "json", "csv", "parquet")


@click.command()
@click.argument("paths", nargs=-1, required=True, metavar="PATH...")
@click.option("--process", "process", metavar="PID|NAME",
              help="One CUDA process of a report of several: its pid, or a name only one has.")
@click.option("--rank", type=int, metavar="N",
              help="One rank of an NCCL job (ranks are numbered by the GPU each process drives).")
@click.option("--ncu", "ncu_file", metavar="NCU_REP",
              help="An Nsight Compute report of the same program: its kernels judged and joined "
                   "to this trace's loop (a capture made with --ncu holds one already).")
@output_options("dir", FORMATS)
@chart_options
@report_options
def report(paths: tuple[str, ...], fmt: str, output: str | None, html_file: str | None,
           png_dir: str | None, process: str | None, rank: int | None, ncu_file: str | None,
           open_options: dict) -> None:
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

    An Nsight Compute report (.ncu-rep) is judged kernel by kernel: its limiter from Speed of
    Light (compute and which pipe, memory and which level, or latency and why), its roofline
    headroom (the FLOPs and the DRAM bytes it uses against the device's ceilings), occupancy,
    and NVIDIA's own rule results, each estimate capped at the headroom. With a trace (a
    capture holding both, or --ncu), each kernel's time in the loop weighs it: a ranked list
    of what each could save per iteration, and the loop's kernels ncu did not profile.

    \b
    Examples:
      nsightlab report captures/examples/vit-fp16
      nsightlab report ddp.sqlite --rank 1
      nsightlab report rank_0.sqlite rank_1.sqlite
      nsightlab report syncy.sqlite --html syncy.html
      nsightlab report fp16 --json > fp16.json
      nsightlab report gemm.ncu-rep
      nsightlab report trace.sqlite --ncu kernels.ncu-rep
    """
    if len(paths) == 1 and ncu_input(paths[0]):
        return _kernels_only(paths[0], fmt, output, html_file, png_dir, open_options)
    if len(paths) > 1 and any(ncu_input(p) for p in paths):
        raise click.UsageError("report reads one Nsight Compute report at a time; diff takes "
                               "two, compare several")
    from nsightlab.read.opener import start_reading

    for path in paths:  # reader processes first, then pandas' imports
        start_reading(path, by_process=len(paths) == 1 and process is None and rank is None,
                      **open_options)
    from nsightlab.run import report as one_run
    from nsightlab.errors import NsightlabError, UsageError
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
    kr = None
    if ncu_file or (len(paths) == 1 and has_ncu(path) and not ncu_input(path) and ncu_reader(
            "judging the capture's Nsight Compute report")):
        from nsightlab.kernels import report as kernel_level

        try:
            kr = kernel_level.build(ncu_file or _capture_dir(path), trace=path,
                                    cache_dir=open_options["cache_dir"],
                                    progress=open_options["progress"],
                                    cache=open_options["cache"])
        except NsightlabError as e:
            if ncu_file:  # asked for: its problem is the answer
                raise
            warn(f"the capture's Nsight Compute report was left out: {e}")
    if kr is not None and fmt == "json" and output is None:
        import json

        click.echo(json.dumps({**rr.to_json(), "kernel_level": kr.to_json()}, indent=1,
                              default=str))
    else:
        wrote(emit(rr, fmt, output), output)
        if kr is not None:
            wrote(emit(kr, fmt, f"{output}/kernel_level" if output else None), output)
    for one in getattr(rr, "runs", [rr]):
        say_warnings(one)
    if kr is not None:
        for w in kr.warnings:
            warn(w)
    charts_out(rr, html_file, png_dir)


def _capture_dir(path: str) -> str:
    """A capture's folder for its name (as every command opens one), else ``path``."""
    from pathlib import Path

    from nsightlab.read.locate import stored_capture

    p = Path(path)
    return str(stored_capture(p.name) or p) if not p.exists() and len(p.parts) == 1 else path


def _kernels_only(path: str, fmt: str, output: str | None, html_file: str | None,
                  png_dir: str | None, open_options: dict) -> None:
    """``report X.ncu-rep``: the kernels of one Nsight Compute report, judged."""
    quick = output is None and not html_file and not png_dir
    with served_answer("report", [fmt], [path], open_options if quick else
                       {**open_options, "cache": False}) as done:
        if done:
            return
        from nsightlab.kernels import report as kernel_level
        from nsightlab.renderers import emit

        kr = kernel_level.build(path, cache_dir=open_options["cache_dir"],
                                progress=open_options["progress"], cache=open_options["cache"])
        wrote(emit(kr, fmt, output), output)
        for w in kr.warnings:
            warn(w)
        charts_out(kr, html_file, png_dir)


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
