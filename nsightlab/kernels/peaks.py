"""The device's ceilings for a kernel's roofline, in the units of the kernel's own run.

From the report's own metrics wherever it has them: a Tensor Core peak per operand type
(``sm__ops_path_tensor*_src_<type>*_sparsity_off.sum.peak_sustained``, dense), CUDA-core FMA
peaks (``sm__sass_thread_inst_executed_op_{f,h,d}fma_pred_on.sum.peak_sustained``), DRAM
bandwidth (``dram__bytes.sum.peak_sustained``), each per cycle, times the clock the kernel ran
at (ncu locks it to base: its peaks and its durations agree). Where the report has none (a
smaller section set), ``TABLE``: dense datasheet figures at boost clocks, keyed by device, and
the source says so.
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

#: operand type in a metric name -> precision label (``formats.ncu.TENSOR_SRC_PRECISION``'s)
_TYPES = {"fp16": "fp16", "bf16": "bf16", "fp8": "fp8", "int8": "int8", "tf32": "tf32",
          "fp64": "fp64", "fp4": "fp4", "fp4_fp6": "fp6/fp4", "fp4_fp6_fp8": "fp8/fp6/fp4"}
_TENSOR_PEAK = re.compile(r"^sm__ops_path_tensor(?:_op_\w+?)?_src_([a-z0-9]+)(?:_dst_[a-z0-9]+)?"
                          r"(_sparsity_off)?\.sum\.peak_sustained$")
_TENSOR_DONE = re.compile(r"^sm__ops_path_tensor_src_([a-z0-9_]+?)(_dst_[a-z0-9]+)?"
                          r"(_sparsity_o(?:n|ff))?\.sum$")
#: CUDA-core operations: (precision, metric stem, FLOPs per thread instruction)
CUDA_CORE = (("fp32", "fadd", 1), ("fp32", "fmul", 1), ("fp32", "ffma", 2),
             ("fp16", "hadd", 2), ("fp16", "hmul", 2), ("fp16", "hfma", 4),
             ("fp64", "dadd", 1), ("fp64", "dmul", 1), ("fp64", "dfma", 2))
_CORE_PEAK = {"fp32": ("ffma", 2), "fp16": ("hfma", 4), "fp64": ("dfma", 2)}
SM_CLOCK = "sm__cycles_elapsed.avg.per_second"
SM_CYCLES = "smsp__cycles_elapsed.avg"
DRAM_PEAK = "dram__bytes.sum.peak_sustained"
DRAM_CLOCK = "dram__cycles_elapsed.avg.per_second"

#: datasheet peaks (dense, boost clock): TFLOP/s per precision on the Tensor Cores, and DRAM
#: TB/s; used only where the report has no peak metric, and said so
TABLE = {
    "H200": {"fp16": 989.4, "bf16": 989.4, "tf32": 494.7, "fp8": 1978.9, "int8": 1978.9,
             "fp64": 66.9, "fp32": 66.9, "dram_tbps": 4.8},
    "H100": {"fp16": 989.4, "bf16": 989.4, "tf32": 494.7, "fp8": 1978.9, "int8": 1978.9,
             "fp64": 66.9, "fp32": 66.9, "dram_tbps": 3.35},
    "A100": {"fp16": 312.0, "bf16": 312.0, "tf32": 156.0, "int8": 624.0, "fp64": 19.5,
             "fp32": 19.5, "dram_tbps": 2.0},
    "A10G": {"fp16": 70.0, "bf16": 70.0, "tf32": 35.0, "int8": 140.0, "fp32": 35.0,
             "dram_tbps": 0.6},
    "B200": {"fp16": 2250.0, "bf16": 2250.0, "tf32": 1100.0, "fp8": 4500.0, "fp4": 9000.0,
             "int8": 4500.0, "fp64": 40.0, "fp32": 80.0, "dram_tbps": 8.0},
}


def metric_names(names: list[str]) -> list[str]:
    """The metrics of a report (``names``) that the peaks and the achieved FLOPs read."""
    want = {SM_CLOCK, SM_CYCLES, DRAM_PEAK, DRAM_CLOCK, "dram__bytes_read.sum",
            "dram__bytes_write.sum"}
    want |= {f"sm__sass_thread_inst_executed_op_{op}_pred_on.sum.peak_sustained"
             for op, _ in _CORE_PEAK.values()}
    want |= {f"smsp__sass_thread_inst_executed_op_{op}_pred_on.sum.per_cycle_elapsed"
             for _, op, _ in CUDA_CORE}
    return sorted(n for n in names if n in want or _TENSOR_PEAK.match(n) or _TENSOR_DONE.match(n))


def table_row(device: str | None) -> tuple[str, dict] | None:
    """(key, peaks) of ``TABLE`` for a device's display name ("NVIDIA H200" -> H200)."""
    for key, row in TABLE.items():
        if device and key.lower() in device.lower():
            return key, row
    return None


