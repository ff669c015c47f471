"""``nsightlab capture``, ``nsightlab captures`` and ``nsightlab export``."""
from __future__ import annotations

from pathlib import Path

import click

from nsightlab.cli.options import output_options

#: Options defaults shown in --help (``capture.Options`` is the source; a test keeps them equal)
DEFAULT_TRACE = "cuda,nvtx,osrt,cublas,cudnn"
PRECISIONS = ("fp16", "bf16", "int8", "best", "fp8", "nvfp4", "mxfp8", "strongly-typed")


@click.command(context_settings={"ignore_unknown_options": False})
@click.argument("name")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@click.option("--store", type=click.Path(file_okay=False), envvar="NSIGHTLAB_STORE",
              help="Capture store [./captures].")
@click.option("--force", is_flag=True, help="Replace an existing capture of this name.")
@click.option("--dry-run", is_flag=True, help="Print the exact argv of every step; run nothing.")
@click.option("--quiet", is_flag=True, help="Do not echo the workload's output (it is still logged).")
@click.option("--no-nsys", "use_nsys", is_flag=True, flag_value=False, default=True,
              help="Do not run Nsight Systems.")
@click.option("--nsys", "nsys_path", help="nsys executable [NSIGHTLAB_NSYS, PATH].")
@click.option("--trace", default=DEFAULT_TRACE, show_default=True, help="nsys --trace list.")
@click.option("--gpu-metrics", is_flag=True, help="Sample GPU metrics (Tensor Active, SMs Active...).")
@click.option("--memory", is_flag=True,
              help="Record every GPU allocation and free (nsys --cuda-memory-usage=true; "
                   "recipe gpu_memory).")
@click.option("--sample", is_flag=True, help="Turn on CPU sampling (off by default).")
@click.option("--nsys-args", default="", help="Extra nsys profile flags, as one quoted string.")
@click.option("--ncu", "use_ncu", is_flag=True, help="Also run the workload under Nsight Compute.")
@click.option("--ncu-path", help="ncu executable [NSIGHTLAB_NCU, PATH].")
@click.option("--ncu-set", default="full", show_default=True, help="ncu section set.")
@click.option("--ncu-kernels", metavar="REGEX", help="Profile only kernels matching REGEX.")
@click.option("--ncu-nvtx", metavar="RANGE", help="Profile only inside this NVTX range (e.g. block3/).")
@click.option("--ncu-count", type=int, metavar="N", help="Profile at most N kernels.")
@click.option("--ncu-mode", type=click.Choice(["all", "auto"]), default="all", show_default=True,
              help="Which kernels ncu profiles. all: every kernel (or those --ncu-kernels, "
                   "--ncu-nvtx, --ncu-count pick). auto: after nsys, the kernels that make up "
                   "80% of the loop's kernel time in its trace, each launch configuration once "
                   "(past warm-up); recorded as ncu_auto in the manifest.")
@click.option("--ncu-args", default="", help="Extra ncu flags, as one quoted string.")
@click.option("--trtexec", type=click.Path(dir_okay=False), metavar="MODEL.onnx",
              help="Preset: build a TensorRT engine once, then profile inference only.")
@click.option("--trtexec-path", help="trtexec executable [NSIGHTLAB_TRTEXEC, PATH].")
@click.option("--precision", default="fp16", show_default=True, metavar="|".join(PRECISIONS),
              help="trtexec engine precision (Q/DQ models: strongly typed).")
@click.option("--shapes", help="trtexec --shapes, e.g. input:1x3x224x224.")
@click.option("--batch", type=int, help="trtexec --batch (implicit-batch engines).")
@click.option("--cuda-graph", is_flag=True,
              help="trtexec --useCudaGraph; with --ort --ep cuda: the CUDA EP's "
                   "enable_cuda_graph (inputs and outputs bound, as ORT requires).")
@click.option("--no-data-transfers", is_flag=True, help="trtexec --noDataTransfers.")
@click.option("--iterations", type=int, default=20, show_default=True, help="Timed iterations.")
@click.option("--warmup-ms", type=int, default=200, show_default=True, help="trtexec warm-up (ms).")
@click.option("--ort", type=click.Path(dir_okay=False), metavar="MODEL.onnx",
              help="Preset: nsightlab's ONNX Runtime runner (NVTX per iteration).")
@click.option("--ep", type=click.Choice(["cpu", "cuda", "tensorrt"]), default="cpu",
              show_default=True, help="ONNX Runtime execution provider.")
@click.option("--shape", "ort_shapes", multiple=True, metavar="NAME=DIMS",
              help="ORT input shape, e.g. input=1x3x224x224; repeatable.")
@click.option("--warmup", type=int, default=5, show_default=True, help="ORT warm-up runs.")
@click.option("--repeat", type=int, default=1, show_default=True, metavar="N",
              help="Run the workload N times under nsys, each run its own report (runs/N/): "
                   "diff then puts the spread between runs into its interval. With several "
                   "NAMEs the runs interleave: A1 B1 A2 B2 ...")
