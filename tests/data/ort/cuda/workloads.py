"""Workloads for nsightlab's runtime test set (issue 47), run on the GPU machine by capture.sh.

    python workloads.py export MODEL OUT.onnx        # bert4, bert12 (dynamic batch/sequence), resnet18,
                                                     # resnet18-fp16 (fixed 8x3x224x224)
    python workloads.py torch MODEL MODE ITERS TRUTH # MODE eager|compile; NVTX range iterN per pass
    python workloads.py cublas ITERS TRUTH           # a plain CUDA program: cuBLAS SGEMMs through ctypes

Models are built from configs with random weights (no download). Truth: one JSON line per timed
pass, {"iter", "gpu_ms" (CUDA events around the pass), "wall_ms"}, flushed as it goes.
BERT inputs are 8 x 128 tokens (ids 0..., mask 1), the same values the ORT runner feeds as zeros
for ids (the mask's values do not change the math's cost)."""
import json
import sys
import time

import torch

B, S = 8, 128


def bert(layers):
    from transformers import BertConfig, BertModel
    cfg = BertConfig(num_hidden_layers=layers)
    return Wrap(BertModel(cfg)).eval()


class Wrap(torch.nn.Module):
    """BERT called by keyword (transformers 5's forward takes more positional arguments)."""

    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, ids, mask, tt):
        o = self.m(input_ids=ids, attention_mask=mask, token_type_ids=tt)
        return o.last_hidden_state, o.pooler_output


def build(name):
    if name.startswith("bert"):
        return bert(int(name[4:]))
    import torchvision
    return torchvision.models.resnet18().eval()


def inputs(name, device="cpu"):
    if name.startswith("bert"):
        ids = torch.zeros(B, S, dtype=torch.long, device=device)
        return (ids, torch.ones(B, S, dtype=torch.long, device=device),
                torch.zeros(B, S, dtype=torch.long, device=device))
    x = torch.randn(8, 3, 224, 224, device=device)
    return (x.half(),) if name.endswith("fp16") else (x,)


def export(name, out):
    m = build(name)
    args = inputs(name)
    if name.endswith("fp16"):
        m = m.half()
    if name.startswith("bert"):
        names = ["input_ids", "attention_mask", "token_type_ids"]
        dyn = {n: {0: "batch", 1: "sequence"} for n in names}
        dyn["last_hidden_state"] = {0: "batch", 1: "sequence"}
        torch.onnx.export(m, args, out, input_names=names,
                          output_names=["last_hidden_state", "pooler_output"],
                          dynamic_axes=dyn, opset_version=17, dynamo=False)
    else:
        torch.onnx.export(m, args, out, input_names=["x"], output_names=["y"],
                          opset_version=17, dynamo=False)
    print("exported", out)


def timed(step, iters, truth, warmup=5):
    import torch.cuda.nvtx as nvtx
    with open(truth, "w") as f:
        for _ in range(warmup):
            step()
        torch.cuda.synchronize()
        for i in range(iters):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            t = time.perf_counter()
            nvtx.range_push(f"iter{i}")
            a.record()
            step()
            b.record()
            b.synchronize()
            nvtx.range_pop()
            wall = (time.perf_counter() - t) * 1e3
            f.write(json.dumps({"iter": i, "gpu_ms": a.elapsed_time(b), "wall_ms": wall}) + "\n")
            f.flush()


def run_torch(name, mode, iters, truth):
    m = build(name).cuda()
    args = inputs(name, "cuda")
    if mode == "compile":
        m = torch.compile(m)
    with torch.inference_mode():
        timed(lambda: m(*args), iters, truth, warmup=5 if mode == "eager" else 8)


def run_cublas(iters, truth):
    """cuBLAS and the CUDA runtime through ctypes: no framework, no runtime of ours to name."""
    import ctypes
    import glob
    import os
    import site
    roots = site.getsitepackages()
    def lib(stem):
        for r in roots:
            hits = sorted(glob.glob(os.path.join(r, "nvidia", "**", stem + ".so*"), recursive=True))
            if hits:
                return ctypes.CDLL(hits[0], mode=ctypes.RTLD_GLOBAL)
        return ctypes.CDLL(stem + ".so")
    rt, blas = lib("libcudart"), lib("libcublas")
    n = 2048
    ptr = [ctypes.c_void_p() for _ in range(3)]
    for p in ptr:
        assert rt.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(n * n * 4)) == 0
        rt.cudaMemset(p, 0, ctypes.c_size_t(n * n * 4))
    h = ctypes.c_void_p()
    assert blas.cublasCreate_v2(ctypes.byref(h)) == 0
    one, zero = ctypes.c_float(1.0), ctypes.c_float(0.0)
    def step():
        for _ in range(8):
            blas.cublasSgemm_v2(h, 0, 0, n, n, n, ctypes.byref(one), ptr[0], n, ptr[1], n,
                                ctypes.byref(zero), ptr[2], n)
    ev = [ctypes.c_void_p(), ctypes.c_void_p()]
    for e in ev:
        rt.cudaEventCreate(ctypes.byref(e))
    for _ in range(3):
        step()
    rt.cudaDeviceSynchronize()
    with open(truth, "w") as f:
        for i in range(iters):
            t = time.perf_counter()
            rt.cudaEventRecord(ev[0], None)
            step()
            rt.cudaEventRecord(ev[1], None)
            rt.cudaEventSynchronize(ev[1])
            ms = ctypes.c_float()
            rt.cudaEventElapsedTime(ctypes.byref(ms), ev[0], ev[1])
            f.write(json.dumps({"iter": i, "gpu_ms": ms.value,
                                "wall_ms": (time.perf_counter() - t) * 1e3}) + "\n")
            f.flush()


if __name__ == "__main__":
    what = sys.argv[1]
    if what == "export":
        export(sys.argv[2], sys.argv[3])
    elif what == "torch":
        run_torch(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5])
    elif what == "cublas":
        run_cublas(int(sys.argv[2]), sys.argv[3])
