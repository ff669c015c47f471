"""What a kernel does and in which precision, read from its name.

One module, used by every recipe and the diff, so that "gemm" or "fp8" means the same
everywhere. Names are classified once per distinct name (a categorical's categories), never per
row. Rules are ordered: the first class whose pattern matches wins, so strong library tokens
(cuBLAS ``nvjet``, cuDNN/xmma ``fprop``) are tried before generic words (``copy``, ``add``).

Precision comes from tokens kernel libraries put in names (cuBLAS ``nvjet_sm90_hsh`` /
``qqhsh`` type codes, CUTLASS/xmma ``f16f16``, ``e4m3``, ``e2m1``, ``h1688``, ``imma``...) with
confidence ``high``; from template arguments (``c10::Half``, ``__half``, ``float``) with
``medium``; and is ``unknown`` when the name says nothing.
"""
from __future__ import annotations

import re
from collections.abc import Iterable

import numpy as np
import pandas as pd

CLASSES = ("gemm", "attention", "conv", "norm", "softmax", "elementwise", "reduce", "quantize",
           "reformat/copy", "memset", "communication", "other")
PRECISIONS = ("nvfp4", "mxfp8", "fp8", "int8", "bf16", "fp16", "tf32", "fp32", "fp64", "unknown")

_CLASS_RULES: list[tuple[str, str]] = [
    ("memset", r"\[cuda memset|memset"),
    ("reformat/copy", r"\[cuda memcpy"),
    ("communication", r"nccl|all_?reduce|all_?gather|reduce_?scatter|sendrecv|all_?to_?all"),
    ("attention", r"fmha|flash_?(fwd|bwd|fprop|attn)|attention|sdpa|_mha_|\bmha|paged_?attn"
                  r"|decode_?attn|xformers"),
    ("conv", r"conv|fprop|dgrad|wgrad|implicit_?gemm|winograd|h1688cudnn|h16816cudnn|s16816fprop"
             r"|\bcudnn.*nhwc_linkable|implicit_convolve"),
    ("gemm", r"nvjet|gemm|gemv|matmul|cublas|cutlass.*tensorop|xmma_gemm|\bmma_|_mma_|wgmma"
             r"|sgemm|hgemm|igemm|dot_kernel|splitk"),
    ("quantize", r"float8|fp8|e4m3|e5m2|e2m1|nvfp4|mxfp|quantiz|amax|absmax|qdq|_cast_|cast_to"
                 r"|float16_copy_kernel|bfloat16_copy_kernel|half_copy_kernel|scale_?kernel"),
    ("norm", r"layer_?norm|rms_?norm|batch_?norm|group_?norm|instance_?norm|l2_?norm|_norm_"
             r"|normaliz"),
    ("softmax", r"softmax"),
    ("reduce", r"reduce_?kernel|reduction|::reduce|reduceop|argmax|argmin|nll_loss|pool"
               r"|cub::.*(sum|min|max)|\bmean|nvfuser_(inner_|outer_)?persistent"),
    ("reformat/copy", r"copy|reformat|transpose|permut|shuffle|nchwtonhwc|nhwctonchw|nhwc2nchw"
                      r"|nchw2nhwc|nhwctonchw|catarray|concat|slice|\bpad\b|::pad<|gather|scatter"
                      r"|index_?select|contiguous"),
    ("elementwise", r"elementwise|pointwise|vectorized|unrolled|functor|gelu|relu|silu|sigmoid"
                    r"|tanh|clamp|fill|where|compare|bitwise|activation|bias|pwn\(|__myl_"
                    r"|distribution|random|normal_|add|mul|div|exp|pow|sqrt|neg"),
]
_CLASS_RES = [(c, re.compile(p, re.I)) for c, p in _CLASS_RULES]

# cuBLAS nvjet kernels: nvjet[_smNN]_<type letters>_<tile>; the first letter is the A type
_NVJET = re.compile(r"nvjet_(?:sm\d+_)?([a-z]+)_\d", re.I)
_NVJET_TYPES = {"q": "fp8", "e": "fp8", "o": "nvfp4", "h": "fp16", "b": "bf16", "t": "tf32",
                "s": "fp32", "d": "fp64", "i": "int8"}
