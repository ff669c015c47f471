"""Real models in several precisions, for the classification and comparison fixtures (run under
nsys on a GPU machine with torch and timm; weights are random, nothing is downloaded).

    python workloads.py MODEL PRECISION [ITERATIONS]

MODEL:
  resnet50     timm ResNet-50, batch 32, 224x224 (conv-heavy). PRECISION fp32 (PyTorch defaults:
               cuDNN convolutions may use TF32, matmuls do not), fp16 or bf16 (channels-last)
  gpt          a GPT-2-small-shaped decoder (12 blocks, d=768, 12 heads, 1024 tokens, batch 8)
               with its LM head (50257) outside the blocks; fp32 (matmuls in FP32), tf32
               (FP32 with TF32 matmuls allowed), bf16, fp16, or fp8 (the blocks' Linear layers
               as per-tensor dynamic e4m3 torch._scaled_mm with FP16 output, the rest FP16)
  gpt-compile  the same decoder under torch.compile(mode="max-autotune-no-cudagraphs") with
               Triton GEMM templates only: Triton kernels whose names say no precision
  gpt-graphs   the decoder captured as one CUDA graph per batch size (1, 4, 8), each replayed:
               graph memory pools (for --cuda-memory-usage captures)
  graphsN      GPU memory: a 4-block decoder (256 tokens) captured as N CUDA graphs (batch sizes
               1..N, NVTX capture_bsK) and replayed; prints torch.cuda.max_memory_reserved()
  leak         GPU memory: the same decoder eagerly, keeping a 32 MiB tensor every iteration

Each run: 3 warm-up steps (compilation and graph capture happen there), then ITERATIONS
(default 10) NVTX ranges ``iterN`` after cudaProfilerStart (so that
``nsys --capture-range=cudaProfilerApi`` leaves compilation and autotuning out), with one range ``blockN`` per decoder block / ResNet stage
inside, each iteration ending with a sync, the way an inference loop does.
"""
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

model_name, prec = sys.argv[1], sys.argv[2]
iters = int(sys.argv[3]) if len(sys.argv) > 3 else 10
dtype = {"fp32": torch.float32, "tf32": torch.float32, "fp16": torch.float16,
         "bf16": torch.bfloat16, "fp8": torch.float16}[prec]
torch.backends.cuda.matmul.allow_tf32 = prec == "tf32"  # PyTorch's default is off
torch.backends.cudnn.allow_tf32 = prec != "fp32" or model_name != "gpt"
dev = torch.device("cuda")
nvtx = torch.cuda.nvtx
torch.manual_seed(0)


class FP8Linear(nn.Module):
    """A Linear layer in per-tensor FP8 (e4m3): the weight quantized once, the input quantized
    every call (abs-max, divide by scale, cast), then torch._scaled_mm with FP16 output."""

    def __init__(self, lin: nn.Linear):
        super().__init__()
        w = lin.weight.detach()
        self.w_scale = (w.abs().max().float() / 448.0).clamp(min=1e-12)
        self.wq_t = (w.float() / self.w_scale).to(torch.float8_e4m3fn).t()  # column-major
        self.bias = lin.bias.detach() if lin.bias is not None else None

    def forward(self, x):
        shape = x.shape
        x2 = x.reshape(-1, shape[-1])
        scale = (x2.abs().max().float() / 448.0).clamp(min=1e-12)
        xq = (x2.float() / scale).to(torch.float8_e4m3fn)
        out = torch._scaled_mm(xq, self.wq_t, scale_a=scale, scale_b=self.w_scale,
                               bias=self.bias, out_dtype=torch.float16)
        return out.reshape(*shape[:-1], -1)


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.heads = heads

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, d // self.heads).unbind(2)
        a = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                           v.transpose(1, 2), is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, vocab=50257, d=768, heads=12, layers=12, ctx=1024, marks=True):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(ctx, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)
        self.marks = marks

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for i, blk in enumerate(self.blocks):
            if self.marks:
                nvtx.range_push(f"block{i}")
            x = blk(x)
            if self.marks:
                nvtx.range_pop()
        return self.head(self.ln(x))


