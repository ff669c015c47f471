"""``nsightlab diff``, ``compare``, ``layers`` and ``ort``: runs against each other."""
from __future__ import annotations

import click

from nsightlab.cli.options import (chart_options, charts_out, import_beside,
                                   output_options, report_options, say_warnings, wrote)

FORMATS = ("table", "json", "csv", "parquet")


def fail_if_option(f):
    """--fail-if RULE (repeatable): a CI gate, exit status 3 when a run breaks a rule."""
    return click.option(
        "--fail-if", "fail_if", multiple=True, metavar="RULE",
        help="CI gate: exit 3 when B breaks RULE, 'METRIC OP CHANGE' against A, e.g. "
             "'latency_p50 > +5%', 'class:quantize > +0.5ms', 'conversion > 1ms', "
             "'throughput < -5%', 'layer:block3 > +10%' (repeatable; see docs/ci.md).")(f)


def _parse_rules(rules: tuple[str, ...]) -> list:
    """The --fail-if rules, parsed before any report is read (a malformed one is refused)."""
    if not rules:
        return []
    from nsightlab.comparison import gate

    return [gate.parse(r) for r in rules]


def _gate(rules: list, pairs) -> None:
    """Check every (baseline, run, conversion_ns) of ``pairs`` against the parsed --fail-if
    ``rules``; print what broke and exit 3."""
    if not rules:
        return
    from nsightlab.comparison import gate

    failed = [line for a, b, conv in pairs for line in gate.check(rules, a, b, conv)]
    for line in failed:
        click.echo(line, err=True)
    if failed:
        click.get_current_context().exit(gate.EXIT_FAILED)


@click.command()
@click.argument("a")
@click.argument("b")
@click.option("--a-process", type=int, metavar="PID",
              help="A's process, when A holds several CUDA processes [the same rank as B's, "
                   "else the busiest].")
@click.option("--b-process", type=int, metavar="PID", help="B's process, likewise.")
@output_options("dir", FORMATS)
@chart_options
@fail_if_option
@report_options
def diff(a: str, b: str, a_process: int | None, b_process: int | None, fmt: str,
         output: str | None, html_file: str | None, png_dir: str | None,
         fail_if: tuple[str, ...], open_options: dict) -> None:
    """Compare run B with run A (capture names, capture folders or reports) where they line
    up: per iteration, kernel class, precision, NVTX/TensorRT layer and kernel, with the
    precision-conversion work B added, launch/sync/idle overheads and Tensor Core activity.

    Sections (with -o DIR, one Parquet file each): headline, by_class, by_precision,
    by_layer, kernels, conversion, overheads, tensor_core; times in ns per iteration.

    Several runs a side: give A or B as 'a1.sqlite,a2.sqlite,...', or a capture made with
    `capture NAME --repeat N` (its runs/ are taken). The headline's times, ratio and 95%
    interval are then over all the runs (the spread between runs is in the interval: one
    run a side cannot show it); every other line and table is of the first run of each
    side, and the output says so.

    \b
    Examples:
      nsightlab diff fp16 nvfp4
      nsightlab diff a1.sqlite,a2.sqlite,a3.sqlite b1.sqlite,b2.sqlite
      nsightlab diff captures/examples/vit-fp16 captures/examples/vit-fp8 --html diff.html
      nsightlab diff a.sqlite b.nsys-rep --json > diff.json
      nsightlab diff fp16 fp8 -o diff/ --png diff/charts
      nsightlab diff main.sqlite pr.sqlite --fail-if 'latency_p50 > +5%'   # CI: exit 3
      nsightlab diff gemm_fp16.ncu-rep gemm_fp8.ncu-rep     # kernel by kernel, the counters

    Two Nsight Compute reports (or captures holding them) are also compared at the counter
    level: kernels paired by role (NVTX range, class, order), each pair's time ratio with the
    limiter on each side and the ratio the roofline expects (the Tensor peaks when
    compute-bound, the bytes when memory-bound), and the kernels on one side only.
    """
    from nsightlab.cli.options import has_ncu, ncu_input, ncu_reader
    from nsightlab.read.opener import start_reading

    if ncu_input(a) and ncu_input(b):
        return _kernel_diff(a, b, fmt, output, html_file, png_dir, open_options)
    rules = _parse_rules(fail_if)
    start_reading(a, **open_options)  # reader processes first, then the imports of pandas
    import_beside("scipy.special")  # the intervals' t distribution, while the tables are read
    import nsightlab
    from nsightlab.renderers import emit

    d = nsightlab.diff(a, b, a_process, b_process, **open_options)
    wrote(emit(d, fmt, output), output)
    say_warnings(d)
    charts_out(d, html_file, png_dir)
    if has_ncu(a) and has_ncu(b) and fmt == "table" and output is None and ncu_reader(
            "comparing the captures' Nsight Compute reports kernel by kernel"):
        click.echo("")  # captures holding Nsight Compute reports: the counter-level diff too
        from nsightlab.errors import NsightlabError

        try:
            _kernel_diff(a, b, fmt, None, None, None, open_options)
        except NsightlabError as e:
            from nsightlab.cli.options import warn

            warn(f"the captures' Nsight Compute reports were left out: {e}")
    _gate(rules, [(d.a, d.b, d.headline["conversion_overhead_ns"])])