# library tokens (high confidence), lowest precision first: a name that mentions an FP8 input
# and an FP32 accumulator is an FP8 kernel
_HIGH = [
    ("nvfp4", r"e2m1|nvfp4|\bfp4|_fp4|mxf4|mxfp4"),
    ("mxfp8", r"mxf8|mxfp8"),
    ("fp8", r"e4m3|e5m2|fp8|float8"),
    ("int8", r"imma|i8816|(?<![a-z])int8|igemm|s8s8|i8i8|_s8_"),
    ("bf16", r"bf16|bfloat16_copy"),
    ("tf32", r"tf32"),
    ("fp16", r"f16f16|_f16|fp16|hmma|h1688|h16816|h884|hgemm|float16|s16816|_h16|half8"),
    ("fp32", r"f32f32|sgemm|fp32|_f32(_|$)"),
    ("fp64", r"dgemm|fp64|f64"),
]
_MEDIUM = [
    ("bf16", r"c10::bfloat16|__bfloat|__nv_bfloat16"),
    ("fp16", r"c10::half|__half\b|<half\b|\bhalf\)"),
    ("fp8", r"float8_e4m3|float8_e5m2|__nv_fp8"),
    ("fp64", r"\bdouble\b"),
    ("fp32", r"\bfloat\b"),
]
_HIGH_RES = [(p, re.compile(r, re.I)) for p, r in _HIGH]
_MEDIUM_RES = [(p, re.compile(r, re.I)) for p, r in _MEDIUM]


def kernel_class(name: str) -> str:
    """The class of one kernel (or GPU op) name; ``other`` when no rule matches."""
    for cls, rx in _CLASS_RES:
        if rx.search(name):
            return cls
    return "other"


def precision(name: str) -> tuple[str, str]:
    """(precision, confidence) read from a kernel name; ("unknown", "none") if it says nothing."""
    m = _NVJET.search(name)
    if m and m.group(1)[0].lower() in _NVJET_TYPES:
        return _NVJET_TYPES[m.group(1)[0].lower()], "high"
    for prec, rx in _HIGH_RES:
        if rx.search(name):
            return prec, "high"
    for prec, rx in _MEDIUM_RES:
        if rx.search(name):
            return prec, "medium"
    return "unknown", "none"


def classify_names(names: Iterable[str]) -> pd.DataFrame:
    """One row per distinct name: name, kernel_class, precision, precision_confidence."""
    rows = []
    for n in dict.fromkeys(str(x) for x in names):
        p, conf = precision(n)
        rows.append((n, kernel_class(n), p, conf))
    return pd.DataFrame(rows, columns=["name", "kernel_class", "precision", "precision_confidence"])


def annotate(df: pd.DataFrame, column: str = "name", copy: bool = True) -> pd.DataFrame:
    """``df`` with kernel_class, precision and precision_confidence added for ``df[column]``.

    Each distinct name is classified once and the result is spread with integer codes, so
    this costs the same for 8 million rows as for 8 thousand. ``copy=False`` adds the columns
    to ``df`` itself (no copy of a big frame).
    """
    key = df[column]
    if not isinstance(key.dtype, pd.CategoricalDtype):
        key = key.astype("category")
    cats = key.cat.categories.astype(str)
    table = classify_names(cats).set_index("name")
    codes = key.cat.codes.to_numpy()
    out = df.copy() if copy else df
    for col in ("kernel_class", "precision", "precision_confidence"):
        per_cat = table[col].reindex(cats).to_numpy(dtype=str)
        labels, inverse = np.unique(per_cat, return_inverse=True)
        new = np.where(codes >= 0, inverse[np.maximum(codes, 0)] if len(inverse) else -1, -1)
        out[col] = pd.Categorical.from_codes(new, categories=labels)
    return out


# synchronizing CUDA API calls by kind; memcpy/memset without "Async" block the host too
SYNC_KINDS = [
    ("device", r"^(cudaDeviceSynchronize|cuCtxSynchronize|cudaThreadSynchronize)"),
    ("stream", r"^(cudaStreamSynchronize|cuStreamSynchronize)"),
    ("event", r"^(cudaEventSynchronize|cuEventSynchronize)"),
    ("stream_wait", r"^(cudaStreamWaitEvent|cuStreamWaitEvent)"),
    ("memcpy", r"^(cudaMemcpy(?!.*Async)|cuMemcpy(?!.*Async))"),
    ("memset", r"^(cudaMemset(?!.*Async)|cuMemset(?!.*Async))"),
]
_SYNC_RES = [(k, re.compile(r)) for k, r in SYNC_KINDS]


def sync_kind(api_name: str) -> str | None:
    """How a CUDA API call makes the host wait (device, stream, event, stream_wait, memcpy,
    memset), or None for calls that do not."""
    for kind, rx in _SYNC_RES:
        if rx.match(api_name):
            return kind
    return None
