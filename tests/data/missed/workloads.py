"""Workloads for the classes nsightlab still missed (issue 57), run under plain ``nsys profile``:

    python workloads.py MODE TRUTH.json [ARG]

The truth comes from the workload, never from nsightlab: CUDA events around each iteration (or
decode step) with the host clock beside them, and what the workload knows it ran. Modes:

  dies        ViT-S fp16: weights copied in, one forward pass with NVTX block0..block11, then
              an exception (the run ends before its loop): truth iterations 0, passes 1 (the
              committed capture was made before the pre-hook returned None: it ended in block0)
  dies_bare   the same, no NVTX
  tiny        2 kernels and a 4-byte copy, then exit (no loop at all)
  replay      a small MLP captured as one CUDA graph and replayed ARG times (default 10) inside
              NVTX ranges replay0, replay1, ... (traced at graph level by default)
  req         ViT-S fp16 eager, ARG requests (default 40) inside NVTX ranges req0, req1, ...,
              with host work between them
  eager_mlp   the MLP of ``replay`` run eagerly, ARG iterations inside iterN (the pair of a
              graph-level trace: the same math kernel by kernel)
  decode      a Llama of 8 layers (random weights, fp16), greedy generate() of 32 new tokens,
              ARG calls (default 3), no NVTX: truth is each decode step (CUDA events in a
              stopping criterion, called once per generated token) and each call
  ddp         (under torchrun, 2 ranks) ResNet-50 DDP training, fp16 autocast, SGD, 40 steps;
              rank r's batch is ARG's r-th entry ("128,256": rank 1 has twice the work):
              truth per rank: each step's events
"""
import json
import os
import sys
import time

import torch

mode, truth_path = sys.argv[1], sys.argv[2]
arg = sys.argv[3] if len(sys.argv) > 3 else None
dev = torch.device("cuda")
torch.manual_seed(0)
windows = []


def write(extra: dict) -> None:
    out = {"mode": mode, "windows": [
        {"i": i, "kind": k, "host_start_ns": h0, "host_end_ns": h1, "gpu_ms": a.elapsed_time(b)}
        for i, (k, h0, h1, a, b) in enumerate(windows)], **extra}
    with open(truth_path, "w") as f:
        json.dump(out, f, indent=1)


def timed(kind: str, fn, nvtx: str | None = None):
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    if nvtx:
        torch.cuda.nvtx.range_push(nvtx)
    h0 = time.perf_counter_ns()
    a.record()
    out = fn()
    b.record()
    torch.cuda.synchronize()
    windows.append((kind, h0, time.perf_counter_ns(), a, b))
    if nvtx:
        torch.cuda.nvtx.range_pop()
    return out


def vit_s():
    import timm
    return timm.create_model("vit_small_patch16_224", pretrained=False).to(dev).half().eval()


if mode in ("dies", "dies_bare"):
    m = vit_s()
    x = torch.randn(16, 3, 224, 224).to(dev).half()
    if mode == "dies":
        def push(i):  # a hook that returns something replaces the block's input or output
            def hook(mod, inp):
                torch.cuda.nvtx.range_push(f"block{i}")
            return hook

        def pop(mod, inp, out):
            torch.cuda.nvtx.range_pop()

        for i, blk in enumerate(m.blocks):
            blk.register_forward_pre_hook(push(i))
            blk.register_forward_hook(pop)
    with torch.no_grad():
        timed("pass", lambda: m(x))
    write({"iterations": 0, "passes": 1, "ended": "exception after the first pass"})
    raise RuntimeError("the run ends before its loop (workload: dies)")

if mode == "tiny":
    a = torch.ones(1, device=dev)
    b = (a + 1).sum()
    v = b.item()  # 4-byte copy to the host
    write({"iterations": 0, "value": v})  # kernels: the fill, the add, the sum
    sys.exit(0)


def mlp():
    return torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.GELU())
                                 for _ in range(8)]).to(dev).half().eval()


