"""Nsight Compute reports (.ncu-rep) through NVIDIA's ``ncu-report`` wheel.

``kernels(path)`` gives one row per profiled kernel with the metrics nsightlab uses (duration,
SM and DRAM throughput, occupancy, tensor-pipe utilization for the architecture, and the operand
precision of its tensor-pipe operations from the per-type counters, ``tensor_precision``). Needs the
optional dependency: ``pip install 'nsightlab[ncu]'``. ``.ncu-rep.xz`` files are decompressed
to a temporary file first.
"""
from __future__ import annotations

import lzma
import re
import shutil
import tempfile
from pathlib import Path

import pandas as pd

from nsightlab.errors import NotAReportError, NsightlabError

# output column -> metric names to try, first present wins (names differ by architecture)
METRICS = {
    "duration_ns": ["gpu__time_duration.sum"],
    "sm_throughput_pct": ["sm__throughput.avg.pct_of_peak_sustained_elapsed"],
    "dram_throughput_pct": ["dram__throughput.avg.pct_of_peak_sustained_elapsed",
                            "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed"],
    "achieved_occupancy_pct": ["sm__warps_active.avg.pct_of_peak_sustained_active"],
    "registers_per_thread": ["launch__registers_per_thread"],
    "grid_size": ["launch__grid_size"],
    "block_size": ["launch__block_size"],
    # tensor pipe: all MMA flavours; then the per-instruction-family shares
    "tensor_active_pct": ["sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active",
                          "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active"],
    "tensor_active_elapsed_pct": ["sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed"],
    "tc_active_pct": ["sm__pipe_tc_cycles_active.avg.pct_of_peak_sustained_active"],
    "hmma_inst_pct": ["sm__inst_executed_pipe_tensor_op_hmma.avg.pct_of_peak_sustained_active"],
    "gmma_inst_pct": ["sm__inst_executed_pipe_tensor_op_gmma.avg.pct_of_peak_sustained_active"],
    "imma_inst_pct": ["sm__inst_executed_pipe_tensor_op_imma.avg.pct_of_peak_sustained_active"],
}


# per-precision tensor-pipe operation counters: sm__ops_path_tensor_src_<type>[_dst_..][_sparsity_..]
_TENSOR_SRC = re.compile(r"^sm__ops_path_tensor_src_([a-z0-9]+?)(?:_dst_\w+?)?(?:_sparsity_o(?:n|ff))?\.sum$")
#: counter source types -> nsightlab precision labels (int1 and types not seen in a real report
#: are left unmapped: the kernel still counts as Tensor Core work, its precision stays unknown)
TENSOR_SRC_PRECISION = {"fp16": "fp16", "bf16": "bf16", "fp8": "fp8", "int8": "int8",
                        "tf32": "tf32", "fp64": "fp64"}


def _module():
    try:
        import ncu_report
    except ImportError:
        raise NsightlabError("reading .ncu-rep files needs NVIDIA's ncu-report package: "
                             "pip install 'nsightlab[ncu]' (or pip install ncu-report)") from None
    return ncu_report


