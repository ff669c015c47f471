"""Pairs whose work differs only in shapes, or in copies, and A/A pairs (issue 61), run under
plain ``nsys profile`` on a GPU:

    python workloads.py MODE TRUTH.json [ARG]

The truth comes from the workload, never from nsightlab: CUDA events around each iteration
with the host clock beside them (``host_start_ns``, ``host_end_ns``, ``gpu_ms``) and what the
workload knows it ran (batch, input size, the bytes each copy moves). Every iteration ends
with a synchronize. Modes:

  vits    ViT-S/16 fp16 inference, batch ARG (default 32), 40 passes in NVTX ranges iterN:
          batch 32 against 48 runs the same kernel names on 1.5x the rows (grids 1.5x larger
          for the norms and elementwise kernels; cuBLAS may pick other GEMM variants)
  conv    ResNet-18 fp16 inference, batch 16, input ARG x ARG (default 224), 40 passes, no
          NVTX: each pass copies its input in from pageable host memory and its output out
          to pageable host memory (the way a plain ONNX Runtime session.run does): 224 against
          448 moves 4x the input bytes on 4x larger grids, the same kernel names
  bound   the same model at 224, its input already on the GPU and its output left there (the
          way io_binding runs): the pageable copies of ``conv 224`` removed, the same kernels
  ddp     (under torchrun, 2 ranks) ResNet-18 DDP training, fp16 autocast, SGD, 20 steps in
          NVTX ranges stepN, batch ARG (default 64) on both ranks
"""
import json
import sys
import time

import torch

mode, truth_path = sys.argv[1], sys.argv[2]
arg = sys.argv[3] if len(sys.argv) > 3 else None
dev = torch.device("cuda")
torch.manual_seed(0)
windows = []


def write(extra: dict) -> None:
    out = {"mode": mode, "arg": arg, "windows": [
        {"i": i, "kind": "main", "host_start_ns": h0, "host_end_ns": h1,
         "gpu_ms": a.elapsed_time(b)} for i, (h0, h1, a, b) in enumerate(windows)], **extra}
    with open(truth_path, "w") as f:
        json.dump(out, f, indent=1)


def timed(fn, nvtx: str | None = None):
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    if nvtx:
        torch.cuda.nvtx.range_push(nvtx)
    h0 = time.perf_counter_ns()
    a.record()
    out = fn()
    b.record()
    torch.cuda.synchronize()
    windows.append((h0, time.perf_counter_ns(), a, b))
    if nvtx:
        torch.cuda.nvtx.range_pop()
    return out


if mode == "vits":
    import timm
    batch = int(arg or 32)
    m = timm.create_model("vit_small_patch16_224", pretrained=False).to(dev).half().eval()
    x = torch.randn(batch, 3, 224, 224, device=dev).half()
    with torch.inference_mode():
        for i in range(40):
            timed(lambda: m(x), f"iter{i}")
    write({"batch": batch})
    sys.exit(0)

if mode in ("conv", "bound"):
    import torchvision
    size = int(arg or 224) if mode == "conv" else 224
    m = torchvision.models.resnet18().to(dev).half().eval()
    host_in = torch.randn(16, 3, size, size).half()  # pageable
    on_dev = host_in.to(dev)

    def run():
        if mode == "bound":
            return m(on_dev)
        return m(host_in.to(dev)).cpu()  # H2D from pageable, D2H to pageable

    with torch.inference_mode():
        for i in range(40):
            timed(run)
    write({"batch": 16, "size": size,
           "h2d_bytes": 0 if mode == "bound" else host_in.numel() * 2,
           "d2h_bytes": 0 if mode == "bound" else 16 * 1000 * 2})
    sys.exit(0)

if mode == "ddp":
    import torch.distributed as dist
    import torchvision
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(rank)
    dev = torch.device("cuda", rank)
    batch = int(arg or 64)
    model = torch.nn.parallel.DistributedDataParallel(
        torchvision.models.resnet18().to(dev).to(memory_format=torch.channels_last),
        device_ids=[rank])
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(batch, 3, 224, 224, device=dev).to(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (batch,), device=dev)

    def step():
        with torch.autocast("cuda", dtype=torch.float16):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for i in range(20):
        timed(step, f"step{i}")
    truth_path = truth_path.replace(".truth.json", f".rank{rank}.truth.json")
    write({"rank": rank, "batch": batch})
    dist.destroy_process_group()
    sys.exit(0)

raise SystemExit(f"unknown mode {mode}")