def _kernel_diff(a: str, b: str, fmt: str, output, html_file, png_dir, open_options) -> None:
    """Two Nsight Compute reports (or captures holding them) compared at the counter level."""
    from nsightlab.cli.options import served_answer

    quick = output is None and not html_file and not png_dir
    with served_answer("diff", [fmt], [a, b], open_options if quick else
                       {**open_options, "cache": False}) as done:
        if done:
            return
        from nsightlab.kernels import report as kernel_level
        from nsightlab.renderers import emit

        d = kernel_level.diff(a, b, cache_dir=open_options["cache_dir"],
                              progress=open_options["progress"], cache=open_options["cache"])
        wrote(emit(d, fmt, output), output)
        charts_out(d, html_file, png_dir)


@click.command()
@click.argument("runs", nargs=-1, required=True)
@click.option("--batch", type=click.IntRange(min=1),
              help="Items per iteration, for items/s (else from the capture manifest).")
@output_options("dir", FORMATS)
@chart_options
@fail_if_option
@report_options
def compare(runs: tuple[str, ...], batch: int | None, fmt: str, output: str | None,
            html_file: str | None, png_dir: str | None, fail_if: tuple[str, ...],
            open_options: dict) -> None:
    """Line up several runs of one model (precisions, runtimes) against the first: latency
    (mean, p50, p95, p99, min, max of the wall-clock iterations), throughput, speedup, GPU time
    by class and precision, conversion overhead, copies, Tensor Core activity and each run's
    verdict; then every run against the baseline, with the reasons.

    A run may be several reports of the same code ('a1.sqlite,a2.sqlite', or a capture made
    with --repeat): its tables are its first report's, and its speed-up's 95% CI holds the
    spread between them ('~': no measurable difference from the baseline).

    Tables (with -o DIR, one Parquet file each): summary, by_class, by_precision, latency,
    pairs. --html adds charts: latency distribution, class time, per-layer change.

    \b
    Examples:
      nsightlab compare fp32 tf32 bf16 fp16 fp8
      nsightlab compare ort-cuda ort-trt trt --batch 64 --html runs.html
      nsightlab compare base.sqlite new.sqlite --json > lineup.json
      nsightlab compare main.sqlite pr.sqlite --fail-if 'latency_p95 > +5%'
      nsightlab compare fp16 bf16          # captures made with capture fp16,bf16 --repeat 3
    """
    import_beside("scipy.special")
    import nsightlab
    from nsightlab.renderers import emit

    if len(runs) < 2:
        raise click.UsageError("give at least two runs (the first is the baseline)")
    from nsightlab.cli.options import ncu_input

    if all(ncu_input(r) for r in runs):
        from nsightlab.kernels import report as kernel_level

        lineup = kernel_level.lineup(list(runs), cache_dir=open_options["cache_dir"],
                                     progress=open_options["progress"],
                                     cache=open_options["cache"])
        wrote(emit(lineup, fmt, output), output)
        return
    rules = _parse_rules(fail_if)
    lineup = nsightlab.compare(list(runs), batch=batch, **open_options)
    wrote(emit(lineup, fmt, output), output)
    say_warnings(lineup)
    charts_out(lineup, html_file, png_dir)
    _gate(rules, [(d.a, d.b, d.headline["conversion_overhead_ns"]) for d in lineup.diffs])


