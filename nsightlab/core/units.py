"""Units for people: nanoseconds as the milliseconds verdicts and tables show, and ratios."""
from __future__ import annotations

import re


def ms_columns(df):
    """A copy of DataFrame ``df`` with every ``*_ns`` column shown as ``*_ms``, in place."""
    out = df.copy()
    for c in list(out.columns):
        if str(c).endswith("_ns"):
            out.insert(list(out.columns).index(c), str(c)[:-3] + "_ms", out.pop(c) / 1e6)
    return out


def fmt_bytes(n: float) -> str:
    """A byte count the way people say it: '512 B', '32.0 kB', '4.8 MB'."""
    return f"{n:,.0f} B" if n < 1e3 else f"{n / 1e3:,.1f} kB" if n < 1e6 else f"{n / 1e6:,.1f} MB"


def fmt_ms(ns: float) -> str:
    """Nanoseconds as '12.34 ms' (for verdicts and findings)."""
    return f"{ns / 1e6:.2f} ms"


def fmt_time(ns: float) -> str:
    """A kernel's time as people say it: '6.1 ns', '1.9 µs', '36.8 µs', '1.63 ms'."""
    if ns != ns:
        return "?"
    if ns < 1e3:
        return f"{ns:.2g} ns"
    return f"{ns / 1e3:.3g} µs" if ns < 1e6 else f"{ns / 1e6:.3g} ms"


def fmt_ratio(v: float) -> str:
    """A ratio as people read it: three decimals near 1 (1.012), two elsewhere (1.37)."""
    return f"{v:.3f}" if abs(v - 1) < 0.1 else f"{v:.2f}"


def fmt_span(lo: float, hi: float) -> str:
    """An interval of ratios, both ends to the same decimals: '0.918-1.103', '2.01-2.19'."""
    d = 3 if min(abs(lo - 1), abs(hi - 1)) < 0.1 else 2
    return f"{lo:.{d}f}-{hi:.{d}f}"


_NOISE = re.compile(r"\bvoid\b|\b(?:at::native::|at::|c10::|cudnn::|cutlass::|binary_internal::"
                    r"|detail::|cuda::|templates::)|<unnamed>::|\(anonymous namespace\)::")
_FUNCTOR = re.compile(r"(\w*(?:Functor|Ops|_kernel_cuda|_kernel_impl|KernelImpl)\w*|launch_\w+"
                      r"|\w+(?=\((?:const )?(?:Tensor|TensorIteratorBase)\b))")
#: functors that only wrap the one that says what is computed
_WRAPPERS = {"AUnaryFunctor", "BUnaryFunctor", "BinaryFunctor", "UnaryFunctor", "gpu_kernel_impl",
             "gpu_kernel_impl_nocast", "func_wrapper_t"}
_LAMBDA_TYPE = re.compile(r"\[lambda\(([\w:]+)\) \(instance \d+\)\]")
_TYPE = re.compile(r"\b(Half|BFloat16|Float8_e4m3fn|Float8_e5m2|float|double|long|bool|__half"
                   r"|__nv_bfloat16|signed char|unsigned char)\b")
_GENERIC_HEADS = {"Kernel", "Kernel2", "device_kernel", "kernel", "Kernel_"}


def _template_args(text: str, start: int) -> str:
    """The text inside the <...> that opens at ``text[start]`` (nested brackets kept)."""
    depth = 0
    for i in range(start, len(text)):
        depth += {"<": 1, ">": -1}.get(text[i], 0)
        if depth == 0:
            return text[start + 1:i]
    return text[start + 1:]


def kernel_label(name: str, width: int = 72) -> str:
    """A kernel name as people read it: the kernel function, then what it does (its functor or
    op and the types it works on), e.g. ``vectorized_elementwise_kernel · AbsFunctor<Half>``,
    ``unrolled_elementwise_kernel · direct_copy · float · with cast``,
    ``Kernel2 · cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4``. Library names without
    templates (nvjet, xmma, Triton) stay as they are; labels are cut at ``width``."""
    s = _NOISE.sub("", str(name)[:8192]).strip()
    base = re.match(r"[\w:]+", s)
    if not base or "<" not in s[base.end():base.end() + 1]:
        return _cut(s, width)
    head = base.group(0).split("::")[-1]
    inner = s[base.end():]
    parts = []
    if head in _GENERIC_HEADS:
        first = re.match(r"<\s*([\w:]+)", inner)
        if first:
            parts.append(first.group(1).split("::")[-1])
    found = [m for m in _FUNCTOR.finditer(inner) if m.group(1) not in _WRAPPERS]
    if found:
        m = found[-1] if "Functor" in found[-1].group(1) else found[0]
        fn = m.group(1).removesuffix("_kernel_cuda")
        args = _template_args(inner, m.end()) if inner[m.end():m.end() + 1] == "<" else ""
        types = ", ".join(dict.fromkeys(_TYPE.findall(args)))
        parts.append(f"{fn}<{types}>" if types else fn)
    lam = [t for t in _LAMBDA_TYPE.findall(inner) if t != "int"]
    if lam and not any(lam[-1] in p for p in parts):
        parts.append(lam[-1])
    if "WithCast" in inner:
        parts.append("with cast")
    if not parts:
        types = list(dict.fromkeys(_TYPE.findall(inner)))[:2]
        parts = [", ".join(types)] if types else []
    return _cut(" · ".join([head, *parts]), width)


def _cut(s: str, width: int) -> str:
    return s if len(s) <= width else s[:width - 1] + "…"


def natural_key(text: str) -> tuple:
    """Sort key that orders numbers inside names by value: block2 before block10."""
    import re

    return tuple(int(t) if t.isdigit() else t.lower() for t in re.split(r"(\d+)", str(text)))