def run(step):
    with torch.inference_mode():
        for _ in range(3):
            step()
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStart()  # nsys --capture-range=cudaProfilerApi starts here
        for it in range(iters):
            nvtx.range_push(f"iter{it}")
            step()
            torch.cuda.synchronize()
            nvtx.range_pop()


if model_name == "resnet50":
    import timm
    m = timm.create_model("resnet50", pretrained=False).to(dev, dtype).eval()
    x = torch.randn(32, 3, 224, 224, device=dev, dtype=dtype)
    if prec != "fp32":
        m, x = m.to(memory_format=torch.channels_last), x.to(memory_format=torch.channels_last)
    stages = [m.layer1, m.layer2, m.layer3, m.layer4]
    def push(i):  # hooks must return None (a value replaces the stage's input or output)
        return lambda mod, args: (nvtx.range_push(f"block{i}"), None)[1]

    for i, s in enumerate(stages):
        s.register_forward_pre_hook(push(i))
        s.register_forward_hook(lambda mod, args, out: (nvtx.range_pop(), None)[1])
    run(lambda: m(x))
elif model_name in ("gpt", "gpt-compile"):
    m = GPT(marks=model_name == "gpt").to(dev, dtype).eval()
    if prec == "fp8":  # the blocks' GEMMs in FP8; embeddings, attention and LM head stay FP16
        for blk in m.blocks:
            for name in ("qkv", "proj", "fc", "out"):
                setattr(blk, name, FP8Linear(getattr(blk, name)))
    idx = torch.randint(0, 50257, (8, 1024), device=dev)
    if model_name == "gpt-compile":
        import torch._inductor.config as ic
        ic.max_autotune_gemm_backends = "TRITON"
        m = torch.compile(m, mode="max-autotune-no-cudagraphs")
    run(lambda: m(idx))
elif model_name == "gpt-graphs":
    m = GPT(layers=4).to(dev, dtype).eval()
    graphs, outs = {}, {}
    with torch.inference_mode():
        for bs in (1, 4, 8):
            idx = torch.randint(0, 50257, (bs, 1024), device=dev)
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                m(idx)  # warm-up on a side stream, as graph capture needs
            torch.cuda.current_stream().wait_stream(s)
            nvtx.range_push(f"capture_bs{bs}")
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                outs[bs] = m(idx)
            nvtx.range_pop()
            graphs[bs] = g
        torch.cuda.synchronize()
        for it in range(iters):
            nvtx.range_push(f"iter{it}")
            for g in graphs.values():
                g.replay()
            torch.cuda.synchronize()
            nvtx.range_pop()
elif model_name.startswith("graphs") or model_name == "leak":
    # GPU memory: "graphsN" captures N CUDA graphs (batch sizes 1..N, 256 tokens, a 4-block
    # decoder), each in an NVTX range capture_bsK, then replays all of them per iteration;
    # "leak" runs the model eagerly and keeps a 32 MiB tensor per iteration (never freed)
    m = GPT(layers=4, ctx=256, marks=False).to(dev, dtype).eval()
    kept = []
    with torch.inference_mode():
        nvtx.range_push("warmup")
        m(torch.randint(0, 50257, (1, 256), device=dev))
        torch.cuda.synchronize()
        nvtx.range_pop()
        graphs = []
        for bs in range(1, int(model_name[6:] or 0) + 1):
            idx = torch.randint(0, 50257, (bs, 256), device=dev)
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                m(idx)
            torch.cuda.current_stream().wait_stream(s)
            nvtx.range_push(f"capture_bs{bs}")
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                out = m(idx)
            torch.cuda.synchronize()
            nvtx.range_pop()
            graphs.append((g, out))
        for it in range(iters):
            nvtx.range_push(f"iter{it}")
            if graphs:
                for g, _ in graphs:
                    g.replay()
            else:
                m(torch.randint(0, 50257, (4, 256), device=dev))
            if model_name == "leak":
                kept.append(torch.empty(32 << 20, dtype=torch.uint8, device=dev))
            torch.cuda.synchronize()
            nvtx.range_pop()
    print(f"max_memory_reserved={torch.cuda.max_memory_reserved()}")
    print(f"memory_reserved={torch.cuda.memory_reserved()}")
    print(f"max_memory_allocated={torch.cuda.max_memory_allocated()}")
else:
    sys.exit(f"unknown model {model_name}")
