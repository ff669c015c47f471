"""Workloads for the classes of issue 62 (one run read right), run under plain ``nsys profile``:

    python workloads.py MODE TRUTH.json [ARG]

The truth comes from the workload, never from nsightlab: CUDA events around each iteration
with the host clock beside them, one JSON line per finished iteration, flushed as the loop
runs (a run that dies keeps what it finished), and what the workload knows it ran. Modes:

  ddp       (under torchrun, 2 ranks: NCCL on two GPUs, gloo when both share one GPU)
            ResNet-18 DDP training, fp16 autocast, SGD, batch 64, ARG
            steps (default 30) in NVTX ranges iterN (NO_NVTX=1: no ranges, in every mode). Every step but the last also adds the
            loss to a running sum on the GPU (two kernels): the last step runs a few kernels
            fewer, and finishes. After the loop each rank evaluates 40 batches (about a
            second of GPU work), meets the other at a barrier and exits 0
  ddp_lastfast  the same, but the last step stops after backward() (no optimizer step, no
            sum): a prefix of the others, its time a third shorter; then the same evaluation
  ddp_raise the same, but rank 1 raises a RuntimeError inside layer3's forward of step 20
            (uncaught: torchrun then stops rank 0)
  ddp_kill  the same, but rank 1 SIGKILLs itself inside layer3's forward of step 20
  train_lastfast  one GPU: ResNet-18 training, fp16 autocast, Adam with a kernel set per
            tensor (foreach=False), batch 64, ARG steps (default 30) in NVTX ranges iterN; the
            last step stops after backward() (a prefix of the others, far shorter), then 100
            evaluation batches (about a second of GPU work) and exit 0
  train_raise     the same, but a RuntimeError is raised inside layer3's forward of step 20
            (uncaught; its NVTX range is left open, as torch.cuda.nvtx.range leaves it)
  train_raise_closed  the same, its NVTX range closed on the way out (try/finally)
  kvgrow    attention over a growing cache: 40 iterations in NVTX ranges iterN; each appends
            320 tokens to a preallocated K/V cache (fp16, batch 8, 32 heads, dim 128) and runs
            flash attention (scaled_dot_product_attention) of 1,024 queries over the cache so
            far (8,512 -> 20,992 tokens), then a GEMM of fixed size, 2 ms of host work first; the same kernels on the same grids every
            iteration, longer each time
  nvtxoff   a 6-layer MLP (fp16, batch 256, width 4096), 5 unnamed warm-up passes, then 80
            passes in NVTX ranges iter5 ... iter84 (the user's numbering starts after the
            warm-up); at the start of passes iter8, iter36, iter37, iter50 and iter71 (inside
            their ranges) the host sleeps 12 ms (a data loader's stall)
"""
import json
import os
import signal
import sys
import time

import torch

mode, truth_path = sys.argv[1], sys.argv[2]
arg = sys.argv[3] if len(sys.argv) > 3 else None
torch.manual_seed(0)
RANK = int(os.environ.get("RANK", "0"))
if "RANK" in os.environ:
    truth_path = truth_path.replace(".truth.json", f".rank{RANK}.truth.json")
out = open(truth_path, "w")


def line(**kw) -> None:
    out.write(json.dumps(kw) + "\n")
    out.flush()


def timed(i: int, fn, nvtx: str | None = None, **extra):
    nvtx = None if os.environ.get("NO_NVTX") == "1" else nvtx
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    if nvtx:
        torch.cuda.nvtx.range_push(nvtx)
    h0 = time.perf_counter_ns()
    a.record()
    r = fn()
    b.record()
    torch.cuda.synchronize()
    h1 = time.perf_counter_ns()
    if nvtx:
        torch.cuda.nvtx.range_pop()
    line(i=i, name=nvtx, host_start_ns=h0, host_end_ns=h1, gpu_ms=a.elapsed_time(b), **extra)
    return r


