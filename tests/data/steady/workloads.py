"""Loops as people write them, without NVTX iteration ranges, for iteration finding and the
steady state (run under plain ``nsys profile`` on a GPU).

    python workloads.py MODE TRUTH.json

Ground truth comes from the workload, never from nsightlab: a CUDA event is recorded before and
after every timed call (an iteration: a step, a token, a request, a pass), and TRUTH.json holds
each one's start/end on the host clock (``time.perf_counter_ns`` right after the event, for
lining the windows up with the trace) and its GPU time (``Event.elapsed_time``). Modes:

  decode        GPT-2-shaped decoder (4 layers, random init), batch 1: 3 greedy "generate" calls
                of 24 tokens with a KV cache; argmax read back each token (.item(): a sync)
  train         ResNet-18 fp16 autocast training steps, batch 16, loss.item() each step
  graph         a small MLP captured as one CUDA graph and replayed 30 times
  serve         pageable H2D of a batch, ResNet-18 batch 32, D2H of the logits, per request
  infer_sync    ViT-S/16 fp16 batch 16, torch.cuda.synchronize() after every pass
  infer_async   the same with no sync inside the loop (one at the end)
  compile       a torch.compile'd MLP: compilation inside the first calls
  autotune      cudnn.benchmark convolutions: autotuning in the first passes
  killed        the infer_sync loop, SIGKILLed by itself in its 14th pass
  nvtx_warmup   NVTX ``iterN`` ranges around a D2H-heavy loop whose first iterations are slow
                (cuBLAS initialisation, allocation): ranges exist, the mean misleads
  vit_b32       infer_sync at batch 32 (a batch pair for diff)
  mlp_fp16      a 6-layer MLP (4096 wide, 1024 tokens) in fp16, synchronized per pass
  mlp_int8      the same with per-tensor dynamic int8 activations and int8 weights through
                torch._int_mm (int32 out), dequantized to fp16: a precision pair for diff
  long_async    infer_async for ~12 s, synchronized every 20 passes (for delayed and
                time-limited captures: work in flight at the capture's edges)
  long_range    the same, cudaProfilerStart/Stop around 2 s of it (no sync at either)
"""
import json
import os
import signal
import sys
import time

import torch

mode, truth_path = sys.argv[1], sys.argv[2]
dev = torch.device("cuda")
torch.manual_seed(0)
windows = []


class Timed:
    """One iteration: CUDA events around it, host times beside them."""

    def __enter__(self):
        self.a, self.b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        self.t0 = time.perf_counter_ns()
        self.a.record()
        return self

    def __exit__(self, *exc):
        self.b.record()
        windows.append((self, time.perf_counter_ns()))


def save(level: str, **extra) -> None:
    torch.cuda.synchronize()
    rows = [{"host_start_ns": t.t0, "host_end_ns": end, "gpu_ms": t.a.elapsed_time(t.b)}
            for t, end in windows]
    with open(truth_path, "w") as f:
        json.dump({"mode": mode, "level": level, "iterations": len(rows), "windows": rows,
                   "clock": "perf_counter_ns", **extra}, f, indent=1)


def vit(batch):
    import timm
    m = timm.create_model("vit_small_patch16_224", pretrained=False).to(dev).half().eval()
    return m, torch.randn(batch, 3, 224, 224, device=dev, dtype=torch.half)


if mode == "decode":
    from transformers import GPT2Config, GPT2LMHeadModel
    cfg = GPT2Config(n_layer=4, n_embd=768, n_head=12, vocab_size=50257)
    model = GPT2LMHeadModel(cfg).to(dev).half().eval()
    with torch.no_grad():
        for call in range(3):
            ids = torch.randint(0, 50257, (1, 16), device=dev)
            past, nxt = None, ids
            for tok in range(24):
                with Timed():
                    out = model(input_ids=nxt, past_key_values=past, use_cache=True)
                    past = out.past_key_values
                    nxt = out.logits[:, -1:].argmax(-1)
                    int(nxt.item())  # the sampler reads the token back: a sync
            time.sleep(0.02)  # between generate() calls: the host builds the next prompt
    save("token", calls=3, tokens_per_call=24)

elif mode == "train":
    import torchvision
    model = torchvision.models.resnet18(num_classes=100).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    scaler = torch.amp.GradScaler()
    x = torch.randn(16, 3, 224, 224, device=dev)
    y = torch.randint(0, 100, (16,), device=dev)
    for step in range(14):
        with Timed():
            with torch.autocast("cuda", dtype=torch.float16):
                loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            float(loss.item())
    save("step")

