"""Runs that end early, for partial traces (issue 46), run under plain ``nsys profile`` on a GPU:

    python workloads.py MODE TRUTH.jsonl

Every mode is the same loop: a small transformer encoder (2 layers, d=512, 8 heads, batch 16 x
256 tokens, fp16) after 30 ms of host work (the batch's preparation), one pass an iteration,
synchronized, in an NVTX range ``iterN`` unless ``NO_NVTX=1`` (``capture.sh`` names such a mode
MODE-bare). The truth is written as the loop runs, one JSON line per finished pass, flushed at
once (a killed run keeps what it finished): CUDA events around the pass (``gpu_ms``), host
clocks beside them (``time.perf_counter_ns``), and one line for each event the workload causes
(``raise``, ``profiler_start``, ``profiler_stop``) with the pass it happens in. ``capture.sh``
decides how each run ends (an exception, SIGKILL from outside, nsys' --duration, a capture
range, --delay); a file TRUTH.jsonl.started appears when the loop begins. Modes:

  healthy    60 passes, exits 0 (the control: nothing is partial)
  exception  raises RuntimeError inside layer 1 of pass 40 (layer 0's kernels ran): uncaught,
             exit 1; the NVTX range of pass 40 (``torch.cuda.nvtx.range``) never closes
  long       up to 25 s of passes (for SIGKILL from outside, --duration and --delay)
  range      cudaProfilerStart before pass 20, cudaProfilerStop inside layer 1 of pass 60 (a
             capture range ending mid-iteration), 80 passes, exit 0
  graph      10 passes replaying one CUDA graph of the forward (for the old nsys)
  eager      10 passes (for the old nsys)
"""
import json
import os
import sys
import time

import torch

mode, truth_path = sys.argv[1], sys.argv[2]
nvtx = os.environ.get("NO_NVTX") != "1"
dev = torch.device("cuda")
torch.manual_seed(0)
out = open(truth_path, "w", buffering=1)


def line(**kw):
    out.write(json.dumps(kw) + "\n")
    out.flush()
    os.fsync(out.fileno())


line(mode=mode, nvtx=nvtx, clock="perf_counter_ns", pid=os.getpid())
layer = torch.nn.TransformerEncoderLayer(512, 8, 2048, batch_first=True)
model = torch.nn.Sequential(layer, torch.nn.TransformerEncoderLayer(512, 8, 2048, batch_first=True))
model = model.to(dev).half().eval()
x = torch.randn(16, 256, 512, device=dev, dtype=torch.half)
hook = {"pass": -1, "what": None}


def in_layer1(mod, args):
    """Runs before layer 1's kernels: where this pass is cut when asked."""
    if hook["what"] == "raise":
        line(event="raise", **{"pass": hook["pass"]})
        raise RuntimeError(f"injected failure inside layer 1 of pass {hook['pass']}")
    if hook["what"] == "stop":
        line(event="profiler_stop", **{"pass": hook["pass"]})
        torch.cuda.profiler.stop()
        hook["what"] = None


model[1].register_forward_pre_hook(in_layer1)


def spin(ms):
    t = time.perf_counter() + ms / 1000
    while time.perf_counter() < t:
        pass


graph = None
if mode == "graph":
    with torch.no_grad():
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                model(x)
        torch.cuda.current_stream().wait_stream(s)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            y = model(x)
torch.cuda.synchronize()
passes = {"healthy": 60, "exception": 60, "range": 80, "graph": 10, "eager": 10}.get(mode, 10**6)
t_end = time.perf_counter() + 25
open(truth_path + ".started", "w").close()
with torch.no_grad():
    for i in range(passes):
        if mode == "long" and time.perf_counter() > t_end:
            break
        hook["pass"], hook["what"] = i, None
        if mode == "exception" and i == 40:
            hook["what"] = "raise"
        if mode == "range" and i == 20:
            line(event="profiler_start", **{"pass": i})
            torch.cuda.profiler.start()
        if mode == "range" and i == 60:
            hook["what"] = "stop"
        rng = torch.cuda.nvtx.range(f"iter{i}") if nvtx else None
        if rng:
            rng.__enter__()  # as `with torch.cuda.nvtx.range(...)`: an exception leaves it open
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t0 = time.perf_counter_ns()
        a.record()
        spin(30)
        if graph is not None:
            graph.replay()
        else:
            model(x)
        b.record()
        torch.cuda.synchronize()
        t1 = time.perf_counter_ns()
        if rng:
            rng.__exit__(None, None, None)
        line(i=i, host_start_ns=t0, host_end_ns=t1, gpu_ms=a.elapsed_time(b))
line(event="exit", code=0)
