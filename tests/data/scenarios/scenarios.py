"""Small GPU programs, each bound by one thing, for the triage fixtures (run under nsys on a GPU).

    python scenarios.py MODE [ITERATIONS]

Every mode runs a few warm-up steps, then ITERATIONS (default 24) NVTX ranges ``iterN`` in the
domain-less default, each ending with the work it needs to finish (a sync or a copy to the
host), the way a real inference loop does. Modes and what bounds them:

  h2d_pinned     a 256 MiB host->device copy from pinned memory per iteration, little math
  h2d_pageable   the same from pageable memory
  d2h            a small GEMM, then a 256 MiB device->host copy into pageable memory
  compute        large FP16 GEMMs, nothing else
  host           5 ms of CPU work (an NVTX range that launches nothing) between short kernels
  sync           200 tiny steps, each followed by .item() (a host sync)
  sync_work      40 GEMMs, each followed by .item() and 0.1 ms of CPU work on the result
  launch         2000 tiny elementwise kernels
  graph          the launch loop captured once as a CUDA graph and replayed
  overlap        a big H2D copy on a side stream overlapping GEMMs on the main stream
  warmup         torch.compile (or, without a compiler, a long fill) before a short loop
  crash          the launch loop, killed inside iteration 12 (os._exit, buffers not flushed)
  enqueue_copy   GEMMs inside a range named ExecutionContext::enqueue, then a 64 MiB copy to
                 pageable host memory outside it, every iteration (trtexec's loop shape)
"""
import os
import sys
import time

import torch

mode = sys.argv[1]
iters = int(sys.argv[2]) if len(sys.argv) > 2 else 24
nvtx = torch.cuda.nvtx
dev = torch.device("cuda")
torch.manual_seed(0)
MIB = 1 << 20


def loop(step, warmup: int = 2) -> None:
    for _ in range(warmup):
        step(-1)
    torch.cuda.synchronize()
    for it in range(iters):
        nvtx.range_push(f"iter{it}")
        step(it)
        nvtx.range_pop()
    torch.cuda.synchronize()


def gemm_inputs(n: int):
    return (torch.randn(n, n, device=dev, dtype=torch.float16),
            torch.randn(n, n, device=dev, dtype=torch.float16))


if mode in ("h2d_pinned", "h2d_pageable"):
    host = torch.empty(256 * MIB // 4, dtype=torch.float32, pin_memory=mode == "h2d_pinned")
    gpu = torch.empty_like(host, device=dev)
    a, b = gemm_inputs(1024)

    def step(it):
        gpu.copy_(host, non_blocking=True)
        (a @ b).sum().item()
    loop(step)
elif mode == "d2h":
    host = torch.empty(256 * MIB // 4, dtype=torch.float32)
    big = torch.randn(256 * MIB // 4, device=dev)
    a, b = gemm_inputs(1024)

    def step(it):
        c = a @ b
        big[: c.numel()].copy_(c.flatten().float())
        host.copy_(big)
    loop(step)
elif mode == "enqueue_copy":
    # trtexec's shape: the NVTX range (named like TensorRT's) wraps only the enqueue of the
    # compute; the device->host copy of the result and the sync happen after it, every time
    host = torch.empty(64 * MIB // 4, dtype=torch.float32)
    out = torch.empty(64 * MIB // 4, device=dev)
    a, b = gemm_inputs(2048)
    for _ in range(2):
        out[: 2048 * 2048].copy_((a @ b).flatten())
        host.copy_(out)
    torch.cuda.synchronize()
    for it in range(iters):
        nvtx.range_push("ExecutionContext::enqueue")
        for _ in range(4):
            out[: 2048 * 2048].copy_((a @ b).flatten())
        nvtx.range_pop()
        host.copy_(out)  # pageable: synchronous
    torch.cuda.synchronize()
elif mode == "compute":
    a, b = gemm_inputs(8192)

    def step(it):
        for _ in range(4):
            c = a @ b
        torch.cuda.synchronize()
    loop(step)
elif mode == "host":
    x = torch.randn(1 << 20, device=dev)

    def step(it):
        for _ in range(4):
            y = x * 2 + 1
            nvtx.range_push("cpu_preprocess")
            t = time.perf_counter()
            while time.perf_counter() - t < 0.00125:  # CPU work that launches nothing
                pass
            nvtx.range_pop()
        y.sum().item()
    loop(step)
elif mode == "sync":
    x = torch.randn(4096, device=dev)

    def step(it):
        for _ in range(200):
            (x * 1.0001).sum().item()
    loop(step)
elif mode == "sync_work":
    a, b = gemm_inputs(2048)

    def step(it):
        for _ in range(40):
            v = (a @ b)[0, 0].item()  # the host waits for the result...
            t = time.perf_counter()
            while time.perf_counter() - t < 0.0001:  # ...then works with it before going on
                v = v * 1.0
    loop(step)
elif mode in ("launch", "crash"):
    x = torch.randn(256, device=dev)

    def step(it):
        global x
        if mode == "crash" and it == 12:
            for _ in range(500):
                x = x * 1.0001 + 0.0001
            os._exit(3)  # dies inside iteration 12, the way a crashed program does
        for _ in range(1000):
            x = x * 1.0001 + 0.0001
        torch.cuda.synchronize()
    loop(step)
elif mode == "graph":
    x = torch.randn(256, device=dev)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            y = x * 1.0001 + 0.0001
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = x
        for _ in range(1000):
            y = y * 1.0001 + 0.0001

    def step(it):
        g.replay()
        torch.cuda.synchronize()
    loop(step)
elif mode == "overlap":
    host = torch.empty(128 * MIB // 4, dtype=torch.float32, pin_memory=True)
    gpu = torch.empty_like(host, device=dev)
    a, b = gemm_inputs(4096)
    copies = torch.cuda.Stream()

    def step(it):
        with torch.cuda.stream(copies):
            gpu.copy_(host, non_blocking=True)
        for _ in range(6):
            c = a @ b
        torch.cuda.synchronize()
    loop(step)
elif mode == "warmup":
    a, b = gemm_inputs(2048)

    def f(x, y):
        return torch.nn.functional.gelu(x @ y) * 0.5 + 1.0
    try:
        fn = torch.compile(f)
        nvtx.range_push("compile")
        fn(a, b)
        torch.cuda.synchronize()
        nvtx.range_pop()
    except Exception as e:  # no compiler on the machine: a long warm-up of other kernels
        print(f"torch.compile unavailable ({type(e).__name__}); eager warm-up", file=sys.stderr)
        fn = f
        big = torch.empty(1 << 30, device=dev, dtype=torch.uint8)
        for _ in range(50):
            big.fill_(1)

    def step(it):
        fn(a, b)
        torch.cuda.synchronize()
    loop(step)
else:
    sys.exit(f"unknown mode {mode!r}")
print("ok")