elif mode == "graph":
    model = torch.nn.Sequential(*[torch.nn.Linear(1024, 1024) for _ in range(8)]).to(dev).half()
    x = torch.randn(256, 1024, device=dev, dtype=torch.half)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s), torch.no_grad():
        for _ in range(3):
            model(x)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g), torch.no_grad():
        y = model(x)
    torch.cuda.synchronize()
    for _ in range(30):
        with Timed():
            g.replay()
        torch.cuda.synchronize()
    save("replay")

elif mode == "serve":
    import torchvision
    model = torchvision.models.resnet18().to(dev).half().eval()
    host = torch.randn(32, 3, 224, 224).half()  # pageable
    with torch.no_grad():
        for req in range(16):
            with Timed():
                xb = host.to(dev)
                logits = model(xb).float().cpu()  # D2H: a sync
    save("request")

elif mode in ("infer_sync", "infer_async", "killed", "vit_b32"):
    model, x = vit(32 if mode == "vit_b32" else 16)
    with torch.no_grad():
        for i in range(24):
            if mode == "killed" and i == 13:
                model(x)
                os.kill(os.getpid(), signal.SIGKILL)
            with Timed():
                model(x)
                if mode != "infer_async":
                    torch.cuda.synchronize()
    save("pass")

elif mode == "compile":
    model = torch.nn.Sequential(torch.nn.Linear(2048, 4096), torch.nn.GELU(),
                                torch.nn.Linear(4096, 2048)).to(dev).half()
    f = torch.compile(model)
    x = torch.randn(512, 2048, device=dev, dtype=torch.half)
    with torch.no_grad():
        for i in range(20):
            with Timed():
                f(x)
                torch.cuda.synchronize()
    save("call")

elif mode == "autotune":
    torch.backends.cudnn.benchmark = True
    import torchvision
    model = torchvision.models.resnet18().to(dev).half().eval().to(memory_format=torch.channels_last)
    with torch.no_grad():
        for i in range(20):
            bs = 8 if i < 4 else 16  # a new shape after warm-up: autotuned again
            xb = torch.randn(bs, 3, 224, 224, device=dev, dtype=torch.half).to(
                memory_format=torch.channels_last)
            with Timed():
                model(xb)
                torch.cuda.synchronize()
    save("pass")

elif mode == "nvtx_warmup":
    a = torch.randn(4096, 4096, device=dev, dtype=torch.half)
    host = torch.empty(32 << 20, dtype=torch.uint8, pin_memory=True)
    for it in range(16):
        torch.cuda.nvtx.range_push(f"iter{it}")
        with Timed():
            c = a @ a
            host.copy_(c.view(torch.uint8).flatten(), non_blocking=True)
            torch.cuda.synchronize()
        torch.cuda.nvtx.range_pop()
    save("iteration")

elif mode in ("mlp_fp16", "mlp_int8"):
    ws = [torch.randn(4096, 4096, device=dev, dtype=torch.half) * 0.02 for _ in range(6)]
    x0 = torch.randn(1024, 4096, device=dev, dtype=torch.half)
    if mode == "mlp_int8":  # weights quantized once, per tensor
        wq = [(w / (w.abs().max() / 127)).round().clamp(-127, 127).to(torch.int8).t().contiguous().t()
              for w in ws]
        wscale = [w.abs().max() / 127 for w in ws]

    def layer(x, i):
        if mode == "mlp_fp16":
            return torch.relu(x @ ws[i])
        s_x = x.abs().amax() / 127  # dynamic per-tensor activation scale
        xq = (x / s_x).round().clamp(-127, 127).to(torch.int8)
        acc = torch._int_mm(xq, wq[i])
        return torch.relu((acc.float() * (s_x * wscale[i])).half())

    with torch.no_grad():
        for _ in range(20):
            with Timed():
                x = x0
                for i in range(6):
                    x = layer(x, i)
                torch.cuda.synchronize()
    save("pass")

elif mode in ("long_async", "long_range"):
    # ViT-S/16 fp16 batch 16 for ~12 s, synchronized every 20 passes: hundreds of kernels are
    # queued at any moment, so a delayed or time-limited capture opens and closes on work in
    # flight; long_range brackets 2 s of it with cudaProfilerStart/Stop (no sync at either)
    model, x = vit(16)
    t_end, started, stopped = time.perf_counter() + 12, False, False
    t_range = time.perf_counter() + 3
    with torch.no_grad():
        i = 0
        while time.perf_counter() < t_end:
            if mode == "long_range" and not started and time.perf_counter() > t_range:
                torch.cuda.profiler.start()
                started = True
            if mode == "long_range" and started and not stopped and time.perf_counter() > t_range + 2:
                torch.cuda.profiler.stop()
                stopped = True
            with Timed():
                model(x)
            i += 1
            if i % 20 == 0:
                torch.cuda.synchronize()
    save("pass")

else:
    sys.exit(f"unknown mode {mode}")