def _engine(path: str):
    """A trtexec --exportProfile JSON, or a capture folder holding trtexec.profile.json."""
    from pathlib import Path

    from nsightlab.errors import NotAReportError
    from nsightlab.read.locate import stored_capture

    p = Path(path)
    if not p.exists() and len(p.parts) == 1:
        p = stored_capture(p.name) or p  # a capture name
    if p.is_dir():
        p = p / "trtexec.profile.json"
    if not p.is_file():
        raise NotAReportError(f"{path}: no trtexec profile; give X.profile.json (trtexec "
                              "--exportProfile) or a capture made with --trtexec")
    return p


@click.command()
@click.argument("a")
@click.argument("b")
@output_options("dir", FORMATS)
@chart_options
def layers(a: str, b: str, fmt: str, output: str | None, html_file: str | None,
           png_dir: str | None) -> None:
    """Match the TensorRT layers of two engines (e.g. FP16 and INT8/FP8 Q/DQ) and compare their
    time, from trtexec exports alone: --exportProfile JSON (layer info found beside it as
    X.layers.json or X.graph.json), or capture folders made with --trtexec.

    Layers match by the graph of the layer info (the layers that write their inputs, then their
    names, kinds and shapes, in engine order), then as regions fused differently; standalone
    Q/DQ and reformat layers are listed as conversion work.
    Tables (with -o DIR, one Parquet file each): layers, conversion, summary.

    \b
    Examples:
      nsightlab layers resnet_fp16.profile.json resnet_qat.profile.json
      nsightlab layers fp16 int8 --json
    """
    from nsightlab.comparison import trt_layers
    from nsightlab.renderers import emit

    m = trt_layers.match(trt_layers.engine_layers(_engine(a)), trt_layers.engine_layers(_engine(b)))
    wrote(emit(m, fmt, output), output)
    charts_out(m, html_file, None)  # no PNGs of a layer match


@click.command()
@click.argument("path")
@click.option("--ep", help="The execution provider that was requested (cpu, cuda, tensorrt or an "
                           "ORT provider name) [from the capture's ort_run.json].")
@click.option("--report", "report", metavar="REPORT",
              help="A Nsight Systems report of the same run (.sqlite, .nsys-rep or a capture) "
                   "to join the profile to [an --ort capture's own].")
@output_options("dir", FORMATS)
def ort(path: str, ep: str | None, report: str | None, fmt: str, output: str | None) -> None:
    """Where ONNX Runtime ran each node, from its profiler JSON (or a capture made with --ort):
    time per execution provider, nodes that fell back to the CPU while a GPU EP was requested,
    the memcpy nodes ORT added between providers, TensorRT EP subgraphs, and session set-up
    (model loading, initialization: engine builds) apart from the first and steady runs.

    With the Nsight Systems report of the same run (an --ort capture holds both; else
    --report), each node is placed on the timeline: its span on the run's thread holds the CUDA
    calls it made, so per node, op type and provider you get host time, launches, the GPU time
    of the kernels they launched and copies, per run: how much is launching and how much is
    math, and what the CPU-EP and Memcpy nodes cost. The clocks are aligned by the profile's
    start time (the runner records it) or the runs' NVTX ranges, and checked: 95% of the calls
    amid each run's nodes must fall in a node's span, else the pair is refused.

    Tables (with -o DIR, one Parquet file each): run, phases, by_provider, fallbacks, memcpy,
    trt_subgraphs, assignment; joined: timeline_alignment, timeline_nodes, timeline_by_op,
    timeline_by_provider, timeline_runs.

    \b
    Examples:
      nsightlab ort ort-cuda                      # a capture made with --ort: joined
      nsightlab ort onnxruntime_profile.json --report run.sqlite
      nsightlab ort onnxruntime_profile.json --ep cuda --json
    """
    from nsightlab.comparison import ort_placement
    from nsightlab.renderers import emit

    wrote(emit(ort_placement.placement(path, ep, report), fmt, output), output)


COMMANDS = (diff, compare, layers, ort,)
