"""Run an ONNX model with ONNX Runtime the way a profile wants it.

    python -m nsightlab.runners.ort MODEL.onnx [--ep cpu|cuda|tensorrt] [--shape NAME=1x3x224x224]
        [--iterations N] [--warmup N] [--io-binding] [--cuda-graph] [--profile OUT.json]
        [--report RUN.json]

--io-binding binds the inputs (on the EP's device) and the outputs once, and runs with
``run_with_iobinding``: no NumPy copies in and out per run. --cuda-graph asks the CUDA EP for
``enable_cuda_graph`` (it implies --io-binding, as ORT requires); ORT refuses it while any
node runs on another EP, and the runner then says so in one line and exits 2. The report
records whether ORT's profiler was on (it adds host time to every run) and when it started
(``get_profiling_start_time_ns``: the evidence that aligns its clock with a trace's).

NVTX ranges mark the phases (``session_create``, ``warmup``, ``timed``) and every timed
iteration (``iterN``), so a Nsight Systems capture can be cut per iteration. Inputs are
synthesized from the model's input specs (symbolic dimensions from --shape, else 1). The
requested execution provider is used when this onnxruntime build has it; otherwise the run says
so on stderr and falls back to CPU, and --report records what was asked, what was available and
what was used, and which nodes ORT placed on which provider (its verbose "Node placements"
log at session creation). --profile keeps ONNX Runtime's own profiler JSON (per-node times).

NVTX needs the ``nvtx`` package (0.2.11 or older for nsys 2023.4 and older: newer ones emit
ranges those versions drop); without it the run works and records ``nvtx: false``.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import sys
import time

EPS = {"cpu": ["CPUExecutionProvider"],
       "cuda": ["CUDAExecutionProvider", "CPUExecutionProvider"],
       "tensorrt": ["TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"]}
DTYPES = {"tensor(float)": "float32", "tensor(float16)": "float16", "tensor(double)": "float64",
          "tensor(int64)": "int64", "tensor(int32)": "int32", "tensor(int8)": "int8",
          "tensor(uint8)": "uint8", "tensor(bool)": "bool", "tensor(bfloat16)": "float32"}


def _nvtx():
    try:
        import nvtx

        return lambda name: nvtx.annotate(name, domain="nsightlab")
    except ImportError:
        return None


def parse_shapes(items: list[str]) -> dict[str, list[int]]:
    out = {}
    for item in items:
        name, _, dims = item.partition("=")
        if not dims:
            raise SystemExit(f"--shape {item!r}: expected NAME=1x3x224x224")
        out[name] = [int(d) for d in dims.lower().split("x")]
    return out


def synthesize(inputs, shapes: dict[str, list[int]]):
    import numpy as np

    rng = np.random.default_rng(0)
    feeds = {}
    for i in inputs:
        shape = shapes.get(i.name) or [d if isinstance(d, int) and d > 0 else 1 for d in i.shape]
        dtype = DTYPES.get(i.type, "float32")
        if dtype.startswith("float"):
            feeds[i.name] = rng.standard_normal(shape).astype(dtype)
        elif dtype == "bool":
            feeds[i.name] = np.zeros(shape, bool)
        else:
            feeds[i.name] = np.zeros(shape, dtype)
    return feeds


@contextlib.contextmanager
def _stderr_captured():
    """What native code writes to stderr inside the block (ORT's logger), also passed on to
    stderr afterwards; a StringIO-like holder with ``getvalue()``."""
    import io
    import tempfile

    holder = io.StringIO()
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield holder
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            text = tmp.read().decode("utf-8", "replace")
            holder.write(text)
            # pass on what is not verbose chatter (warnings, errors, the placements)
            keep = [ln for ln in text.splitlines() if "[V:" not in ln and "[I:" not in ln
                    or "placed on" in ln]
            if keep:
                print("\n".join(keep), file=sys.stderr)


def _bound(ort, sess, feeds: dict, providers: list):
    """A run function over an io_binding made once: inputs copied once to the first EP's
    device, outputs left there (``run_with_iobinding``)."""
    device = "cuda" if any((p[0] if isinstance(p, tuple) else p) in
                           ("CUDAExecutionProvider", "TensorrtExecutionProvider")
                           for p in providers[:1]) else "cpu"
    binding = sess.io_binding()
    for name, value in feeds.items():
        binding.bind_ortvalue_input(name, ort.OrtValue.ortvalue_from_numpy(value, device, 0))
    for out in sess.get_outputs():
        binding.bind_output(out.name, device)

    def run():
        sess.run_with_iobinding(binding)
    return run


def parse_placements(log: str) -> dict:
    """ORT's verbose "Node placements" block: {provider: {"nodes": n, "names": [...]}}.
    Formats: " All nodes placed on [EP]. Number of nodes: N", or per EP " Node(s) placed on
    [EP]. Number of nodes: N" followed by "  OpType (NodeName)" lines."""
    import re

    out: dict = {}
    current = None
    for line in log.splitlines():
        m = re.search(r"(?:All nodes|Node\(s\)) placed on \[(\w+)\]\. Number of nodes: (\d+)", line)
        if m:
            current = m.group(1)
            out[current] = {"nodes": int(m.group(2)), "names": []}
            continue
        n = re.search(r"\]\s{2,}(\S+)(?: \((.*)\))?\s*$", line)
        if current and n:  # "OpType (NodeName)", or a fused node's name alone
            out[current]["names"].append(n.group(1) + (f" ({n.group(2)})" if n.group(2) is not None else ""))
        elif current and "VerifyEachNodeIsAssignedToAnEp" not in line:
            current = None
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m nsightlab.runners.ort", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--ep", choices=list(EPS), default="cpu")
    ap.add_argument("--shape", action="append", default=[], metavar="NAME=DIMS")
    ap.add_argument("--iterations", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--io-binding", action="store_true",
                    help="bind inputs and outputs once (run_with_iobinding)")
    ap.add_argument("--cuda-graph", action="store_true",
                    help="the CUDA EP's enable_cuda_graph (implies --io-binding)")
    ap.add_argument("--profile", help="save ONNX Runtime's profiler JSON here")
    ap.add_argument("--report", help="write what ran (providers, latencies) as JSON here")
    args = ap.parse_args(argv)
    if args.cuda_graph and args.ep != "cuda":
        ap.error("--cuda-graph is the CUDA EP's enable_cuda_graph: give --ep cuda")
    args.io_binding = args.io_binding or args.cuda_graph
    import onnxruntime as ort

    rng_of = _nvtx()
    scope = rng_of or (lambda name: contextlib.nullcontext())
    available = ort.get_available_providers()
    wanted = EPS[args.ep]
    providers = [p for p in wanted if p in available] or ["CPUExecutionProvider"]
    fallback = wanted[0] not in available
    if fallback:
        print(f"nsightlab.runners.ort: {wanted[0]} is not available in this onnxruntime build "
              f"(available: {', '.join(available)}); running on {providers[0]}", file=sys.stderr)
    so = ort.SessionOptions()
    if args.profile:
        so.enable_profiling = True
        so.profile_file_prefix = os.path.splitext(os.path.abspath(args.profile))[0] + "-ort"
    if args.report:  # ORT logs its node placements at verbose level while the session is made
        so.log_severity_level = 0
    if args.cuda_graph and "CUDAExecutionProvider" in providers:
        providers = [("CUDAExecutionProvider", {"enable_cuda_graph": "1"}) if p ==
                     "CUDAExecutionProvider" else p for p in providers]
    try:
        with scope("session_create"), _stderr_captured() as session_log:
            sess = ort.InferenceSession(args.model, sess_options=so, providers=providers)
    except Exception as e:  # ORT's own refusal (enable_cuda_graph with nodes off the CUDA EP)
        print(f"nsightlab.runners.ort: {args.model}: ONNX Runtime refused the session: "
              f"{str(e).strip().splitlines()[-1]}"
              + (" (enable_cuda_graph needs every node on the CUDA EP: fix the input shapes and "
                 "constant-fold the shape subgraph, or run without --cuda-graph)"
                 if args.cuda_graph else ""), file=sys.stderr)
        return 2
    so.log_severity_level = 2
    feeds = synthesize(sess.get_inputs(), parse_shapes(args.shape))
    run = _bound(ort, sess, feeds, providers) if args.io_binding else \
        (lambda: sess.run(None, feeds))
    with scope("warmup"):
        for _ in range(args.warmup):
            run()
    latencies = []
    with scope("timed"):
        for i in range(args.iterations):
            with scope(f"iter{i}"):
                t = time.perf_counter()
                run()
                latencies.append((time.perf_counter() - t) * 1e3)
    profiling_start = sess.get_profiling_start_time_ns() if args.profile else None
    if args.profile:
        shutil.move(sess.end_profiling(), args.profile)
    report = {
        "model": os.path.abspath(args.model), "ep_requested": args.ep,
        "providers_requested": wanted, "providers_available": available,
        "providers_used": sess.get_providers(), "fallback": fallback,
        "nvtx": rng_of is not None, "iterations": args.iterations, "warmup": args.warmup,
        "io_binding": args.io_binding, "cuda_graph": args.cuda_graph,
        "profiler_on": bool(args.profile), "profiling_start_ns": profiling_start,
        "inputs": {k: list(v.shape) for k, v in feeds.items()},
        "latency_ms": latencies,
        "latency_mean_ms": statistics.fmean(latencies) if latencies else None,
        "latency_median_ms": statistics.median(latencies) if latencies else None,
        "onnxruntime_version": ort.__version__,
        "node_placements": parse_placements(session_log.getvalue()),
    }
    if args.report:
        with open(args.report, "w") as f:
            json.dump(report, f, indent=1)
    print(f"nsightlab.runners.ort: {args.iterations} iterations on {sess.get_providers()[0]}"
          f"{' with io_binding' if args.io_binding else ''}"
          f"{' and enable_cuda_graph' if args.cuda_graph else ''}, median "
          f"{report['latency_median_ms']:.3f} ms"
          f"{' (ORT profiler on: it adds host time to every run)' if args.profile else ''}",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