if mode == "replay":
    n = int(arg or 10)
    m, x = mlp(), torch.randn(256, 1024, device=dev).half()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s), torch.no_grad():
        for _ in range(3):
            m(x)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g), torch.no_grad():
        y = m(x)
    for i in range(n):
        timed("replay", g.replay, f"replay{i}")
    write({"iterations": n, "unit": "replay", "kernels_per_replay": 16})
    sys.exit(0)

if mode == "eager_mlp":
    n = int(arg or 10)
    m, x = mlp(), torch.randn(256, 1024, device=dev).half()
    with torch.no_grad():
        for _ in range(3):
            m(x)
        for i in range(n):
            timed("main", lambda: m(x), f"iter{i}")
    write({"iterations": n})
    sys.exit(0)

if mode == "req":
    n = int(arg or 40)
    m = vit_s()
    x = torch.randn(8, 3, 224, 224).to(dev).half()
    with torch.no_grad():
        for i in range(n):
            t = time.perf_counter()
            while time.perf_counter() - t < 0.002:  # the server's own host work between requests
                pass
            timed("request", lambda: m(x), f"req{i}")
    write({"iterations": n, "unit": "request"})
    sys.exit(0)

if mode == "decode":
    from transformers import LlamaConfig, LlamaForCausalLM, StoppingCriteria, StoppingCriteriaList
    calls = int(arg or 3)
    cfg = LlamaConfig(vocab_size=32000, hidden_size=1024, intermediate_size=2816,
                      num_hidden_layers=8, num_attention_heads=16, num_key_value_heads=16)
    model = LlamaForCausalLM(cfg).to(dev).half().eval()
    steps = []

    class Mark(StoppingCriteria):
        """Called once per generated token: an event at each, the host clock beside it."""
        def __call__(self, input_ids, scores, **kw):
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            steps.append((e, time.perf_counter_ns(), int(input_ids.shape[1])))
            return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)

    ids = torch.randint(0, 32000, (1, 64), device=dev)
    calls_out = []
    with torch.no_grad():
        for c in range(calls):
            start = torch.cuda.Event(enable_timing=True)
            start.record()
            h0 = time.perf_counter_ns()
            steps.append((start, h0, -1))
            model.generate(ids, max_new_tokens=32, min_new_tokens=32, do_sample=False,
                           stopping_criteria=StoppingCriteriaList([Mark()]), pad_token_id=0)
            torch.cuda.synchronize()
            calls_out.append({"call": c, "host_start_ns": h0, "host_end_ns": time.perf_counter_ns()})
    torch.cuda.synchronize()
    marks = []
    for (e0, h0, n0), (e1, h1, n1) in zip(steps, steps[1:]):
        if n1 < 0:
            continue
        marks.append({"kind": "prefill" if n0 < 0 else "decode", "gpu_ms": e0.elapsed_time(e1),
                      "host_start_ns": h0, "host_end_ns": h1, "tokens": n1})
    with open(truth_path, "w") as f:
        json.dump({"mode": mode, "calls": calls_out, "steps": marks,
                   "decode_steps": sum(m["kind"] == "decode" for m in marks),
                   "layers": 8}, f, indent=1)
    sys.exit(0)

if mode == "ddp":
    import torch.distributed as dist
    import torchvision
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(rank)
    dev = torch.device("cuda", rank)
    batch = int((arg or "128,128").split(",")[rank])
    model = torch.nn.parallel.DistributedDataParallel(
        torchvision.models.resnet50().to(dev).to(memory_format=torch.channels_last), device_ids=[rank])
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(batch, 3, 224, 224, device=dev).to(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (batch,), device=dev)

    def step():
        with torch.autocast("cuda", dtype=torch.float16):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for i in range(40):
        timed("step", step, f"step{i}")
    truth_path = truth_path.replace(".truth.json", f".rank{rank}.truth.json")
    write({"rank": rank, "batch": batch})
    dist.destroy_process_group()
    sys.exit(0)

raise SystemExit(f"unknown mode {mode}")
