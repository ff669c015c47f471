"""Loops whose iterations are not all alike, for kinds of iteration, trends, outliers and the
right level (issue 45), run under plain ``nsys profile`` on a GPU:

    python workloads.py MODE TRUTH.json

A mode with ``NO_NVTX=1`` in the environment runs without its NVTX ranges (``capture.sh``
names it MODE-bare). The truth comes from the workload, never from nsightlab: a CUDA event pair around every
iteration (host clock beside each: ``time.perf_counter_ns``), its GPU time
(``Event.elapsed_time``) and, where iterations differ on purpose, which kind each one is
(``kind``). Modes (NVTX ``iterN`` ranges unless said):

  periodic_d2h  ResNet-50 fp16 batch 32, 44 passes; every 4th also copies a 256 MiB
                activation to pageable host memory (a periodic log): two kinds, every 4th
  periodic_bare the same with no NVTX ranges, every 5th pass copying 64 MiB (the finder must
                see through the extra copy)
  phase         ViT-S/16 fp16 batch 16, synchronized, 44 passes; from pass 24 the host also
                does 4 ms of Python work before each pass: the loop changes speed (a phase)
  drift         ViT-S/16 fp16 batch 16 after 0.1 ms more Python work each pass (0 to 4.3 ms),
                44 passes: each a little slower than the last (a trend, no kinds)
  drift_copy    a pinned H2D copy growing by 2 MiB a pass (8 to 94 MiB) before a fixed GEMM
                chain: the copies grow, the kernels stay (a trend)
  alternating   ResNet-50 fp16, batch 16 and 128 alternating, 44 passes: two kinds, every 2nd
  alternating_vit  ViT-S/16 fp16, batch 8 and 48 alternating: the GPU waits for launches,
                so both take ~5 ms: two shapes, one kind
  hiccup        ViT-S/16 fp16 batch 16, 44 passes, two of them (17, 31) with a 30 ms host
                stall (a GC pause): the only case where "outlier" is right
  eval_every    ResNet-18 fp16-autocast training steps, batch 32, 44 steps; every 5th also
                evaluates a batch of 128 (more kernels): two kinds, every 5th
  checkpoint    the same, every 8th step saving a checkpoint (weights copied to the host and
                serialized: copies and host work)
  deit_fp16, deit_bf16
                DeiT-S batch 64 in fp16 / bf16, 44 passes: the same kernels, a pair for diff
                whose true medians are close (trimming must not bias the ratio)
  hf_s32, hf_s64, hf_l32, hf_l64
                Hugging Face ``generate`` (greedy, no NVTX), GPT-2 shaped with 4 (s) or
                12 (l) layers, random init, 4 calls of 32 or 64 new tokens from a 32-token
                prompt; truth per forward (a token; the first of each call is the prefill)
"""
import json
import os
import sys
import time

import torch

mode, truth_path = sys.argv[1], sys.argv[2]
dev = torch.device("cuda")
torch.manual_seed(0)
windows = []


class Timed:
    """One iteration: CUDA events around it, host times beside them, an NVTX range when
    ``nvtx``; ``kind`` is what the workload knows the iteration to be."""

    def __init__(self, i, kind="main", nvtx=True):
        self.i, self.kind, self.nvtx = i, kind, nvtx and os.environ.get("NO_NVTX") != "1"

    def __enter__(self):
        if self.nvtx:
            torch.cuda.nvtx.range_push(f"iter{self.i}")
        self.a, self.b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        self.t0 = time.perf_counter_ns()
        self.a.record()
        return self

    def __exit__(self, *exc):
        self.b.record()
        torch.cuda.synchronize()
        windows.append((self, time.perf_counter_ns()))
        if self.nvtx:
            torch.cuda.nvtx.range_pop()


def save(level, **extra):
    torch.cuda.synchronize()
    rows = [{"host_start_ns": t.t0, "host_end_ns": end, "gpu_ms": t.a.elapsed_time(t.b),
             "kind": t.kind} for t, end in windows]
    with open(truth_path, "w") as f:
        json.dump({"mode": mode, "level": level, "iterations": len(rows), "windows": rows,
                   "clock": "perf_counter_ns", **extra}, f, indent=1)


def vit():
    import timm
    return timm.create_model("vit_small_patch16_224", pretrained=False).to(dev).half().eval()


def spin(ms):
    t = time.perf_counter() + ms / 1000
    x = 0
    while time.perf_counter() < t:
        x += 1


if mode in ("periodic_d2h", "periodic_bare"):
    import torchvision
    model = torchvision.models.resnet50().to(dev).half().eval()
    x = torch.randn(32, 3, 224, 224, device=dev, dtype=torch.half)
    every, mib = (4, 256) if mode == "periodic_d2h" else (5, 64)
    act = torch.randn(mib << 19, device=dev, dtype=torch.half)  # mib MiB of fp16
    with torch.no_grad():
        for i in range(44):
            log = i % every == every - 1
            with Timed(i, "copy" if log else "main", nvtx=mode == "periodic_d2h"):
                y = model(x)
                if log:
                    act.add_(y.mean())  # the logged activation depends on this pass
                    host = act.cpu()  # pageable D2H
    save("pass", every=every, copy_mib=mib)

