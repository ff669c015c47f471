"""Workloads for nsightlab's several-processes test set (issue 48), run by capture.sh on a GPU
machine (two GPUs for the ranks).

    python workloads.py infer MODEL WARM ITERS TRUTH [DEVICE]   # one inference process (no NVTX)
    python workloads.py ddp MODE WARM STEPS TRUTH_PREFIX        # under torchrun: one DDP rank
                                                                # MODE balanced|straggler|unequal|tp
                                                                # |tpdp (4 ranks: TP pairs 0-1,
                                                                # 2-3; DP pairs 0-2, 1-3; rank 3
                                                                # does 10 ms of host work a step)
    python workloads.py shared MODEL[:BATCH][@graph],... WARM ROUNDS SOLO TOGETHER TRUTH_PREFIX
        # processes sharing GPU 0 (spawned here, one per model), in rounds: each runs SOLO
        # passes alone while the others wait, then all run passes together until each has run
        # TOGETHER; the solo truth is in the same trace, interleaved with the shared passes.
        # @graph: the model's forward captured once as a CUDA graph after the warm-up, each
        # pass one replay. PROFILE_RANGE=1: each process calls cudaProfilerStart after the
        # warm-up (for nsys --capture-range=cudaProfilerApi: no eager kernel in the trace)

Truth: one JSON line per timed pass or step, flushed as it goes: pid, rank, iter, gpu_ms (CUDA
events around the pass), wall_ms, start_ns and end_ns (time.time_ns(): the wall clock, the same
clock nsys's session start is given in). Models from configs, random weights, fp16. START_AT
(epoch seconds): inference processes started together begin their timed passes then."""
import json
import os
import sys
import time

import torch


def model(name, batch=32):
    import timm
    import torchvision
    if name == "vit_s":
        return timm.create_model("vit_small_patch16_224", pretrained=False), (batch, 3, 224, 224)
    if name == "resnet18":
        return torchvision.models.resnet18(), (batch, 3, 224, 224)
    if name == "resnet50":
        return torchvision.models.resnet50(), (batch, 3, 224, 224)
    raise SystemExit(f"unknown model {name}")


def line(f, **kw):
    f.write(json.dumps(kw) + "\n")
    f.flush()


def timed_pass(f, m, x, **kw):
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t, s = time.perf_counter(), time.time_ns()
    a.record()
    m(x) if x is not None else m()
    b.record()
    b.synchronize()
    line(f, pid=os.getpid(), gpu_ms=a.elapsed_time(b), wall_ms=(time.perf_counter() - t) * 1e3,
         start_ns=s, end_ns=time.time_ns(), **kw)


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
            timed_pass(f, m, x, model=name, iter=i)


def member(i, spec, bar, done, warm, rounds, solo, together, truth):
    """One process of ``shared``: waits at the barrier while another runs alone."""
    spec_, _, how = spec.partition("@")
    name, _, batch = spec_.partition(":")
    torch.cuda.set_device(0)
    m, shape = model(name, int(batch or 32))
    m = m.cuda().half().eval()
    x = torch.randn(*shape, device="cuda", dtype=torch.half)
    n = len(done)
    with torch.inference_mode(), open(truth, "w") as f:
        bar.wait()
        for j in range(n):  # warm-up, each alone in turn
            if j == i:
                side = torch.cuda.Stream()
                side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(side):  # as torch.cuda.graph asks: warm up on a side
                    for _ in range(warm):      # stream before capturing
                        m(x)
                torch.cuda.current_stream().wait_stream(side)
                if how == "graph":
                    g = torch.cuda.CUDAGraph()
                    with torch.cuda.graph(g):
                        m(x)
                    m, x = g.replay, None
                torch.cuda.synchronize()
            bar.wait()
        if os.environ.get("PROFILE_RANGE") == "1":
            torch.cuda.profiler.start()
        k = 0
        for r in range(rounds):
            for j in range(n):
                if j == i:
                    for _ in range(solo):
                        timed_pass(f, m, x, model=spec, phase="solo", round=r, iter=k)
                        k += 1
                bar.wait()
            # together: until every process has run TOGETHER passes this round (the faster keep
            # going, so the slower never run alone); a process's last pass may end after a
            # peer stopped: marked "last"
            goal = (r + 1) * together
            while True:
                with done.get_lock():
                    if min(done[:]) >= goal:
                        break
                timed_pass(f, m, x, model=spec, phase="together", round=r, iter=k)
                k += 1
                with done.get_lock():
                    done[i] += 1
            f.write(json.dumps({"pid": os.getpid(), "round": r, "phase_end": "together",
                                "end_ns": time.time_ns()}) + "\n")
            bar.wait()


def shared(specs, warm, rounds, solo, together, prefix):
    import multiprocessing as mp
    ctx = mp.get_context("spawn")
    specs = specs.split(",")
    bar, done = ctx.Barrier(len(specs)), ctx.Array("i", len(specs))
    ps = [ctx.Process(target=member, args=(i, s, bar, done, warm, rounds, solo, together,
                                           f"{prefix}-{i}-{s.replace(':', '-b')}.jsonl"))
          for i, s in enumerate(specs)]
    for p in ps:
        p.start()
    for p in ps:
        p.join()
    sys.exit(max(p.exitcode for p in ps))


def ddp(mode, warm, steps, prefix):
    import torch.distributed as dist
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(rank)
    truth = open(f"{prefix}.rank{rank}.jsonl", "w")
    if mode == "tpdp":  # two communicators per rank: its TP pair and its DP pair
        pairs = {"tp": [[0, 1], [2, 3]], "dp": [[0, 2], [1, 3]]}
        groups = {k: [dist.new_group(p) for p in v] for k, v in pairs.items()}  # every rank
        tp = next(g for g, p in zip(groups["tp"], pairs["tp"]) if rank in p)  # makes every
        dp = next(g for g, p in zip(groups["dp"], pairs["dp"]) if rank in p)  # group
        h = 4096
        w = [torch.randn(h, h // 2, device="cuda", dtype=torch.half) / 64 for _ in range(4)]
        wo = [torch.randn(h // 2, h, device="cuda", dtype=torch.half) / 64 for _ in range(4)]
        x0 = torch.randn(256, h, device="cuda", dtype=torch.half)
        grad = torch.randn(16 << 20, device="cuda", dtype=torch.half)

        def step():
            x = x0
            for a, b in zip(w, wo):
                y = torch.relu(x @ a) @ b
                dist.all_reduce(y, group=tp)
                x = y
            dist.all_reduce(grad, group=dp)
    elif mode == "tp":  # tensor-parallel style: a sharded matmul and an all-reduce in each layer
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
        if (mode == "straggler" and rank == 1) or (mode == "tpdp" and rank == 3):
            host_ms = 25.0 if mode == "straggler" else 10.0  # a slow loader: host work
            t = time.perf_counter()
            while time.perf_counter() - t < host_ms / 1e3:
                pass
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
    elif what == "shared":
        shared(sys.argv[2], *map(int, sys.argv[3:7]), sys.argv[7])