def _split(columns, rx: re.Pattern, key, flag: int) -> tuple[dict, dict]:
    """The metrics of ``columns`` that ``rx`` matches (a known operand type in its first
    group), by ``key(match)``: (those whose group ``flag`` is set, the others)."""
    flagged: dict = {}
    other: dict = {}
    for name in columns:
        m = rx.match(name)
        if m and m.group(1) in _TYPES:
            (flagged if m.group(flag) else other).setdefault(key(m), []).append(name)
    return flagged, other


def flops(v: pd.DataFrame) -> pd.DataFrame:
    """Per kernel (rows of ``v``, the values of ``metric_names``): FLOPs per precision, on the
    Tensor Cores (``tensor_<p>``, from the per-type op counters: an op is one FLOP) and the
    CUDA cores (``core_<p>``)."""
    out = pd.DataFrame(index=v.index)
    parts, totals = _split(v.columns, _TENSOR_DONE, lambda m: (m.group(1), m.group(2)), 3)
    for key in set(totals) | set(parts):  # a counter's total where collected, else its parts
        col = f"tensor_{_TYPES[key[0]]}"
        got = v[totals.get(key) or parts[key]].fillna(0).sum(axis=1)
        out[col] = out.get(col, 0) + got
    cycles = v.get(SM_CYCLES, pd.Series(np.nan, index=v.index))
    for prec, op, per in CUDA_CORE:
        name = f"smsp__sass_thread_inst_executed_op_{op}_pred_on.sum.per_cycle_elapsed"
        if name in v:
            col = f"core_{prec}"
            out[col] = out.get(col, 0) + v[name].fillna(0) * cycles * per
    return out


def ceilings(v: pd.DataFrame) -> pd.DataFrame:
    """Per kernel: each precision's peak in FLOP/s (``peak_tensor_<p>``, ``peak_core_<p>``),
    DRAM bandwidth in bytes/s (``peak_dram``), at the kernel's own clocks, from the report's
    metrics (NaN where it has none: ``datasheet``)."""
    clock = v.get(SM_CLOCK, pd.Series(np.nan, index=v.index))
    out = pd.DataFrame(index=v.index)
    dense, plain = _split(v.columns, _TENSOR_PEAK, lambda m: _TYPES[m.group(1)], 2)
    for prec in set(dense) | set(plain):
        cols = dense.get(prec) or plain[prec]  # dense where the report tells it apart
        out[f"peak_tensor_{prec}"] = v[cols].max(axis=1) * clock
    for prec, (op, per) in _CORE_PEAK.items():
        name = f"sm__sass_thread_inst_executed_op_{op}_pred_on.sum.peak_sustained"
        if name in v:
            out[f"peak_core_{prec}"] = v[name] * per * clock
    if DRAM_PEAK in v and DRAM_CLOCK in v:
        out["peak_dram"] = v[DRAM_PEAK] * v[DRAM_CLOCK]
    return out


def datasheet(device: str | None, col: str) -> tuple[float, str] | None:
    """(the ``TABLE`` figure for ceiling ``col`` ("peak_tensor_fp8", "peak_dram") on
    ``device``, in FLOP/s or bytes/s, where it came from), or None."""
    row = table_row(device)
    prec = "dram_tbps" if col == "peak_dram" else col.removeprefix("peak_tensor_").removeprefix(
        "peak_core_")
    if row is None or prec not in row[1]:
        return None
    return row[1][prec] * 1e12, f"the {row[0]} datasheet (boost clocks)"
