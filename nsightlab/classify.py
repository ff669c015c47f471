"""What a kernel does and in which precision, read from its name.

One module, used by every recipe and the diff, so that "gemm" or "fp8" means the same
everywhere. Names are classified once per distinct name (a categorical's categories), never per
row. Rules are ordered: the first class whose pattern matches wins, so strong library tokens
(cuBLAS ``nvjet``, cuDNN/xmma ``fprop``) are tried before generic words (``copy``, ``add``).

Precision comes from tokens kernel libraries put in names (cuBLAS ``nvjet_sm90_hsh`` /
``qqhsh`` / ``tst`` type letters, CUTLASS block-scale types ``ue4m3xe2m1`` / ``ue8m0xe4m3``,
xmma ``f16f16``, ``e4m3``, ``h1688``, ``imma``...) with confidence ``high``; from the narrowest
template argument type (``c10::Half``, ``c10::BFloat16``, ``float``) with ``medium``; and is
``unknown`` when the name says nothing (most Triton kernels): never a guess. ``tensor_core``
says whether the math runs on Tensor Cores; ``rule`` which rules decided.
"""
from __future__ import annotations

import re
from collections.abc import Iterable

import numpy as np
import pandas as pd

CLASSES = ("gemm", "attention", "conv", "norm", "softmax", "elementwise", "reduce", "quantize",
           "reformat/copy", "memset", "communication", "other")
PRECISIONS = ("nvfp4", "mxfp4", "mxfp6", "mxfp8", "fp8", "int8", "bf16", "fp16", "tf32", "fp32",
              "fp64", "unknown")
#: the classes that do the model's math (a layer's precision is theirs)
MATH_CLASSES = frozenset({"gemm", "attention", "conv"})
#: precisions whose math runs on Tensor Cores (FP32 and FP64 math here is SIMT)
TENSOR_CORE_PRECISIONS = frozenset({"nvfp4", "mxfp4", "mxfp6", "mxfp8", "fp8", "int8", "bf16",
                                    "fp16", "tf32"})
#: kernels that do math on the SIMT pipes whatever their data type
_SIMT = re.compile(r"simt|ffma|sgemm|dgemm|scudnn|gemv|implicit_convolve", re.I)

# Class rules, in order: (rule name, class, pattern). The first match wins, so library
# prefixes (Triton's kind in its kernel name, cuBLAS nvjet) come before generic words; a
# Triton fusion named "..._convolution_..." is still the pointwise kernel Triton says it is.
CLASS_RULES: list[tuple[str, str, str]] = [
    ("triton pointwise", "elementwise", r"^triton_poi_"),
    ("triton reduction", "reduce", r"^triton_(red|per)_"),
    ("triton template (matmul)", "gemm", r"^triton_tem_"),
    ("memset", "memset", r"\[cuda memset|memset"),
    ("memcpy", "reformat/copy", r"\[cuda memcpy"),
    ("collective", "communication", r"nccl|all_?reduce|all_?gather|reduce_?scatter|sendrecv"
                                    r"|all_?to_?all|cross_device_reduce"),
    ("attention", "attention", r"fmha|flash_?(fwd|bwd|fprop|attn)|attention|sdpa|_mha_|\bmha"
                               r"|paged_?attn|decode_?attn|xformers"),
    ("batch norm", "norm", r"bn_fw|bn_bw|batch_?norm|bn_inf"),
    ("KV-cache write", "reformat/copy", r"reshape_and_cache|cache_kernel"),
    ("convolution", "conv", r"conv|fprop|dgrad|wgrad|implicit_?gemm|winograd|[hs]\d{3,5}cudnn"
                            r"|scudnn|s16816fprop|\bcudnn.*nhwc_linkable|implicit_convolve"),
    ("matmul", "gemm", r"nvjet|gemm|gemv|matmul|cublas|cutlass.*tensorop|bstensorop|xmma_gemm"
                       r"|\bmma_|_mma_|wgmma|sgemm|hgemm|igemm|dot_kernel|splitk|(^|_)bmm_"),
    ("quantize/cast", "quantize", r"float8|fp8|e4m3|e5m2|e2m1|nvfp4|mxfp|quantiz|amax|absmax|qdq"
                                  r"|_cast_|cast_to|float16_copy_kernel|bfloat16_copy_kernel"
                                  r"|half_copy_kernel|scale_?kernel"),
    ("normalization", "norm", r"layer_?norm|rms_?norm|group_?norm|instance_?norm|l2_?norm"
                              r"|_norm_|normaliz"),
    ("softmax", "softmax", r"softmax"),
    ("reduction", "reduce", r"reduce_?kernel|reduction|::reduce\b|reduceop|argmax|argmin|nll_loss"
                            r"|pool|cub::.*(sum|min|max)|\bmean"
                            r"|nvfuser_(inner_|outer_)?persistent"),
    ("copy/layout", "reformat/copy", r"copy|reformat|transpose|permut|shuffle|nchwtonhwc"
                                     r"|nhwctonchw|nhwc2nchw|nchw2nhwc|catarray|concat|slice"
                                     r"|\bpad\b|::pad<|gather|scatter|index_?select|contiguous"),
    ("elementwise", "elementwise", r"elementwise|pointwise|vectorized|unrolled|functor|gelu|relu"
                                   r"|silu|sigmoid|tanh|clamp|fill|where|compare|bitwise"
                                   r"|activation|bias|pwn\(|__myl_|distribution|random|normal_"
                                   r"|add|mul|div|exp|pow|sqrt|neg"),
]
_CLASS_RES = [(name, c, re.compile(p, re.I)) for name, c, p in CLASS_RULES]

