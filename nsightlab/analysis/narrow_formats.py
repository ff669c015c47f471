"""FP4, FP6 and FP8 formats, block-scaled or not, read from the kernel names of the libraries
that define them.

A block-scaled format is an element type plus a scale type over a block of elements:

- NVFP4: E2M1 data, UE4M3 scales, 16-element blocks;
- MXFP4, MXFP6, MXFP8 (OCP MX): E2M1, E2M3/E3M2 or E4M3/E5M2 data, UE8M0 scales, 32-element blocks.

The scale type decides, never the MMA's name: CUTLASS's ``SM100_MMA_MXF4_SS`` atom runs NVFP4
when its scale type is ``float_ue4m3_t`` and its vector size 16 (``mma_sm100_umma.hpp``).
Names give the A and B operands in that order, not which is the activation and which the
weight, so no role is claimed. A mixed pair (MXFP4 x MXFP8) is labelled by its narrower operand
and the detail names both.

``parse(name)`` returns a ``Format`` (math precision, rule, source, detail) or None when the
name spells none of these grammars; ``classify`` falls back to its token rules then.
``GRAMMARS`` is the rule table with the source of each rule (``docs/precision.md``).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

#: narrowest first: a mixed pair takes the first of its two labels in this order
ORDER = ("nvfp4", "mxfp4", "fp4", "mxfp6", "fp6", "mxfp8", "fp8", "int8", "bf16", "fp16", "tf32",
         "fp32", "fp64")
_FAMILY = {"e2m1": "fp4", "f4": "fp4", "e2m3": "fp6", "e3m2": "fp6", "f6": "fp6", "e4m3": "fp8",
           "e5m2": "fp8", "f8": "fp8"}
_WIDE = {"f16": "fp16", "fp16": "fp16", "bf16": "bf16", "bfloat16": "bf16", "tf32": "tf32",
         "f32": "fp32", "fp32": "fp32", "f64": "fp64", "s8": "int8", "u8": "int8", "i8": "int8",
         "int8": "int8"}

#: (rule, source) of every grammar ``parse`` reads, in the order it tries them
GRAMMARS: list[tuple[str, str]] = [
    ("cuBLASLt nvjet type letters and scale vectors",
     "cuBLASLt kernel names: nvjet_sm100_oohsh_..._Avec16UE4M3_Bvec16UE4M3 (NVFP4), "
     "nvjet_sm100_qqtst_..._Avec32UE8M0_Bvec32UE8M0 (MXFP8); letters o = e2m1, q = e4m3, r = e5m2 "
     "(a reading of the format strings in libcublasLt; NVIDIA documents no grammar)"),
    ("CUTLASS library name (A, B types)",
     "NVIDIA/cutlass python/cutlass_library: gemm_operation.py extended_name_3x "
     "'{sfa}x{a}_{sfb}x{b}_{acc}_{c}_{d}', library.py DataTypeNames (ue4m3, ue8m0, e2m1, f4, "
     "e2m3, e3m2, f6, e4m3, e5m2, f8) and KernelScheduleSuffixes (_o_vs16 Nvf4, _o_vs32 Mxf4, "
     "_q Mxf8f6f4)"),
    ("CUTLASS template types (element, scale factor)",
     "NVIDIA/cutlass include/cutlass/float_subbyte.h and float8.h: nv_float4_t (UE4M3 scales), "
     "mx_float4_t / mx_float6_t / mx_float8_t (UE8M0 scales), unwrapped in kernel names to "
     "cute::tuple<float_e2m1_t, float_ue4m3_t>; cute/arch/mma_sm100_umma.hpp "
     "SM100_MMA_MXF4_SS<a, b, c, sf, M, N, VS> (VS 16: kind::mxf4nvf4, 32: kind::mxf4)"),
    ("TensorRT-LLM trtllm-gen dtypes",
     "NVIDIA/TensorRT-LLM trtllmGenKernels .../trtllm/gen/DtypeDecl.h: E2m1 = 16 elements per "
     "E4m3 scale (NVFP4), MxE2m1 / MxE4m3 = 32 per UE8m0 scale (MXFP4 / MXFP8), E4m3 / E5m2 "
     "plain FP8; a _cast<Dtype> token is the MMA's type; Ab/Bb/bA/bB/sfBlk<N> set the block"),
    ("TensorRT-LLM / FlashInfer quantize_with_block_size",
     "flashinfer-ai/flashinfer csrc/nv_internal/tensorrt_llm/kernels/quantization.h: "
     "BlockScaleQuantizationType FP16_TO_FP4 = 0, FP8_TO_FP4 = 1, FP16_TO_MXFP8 = 2; template "
     "<type, T, SF_VEC_SIZE, UE8M0_SF, ...>"),
    ("vLLM cvt_fp16_to_fp4",
     "vllm-project/vllm csrc/quantization/fp4/nvfp4_quant_kernels.cu: "
     "cvt_fp16_to_fp4<Type, bool UE8M0_SF = false> ('Use UE4M3 by default', 16-element blocks)"),
    ("CuTe DSL tensor types",
     "CUTLASS CuTe DSL generated kernel names embed MLIR element types: f4E2M1FN, f8E4M3FN, "
     "f8E5M2, f8E8M0FNU (the UE8M0 scale)"),
]


@dataclass(frozen=True)
class Format:
    precision: str
    rule: str
    detail: str


def label(element: str, scale: str | None, block: int | None) -> str:
    """The precision label of one operand: its element type's family, block-scaled by
    ``scale`` (ue4m3 / ue8m0) over ``block`` elements (None: not said)."""
    family = _WIDE.get(element) or _FAMILY.get(element, "unknown")
    if family not in ("fp4", "fp6", "fp8"):
        return family
    if family == "fp4":
        if scale == "ue4m3" or (scale is None and block == 16):
            return "nvfp4"
        return "mxfp4" if scale == "ue8m0" or block == 32 else "fp4"
    return f"mx{family}" if scale == "ue8m0" or block == 32 else family


def narrowest(labels: list[str]) -> str:
    known = [p for p in labels if p in ORDER]
    return min(known, key=ORDER.index) if known else "unknown"


def _detail(operands: list[tuple[str, str | None, int | None]], note: str) -> str:
    """The formats as ``classify.precision_detail`` says them: elements (A+B where they
    differ), then scale types and block size: "e2m1+e4m3; ue8m0 scales x32"."""
    elements = list(dict.fromkeys(e for e, _, _ in operands if e in _FAMILY))
    scales = list(dict.fromkeys(s for _, s, _ in operands if s))
    blocks = list(dict.fromkeys(b for _, _, b in operands if b))
    out = "+".join(elements)
    if scales:
        out += f"; {'+'.join(scales)} scales" + (f" x{blocks[0]}" if len(blocks) == 1 else "")
    elif blocks:
        out += f"; x{blocks[0]} blocks"
    return "; ".join(x for x in (out, note) if x)


def _format(rule: str, operands: list[tuple[str, str | None, int | None]],
            math: str | None = None, note: str = "") -> Format:
    labels = [label(*o) for o in operands]
    return Format(math or narrowest(labels), rule, _detail(operands, note))


# ---- cuBLASLt nvjet ----------------------------------------------------------------------------
_NVJET = re.compile(r"nvjet_(?:sm\d+_)?([a-z]+)_\d", re.I)
_NVJET_LETTERS = {"o": "e2m1", "q": "e4m3", "r": "e5m2", "h": "f16", "t": "bf16", "s": "f32",
                  "d": "f64", "b": "s8", "i": "s8"}
_NVJET_VEC = re.compile(r"_([AB])(vec|blk)(\d+)(UE4M3|UE8M0)?", re.I)


def _nvjet(name: str) -> Format | None:
    """An nvjet kernel with FP4/FP8 operands (classify reads the 16- and 32-bit ones)."""
    m = _NVJET.search(name)
    if not m or m.group(1)[0].lower() not in "oqr":
        return None
    letters = m.group(1).lower()
    ab = letters[:2] if len(letters) > 3 else letters[:1]
    vec = {v.group(1).upper(): (v.group(4).lower() if v.group(4) else None, int(v.group(3)),
                                v.group(2).lower()) for v in _NVJET_VEC.finditer(name)}
    ops, note = [], ""
    for i, ch in enumerate(ab):
        scale, block, kind = vec.get("AB"[i], (None, None, None))
        element = _NVJET_LETTERS[ch]
        if kind == "blk" or (scale is None and block == 128):  # FP8 with 1x128 / 128x128 blocks
            note, scale, block = "FP32 block scales (1x128/128x128)", None, None
        ops.append((element, scale, block))
    if not ops:
        return None
    return _format(GRAMMARS[0][0], ops, note=note)


# ---- CUTLASS library (procedural) names --------------------------------------------------------
_CUTLASS3X = re.compile(
    r"cutlass3x_sm\d+_\w*?tensorop_(?:[a-z]*gemm|s[\dx]+gemm)(?:_grouped|_block_scaled)?_"
    r"((?:(?:ue4m3|ue8m0)x)?[a-z]*\d+[a-z0-9]*)_((?:(?:ue4m3|ue8m0)x)?[a-z]*\d+[a-z0-9]*)_", re.I)
_BLOCKWISE = re.compile(r"^\d+x\d+f32x(e4m3|e5m2|f8)$", re.I)
_VS = re.compile(r"_vs(\d+)", re.I)


def _cutlass_library(name: str) -> Format | None:
    m = _CUTLASS3X.search(name)
    if not m:
        return None
    vs = _VS.search(name[m.end():])
    block = int(vs.group(1)) if vs else None  # the scale type decides NVFP4 vs MX, not this
    if block is None and re.search(r"_q(_|$)", name[m.end():]):
        block = 32  # kind::mxf8f6f4: 32-element blocks
    ops, note = [], ""
    for tok in (m.group(1).lower(), m.group(2).lower()):
        bw = _BLOCKWISE.match(tok)
        if bw:
            ops.append((bw.group(1), None, None))
            note = "FP32 block scales (blockwise FP8)"
        elif "x" in tok and tok.split("x")[0] in ("ue4m3", "ue8m0"):
            scale, element = tok.split("x", 1)
            ops.append((element, scale, block))
        elif tok in _FAMILY or tok in _WIDE:
            ops.append((tok, None, None))
        else:
            return None
    return _format(GRAMMARS[1][0], ops, note=note)


# ---- CUTLASS templates -------------------------------------------------------------------------
_T = r"cutlass::(?:detail::)?float_(e2m1|e2m3|e3m2|e4m3|e5m2)(?:_unpacksmem)?_t"
_PAIR = re.compile(rf"tuple<{_T}, cutlass::float_(ue4m3|ue8m0)_t>")
_INT = r"(?:\(int\))?(\d+)"
_ATOM = re.compile(rf"SM1\d\d_MMA_MXF\w*?<{_T}, {_T}, [\w:]+, cutlass::float_(ue4m3|ue8m0)_t, "
                   rf"{_INT}, {_INT}, {_INT}")
_ATOM_120 = re.compile(rf"SM120_16x8x\d+_TN_VS<{_T}, {_T}, [\w:]+, cutlass::float_(ue4m3|ue8m0)_t, "
                       rf"{_INT}>")
_WRAPPER = re.compile(r"\b(nv|mx)_float(4|6|8)_t<")


def _cutlass_template(name: str) -> Format | None:
    rule = GRAMMARS[2][0]
    atom = _ATOM.search(name)
    if atom:
        a, b, sf, _m, _n, vs = atom.groups()
        return _format(rule, [(a, sf, int(vs)), (b, sf, int(vs))])
    atom = _ATOM_120.search(name)
    if atom:
        a, b, sf, vs = atom.groups()
        return _format(rule, [(a, sf, int(vs)), (b, sf, int(vs))])
    pairs = _PAIR.findall(name)
    if pairs:
        return _format(rule, [(e, s, None) for e, s in pairs[:2]])
    wrapped = _WRAPPER.findall(name)
    if wrapped:
        ops = [({"4": "e2m1", "6": "e3m2", "8": "e4m3"}[bits],
                "ue4m3" if kind == "nv" else "ue8m0", 16 if kind == "nv" else 32)
               for kind, bits in wrapped[:2]]
        return _format(rule, ops)
    return None


# ---- TensorRT-LLM trtllm-gen -------------------------------------------------------------------
_GEN_NAME = re.compile(r"(?:^|[^a-z])(bmm|gemm|batchedgemmkernel|gemmgatedactkernel|moe_proj\w*?)_",
                       re.I)
_DTYPE = r"(?:Mx)?(?:E2m1|E4m3|E5m2|E2m3|E3m2|Int4)|Bfloat16|Fp16|Fp32|Int8|Int32|UE8m0"
_DTYPES = re.compile(rf"^(?:{_DTYPE}){{2,3}}$")
_ONE = re.compile(_DTYPE)
_CAST = re.compile(rf"^cast({_DTYPE})$")
_GEN_BLOCK = re.compile(r"^(?:(A|B)b|b(A|B)|sfBlk)(\d+)$")
_GEN_ELEMENT = {"e2m1": "e2m1", "e4m3": "e4m3", "e5m2": "e5m2", "e2m3": "e2m3", "e3m2": "e3m2",
                "bfloat16": "bf16", "fp16": "f16", "fp32": "f32", "int8": "s8", "int32": "f32"}


def _gen_operand(dtype: str, block: int | None) -> tuple[str, str | None, int | None]:
    mx = dtype.startswith("Mx")
    base = dtype[2:] if mx else dtype
    element = _GEN_ELEMENT.get(base.lower(), base.lower())
    if mx:
        return element, "ue8m0", block or 32
    if base == "E2m1":  # NVFP4 unless a block-size token says otherwise
        return element, "ue4m3" if (block or 16) == 16 else None, block or 16
    if base in ("E2m3", "E3m2"):  # block formats in DtypeDecl.h
        return element, None, block
    return element, None, None


def _trtllm_gen(name: str) -> Format | None:
    m = _GEN_NAME.search(name)
    if not m:
        return None
    tokens = name[m.end():].split("_")
    ab, cast, blocks = None, None, {}
    for tok in tokens:
        if ab is None and _DTYPES.match(tok):
            ab = _ONE.findall(tok)[:2]
        elif (c := _CAST.match(tok)):
            cast = c.group(1)
        elif (b := _GEN_BLOCK.match(tok)):
            side = b.group(1) or b.group(2)
            for s in (side,) if side else ("A", "B"):
                blocks[s] = int(b.group(3))
    if ab is None or not any(_ONE.fullmatch(t) and t[-3:] in ("2m1", "4m3", "5m2", "2m3", "3m2")
                             for t in ab):
        return None  # a 16-bit or INT8 trtllm-gen kernel: the token rules read those
    ops = [_gen_operand(d, blocks.get(s)) for d, s in zip(ab, "AB")]
    rule = GRAMMARS[3][0]
    if cast:
        element = _GEN_ELEMENT.get(cast.removeprefix("Mx").lower(), cast.lower())
        math = label(*_gen_operand(cast, None)) if cast.startswith("Mx") else label(element, None, None)
        return _format(rule, ops, math=math, note=f"cast to {element} for the MMA")
    return _format(rule, ops)


# ---- quantize kernels with their format in the template -----------------------------------------
_BOOL = r"(?:\(bool\))?(1|0|true|false)"
_QWBS = re.compile(rf"quantize_with_block_size\w*<\((?:[\w:]*::)?BlockScaleQuantizationType\)(\d), "
                   rf"[^,]+, {_INT}, {_BOOL}", re.I)
_CVT_FP4 = re.compile(rf"cvt_fp16_to_fp4\w*<[^,>]+, {_BOOL}")


def _quantize(name: str) -> Format | None:
    m = _QWBS.search(name)
    if m:
        kind, vec, ue8m0 = int(m.group(1)), int(m.group(2)), m.group(3) in ("1", "true")
        source = {0: "f16", 1: "e4m3", 2: "f16"}.get(kind, "?")
        target = ("e4m3" if kind == 2 else "e2m1", "ue8m0" if ue8m0 else "ue4m3", vec)
        return _format(GRAMMARS[4][0], [target], note=f"quantizes {source} data")
    m = _CVT_FP4.search(name)
    if m:
        ue8m0 = m.group(1) in ("1", "true")
        return _format(GRAMMARS[5][0], [("e2m1", "ue8m0" if ue8m0 else "ue4m3",
                                         32 if ue8m0 else 16)], note="quantizes 16-bit data")
    return None


_DSL = re.compile(r"f4E2M1FN|f8E4M3FN|f8E5M2|f6E3M2FN|f6E2M3FN|f8E8M0FNU")


def _cute_dsl(name: str) -> Format | None:
    found = set(_DSL.findall(name))
    if not found or "kernel_cutlass" not in name:
        return None
    scale = "ue8m0" if "f8E8M0FNU" in found else None
    if "f4E2M1FN" in found:
        # an E4M3 tensor beside E2M1 data and no UE8M0 one is NVFP4's scale
        scale = scale or ("ue4m3" if "f8E4M3FN" in found else None)
        return _format(GRAMMARS[6][0], [("e2m1", scale, None)])
    for tok, element in (("f6E3M2FN", "e3m2"), ("f6E2M3FN", "e2m3"), ("f8E4M3FN", "e4m3"),
                         ("f8E5M2", "e5m2")):
        if tok in found:
            return _format(GRAMMARS[6][0], [(element, scale, None)])
    return None


PARSERS = (_nvjet, _cutlass_library, _cutlass_template, _trtllm_gen, _quantize, _cute_dsl)


def parse(name: str) -> Format | None:
    """The format ``name`` spells in one of the ``GRAMMARS``, or None."""
    for p in PARSERS:
        f = p(name)
        if f is not None:
            return f
    return None