elif mode in ("phase", "hiccup"):
    model = vit()
    x = torch.randn(16, 3, 224, 224, device=dev, dtype=torch.half)
    with torch.no_grad():
        for i in range(44):
            slow = (mode == "phase" and i >= 24) or (mode == "hiccup" and i in (17, 31))
            with Timed(i, ("host" if mode == "phase" else "stall") if slow else "main"):
                if slow:
                    spin(4 if mode == "phase" else 30)
                model(x)
    save("pass")

elif mode in ("alternating", "alternating_vit"):
    if mode == "alternating":
        import torchvision
        model, sizes = torchvision.models.resnet50().to(dev).half().eval(), (16, 128)
    else:
        model, sizes = vit(), (8, 48)
    xs = {b: torch.randn(b, 3, 224, 224, device=dev, dtype=torch.half) for b in sizes}
    with torch.no_grad():
        for i in range(44):
            b = sizes[i % 2]
            with Timed(i, f"batch{b}"):
                model(xs[b])
    save("pass")

elif mode == "drift":
    # ViT-S/16 fp16 batch 16 after host work that grows a little every pass (a history the
    # loop walks, a cache that fills): 0 to 4.3 ms of Python before each pass
    model = vit()
    x = torch.randn(16, 3, 224, 224, device=dev, dtype=torch.half)
    with torch.no_grad():
        for i in range(44):
            with Timed(i):
                spin(0.1 * i)
                model(x)
    save("pass")

elif mode == "drift_copy":
    # a pinned host-to-device copy that grows by 2 MiB every pass (8 to 94 MiB), then a
    # fixed GEMM chain: the copies grow, the kernels stay
    host = torch.empty(8 + 2 * 44 << 20, dtype=torch.uint8).pin_memory()
    dst = torch.empty(8 + 2 * 44 << 20, dtype=torch.uint8, device=dev)
    a = torch.randn(2048, 2048, device=dev, dtype=torch.half)
    with torch.no_grad():
        for i in range(44):
            n = 8 + 2 * i << 20
            with Timed(i):
                dst[:n].copy_(host[:n], non_blocking=True)
                h = a
                for _ in range(8):
                    h = (h @ a) * 0.01
    save("pass")

elif mode in ("eval_every", "checkpoint"):
    # training steps (ResNet-18 fp16 autocast, batch 32); every 5th step also evaluates on a
    # held-out batch of 128 (more kernels), or every 8th saves a checkpoint (the weights
    # copied to the host and serialized: copies and host work)
    import io
    import torchvision
    model = torchvision.models.resnet18(num_classes=100).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(32, 3, 224, 224, device=dev)
    y = torch.randint(0, 100, (32,), device=dev)
    xe = torch.randn(128, 3, 224, 224, device=dev)
    every = 5 if mode == "eval_every" else 8
    for i in range(44):
        odd = i % every == every - 1
        with Timed(i, ("eval" if mode == "eval_every" else "checkpoint") if odd else "main"):
            with torch.autocast("cuda", dtype=torch.float16):
                loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            if odd and mode == "eval_every":
                with torch.no_grad(), torch.autocast("cuda", dtype=torch.float16):
                    model.eval()
                    model(xe).argmax(-1)
                    model.train()
            elif odd:
                torch.save(model.state_dict(), io.BytesIO())
    save("step", every=every)

elif mode in ("deit_fp16", "deit_bf16"):
    import timm
    dt = torch.half if mode == "deit_fp16" else torch.bfloat16
    model = timm.create_model("deit_small_patch16_224", pretrained=False).to(dev).to(dt).eval()
    x = torch.randn(64, 3, 224, 224, device=dev, dtype=dt)
    with torch.no_grad():
        for i in range(44):
            with Timed(i):
                model(x)
    save("pass")

elif mode.startswith("hf_"):
    from transformers import GPT2Config, GPT2LMHeadModel
    layers = 4 if mode[3] == "s" else 12
    tokens = int(mode[4:])
    model = GPT2LMHeadModel(GPT2Config(n_layer=layers, n_embd=768, n_head=12)).to(dev).half().eval()
    state = {}

    def before(mod, args, kwargs):
        t = Timed(len(windows), "token", nvtx=False)
        ids = kwargs.get("input_ids", args[0] if args else None)
        t.kind = "prefill" if ids is not None and ids.shape[-1] > 1 else "token"
        state["t"] = t.__enter__()

    def after(mod, args, kwargs, out):
        t = state.pop("t")
        t.b.record()
        windows.append((t, time.perf_counter_ns()))  # no sync: generate syncs on its own

    model.register_forward_pre_hook(before, with_kwargs=True)
    model.register_forward_hook(after, with_kwargs=True)
    prompt = torch.randint(0, 50257, (1, 32), device=dev)
    with torch.no_grad():
        for call in range(4):
            model.generate(prompt, max_new_tokens=tokens, min_new_tokens=tokens,
                           do_sample=False, pad_token_id=0)
            time.sleep(0.02)  # between calls: the host builds the next prompt
    save("token", calls=4, tokens_per_call=tokens, layers=layers)

else:
    sys.exit(f"unknown mode {mode}")
