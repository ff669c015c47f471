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

from nsightlab.analysis import narrow_formats
from nsightlab.formats.ncu import COVERS

CLASSES = ("gemm", "attention", "conv", "norm", "softmax", "elementwise", "reduce", "quantize",
           "reformat/copy", "memset", "communication", "other")
PRECISIONS = ("nvfp4", "mxfp4", "fp4", "mxfp6", "fp6", "mxfp8", "fp8", "int8", "bf16", "fp16",
              "tf32", "fp32", "fp64", "unknown")
#: the classes that do the model's math (a layer's precision is theirs)
MATH_CLASSES = frozenset({"gemm", "attention", "conv"})
#: precisions whose math runs on Tensor Cores (FP32 and FP64 math here is SIMT)
TENSOR_CORE_PRECISIONS = frozenset({"nvfp4", "mxfp4", "fp4", "mxfp6", "fp6", "mxfp8", "fp8",
                                    "int8", "bf16", "fp16", "tf32"})
#: kernels that do math on the SIMT pipes whatever their data type
_SIMT = re.compile(r"simt|ffma|(?<![a-z])[sd]gemm|_[sd]gemm|scudnn|gemv|implicit_convolve", re.I)

# Class rules, in order: (rule name, class, pattern). The first match wins, so library
# prefixes (Triton's kind in its kernel name, cuBLAS nvjet) come before generic words; a
# Triton fusion named "..._convolution_..." is still the pointwise kernel Triton says it is.
CLASS_RULES: list[tuple[str, str, str]] = [
    ("triton pointwise", "elementwise", r"^triton_poi_"),
    ("triton reduction", "reduce", r"^triton_(red|per)_"),
    # Inductor templates: flex attention is a template too; every other template is a matmul
    ("triton template (attention)", "attention", r"^triton_tem_\w*attention"),
    ("triton template (matmul)", "gemm", r"^triton_tem_"),
    ("memset", "memset", r"\[cuda memset|memset|init_device_workspace"),
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
    # Blackwell block-scale work: FP4/FP6 casts, scale factors and their swizzled layout
    ("quantize/cast", "quantize", r"float8|fp8|e4m3|e5m2|e2m1|nvfp4|mxfp|quantiz|amax|absmax|qdq"
                                  r"|fp4|fp6|block_?scale|scale_?factor|sf_?(layout|swizzle)"
                                  r"|_cast_|cast_to|float16_copy_kernel|bfloat16_copy_kernel"
                                  r"|half_copy_kernel|scale_?kernel"),
    ("normalization", "norm", r"layer_?norm|rms_?norm|group_?norm|instance_?norm|l2_?norm"
                              r"|_norm_|normaliz"),
    ("softmax", "softmax", r"softmax"),
    ("reduction", "reduce", r"reduce_?kernel|reduction|::reduce\b|reduceop|argmax|argmin|nll_loss"
                            r"|pool|cub::.*(sum|min|max)|\bmean"
                            r"|nvfuser_(inner_|outer_)?persistent"),
    ("copy/layout", "reformat/copy", r"copy|reformat|transpose|permut|shuffle|nchwtonhwc"
                                     r"|nhwctonchw|nhwc2nchw|nchw2nhwc|catarray|concat|slice|addpadding"
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
_NVJET_TYPES = {"q": "fp8", "r": "fp8", "e": "fp8", "o": "nvfp4", "h": "fp16", "t": "bf16",
                "s": "fp32", "d": "fp64", "i": "int8"}
AMBIGUOUS_16 = "cuDNN f16 (FP16 or BF16)"
# library tokens (high confidence), block-scaled formats first, then lowest precision first: a
# name that mentions an FP8 input and an FP32 accumulator is an FP8 kernel
PRECISION_RULES: list[tuple[str, str, str, str]] = [
    # (rule, precision, pattern, where the token's meaning comes from). Tried after the library
    # grammars of ``narrow_formats`` (CUTLASS, trtllm-gen, cuBLASLt nvjet, quantize kernels).
    # TensorRT-LLM attention names its Q, KV and output types: the math runs in Q's type (an FP4
    # KV cache is dequantized to it)
    ("TensorRT-LLM FMHA Q type (E4M3)", "fp8", r"fmha\w*_?QE4m3",
     "TensorRT-LLM fmha cubin names Q<dtype>Kv<dtype>O<dtype> (trtllmGenKernels/fmha)"),
    ("NVFP4 block scale (UE4M3 x E2M1)", "nvfp4", r"ue4m3x(e2m1|f4)|nvf4|nvfp4",
     "CUTLASS DataTypeNames ue4m3/e2m1 and its nvf4 kernel-schedule names; 'nvfp4' in names"),
    ("MXFP4 block scale (UE8M0 x E2M1)", "mxfp4", r"ue8m0x(e2m1|f4)|mxf4(?!nvf4)|mxfp4",
     "CUTLASS DataTypeNames ue8m0/e2m1 (OCP MX: UE8M0 scales on 32 elements)"),
    ("MXFP6 block scale (UE8M0 x E3M2/E2M3)", "mxfp6", r"ue8m0x(e3m2|e2m3|f6)|mxf6|mxfp6",
     "CUTLASS DataTypeNames ue8m0 with e3m2/e2m3 (OCP MX)"),
    ("MXFP8 block scale (UE8M0 x E4M3/E5M2)", "mxfp8", r"ue8m0x(e4m3|e5m2|f8)|mxf8|mxfp8",
     "CUTLASS DataTypeNames ue8m0 with e4m3/e5m2 (OCP MX)"),
    # an FP4/FP6 type with no scale type or block size beside it: the format is not named
    ("FP4 token (block format not named)", "fp4", r"e2m1|\bfp4|_fp4",
     "OCP FP4 E2M1 element type; NVFP4 or MX only where a scale type or block size says so"),
    ("FP6 token (block format not named)", "fp6", r"e3m2|e2m3|\bfp6|_fp6",
     "OCP FP6 E3M2/E2M3 element types"),
    ("FP8 token", "fp8", r"e4m3|e5m2|fp8|float8",
     "OCP FP8 E4M3/E5M2; PyTorch float8_copy_kernel, c10::Float8_e4m3fn"),
    ("INT8 token", "int8", r"imma|i8816|(?<![a-z])int8|igemm|s8s8|i8i8|_s8_",
     "SASS IMMA and cuBLAS/CUTLASS i8/s8 type tokens"),
    ("BF16 token", "bf16", r"bf16|bfloat16", "type tokens of cuBLAS, CUTLASS, TensorRT-LLM"),
    # cuDNN's runtime-compiled kernels spell any 16-bit float "f16": the same SDPA kernel name
    # runs BF16 in a BF16 model (ncu counters, h100-gpt-compile-bf16); the run decides below
    (AMBIGUOUS_16, "fp16", r"cudnn_generated\w*_f16_",
     "cuDNN runtime-compiled kernels; measured BF16 in tests/data/models h100-gpt-compile-bf16"),
    ("FP16 token", "fp16", r"f16f16|_f16|fp16|hmma|h1688|h16816|h884|hgemm|(?<!b)float16"
                           r"|s16816|s884|_h16|half8",
     "SASS HMMA shapes and cuBLAS/cuDNN/xmma f16 tokens"),
    # cuDNN's SIMT families name their type: scudnn single precision (h884cudnn is FP16)
    ("cuDNN single precision (scudnn)", "fp32", r"scudnn", "cuDNN kernel families"),
    # after FP16: ampere_fp16_s1688gemm_fp16 is an FP16 kernel, cutlass_80_tensorop_s1688gemm TF32
    ("TF32 token", "tf32", r"tf32|s1688gemm|tensorop_s1688", "CUTLASS tensorop_s1688 (TF32 MMA)"),
    ("FP32 token", "fp32", r"f32f32|fp32|_f32(_|$)", "type tokens"),
    ("FP64 token", "fp64", r"dgemm|fp64|f64", "type tokens"),
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
_PREC_RES = [(name, p, re.compile(r, re.I)) for name, p, r, _ in PRECISION_RULES]
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
    fmt = narrow_formats.parse(name)  # FP4/FP6/FP8 and block scales, by library grammar
    if fmt is not None and fmt.precision != "unknown":
        return fmt.precision, "high", fmt.rule
    m = _NVJET.search(name)
    if m and m.group(1)[0].lower() in _NVJET_TYPES:
        prec = _NVJET_TYPES[m.group(1)[0].lower()]
        return prec, "high", "cuBLAS nvjet type letters"
    for rule, prec, rx in _PREC_RES:
        if rx.search(name):
            return prec, "medium" if rule == AMBIGUOUS_16 else "high", rule
    for prec, rx in _TEMPLATE_RES:
        if rx.search(name):
            return prec, "medium", "template argument"
    for rule, prec, rx in _LOW:
        if rx.search(name):
            return prec, "high", rule
    return "unknown", "none", "nothing in the name"


# element-type tokens of library names -> precision labels (output types, nvjet letters)
_TYPE_TOKENS = {"f16": "fp16", "fp16": "fp16", "h": "fp16", "bf16": "bf16", "t": "bf16",
                "f32": "fp32", "fp32": "fp32", "s": "fp32", "tf32": "tf32", "f64": "fp64",
                "d": "fp64", "e4m3": "fp8", "e5m2": "fp8", "q": "fp8", "r": "fp8", "i8": "int8",
                "s8": "int8", "i": "int8"}
_T = r"(?:ue[48]m[03]x)?[a-z]*\d[a-z0-9]*"  # one CUTLASS type token (bf16, f32, ue4m3xe2m1)
# where library names spell the output (D) type, in the order tried: (rule, pattern, group)
OUTPUT_RULES: list[tuple[str, re.Pattern, int]] = [
    # cuBLASLt nvjet: the last type letter is D (hsh, tst, qqhsh, oohsh)
    ("nvjet D type letter", re.compile(r"nvjet_(?:sm\d+_)?[a-z]*([a-z])_\d", re.I), 1),
    # CUTLASS 3 library: gemm_<A>_<B>_<accumulator>_<C>_<D>_
    ("CUTLASS A_B_acc_C_D types", re.compile(
        rf"cutlass3x_\w*?gemm_(?:block_scaled_)?{_T}_{_T}_{_T}_(?:{_T}|void)_({_T})_", re.I), 1),
    # cuBLAS/cuDNN/TensorRT xmma: <A><C/D>_<B><accumulator>_<epilogue> (e4m3bf16 = FP8 in, BF16 out)
    ("xmma A, C/D types", re.compile(
        r"xmma_[a-z0-9_]*?_(?:e4m3|e5m2|bf16|tf32|f16|f32|f64|i8|s8)"
        r"(e4m3|e5m2|bf16|tf32|f16|f32|f64|i8|s8)_", re.I), 1),
    # cuBLAS/CUTLASS 2 tensor-op GEMMs: ampere_fp16_s16816gemm_fp16_..., ..._s16816gemm_relu_bf16_
    ("<type>_sNNNgemm_<type>", re.compile(r"_s\d+gemm_(?:relu_)?(fp16|bf16|fp32|f16|tf32)_", re.I), 1),
    ("fmha output type", re.compile(r"_output_(bf16|fp16|e4m3)", re.I), 1),
    # TensorRT-LLM attention names Q, KV and O types: fmhaSm100aKernel_QE4m3KvE2m1OE4m3H128...
    ("TensorRT-LLM FMHA O type", re.compile(r"fmha\w*?O(E4m3|Bf16|Fp16|Fp32)H\d"), 1),
]
_ELEMENT = re.compile(r"ue4m3|ue8m0|e4m3|e5m2|e2m1|e3m2|e2m3", re.I)
_NVJET_ELEMENT = {"q": "e4m3", "r": "e5m2", "o": "e2m1"}
_SCALE_VECTOR = re.compile(r"vec(\d+)(ue4m3|ue8m0)|_vs(\d+)", re.I)


def output_precision(name: str) -> str:
    """The precision of the kernel's output (D) where the library spells it in the name
    (nvjet's last type letter, CUTLASS's D type, xmma's C/D type); "unknown" otherwise."""
    for _, rx, group in OUTPUT_RULES:
        m = rx.search(name)
        if m:
            tok = m.group(group).lower()
            return _TYPE_TOKENS.get(tok, "fp8" if "e4m3" in tok or "e5m2" in tok else "unknown")
    return "unknown"


def precision_detail(name: str) -> str:
    """The narrow element formats the name spells (FP8 stays one precision label; this says
    e4m3 or e5m2) and block-scale types with their vector length: e.g. "e2m1; ue4m3 scales x16".
    Empty when the name names no FP8/FP6/FP4 format. Library grammars (``narrow_formats``) say
    each operand: "e2m1 (ue4m3 scales x16) x e2m1 (ue4m3 scales x16)"."""
    fmt = narrow_formats.parse(name)
    if fmt is not None and fmt.detail:
        return fmt.detail
    elements, scales = [], []
    m = _NVJET.search(name)
    if m:
        letters = m.group(1).lower()
        for ch in letters[:-3] if len(letters) > 3 else letters[:1]:
            if ch in _NVJET_ELEMENT:
                elements.append(_NVJET_ELEMENT[ch])
    for tok in _ELEMENT.findall(name.replace("float8_e4m3fn", "e4m3").replace("Float8_e4m3fn", "e4m3")):
        (scales if tok.lower().startswith("u") else elements).append(tok.lower())
    if re.search(r"ue[48]m[03]xf4", name, re.I):
        elements.append("e2m1")
    elements, scales = list(dict.fromkeys(elements)), list(dict.fromkeys(scales))
    vec = _SCALE_VECTOR.search(name)
    size = (vec.group(1) or vec.group(3)) if vec else None
    if vec and vec.group(2):
        scales = list(dict.fromkeys([*scales, vec.group(2).lower()]))
    out = "+".join(elements)
    if scales:
        out += f"; {'+'.join(scales)} scales" + (f" x{size}" if size else "")
    return out.strip("; ")


def uses_tensor_cores(name: str, cls: str, prec: str) -> bool:
    """Whether the kernel's math runs on Tensor Cores: a math class in a Tensor-Core precision,
    and not a SIMT kernel (simt/ffma/sgemm/gemv in the name)."""
    return cls in MATH_CLASSES and prec in TENSOR_CORE_PRECISIONS and not _SIMT.search(name)


#: characters of a kernel name the rules read (the longest real template names are ~3 KB)
MAX_NAME = 8192
#: the columns ``annotate`` always adds, and those it adds with ``explain``
LABELS = ("kernel_class", "precision", "precision_confidence", "tensor_core")
EXPLAIN = ("rule", "precision_detail", "output_precision")


def classify_names(names: Iterable[str]) -> pd.DataFrame:
    """One row per distinct name: name, the ``LABELS`` and the ``EXPLAIN`` columns: rule
    (which class and precision rules decided, so a label can be checked), precision_detail
    (e4m3/e5m2/e2m1 and block-scale types the name spells) and output_precision."""
    rows = []
    for name in dict.fromkeys(str(x) for x in names):
        # a name longer than any real kernel's (a damaged export) is read by its ends: the
        # rules are regular expressions, and megabytes of text would take them seconds
        n = name if len(name) <= MAX_NAME else name[:MAX_NAME // 2] + name[-MAX_NAME // 2:]
        cls, crule = _class_rule(n)
        p, conf, prule = _precision_rule(n)
        rows.append((name, cls, p, conf, uses_tensor_cores(n, cls, p), f"{crule}; {prule}",
                     precision_detail(n), output_precision(n)))
    return _resolve_16_bit(pd.DataFrame(rows, columns=["name", *LABELS, *EXPLAIN]))


def _resolve_16_bit(t: pd.DataFrame) -> pd.DataFrame:
    """Names that say "a 16-bit float" (cuDNN's f16) read BF16 when the other math kernels of
    the same run are BF16 and none FP16: ``names`` are one run's kernels."""
    vague = t["rule"].str.endswith(AMBIGUOUS_16)
    if not vague.any():
        return t
    known = t.loc[~vague & t["kernel_class"].isin(MATH_CLASSES), "precision"]
    if (known == "bf16").any() and not (known == "fp16").any():
        t.loc[vague, "precision"] = "bf16"
        t.loc[vague, "rule"] += ", BF16 as the run's other math kernels"
    return t


def annotate(df: pd.DataFrame, column: str = "name", copy: bool = True,
             explain: bool = False, evidence: pd.DataFrame | None = None) -> pd.DataFrame:
    """``df`` with kernel_class, precision, precision_confidence and tensor_core added for
    ``df[column]`` (and rule, precision_detail, output_precision with ``explain``).

    Each distinct name is classified once and the result is spread with integer codes, so
    this costs the same for 8 million rows as for 8 thousand. ``copy=False`` adds the columns
    to ``df`` itself (no copy of a big frame). ``evidence`` (see ``refine``) corrects the
    labels with measurements.
    """
    key = df[column]
    if not isinstance(key.dtype, pd.CategoricalDtype):
        key = key.astype("category")
    cats = key.cat.categories.astype(str)
    table = classify_names(cats)
    if evidence is not None and len(evidence):
        table = refine(table, evidence)
    table = table.set_index("name")
    codes = key.cat.codes.to_numpy()
    missing = codes < 0
    if not missing.any():  # every row named (the usual case): no masking passes
        missing = None
    at = codes if missing is None else np.maximum(codes, 0)
    out = df.copy() if copy else df
    for col in (*LABELS, *(EXPLAIN if explain else ())):
        if col == "tensor_core":
            tc = table[col].reindex(cats).to_numpy(dtype=bool)
            got = tc[at] if len(tc) else np.zeros(len(codes), bool)
            out[col] = got if missing is None else got & ~missing
            continue
        per_cat = table[col].reindex(cats).to_numpy(dtype=str)
        labels, inverse = np.unique(per_cat, return_inverse=True)
        # the labels' codes in the small integer type a Categorical keeps (8M rows: one
        # int8 gather, not int64 arrays converted afterwards)
        small = inverse.astype(np.int8 if len(labels) < 127 else np.int32)
        new = small[at] if len(small) else np.full(len(codes), -1, small.dtype)
        if missing is not None:
            new[missing] = -1
        out[col] = pd.Categorical.from_codes(new, categories=labels)
    return out


#: GPU-metrics Tensor Active (% over a kernel's duration) from which a kernel whose name says
#: nothing counts as Tensor Core work; Nsight Compute shows 0-4% Tensor Active on kernels that
#: run no tensor-pipe operation (layer norm, elementwise: h200-vit-fp8-block3) and 30-95% on GEMMs
TENSOR_ACTIVE_MIN_PCT = 10.0


def refine(labels: pd.DataFrame, evidence: pd.DataFrame) -> pd.DataFrame:
    """``labels`` (one row per name: ``classify_names`` or ``annotate`` output with ``name``)
    with what measurements say about each kernel, where the name said nothing or the
    measurement contradicts it.

    ``evidence`` is indexed by kernel name with any of: ``tensor_precision`` and ``tensor_ops``
    (Nsight Compute per-type tensor-pipe counters, ``ncu.kernels``) and ``tensor_active_pct``
    (GPU-metrics Tensor Active over the kernel's duration). Counters decide precision and
    ``tensor_core`` (confidence ``measured``); Tensor Active only ``tensor_core``, and only for
    kernels whose precision is unknown. ``rule`` (added if absent) says what decided."""
    out = labels.copy()
    for col in ("precision", "precision_confidence", "rule"):
        if col in out and isinstance(out[col].dtype, pd.CategoricalDtype):
            out[col] = out[col].astype(str)
    if "rule" not in out:
        out["rule"] = ""
    ev = evidence.reindex(out["name"].astype(str))
    for i, (name, row) in enumerate(ev.iterrows()):
        ops = row.get("tensor_ops", np.nan)
        src = row.get("tensor_precision")
        active = row.get("tensor_active_pct", np.nan)  # GPU metrics, over the kernel
        busy = row.get("ncu_tensor_active_pct", np.nan)  # ncu, its tensor/TC pipe
        j = out.index[i]
        said = out.at[j, "precision"]
        if pd.notna(ops) and ops > 0:
            out.at[j, "tensor_core"] = True
            if not isinstance(src, str) or src in ("unknown", said):
                out.at[j, "rule"] += "; ncu: tensor-pipe ops"
            elif said in COVERS.get(src, ()):  # a lumped counter: the name narrows it
                out.at[j, "precision_confidence"] = "measured"
                out.at[j, "rule"] += f"; ncu: tensor-pipe ops on {src} operands, {said} by the name"
            else:
                out.at[j, "precision"], out.at[j, "precision_confidence"] = src, "measured"
                out.at[j, "rule"] += (f"; ncu: tensor-pipe ops on {src} operands"
                                      + (f" (name said {said})" if said != "unknown" else ""))
        elif pd.notna(ops) and pd.notna(busy) and busy >= TENSOR_ACTIVE_MIN_PCT:
            # op counters can read 0 where the pipe was busy (reported on B200)
            out.at[j, "tensor_core"] = True
            out.at[j, "rule"] += (f"; ncu: tensor pipe {busy:.0f}% active although its op "
                                  "counters read 0")
        elif pd.notna(ops):
            out.at[j, "tensor_core"] = False
            out.at[j, "rule"] += "; ncu: no tensor-pipe ops"
        elif pd.notna(active) and said == "unknown":
            out.at[j, "tensor_core"] = bool(active >= TENSOR_ACTIVE_MIN_PCT)
            out.at[j, "rule"] += f"; GPU metrics: Tensor Active {active:.0f}% while it ran"
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


def precision_markdown() -> str:
    """The precision rules with their sources, as Markdown (docs/precision.md is this text; a
    test keeps it current)."""
    from nsightlab.formats import ncu

    out = ["# How nsightlab reads precision", "",
           "Generated from `nsightlab/analysis/classify.py`, `narrow_formats.py` and "
           "`formats/ncu.py` (`python -m nsightlab.analysis.classify > docs/precision.md`).", "",
           "Math precision comes from the kernel name, first by the grammar of the library that "
           "wrote it, then by type tokens, then by template arguments; Nsight Compute counters "
           "(`--ncu`) correct it. Output precision is kept apart (`output_precision`).", "",
           "## Library grammars (FP4, FP6, FP8, block scales)", "",
           "A block-scaled format is decided by its scale type (UE4M3: NVFP4; UE8M0: MX) and "
           "block size, never by an MMA's name. Names give operands A and B, not their roles; a "
           "mixed pair takes the narrower label.", "", "| grammar | source |", "|---|---|"]
    out += [f"| {rule} | {src} |" for rule, src in narrow_formats.GRAMMARS]
    out += ["", "## Type tokens (in order; the first match wins)", "",
            "| rule | precision | pattern | source |", "|---|---|---|---|"]
    out += [f"| {r} | {p} | " + f"`{pat}`".replace("|", "\\|") + f" | {src} |"
            for r, p, pat, src in PRECISION_RULES]
    out += ["", "## Nsight Compute metrics (read by pattern, per architecture family)", "",
            f"Tensor Core activity: {ncu.TENSOR_ACTIVE_RULE}.", "",
            "| column | patterns, first present wins |", "|---|---|"]
    out += [f"| `{c}` | " + "; ".join(f"`{p}`" for p in ps).replace("|", "\\|") + " |"
            for c, ps in ncu.PATTERNS.items()]
    out += ["", "Op counters `sm__ops_path_tensor_src_<types>[_dst_<type>][_sparsity_on|off].sum` "
            "give `tensor_precision`; a counter lumping types gives a lumped label that the name "
            "narrows:", "", "| counter source | label | name labels it narrows to |",
            "|---|---|---|"]
    out += [f"| `{src}` | {label} | {', '.join(sorted(ncu.COVERS.get(label, {label})))} |"
            for src, label in ncu.TENSOR_SRC_PRECISION.items()]
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    print(precision_markdown(), end="")