@click.option("--io-binding", is_flag=True,
              help="ORT: bind inputs and outputs on the device once (io_binding) instead of "
                   "copying NumPy arrays in and out every run.")
def capture(dry_run: bool, quiet: bool, **options) -> None:
    """Run a workload under Nsight Systems (and/or Nsight Compute) and keep it as capture NAME:
    the reports, their SQLite export and Parquet tables, logs and a manifest, in ./captures/NAME
    (or --store). Every other command then opens it by NAME.

    Several configurations to compare: NAME,NAME,... with {name} in the command or in any
    option; one capture per name, their runs interleaved (A1 B1 A2 B2 ... with --repeat) so
    that the machine's drift falls on every side alike.

    \b
    Examples:
      nsightlab capture fp16 --trtexec vit.onnx --precision fp16 --shapes input:64x3x224x224
      nsightlab capture nvfp4 --trtexec vit_nvfp4.onnx --precision nvfp4
      nsightlab capture ort-cpu --ort model.onnx --ep cpu --iterations 50
      nsightlab capture ort-bound --ort model.onnx --ep cuda --io-binding --cuda-graph
      nsightlab capture vit -- python vit_workload.py fp16
      nsightlab capture graphs --memory -- python serve.py       # then: recipe run gpu_memory graphs
      nsightlab capture blk3 --no-nsys --ncu --ncu-nvtx block3/ -- python vit_workload.py fp16
      nsightlab capture vit --ncu --ncu-mode auto -- python infer.py   # ncu on the kernels that matter
      nsightlab capture fp16 --dry-run --trtexec vit.onnx
      nsightlab capture a --repeat 3 -- python bench.py fp16    # 3 runs: run-to-run spread
      nsightlab capture fp16,bf16 --repeat 3 -- python bench.py {name}   # then: diff fp16 bf16
      nsightlab capture fp16,fp8 --trtexec vit_{name}.onnx --precision {name} --repeat 3

    Around every run the GPU's clocks, power, temperature and other processes, and the host's
    load, go into the manifest (NVML, else nvidia-smi): diff and report say what stands out.
    """
    from nsightlab.capture import record as cap
    from nsightlab.cli.options import progress

    configs = cap.configurations(cap.Options(**options))  # click names are Options' fields
    if dry_run:
        for opts in configs:
            opts.validate(check_files=False)
            tools = cap.resolve_tools(opts, dry_run=True)
            for step in cap.plan(opts, cap.store_dir(opts) / opts.name, tools):
                click.echo(f"{opts.name}: {step}" if len(configs) > 1 else str(step))
        return
    echo = None if quiet else (lambda line: click.echo(line, err=True))
    for opts, path in zip(configs, cap.capture_many(configs, echo=echo, progress=progress)):
        click.echo(f"captured {opts.name} in {path}")


@click.command()
@click.option("--store", type=click.Path(file_okay=False), envvar="NSIGHTLAB_STORE",
              help="Capture store [./captures, under the current directory].")
@output_options("file", formats=("table", "csv", "json"))
def captures(store: str | None, fmt: str, output: str | None) -> None:
    """List the captures in the store, and one level down in its folders (the repository's
    captures/examples/vit-fp16 is listed, and opened, as vit-fp16): name, date, preset, GPU,
    status, size. Every command opens a capture by the name listed here.

    \b
    Examples:
      nsightlab captures                       # ./captures and its folders
      nsightlab captures --store captures/examples
      nsightlab captures --json
    """
    from nsightlab.capture import record as cap
    from nsightlab.read.locate import default_store
    from nsightlab.renderers import emit

    df = cap.captures_table(Path(store) if store else None)
    if df.empty:
        where = (Path(store) if store else default_store()).absolute()
        click.echo(f"nsightlab: no captures in {where} or the folders in it (capture one with: "
                   "nsightlab capture NAME -- COMMAND..., or look elsewhere with --store DIR or "
                   "NSIGHTLAB_STORE)", err=True)
    emit(df, fmt, output)


@click.command("export")
@click.argument("inputs", nargs=-1, required=True)
@click.option("-o", "--output", "outdir", type=click.Path(file_okay=False), default=".",
              show_default=True, help="Folder for the exported files.")
@click.option("--nsys", "nsys_path", help="nsys executable for .nsys-rep [NSIGHTLAB_NSYS, PATH].")
def export_(inputs, outdir, nsys_path) -> None:
    """Export profiler artifacts: .nsys-rep -> SQLite, .ncu-rep -> Parquet (per-kernel key
    metrics and every metric), trtexec --exportProfile/--exportLayerInfo/--exportTimes JSON
    and ONNX Runtime profiler JSON -> Parquet.

    \b
    Examples:
      nsightlab export run.nsys-rep -o exports/
      nsightlab export gemm.ncu-rep trtexec.profile.json trtexec.layers.json -o exports/
    """
    from nsightlab.capture import exporters

    for path in exporters.export(list(inputs), outdir, nsys_path):
        click.echo(str(path))


COMMANDS = (capture, captures, export_,)
