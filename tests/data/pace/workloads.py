"""Loops for work and pace (issue 56): the same work at another pace, other work in a pattern,
precision pairs, run under plain ``nsys profile`` on a GPU:

    python workloads.py MODE TRUTH.json [ITERS]

The truth comes from the workload, never from nsightlab: a CUDA event pair around every
iteration with the host clock beside it (``host_start_ns``, ``host_end_ns`` on
``time.perf_counter_ns``, ``gpu_ms`` from ``Event.elapsed_time``) and what the workload knows
each iteration to be (``kind``: the work it ran, or the pace it was given). NVTX ``iterN``
ranges unless ``NO_NVTX=1``. Modes:

  vits_fp16, vits_bf16   ViT-S/16 batch 16 inference (launch-bound on an H100/H200: the GPU
                         idles between launches); ITERS passes (default 100)
  deit_bf16              DeiT-S batch 64 bf16 inference (GPU-bound)
  resnet_fp16            ResNet-50 batch 32 fp16 inference
  gemm_fp16, gemm_bf16, gemm_fp32
                         a chain of 8 GEMMs 4096 x 4096 (fp32: TF32 off): the GPU's time
                         differs between fp16 and fp32, not between fp16 and bf16
  gradaccum              ResNet-50 fp16-autocast training, batch 32, Adam, the optimizer step
                         every 4th micro-batch: kinds "first" (grads assigned), "middle" and
                         "step" (optimizer), the first step "first_step" (Adam's state made)
  eval6                  ResNet-18 fp16-autocast training, batch 32, SGD; every 6th step also 4
                         eval forward passes of batch 32: kinds "main" and "eval"
  stalls                 ViT-S fp16 batch 16, 120 passes; 14 of them, drawn at random (seed 7),
                         first wait 8-15 ms on the host (a data loader): kind "stall", the same
                         kernels
  stretch                ViT-S fp16 batch 16, ITERS passes (default 600); in iterations
                         [150, 270) and [400, 480) the host spins 3 ms before each pass (a
                         slower host stretch): kind "slow", the same kernels
Every mode synchronizes at the end of each iteration (the event's end is waited for).
"""
import json
import os
import random
import sys
import time

import torch

mode, truth_path = sys.argv[1], sys.argv[2]
iters = int(sys.argv[3]) if len(sys.argv) > 3 else None
dev = torch.device("cuda")
torch.manual_seed(0)
windows = []
NVTX = os.environ.get("NO_NVTX") != "1"


class Timed:
    """One iteration: CUDA events around it, host times beside them, an NVTX range."""

    def __init__(self, i, kind="main"):
        self.i, self.kind = i, kind

    def __enter__(self):
        if NVTX:
            torch.cuda.nvtx.range_push(f"iter{self.i}")
        self.a, self.b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        self.t0 = time.perf_counter_ns()
        self.a.record()
        return self

    def __exit__(self, *exc):
        self.b.record()
        torch.cuda.synchronize()
        windows.append((self, time.perf_counter_ns()))
        if NVTX:
            torch.cuda.nvtx.range_pop()


def gpu_state() -> dict:
    """The GPU's clocks, power and temperature, and its other processes (NVML, where there)."""
    try:
        import pynvml as nv
        nv.nvmlInit()
        h = nv.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
        return {"sm_mhz": nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM),
                "mem_mhz": nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM),
                "power_w": nv.nvmlDeviceGetPowerUsage(h) / 1000,
                "temp_c": nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU),
                "processes": len(nv.nvmlDeviceGetComputeRunningProcesses(h))}
    except Exception as e:  # noqa: BLE001 - the truth records what it could not read
        return {"error": str(e)}


before = gpu_state()


def save(level, **extra):
    torch.cuda.synchronize()
    rows = [{"host_start_ns": t.t0, "host_end_ns": end, "gpu_ms": t.a.elapsed_time(t.b),
             "kind": t.kind} for t, end in windows]
    with open(truth_path, "w") as f:
        json.dump({"mode": mode, "level": level, "iterations": len(rows), "windows": rows,
                   "clock": "perf_counter_ns", "gpu_before": before, "gpu_after": gpu_state(),
                   "load_before_after": os.getloadavg(), **extra}, f, indent=1)


