"""Workloads for nsightlab's several-processes test set (issue 48), run by capture.sh on a GPU
machine (two GPUs for the ranks).

    python workloads.py infer MODEL WARM ITERS TRUTH [DEVICE]   # one inference process (no NVTX)
    python workloads.py ddp MODE WARM STEPS TRUTH_PREFIX        # under torchrun: one DDP rank
                                                                # MODE balanced|straggler|unequal|tp

Truth: one JSON line per timed pass or step, flushed as it goes: pid, rank, iter, gpu_ms (CUDA
events around the pass), wall_ms, start_ns and end_ns (time.time_ns(): the wall clock, the same
clock nsys's session start is given in). Models from configs, random weights, fp16. START_AT
(epoch seconds): inference processes started together begin their timed passes then."""
import json
import os
import sys
import time

import torch


def model(name):
    import timm
    import torchvision
    if name == "vit_s":
        return timm.create_model("vit_small_patch16_224", pretrained=False), (32, 3, 224, 224)
    if name == "resnet18":
        return torchvision.models.resnet18(), (32, 3, 224, 224)
    if name == "resnet50":
        return torchvision.models.resnet50(), (32, 3, 224, 224)
    raise SystemExit(f"unknown model {name}")


def line(f, **kw):
    f.write(json.dumps(kw) + "\n")
    f.flush()


def infer(name, warm, iters, truth, device="0"):
    torch.cuda.set_device(int(device))
    m, shape = model(name)
    m = m.cuda().half().eval()
    x = torch.randn(*shape, device="cuda", dtype=torch.half)
    start_at = float(os.environ.get("START_AT", 0))  # processes started together: wait until
    if start_at > time.time():                      # all have built their models, before any
        time.sleep(start_at - time.time())          # GPU work (no pause inside the loop)
    with torch.inference_mode(), open(truth, "w") as f:
        for _ in range(warm):
            m(x)
        torch.cuda.synchronize()
        for i in range(iters):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            t, s = time.perf_counter(), time.time_ns()
            a.record()
            m(x)
            b.record()
            b.synchronize()
            line(f, pid=os.getpid(), model=name, iter=i, gpu_ms=a.elapsed_time(b),
                 wall_ms=(time.perf_counter() - t) * 1e3, start_ns=s, end_ns=time.time_ns())


def ddp(mode, warm, steps, prefix):
    import torch.distributed as dist
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(rank)
    truth = open(f"{prefix}.rank{rank}.jsonl", "w")
    if mode == "tp":  # tensor-parallel style: a sharded matmul and an all-reduce in each layer
        h = 4096
        w = [torch.randn(h, h // 2, device="cuda", dtype=torch.half) / 64 for _ in range(8)]
        wo = [torch.randn(h // 2, h, device="cuda", dtype=torch.half) / 64 for _ in range(8)]
        x0 = torch.randn(64, h, device="cuda", dtype=torch.half)

        def step():
            x = x0
            for a, b in zip(w, wo):
                y = torch.relu(x @ a) @ b
                dist.all_reduce(y)
                x = y
    else:
        from torch.nn.parallel import DistributedDataParallel as DDP
        import torchvision
        net = torchvision.models.resnet50().cuda().half()
        net = DDP(net, device_ids=[rank])
        opt = torch.optim.SGD(net.parameters(), lr=1e-3)
        batch = 64 if mode == "unequal" and rank == 1 else 32
        x = torch.randn(batch, 3, 224, 224, device="cuda", dtype=torch.half)
        y = torch.randint(0, 1000, (batch,), device="cuda")
        crit = torch.nn.CrossEntropyLoss()

        def step():
            loss = crit(net(x).float(), y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
    for i in range(warm + steps):
        host_ms = 0.0
        if mode == "straggler" and rank == 1:  # a slow loader: 25 ms of host work per step
            t = time.perf_counter()
            while time.perf_counter() - t < 0.025:
                pass
            host_ms = 25.0
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t, s = time.perf_counter(), time.time_ns()
        torch.cuda.nvtx.range_push(f"step{i}")
        a.record()
        step()
        b.record()
        b.synchronize()
        torch.cuda.nvtx.range_pop()
        if i >= warm:
            line(truth, pid=os.getpid(), rank=rank, mode=mode, iter=i - warm,
                 gpu_ms=a.elapsed_time(b), wall_ms=(time.perf_counter() - t) * 1e3,
                 host_work_ms=host_ms, start_ns=s, end_ns=time.time_ns())
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    what = sys.argv[1]
    if what == "infer":
        infer(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], *(sys.argv[6:7]))
    elif what == "ddp":
        ddp(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