class NcuReport:
    """One .ncu-rep, loaded once: ``kernels()`` (wide: key metrics per kernel) and ``metrics()``
    (long: every metric of every kernel). Use ``nsightlab.open_ncu(path)``."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        ncu_report = _module()
        if not self.path.is_file():
            raise NotAReportError(f"{self.path}: no such file; give an Nsight Compute report (.ncu-rep)")
        self._tmp = tempfile.TemporaryDirectory()
        src = self.path
        if self.path.name.endswith(".xz"):
            src = Path(self._tmp.name) / self.path.name[:-3]
            try:
                with lzma.open(self.path) as fin, src.open("wb") as fout:
                    shutil.copyfileobj(fin, fout, 1 << 20)
            except (lzma.LZMAError, EOFError) as e:
                raise NotAReportError(f"{self.path}: not a complete xz file ({e})") from None
        try:
            self._ctx = ncu_report.load_report(str(src))
        except Exception as e:  # the wheel raises plain exceptions for unreadable files
            raise NotAReportError(f"{self.path}: not a readable Nsight Compute report ({e}); "
                                  "give a .ncu-rep written by ncu") from None
        self._demangled = ncu_report.IAction.NameBase_DEMANGLED

    def _actions(self):
        for ri in range(self._ctx.num_ranges()):
            rng = self._ctx.range_by_idx(ri)
            for ai in range(rng.num_actions()):
                yield ri, ai, rng.action_by_idx(ai)

    def kernels(self) -> pd.DataFrame:
        """One row per profiled kernel: range, id, name, nvtx (push/pop stack, outermost first,
        joined with '/'), then the ``METRICS`` columns (NaN where a metric is absent)."""
        rows = []
        for ri, ai, a in self._actions():
            row = {"range": ri, "id": ai, "name": a.name(self._demangled), "nvtx": _nvtx(a)}
            for col, names in METRICS.items():
                row[col] = _first_value(a, names)
            row["tensor_precision"], row["tensor_ops"] = _tensor_source(a)
            rows.append(row)
        return pd.DataFrame(rows, columns=["range", "id", "name", "nvtx", *METRICS,
                                           "tensor_precision", "tensor_ops"])

    def metrics(self) -> pd.DataFrame:
        """Every metric of every kernel, long form: range, id, name, nvtx, metric, value
        (numeric, NaN for text), text (for string metrics), unit."""
        rows = []
        for ri, ai, a in self._actions():
            name, nvtx = a.name(self._demangled), _nvtx(a)
            for m in a.metric_names():
                metric = a.metric_by_name(m)
                v = metric.value()
                num = float(v) if isinstance(v, (int, float)) else float("nan")
                text = v if isinstance(v, str) else None
                rows.append((ri, ai, name, nvtx, m, num, text, metric.unit()))
        return pd.DataFrame(rows, columns=["range", "id", "name", "nvtx", "metric", "value",
                                           "text", "unit"])


def open_ncu(path: str | Path) -> NcuReport:
    """Open an Nsight Compute report (``.ncu-rep`` or ``.ncu-rep.xz``)."""
    return NcuReport(path)


def kernels(path: str | Path) -> pd.DataFrame:
    """Key metrics per kernel of the report at ``path`` (see ``NcuReport.kernels``)."""
    return NcuReport(path).kernels()


def tensor_evidence(kernels: pd.DataFrame) -> pd.DataFrame:
    """Per kernel name, what the tensor-pipe counters of ``kernels`` (``NcuReport.kernels``)
    measured: tensor_ops (summed over its profiled launches) and tensor_precision (of the
    launch with the most ops); the ``evidence`` of ``classify.refine``."""
    k = kernels[kernels["tensor_ops"].notna()]
    if k.empty:
        return pd.DataFrame(columns=["tensor_precision", "tensor_ops"])
    top = k.sort_values("tensor_ops", ascending=False).drop_duplicates("name").set_index("name")
    out = pd.DataFrame({"tensor_ops": k.groupby("name")["tensor_ops"].sum()})
    out["tensor_precision"] = top["tensor_precision"].reindex(out.index)
    return out


def _first_value(action, names: list[str]) -> float:
    for n in names:
        m = action.metric_by_name(n)
        if m is not None:
            v = m.value()
            try:
                return float(v)
            except (TypeError, ValueError):
                continue
    return float("nan")


def _tensor_source(action) -> tuple[str | None, float]:
    """(precision of the operand type with the most tensor-pipe operations, all tensor ops);
    (None, NaN) when the report holds no per-type counters (not collected by the section set),
    (None, 0) when the kernel ran no tensor-pipe operation, ("unknown", ops) when the busiest
    type has no precision label (int1)."""
    ops: dict[str, float] = {}
    for m in action.metric_names():
        hit = _TENSOR_SRC.match(m)
        if hit:
            try:
                v = float(action.metric_by_name(m).value())
            except (TypeError, ValueError):
                continue
            ops[hit.group(1)] = ops.get(hit.group(1), 0.0) + v
    if not ops:
        return None, float("nan")
    total = sum(ops.values())
    if total <= 0:
        return None, 0.0
    src = max(ops, key=ops.get)
    return TENSOR_SRC_PRECISION.get(src, "unknown"), total


def _nvtx(action) -> str | None:
    state = action.nvtx_state()
    if state is None:
        return None
    names = []
    for d in state.domains():
        dom = state.domain_by_id(d)
        names += [str(r) for r in dom.push_pop_ranges()]
    return "/".join(names) or None