if mode.startswith("ddp"):
    import torch.distributed as dist
    import torchvision
    # NCCL needs a GPU per rank; on a one-GPU machine both ranks share it through gloo
    gpus = torch.cuda.device_count()
    dist.init_process_group("nccl" if gpus >= 2 else "gloo")
    torch.cuda.set_device(RANK % gpus)
    dev = torch.device("cuda", RANK % gpus)
    steps = int(arg or 30)
    net = torchvision.models.resnet18().to(dev).to(memory_format=torch.channels_last)
    model = torch.nn.parallel.DistributedDataParallel(net, device_ids=[RANK % gpus])
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(64, 3, 224, 224, device=dev).to(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (64,), device=dev)
    running = torch.zeros((), device=dev)
    state = {"i": -1}

    def hook(*_):
        if RANK == 1 and state["i"] == 20 and mode in ("ddp_raise", "ddp_kill"):
            line(event="dies", how=mode, step=20, host_ns=time.perf_counter_ns())
            if mode == "ddp_kill":
                os.kill(os.getpid(), signal.SIGKILL)
            raise RuntimeError("injected failure in layer3 (issue 62's killed rank)")

    net.layer3.register_forward_pre_hook(hook)

    def step(last: bool):
        global running
        with torch.autocast("cuda", dtype=torch.float16):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        if last and mode == "ddp_lastfast":
            return  # a last step that only measures: no optimizer step
        opt.step()
        opt.zero_grad(set_to_none=True)
        if not last:
            running = running + loss.detach().float()

    for i in range(steps):
        state["i"] = i
        timed(i, lambda: step(i == steps - 1), f"iter{i}", rank=RANK, last=i == steps - 1)
    h0 = time.perf_counter_ns()
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.float16):
        for _ in range(40):
            model.module(x)
    torch.cuda.synchronize()
    line(event="eval", host_start_ns=h0, host_end_ns=time.perf_counter_ns(), batches=40)
    dist.barrier()
    dist.destroy_process_group()
    sys.exit(0)

dev = torch.device("cuda")
if mode.startswith("train"):
    import torchvision
    net = torchvision.models.resnet18().to(dev).to(memory_format=torch.channels_last)
    opt = torch.optim.Adam(net.parameters(), lr=1e-4, foreach=False)  # a kernel set per tensor
    x = torch.randn(64, 3, 224, 224, device=dev).to(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (64,), device=dev)
    steps = int(arg or 30)
    state = {"i": -1}

    def hook(*_):
        if mode != "train_lastfast" and state["i"] == 20:
            line(event="dies", how=mode, step=20, host_ns=time.perf_counter_ns())
            raise RuntimeError("injected failure in layer3 (issue 62)")

    net.layer3.register_forward_pre_hook(hook)

    def step(last: bool):
        with torch.autocast("cuda", dtype=torch.float16):
            loss = torch.nn.functional.cross_entropy(net(x), y)
        loss.backward()
        if last:
            return  # the last step only measures: no optimizer step
        opt.step()
        opt.zero_grad(set_to_none=True)

    for i in range(steps):
        state["i"] = i
        if mode == "train_raise_closed":  # a range that closes on the way out (try/finally)
            torch.cuda.nvtx.range_push(f"iter{i}")
            try:
                timed(i, lambda: step(False))
            finally:
                torch.cuda.nvtx.range_pop()
        else:
            timed(i, lambda: step(i == steps - 1), f"iter{i}", last=i == steps - 1)
    h0 = time.perf_counter_ns()
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.float16):
        for _ in range(100):
            net(x)
    torch.cuda.synchronize()
    line(event="eval", host_start_ns=h0, host_end_ns=time.perf_counter_ns(), batches=100)
    sys.exit(0)

if mode == "kvgrow":
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    B, H, D, Q, L0, STEP, N = 8, 32, 128, 1024, 8192, 320, 40
    cap = L0 + STEP * N
    k = torch.randn(B, H, cap, D, device=dev, dtype=torch.half)
    v = torch.randn(B, H, cap, D, device=dev, dtype=torch.half)
    q = torch.randn(B, H, Q, D, device=dev, dtype=torch.half)
    new = torch.randn(B, H, STEP, D, device=dev, dtype=torch.half)
    w1 = torch.randn(4096, 4096, device=dev, dtype=torch.half) / 64
    h = torch.randn(B * Q, 4096, device=dev, dtype=torch.half)
    for i in range(N):
        L = L0 + STEP * (i + 1)

        def it():
            k[:, :, L - STEP:L].copy_(new)
            v[:, :, L - STEP:L].copy_(new)
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):  # one kernel, its grid by queries
                o = F.scaled_dot_product_attention(q, k[:, :, :L], v[:, :, :L])
            return (h @ w1).relu_() , o
        time.sleep(0.002)  # the host's work between steps (sampling, bookkeeping)
        timed(i, it, f"iter{i}", cache_tokens=L)
    sys.exit(0)

if mode == "nvtxoff":
    layers = [torch.nn.Linear(4096, 4096).to(dev).half() for _ in range(6)]
    x = torch.randn(256, 4096, device=dev, dtype=torch.half)
    stalls = {8, 36, 37, 50, 71}

    def mlp():
        y = x
        for lin in layers:
            y = torch.relu(lin(y))
        return y
    with torch.inference_mode():
        for i in range(85):
            stall = i in stalls
            timed(i, lambda: (time.sleep(0.012) if stall else None, mlp())[1],
                  f"iter{i}" if i >= 5 else None, stall=stall)
    sys.exit(0)

raise SystemExit(f"unknown mode {mode}")
