"""Kernel-level cases for Nsight Compute captures on an H200, with truth from CUDA events.

python kernel_cases.py CASE [OUT_JSON]
CASE: gemm_fp16 gemm_fp8 (8192^3, compute-bound) | m16_fp16 m16_fp8 (M=16, N=K=8192, memory-bound)
      | wo_fp8 (weight-only fp8: cast + scale at every call, then the fp16 GEMM, M=16)
      | gather (x[::16] of fp16: 2 of every 32 bytes used) | scan (cumsum of 2048 values: small grid)
      | vits (ViT-S/16 fp16, batch 32, 30 iterations, NVTX iter<i> per iteration)
The profiled call is inside NVTX range CASE (ncu --nvtx --nvtx-include CASE/); the timed calls
(CUDA events, 50 of them after 5 warm-ups) are outside it. Truth goes to OUT_JSON.
"""
import json
import sys

import torch

case = sys.argv[1]
out = sys.argv[2] if len(sys.argv) > 2 else None
nvtx = torch.cuda.nvtx
torch.manual_seed(0)
dev = "cuda"
E4M3 = torch.float8_e4m3fn


def fp8(t):
    s = (t.abs().max().float() / 448.0).clamp(min=1e-12)
    return (t.float() / s).to(E4M3), s


def gemm(m, n, k, precision):
    a = torch.randn(m, k, device=dev, dtype=torch.float16)
    w = torch.randn(n, k, device=dev, dtype=torch.float16)
    if precision == "fp16":
        return lambda: a @ w.t(), 2 * m * n * k
    a8, sa = fp8(a)
    w8, sw = fp8(w)
    b = w8.t()  # column-major, as _scaled_mm wants
    return (lambda: torch._scaled_mm(a8, b, scale_a=sa, scale_b=sw, out_dtype=torch.float16),
            2 * m * n * k)


def weight_only(m=16, n=8192, k=8192):
    a = torch.randn(m, k, device=dev, dtype=torch.float16)
    w8, sw = fp8(torch.randn(n, k, device=dev, dtype=torch.float16))
    sw = sw.half()

    def call():
        w16 = w8.to(torch.float16) * sw  # the cast and the scale, every call
        return a @ w16.t()
    return call, 2 * m * n * k


def gather():
    x = torch.randn(1 << 28, device=dev, dtype=torch.float16)
    return (lambda: x[::16].contiguous()), 0


def scan():
    x = torch.randn(2048, device=dev)
    return (lambda: torch.cumsum(x, 0)), 0


def vits(iters=30, batch=32):
    import timm
    model = timm.create_model("vit_small_patch16_224", pretrained=False).to(dev).eval().half()
    x = torch.randn(batch, 3, 224, 224, device=dev, dtype=torch.float16)
    times = []
    with torch.inference_mode():
        for i in range(iters):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            with nvtx.range(f"iter{i}"):
                s.record()
                model(x)
                e.record()
            torch.cuda.synchronize()
            times.append(s.elapsed_time(e))
    return {"case": case, "iterations": iters, "batch": batch, "iter_ms": times}


CASES = {"gemm_fp16": lambda: gemm(8192, 8192, 8192, "fp16"),
         "gemm_fp8": lambda: gemm(8192, 8192, 8192, "fp8"),
         "m16_fp16": lambda: gemm(16, 8192, 8192, "fp16"),
         "m16_fp8": lambda: gemm(16, 8192, 8192, "fp8"),
         "wo_fp8": weight_only, "gather": gather, "scan": scan}

if case == "vits":
    truth = vits()
else:
    call, flops = CASES[case]()
    for _ in range(5):
        call()
    torch.cuda.synchronize()
    with nvtx.range(case):
        call()
    torch.cuda.synchronize()
    ms = []
    for _ in range(50):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        call()
        e.record()
        torch.cuda.synchronize()
        ms.append(s.elapsed_time(e))
    ms.sort()
    truth = {"case": case, "flops": flops, "call_ms_median": ms[len(ms) // 2],
             "call_ms_min": ms[0], "call_ms": ms}
print(json.dumps({k: v for k, v in truth.items() if k not in ("call_ms", "iter_ms")}))
if out:
    with open(out, "w") as f:
        json.dump(truth, f)
