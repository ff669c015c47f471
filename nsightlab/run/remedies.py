"""Advice in the terms of the run's own runtime.

The budget's advice is records (``budget._advice``); once the runtime behind the run is known
(``analysis.runtime``), ``how`` gives the words each remedy is said in, as that runtime's users
do it (``renderers.words.HOW``); an unknown runtime gets the CUDA calls themselves. Only the
wording changes: when to advise stays the budget's rule on the measured shares.

``findings`` adds the remedies a runtime has of its own, each only where the trace (and, for
an ``--ort`` capture, the runner's record of ORT's placement) supports it:

- ONNX Runtime: io_binding when the runs copy inputs in from, or outputs out to, pageable
  memory; whether enable_cuda_graph can work (the nodes ORT placed on the CPU EP, named, and
  how people move them); the profiler's own host time when it was on; the TensorRT EP or an
  fp16 model when the math is FP32/TF32 (TF32 being ORT's default for FP32 GEMMs);
- PyTorch: TF32 (allow_tf32 / set_float32_matmul_precision) or bf16 autocast when FP32 FFMA
  GEMMs take a large share;
- TensorRT: trtexec's own end-of-run checks, reproduced from the trace: enqueue time (the
  ``ExecutionContext::enqueue`` ranges, else the CUDA API time per iteration) at or above the
  GPU compute time (--useCudaGraph), host-to-device or device-to-host copies at or above it
  (--noDataTransfers), an unstable loop (--useSpinWait).
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from nsightlab.analysis.classify import MATH_CLASSES
from nsightlab.analysis.kinds import UNSTABLE_COV_PCT  # the report's UNSTABLE line: --useSpinWait
from nsightlab.core.units import fmt_ms as _ms
from nsightlab.renderers import words

#: per-iteration copies below this many bytes are ORT's own shape values, not a run's inputs
IO_BYTES = 1024
#: FP32/TF32 math worth naming a precision remedy (% of the iterations' GPU time)
FP32_MATH_PCT = 25.0
#: CPU-EP node names shown
NAMED_NODES = 6

def how(runtime: str, record: dict | None = None, job: bool = False) -> dict:
    """The words of each remedy in ``runtime``'s terms (``renderers.words.how``); for ONNX
    Runtime, CUDA graphs as far as the runner's ``record`` knows the placement; ``job``: a
    report of the whole job."""
    graph = ort_graph_words(record or {}) if runtime.startswith("ONNX Runtime") else None
    return words.how(runtime, graph, job)


def ort_record(source: Path | str) -> dict:
    """The ORT runner's record (``ort_run.json``) of the capture a report came from; {}."""
    import json

    folder = Path(source) if Path(source).is_dir() else Path(source).parent
    try:
        r = json.loads((folder / "ort_run.json").read_text())
    except (OSError, ValueError):
        return {}
    return r if isinstance(r, dict) else {}


def cpu_nodes(record: dict) -> list[str] | None:
    """The nodes ORT placed on the CPU EP while a GPU EP ran the rest ("OpType (name)"), from
    the runner's record; None when the placement is not known."""
    placed = record.get("node_placements")
    if not placed or not any(ep != "CPUExecutionProvider" for ep in placed):
        return None  # unknown, or a CPU-only session: no GPU EP to fall back from
    cpu = placed.get("CPUExecutionProvider") or {}
    names = list(cpu.get("names") or [])
    return names or [f"({int(cpu.get('nodes', 0))} nodes)"] * bool(cpu.get("nodes"))


def ort_graph_words(record: dict) -> str:
    """The CUDA-graph remedy for an ORT run, as far as its placement is known."""
    nodes = cpu_nodes(record)
    if nodes is None:
        return words.HOW["ONNX Runtime"]["graph"]
    if not nodes:
        return ("(the CUDA EP's enable_cuda_graph provider option, with inputs and outputs "
                "bound by io_binding: every node here runs on the CUDA EP, so ORT can capture it)")
    n = int((record.get("node_placements") or {}).get("CPUExecutionProvider", {}).get("nodes")
            or len(nodes))
    return ("(the CUDA EP's enable_cuda_graph provider option, with io_binding; ONNX Runtime "
            f"refuses it while any node runs on the CPU EP, and {n} do here: "
            f"{_named(nodes)}: fix the input shapes (export with static shapes, or "
            "SessionOptions.add_free_dimension_override_by_name) so ORT's constant folding "
            "removes that shape subgraph (graph_optimization_level ORT_ENABLE_ALL, the default; "
            "or onnxsim), then every node lands on the CUDA EP)")


def _named(nodes: list[str]) -> str:
    ops = pd.Series([n.split(" (")[0] for n in nodes]).value_counts()
    shown = ", ".join(f"{op} x{c}" if c > 1 else op for op, c in ops.head(NAMED_NODES).items())
    return shown + (f" and {len(ops) - NAMED_NODES} other op types" if len(ops) > NAMED_NODES else "")