# cuBLAS(Lt) nvjet kernels: nvjet[_smNN]_<type letters>_<tile>; the first letter is the A type
# (t bf16, h fp16, s fp32, q e4m3, r e5m2, o e2m1: a BF16 torch run launches nvjet_tst_...)
_NVJET = re.compile(r"nvjet_(?:sm\d+_)?([a-z]+)_\d", re.I)
_MX_VECTOR = re.compile(r"vec32ue8m0", re.I)  # nvjet's AvecNN<type>: the block-scale vector
_NVJET_TYPES = {"q": "fp8", "r": "fp8", "e": "fp8", "o": "nvfp4", "h": "fp16", "t": "bf16",
                "s": "fp32", "d": "fp64", "i": "int8"}
# library tokens (high confidence), block-scaled formats first, then lowest precision first: a
# name that mentions an FP8 input and an FP32 accumulator is an FP8 kernel
PRECISION_RULES: list[tuple[str, str, str]] = [
    # TensorRT-LLM attention names its Q, KV and output types: the math runs in Q's type (an FP4
    # KV cache is dequantized to it)
    ("TensorRT-LLM FMHA Q type (E4M3)", "fp8", r"fmha\w*_?QE4m3"),
    ("NVFP4 block scale (UE4M3 x E2M1)", "nvfp4", r"ue4m3x(e2m1|f4)|nvf4|nvfp4"),
    ("MXFP4 block scale (UE8M0 x E2M1)", "mxfp4", r"ue8m0x(e2m1|f4)|mxf4|mxfp4"),
    ("MXFP6 block scale (UE8M0 x E3M2/E2M3)", "mxfp6", r"ue8m0x(e3m2|e2m3|f6)|mxf6|mxfp6"),
    ("MXFP8 block scale (UE8M0 x E4M3/E5M2)", "mxfp8", r"ue8m0x(e4m3|e5m2|f8)|mxf8|mxfp8"),
    ("FP4 token", "nvfp4", r"e2m1|\bfp4|_fp4"),
    ("FP8 token", "fp8", r"e4m3|e5m2|fp8|float8"),
    ("INT8 token", "int8", r"imma|i8816|(?<![a-z])int8|igemm|s8s8|i8i8|_s8_"),
    ("BF16 token", "bf16", r"bf16|bfloat16"),
    ("FP16 token", "fp16", r"f16f16|_f16|fp16|hmma|h1688|h16816|h884|hgemm|(?<!b)float16"
                           r"|s16816|s884|_h16|half8"),
    # cuDNN's SIMT families name their type: scudnn single precision (h884cudnn is FP16)
    ("cuDNN single precision (scudnn)", "fp32", r"scudnn"),
    # after FP16: ampere_fp16_s1688gemm_fp16 is an FP16 kernel, cutlass_80_tensorop_s1688gemm TF32
    ("TF32 token", "tf32", r"tf32|s1688gemm|tensorop_s1688"),
    ("FP32 token", "fp32", r"f32f32|fp32|_f32(_|$)"),
    ("FP64 token", "fp64", r"dgemm|fp64|f64"),
]
# template arguments (medium confidence): the narrowest type named wins, since kernels name their
# accumulate type too (normal_and_transform<c10::Half, float> makes FP16 data); FP64 only as a
# template argument or a pointer (a float RNG kernel takes its mean and stddev as double)
TEMPLATE_TYPES: list[tuple[str, str]] = [
    ("bf16", r"c10::bfloat16|__bfloat|__nv_bfloat16"),
    ("fp16", r"c10::half|__half\b|<half\b|\bhalf\)"),
    ("fp8", r"float8_e4m3|float8_e5m2|__nv_fp8"),
    ("fp64", r"<double\b|\bdouble\s*\*|tensor<double"),
    ("fp32", r"\bfloat\b"),
]
# SIMT library kernels whose name says FP32 but whose data may be another type (cuDNN's
# implicit_convolve_sgemm<__half, ...>): the template arguments decide first
_LOW = [("FP32 SIMT GEMM (sgemm)", "fp32", re.compile(r"sgemm", re.I))]
_PREC_RES = [(name, p, re.compile(r, re.I)) for name, p, r in PRECISION_RULES]
#: identifiers that spell a precision but name an option type, not the kernel's data
_NOT_A_TYPE = re.compile(r"Fp8KVCacheDataType", re.I)
_TEMPLATE_RES = [(p, re.compile(r, re.I)) for p, r in TEMPLATE_TYPES]