def spin(ms):
    t = time.perf_counter() + ms / 1000
    while time.perf_counter() < t:
        pass


def timm_model(name, dt):
    import timm
    return timm.create_model(name, pretrained=False).to(dev).to(dt).eval()


if mode in ("vits_fp16", "vits_bf16", "deit_bf16", "resnet_fp16", "stalls", "stretch"):
    dt = torch.bfloat16 if "bf16" in mode else torch.half
    if mode == "resnet_fp16":
        import torchvision
        model, batch = torchvision.models.resnet50().to(dev).half().eval(), 32
    elif mode == "deit_bf16":
        model, batch = timm_model("deit_small_patch16_224", dt), 64
    else:
        model, batch = timm_model("vit_small_patch16_224", dt), 16
    x = torch.randn(batch, 3, 224, 224, device=dev, dtype=dt)
    n = iters or {"stalls": 120, "stretch": 600}.get(mode, 100)
    rng = random.Random(7)
    stalled = set(rng.sample(range(10, n), 14)) if mode == "stalls" else set()
    slow = set(range(150, 270)) | set(range(400, 480)) if mode == "stretch" else set()
    with torch.no_grad():
        for i in range(n):
            kind = "stall" if i in stalled else "slow" if i in slow else "main"
            with Timed(i, kind):
                if i in stalled:
                    time.sleep(rng.uniform(0.008, 0.015))
                elif i in slow:
                    spin(3)
                model(x)
    save("pass", stalled=sorted(stalled))

elif mode.startswith("gemm_"):
    dt = {"gemm_fp16": torch.half, "gemm_bf16": torch.bfloat16, "gemm_fp32": torch.float}[mode]
    torch.backends.cuda.matmul.allow_tf32 = False
    a = torch.randn(4096, 4096, device=dev, dtype=dt) / 64
    with torch.no_grad():
        for i in range(iters or 100):
            with Timed(i):
                h = a
                for _ in range(8):
                    h = torch.relu(h @ a)
    save("pass")

elif mode == "gradaccum":
    import torchvision
    model = torchvision.models.resnet50(num_classes=100).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    x = torch.randn(32, 3, 224, 224, device=dev)
    y = torch.randint(0, 100, (32,), device=dev)
    accum = 4
    for i in range(iters or 48):
        pos = i % accum
        kind = ("first" if pos == 0 else "first_step" if i == accum - 1 else
                "step" if pos == accum - 1 else "middle")
        with Timed(i, kind):
            with torch.autocast("cuda", dtype=torch.float16):
                loss = torch.nn.functional.cross_entropy(model(x), y) / accum
            loss.backward()
            if pos == accum - 1:
                opt.step()
                opt.zero_grad(set_to_none=True)
    save("micro-batch", accum=accum)

elif mode == "eval6":
    import torchvision
    model = torchvision.models.resnet18(num_classes=100).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(32, 3, 224, 224, device=dev)
    y = torch.randint(0, 100, (32,), device=dev)
    for i in range(iters or 48):
        ev = i % 6 == 5
        with Timed(i, "eval" if ev else "main"):
            with torch.autocast("cuda", dtype=torch.float16):
                loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            if ev:
                model.eval()
                with torch.no_grad(), torch.autocast("cuda", dtype=torch.float16):
                    for _ in range(4):
                        model(x).argmax(-1)
                model.train()
    save("step", every=6)

elif mode == "hog":
    # not traced: GEMMs on the same GPU for ITERS seconds, started beside a traced run
    a = torch.randn(8192, 8192, device=dev, dtype=torch.half)
    end = time.time() + (iters or 60)
    while time.time() < end:
        for _ in range(20):
            a = (a @ a) / 90
        torch.cuda.synchronize()

else:
    sys.exit(f"unknown mode {mode}")