def findings(runtime: str, summary: pd.Series, iterations: pd.DataFrame, ks: pd.DataFrame,
             record: dict, enqueue: tuple[float, str] | None = None) -> list[tuple[str, str]]:
    """The runtime's own remedies that the evidence supports (see the module's docstring):
    ``summary`` one GPU's budget summary row, ``iterations`` its timed iterations, ``ks`` the
    iterations' kernel_sum table, ``record`` the ORT runner's record ({} when none),
    ``enqueue`` the host's enqueue time per iteration and where it comes from (TensorRT). Each
    as (code, sentence)."""
    out = []
    if runtime == "TensorRT":
        return trt_checks(summary, enqueue)
    math = ks[ks["kernel_class"].isin(MATH_CLASSES)] if len(ks) else ks
    share = {p: float(math.loc[math["precision"] == p, "time_pct"].sum()) for p in ("fp32", "tf32")} \
        if len(math) else {"fp32": 0.0, "tf32": 0.0}
    if runtime.startswith("ONNX Runtime"):
        out += _ort(iterations, record, share)
    elif runtime.startswith("PyTorch") and share["fp32"] >= FP32_MATH_PCT:
        out.append(("pytorch_fp32", f"what to do about the FP32 math ({share['fp32']:.0f}% of GPU time in FP32 "
                   "GEMM/attention/conv kernels on CUDA cores): let PyTorch use TF32 Tensor Cores "
                   "(torch.set_float32_matmul_precision('high'), or torch.backends.cuda.matmul."
                   "allow_tf32 = True and torch.backends.cudnn.allow_tf32 = True) or run under "
                   "torch.autocast('cuda', dtype=torch.bfloat16)"))
    return out


def _ort(it: pd.DataFrame, record: dict, share: dict) -> list[tuple[str, str]]:
    out = []
    steady = it[it["phase"] != "warm-up"] if "phase" in it else it
    if len(steady) and not record.get("io_binding"):
        h2d = float(steady["h2d_bytes"].median()) if steady["h2d_pageable_ns"].median() > 0 else 0.0
        d2h = float(steady["d2h_bytes"].median()) if steady["d2h_pageable_ns"].median() > 0 else 0.0
        if max(h2d, d2h) >= IO_BYTES:
            ns = float((steady["h2d_pageable_ns"] + steady["d2h_pageable_ns"]).median())
            said = " and ".join(x for x in (
                f"its inputs in from pageable host memory ({h2d / 1e3:,.1f} kB)" if h2d >= IO_BYTES else "",
                f"its outputs out to pageable memory ({d2h / 1e3:,.1f} kB, a copy session.run "
                "waits for)" if d2h >= IO_BYTES else "") if x)
            out.append(("ort_io_binding", f"each run copies {said}: {_ms(ns)} of copies per run on the GPU, and "
                       "the host waits: bind inputs on the device once and outputs to device "
                       "buffers with io_binding (session.io_binding(), bind_ortvalue_input, "
                       "bind_output(name, 'cuda'), run_with_iobinding)"))
    if record.get("profiler_on"):
        out.append(("ort_profiler", "ONNX Runtime's profiler was on in this run (the runner's record): it adds "
                   "host time to every node, so the host side looks slower than it is; capture "
                   "the runner without --profile (nsightlab capture NAME -- python -m "
                   "nsightlab.runners.ort MODEL ...) for the run's own wall time"))
    fp = share["fp32"] + share["tf32"]
    if fp >= FP32_MATH_PCT:
        which = "TF32 (the CUDA EP's default for FP32 MatMul/Gemm: use_tf32)" \
            if share["tf32"] >= share["fp32"] else "FP32"
        out.append(("ort_math", f"the math is {which}: {fp:.0f}% of GPU time in FP32/TF32 GEMM/attention/conv "
                   "kernels; for Tensor Core precision export an fp16 model "
                   "(onnxconverter_common.float16.convert_float_to_float16) or run the TensorRT EP "
                   "with trt_fp16_enable"))
    return out


def trt_checks(summary: pd.Series, enqueue: tuple[float, str] | None) -> list[tuple[str, str]]:
    """trtexec's warnings at the end of a run, from the trace's numbers per iteration."""
    out = []
    compute = float(summary.get("kernels_ns", 0.0))
    if compute <= 0:
        return out
    if enqueue and enqueue[0] >= compute:
        out.append(("trt_enqueue", f"enqueue time {_ms(enqueue[0])} ({enqueue[1]}) is at or above the GPU "
                   f"compute time {_ms(compute)} per inference: throughput is bound by the host's "
                   "enqueue, as trtexec warns: capture the enqueue as a CUDA graph "
                   "(trtexec --useCudaGraph; in an application, enqueueV3 captured once and "
                   "replayed)"))
    for key, said in (("h2d", "host-to-device"), ("d2h", "device-to-host")):
        ns = float(summary.get(f"{key}_pageable_ns", 0.0) + summary.get(f"{key}_pinned_ns", 0.0))
        if ns >= compute:
            out.append(("trt_copies", f"{said} copies take {_ms(ns)} per inference, at or above the GPU compute "
                       f"time {_ms(compute)}: throughput is bound by the transfers, as trtexec "
                       "warns: time the engine alone with trtexec --noDataTransfers, and in the "
                       "application keep the bindings on the device (or pinned, copied with "
                       "cudaMemcpyAsync on the enqueue's stream)"))
    cov = float(summary.get("wall_cov_pct", 0.0))
    if cov > UNSTABLE_COV_PCT:
        out.append(("trt_unstable", f"the iterations vary by {cov:.0f}% (CoV): trtexec --useSpinWait makes its "
                   "waits for the GPU tighter, and locked GPU clocks steadier"))
    return out


def trt_enqueue(report, p) -> tuple[float, str] | None:
    """The host's enqueue time per iteration: the median ``ExecutionContext::enqueue``/
    ``execute`` NVTX range (TensorRT writes them with its NVTX verbosity), else the CUDA API
    time per iteration of the run profile ``p``."""
    if report.has_rows("nvtx"):
        n = report.nvtx(["text", "start_ns", "end_ns"])
        e = n[n["text"].astype(str).str.match(r"^ExecutionContext::(enqueue|execute)")]
        if len(e):
            return (float((e["end_ns"] - e["start_ns"]).median()),
                    "the median ExecutionContext::enqueue range")
    api = (p.overheads or {}).get("api_ns") if p is not None else None
    return (float(api), "CUDA API time per iteration") if api else None