def kernel_class(name: str) -> str:
    """The class of one kernel (or GPU op) name; ``other`` when no rule matches."""
    return _class_rule(name)[0]


def _class_rule(name: str) -> tuple[str, str]:
    for rule, cls, rx in _CLASS_RES:
        if rx.search(name):
            return cls, rule
    return "other", "no class rule"


def precision(name: str) -> tuple[str, str]:
    """(precision, confidence) read from a kernel name; ("unknown", "none") if it says nothing."""
    p, conf, _ = _precision_rule(name)
    return p, conf


def _precision_rule(name: str) -> tuple[str, str, str]:
    name = _NOT_A_TYPE.sub("", name)
    m = _NVJET.search(name)
    if m and m.group(1)[0].lower() in _NVJET_TYPES:
        prec = _NVJET_TYPES[m.group(1)[0].lower()]
        if _MX_VECTOR.search(name):  # 32-element UE8M0 scale vectors: an MX format
            prec = {"nvfp4": "mxfp4", "fp8": "mxfp8"}.get(prec, prec)
            return prec, "high", "cuBLAS nvjet type letters, 32 x UE8M0 scale vectors (MX)"
        return prec, "high", "cuBLAS nvjet type letters"
    for rule, prec, rx in _PREC_RES:
        if rx.search(name):
            return prec, "high", rule
    for prec, rx in _TEMPLATE_RES:
        if rx.search(name):
            return prec, "medium", "template argument"
    for rule, prec, rx in _LOW:
        if rx.search(name):
            return prec, "high", rule
    return "unknown", "none", "nothing in the name"


def uses_tensor_cores(name: str, cls: str, prec: str) -> bool:
    """Whether the kernel's math runs on Tensor Cores: a math class in a Tensor-Core precision,
    and not a SIMT kernel (simt/ffma/sgemm/gemv in the name)."""
    return cls in MATH_CLASSES and prec in TENSOR_CORE_PRECISIONS and not _SIMT.search(name)


def classify_names(names: Iterable[str]) -> pd.DataFrame:
    """One row per distinct name: name, kernel_class, precision, precision_confidence,
    tensor_core, rule (which class and precision rules decided, so a label can be checked)."""
    rows = []
    for n in dict.fromkeys(str(x) for x in names):
        cls, crule = _class_rule(n)
        p, conf, prule = _precision_rule(n)
        rows.append((n, cls, p, conf, uses_tensor_cores(n, cls, p), f"{crule}; {prule}"))
    return pd.DataFrame(rows, columns=["name", "kernel_class", "precision", "precision_confidence",
                                       "tensor_core", "rule"])


def annotate(df: pd.DataFrame, column: str = "name", copy: bool = True,
             explain: bool = False) -> pd.DataFrame:
    """``df`` with kernel_class, precision, precision_confidence and tensor_core added for
    ``df[column]`` (and ``rule`` with ``explain``).

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
    for col in ("kernel_class", "precision", "precision_confidence", "tensor_core",
                *(["rule"] if explain else [])):
        if col == "tensor_core":
            tc = table[col].reindex(cats).to_numpy(dtype=bool)
            out[col] = np.where(codes >= 0, tc[np.maximum(codes, 0)] if len(tc) else False, False)
            continue
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
