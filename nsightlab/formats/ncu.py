"""Nsight Compute reports (.ncu-rep) through NVIDIA's ``ncu-report`` wheel: the reader.

``NcuReport.each()`` walks the report once: per kernel its identity, every metric and NVIDIA's
rule results (``read.ncu_store`` keeps them as Parquet; ``kernels`` judges them).

``kernels(path)`` gives one row per profiled kernel with the metrics nsightlab uses (duration,
SM and DRAM throughput, occupancy, tensor-pipe utilization for the architecture, and the operand
precision of its tensor-pipe operations from the per-type counters, ``tensor_precision``). Needs the
optional dependency: ``pip install 'nsightlab[ncu]'``. ``.ncu-rep.xz`` files are decompressed
to a temporary file first.
"""
from __future__ import annotations

import contextlib
import functools
import json
import lzma
import os
import re
import shutil
import struct
import sys
import tempfile
from pathlib import Path

import pandas as pd

from nsightlab.errors import NotAReportError, NsightlabError
from nsightlab.formats.ncu_file import MAGIC, is_ncu  # noqa: F401 (is_ncu: the API)

# ---- metrics read by pattern, whatever the architecture ------------------------------------------
# Names differ by family: Hopper counts its tensor pipe as sm__*pipe_tensor_op_{hmma,imma,gmma},
# Blackwell as sm__*pipe_tensor_subpipe_{hmma,imma,dmma}, and Blackwell datacenter parts (sm_100,
# sm_103) add the tcgen05 pipe sm__*pipe_tc* (ncu 2025.3.1 --query-metrics for gh100, gb100,
# gb110, gb202). Each column reads the first pattern the report has; of its metrics the
# "% of peak sustained active" one, else "% of elapsed"; the metric read is named
# (``METRIC_COLUMNS``, and ``kernels().attrs["metrics"]``).
_PCT = r"\.avg\.pct_of_peak_sustained_(?:active|elapsed)$"
PATTERNS: dict[str, list[str]] = {
    "duration_ns": [r"^gpu__time_duration\.sum$"],
    "sm_throughput_pct": [r"^sm__throughput\.avg\.pct_of_peak_sustained_elapsed$"],
    "dram_throughput_pct": [r"^(?:gpu__)?dram__throughput\.avg\.pct_of_peak_sustained_elapsed$",
                            r"^gpu__dram_throughput\.avg\.pct_of_peak_sustained_elapsed$"],
    "achieved_occupancy_pct": [r"^sm__warps_active\.avg\.pct_of_peak_sustained_active$"],
    "registers_per_thread": [r"^launch__registers_per_thread$"],
    "grid_size": [r"^launch__grid_size$"],
    "block_size": [r"^launch__block_size$"],
    # the tensor pipe (every MMA kind; on Blackwell datacenter parts tcgen05 work too)
    "tensor_pipe_pct": [rf"^sm__pipe_tensor_cycles_active(?:_v2)?{_PCT}",
                        rf"^sm__pipe_tensor_(?:op|subpipe)_hmma_cycles_active{_PCT}"],
    "tensor_active_elapsed_pct": [r"^sm__pipe_tensor_cycles_active(?:_v2)?\.avg\."
                                  r"pct_of_peak_sustained_elapsed$"],
    # the TC pipe of sm_100/sm_103: tcgen05 (UTC*MMA) instructions only
    "tc_active_pct": [rf"^sm__pipe_tc_cycles_active{_PCT}"],
    # the instruction mix
    "hmma_inst_pct": [rf"^sm__inst_executed_pipe_tensor_(?:op|subpipe)_hmma{_PCT}"],
    "imma_inst_pct": [rf"^sm__inst_executed_pipe_tensor_(?:op|subpipe)_imma{_PCT}"],
    "gmma_inst_pct": [rf"^sm__inst_executed_pipe_tensor_op_gmma{_PCT}"],
    "dmma_inst_pct": [rf"^sm__inst_executed_pipe_(?:tensor_(?:op|subpipe)|fp64_op)_dmma{_PCT}"],
    "tc_inst_pct": [rf"^sm__inst_executed_pipe_tc{_PCT}"],
}
_PATTERN_RES = {c: [re.compile(p) for p in ps] for c, ps in PATTERNS.items()}
#: the columns of ``NcuReport.kernels`` read straight from a metric
METRICS = tuple(PATTERNS)
#: derived columns that name the metric (or metrics) they came from, or why they are empty
METRIC_COLUMNS = ("tensor_active_metric", "tensor_ops_metrics")
#: where the Tensor Core activity figure comes from (Nsight Compute Kernel Profiling Guide,
#: "Pipelines": "The TC pipeline executes UTCBAR, UTCCP, UTC*MMA, UTCSHIFT and UTC*SWS
#: instructions. It is different from the Tensor pipeline."; "The Tensor pipeline executes
#: various MMA instructions."): a kernel whose TC pipe was active ran tcgen05 MMAs, and the
#: TC pipe's figure is its Tensor Core activity; any other kernel's is the tensor pipe's
TENSOR_ACTIVE_RULE = ("TC pipe (tcgen05) when it was active, else the tensor pipe "
                      "(Nsight Compute Kernel Profiling Guide, Pipelines table)")

# per-precision tensor-pipe operation counters: sm__ops_path_tensor_src_<types>[_dst_<type>]
# [_sparsity_on|_off].sum; <types> may lump several (fp4_fp6_fp8 on B200, fp4_fp6 on B300 and
# RTX 50): such a counter cannot say which of them ran, the kernel name can narrow it
_TYPE = r"(?:fp|bf|tf|int)\d+"
_TENSOR_SRC = re.compile(rf"^sm__ops_path_tensor_src_({_TYPE}(?:_{_TYPE})*)(?:_dst_({_TYPE}))?"
                         r"(_sparsity_o(?:n|ff))?\.sum$")
#: counter source types -> nsightlab precision labels; a lumped counter gives a lumped label
#: (int1 and types not seen in a real report stay unmapped: Tensor Core work, precision unknown)
TENSOR_SRC_PRECISION = {"fp16": "fp16", "bf16": "bf16", "fp8": "fp8", "int8": "int8",
                        "tf32": "tf32", "fp64": "fp64", "fp4": "fp4", "fp4_fp6": "fp6/fp4",
                        "fp4_fp6_fp8": "fp8/fp6/fp4"}
#: the name-based labels a measured (possibly lumped) label covers: the name narrows it
COVERS = {"fp8": {"fp8", "mxfp8"}, "fp4": {"fp4", "nvfp4", "mxfp4"},
          "fp6/fp4": {"fp6", "mxfp6", "fp4", "nvfp4", "mxfp4"},
          "fp8/fp6/fp4": {"fp8", "mxfp8", "fp6", "mxfp6", "fp4", "nvfp4", "mxfp4"}}


#: ncu_report's message and speedup kinds (``MsgType_*``, ``SpeedupType_*``), by their value
MESSAGE_KINDS = {0: "none", 1: "ok", 2: "optimization", 3: "warning", 4: "error"}
SPEEDUP_KINDS = {0: "unknown", 1: "local", 2: "global"}
#: the launch identity kept per kernel (beside ``METRICS``)
LAUNCH = ("launch__grid_dim_x", "launch__grid_dim_y", "launch__grid_dim_z", "launch__block_dim_x",
          "launch__block_dim_y", "launch__block_dim_z", "launch__stream_id", "launch__device_id")


def whole(path: Path) -> tuple[bool, int]:
    """(whether the report's length-prefixed records end exactly at its last byte, the byte
    where the records say it should end): a copy cut short ends inside a record. The file is
    MAGIC, then records of a little-endian uint32 length and that many bytes."""
    size = path.stat().st_size
    with path.open("rb") as f:
        off = len(MAGIC)
        while off + 4 <= size:
            f.seek(off)
            (n,) = struct.unpack("<I", f.read(4))
            off += 4 + n
    return off == size, off


@contextlib.contextmanager
def quiet_stderr(on: bool = True):
    """The wheel's C++ logging off (fd 2 to /dev/null) while ``on``: a report cut short makes
    it print a parse error per record; nsightlab says the cut once, in its own words."""
    if not on:
        yield
        return
    sys.stderr.flush()
    saved, null = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(null)


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
            raise NotAReportError(f"{self.path}: no such file; give an Nsight Compute report "
                                  "(.ncu-rep)")
        self._tmp = tempfile.TemporaryDirectory()
        src = self.path
        if self.path.name.endswith(".xz"):
            src = Path(self._tmp.name) / self.path.name[:-3]
            try:
                with lzma.open(self.path) as fin, src.open("wb") as fout:
                    shutil.copyfileobj(fin, fout, 1 << 20)
            except (lzma.LZMAError, EOFError) as e:
                raise NotAReportError(f"{self.path}: not a complete xz file ({e})") from None
        _check(self.path, src)
        #: (whether the file is whole, where its records say it ends): a cut copy still gives
        #: the kernels before the cut (``read.ncu_store`` warns how many were read)
        self.whole, self.expected_bytes = whole(src)
        self.size = src.stat().st_size  #: of the report itself (decompressed)
        try:
            with quiet_stderr(not self.whole):
                self._ctx = ncu_report.load_report(str(src))
        except Exception as e:  # the wheel raises plain exceptions for unreadable files
            raise NotAReportError(f"{self.path}: not a readable Nsight Compute report ({e}); "
                                  "give a .ncu-rep written by ncu") from None
        self._demangled = ncu_report.IAction.NameBase_DEMANGLED
        self._function = ncu_report.IAction.NameBase_FUNCTION

    def count(self) -> int:
        """How many kernels (actions) the report holds, over all its ranges."""
        return sum(self._ctx.range_by_idx(ri).num_actions() for ri in range(self._ctx.num_ranges()))

    def _actions(self, only: set[int] | None = None):
        """(range, id, action) of each kernel, in order; of the kernels ``only`` (0-based over
        all ranges) when given: the others are not decoded."""
        k = 0
        for ri in range(self._ctx.num_ranges()):
            rng = self._ctx.range_by_idx(ri)
            for ai in range(rng.num_actions()):
                if only is None or k in only:
                    with quiet_stderr(not self.whole):
                        a = rng.action_by_idx(ai)
                    yield k, ri, ai, a
                k += 1

    def kernels(self) -> pd.DataFrame:
        """One row per profiled kernel: range, id, name, nvtx (push/pop stack, outermost first,
        joined with '/'), the ``METRICS`` columns (NaN where the report has no metric of the
        pattern; ``attrs["metrics"]`` names the metric each was read from), tensor_active_pct
        (``TENSOR_ACTIVE_RULE``) with tensor_active_metric, and tensor_precision / tensor_ops
        from the per-type op counters with tensor_ops_metrics (or why they are empty)."""
        rows = []
        for _, ri, ai, a in self._actions():
            names = list(a.metric_names())
            rows.append({"range": ri, "id": ai, "name": a.name(self._demangled), "nvtx": _nvtx(a),
                         **_key_metrics(a, names)})
        return key_frame(rows)

    def each(self, only: set[int] | None = None):
        """Per kernel, once, in the report's order: (identity, metrics, rules). identity:
        kernel (0-based, over all ranges), range, id, name (demangled), function, nvtx, the
        ``LAUNCH`` values, device (its name) and the ``kernels()`` columns; metrics: (names,
        values (float, NaN for text), texts ({index: str} of the text metrics), units); rules:
        one dict per rule result (``rule_rows``)."""
        units: dict[str, str] = {}
        nan = float("nan")
        for k, ri, ai, a in self._actions(only):
            names = list(a.metric_names())
            ident = {"kernel": k, "range": ri, "id": ai, "name": a.name(self._demangled),
                     "function": a.name(self._function), "nvtx": _nvtx(a)}
            values, texts = [], {}
            by_name = a.metric_by_name
            for i, n in enumerate(names):
                m = by_name(n)
                v = m.value()
                if v.__class__ is float or v.__class__ is int:
                    values.append(v)
                else:
                    values.append(nan)
                    if isinstance(v, str):
                        texts[i] = v
                if n not in units:
                    units[n] = m.unit()
            got = dict(zip(names, values))
            for n in LAUNCH:
                ident[n] = got.get(n)
            ident["device"] = texts.get(names.index("device__attribute_display_name")) \
                if "device__attribute_display_name" in got else None
            ident.update(_key_metrics(got, names))
            yield ident, (names, values, texts, [units[n] for n in names]), \
                rule_rows(a.rule_results_as_dicts())

    def metrics(self) -> pd.DataFrame:
        """Every metric of every kernel, long form: range, id, name, nvtx, metric, value
        (numeric, NaN for text), text (for string metrics), unit."""
        rows = []
        for _, ri, ai, a in self._actions():
            name, nvtx = a.name(self._demangled), _nvtx(a)
            for m in a.metric_names():
                metric = a.metric_by_name(m)
                v = metric.value()
                num = float(v) if isinstance(v, (int, float)) else float("nan")
                text = v if isinstance(v, str) else None
                rows.append((ri, ai, name, nvtx, m, num, text, metric.unit()))
        return pd.DataFrame(rows, columns=["range", "id", "name", "nvtx", "metric", "value",
                                           "text", "unit"])


KEY_COLUMNS = ["range", "id", "name", "nvtx", *METRICS, "tensor_active_pct", "tensor_precision",
               "tensor_ops", *METRIC_COLUMNS]


def key_frame(rows: list[dict]) -> pd.DataFrame:
    """The ``kernels()`` frame of rows holding ``_key_metrics`` (and their ``_metric_*`` keys:
    which metric each column was read from, kept in ``attrs["metrics"]``)."""
    out = pd.DataFrame(rows)
    used = {}
    for c in METRICS:
        col = f"_metric_{c}"
        found = out[col].dropna() if col in out else pd.Series(dtype=object)
        used[c] = found.iloc[0] if len(found) else "not in this report"
    out = out.reindex(columns=[c for c in out.columns if not c.startswith("_metric_")])
    out = out.reindex(columns=KEY_COLUMNS + [c for c in out.columns if c not in KEY_COLUMNS])
    out.attrs["metrics"] = used
    return out


def _key_metrics(action, names: list[str]) -> dict:
    """The ``METRICS`` columns, the Tensor Core activity and precision of one kernel, and the
    metric each ``METRICS`` column came from (``_metric_<column>``)."""
    row = {}
    for col in METRICS:
        row[col], row[f"_metric_{col}"] = _by_pattern(action, names, _PATTERN_RES[col])
    row["tensor_active_pct"], row["tensor_active_metric"] = _tensor_active(action, names)
    row["tensor_precision"], row["tensor_ops"], row["tensor_ops_metrics"] = \
        _tensor_source(action, names)
    return row


_MARKUP = re.compile(r"@(?:section|url|metric|table):([^@:]*)(?::[^@]*)?@")


def plain(message: str) -> str:
    """A rule message without ncu's link markup: "@section:ID:Label@" reads "Label"."""
    def label(m: re.Match) -> str:
        parts = m.group(0).strip("@").split(":", 2)
        return parts[2] if parts[0] == "section" and len(parts) > 2 else parts[1]
    return _MARKUP.sub(label, message or "").strip()


def rule_rows(results: list[dict]) -> list[dict]:
    """NVIDIA's rule results of one kernel (``IAction.rule_results_as_dicts()``) as flat rows,
    as ncu states them: rule, name, section, title, message (markup made plain), kind
    (``MESSAGE_KINDS``), speedup_pct and speedup_kind (``SPEEDUP_KINDS``; NaN / None without
    an estimate), focus (the focus metrics, JSON)."""
    rows = []
    for r in results:
        msg = r.get("rule_message") or {}
        est = r.get("speedup_estimation") or {}
        rows.append({"rule": r.get("rule_identifier"), "name": r.get("name"),
                     "section": r.get("section_identifier"), "title": msg.get("title") or "",
                     "message": plain(msg.get("message", "")),
                     "kind": MESSAGE_KINDS.get(int(msg.get("type", 0) or 0), "none"),
                     "speedup_pct": float(est["speedup"]) if "speedup" in est else float("nan"),
                     "speedup_kind": SPEEDUP_KINDS.get(int(est.get("type", 0))) if est else None,
                     "focus": json.dumps(r.get("focus_metrics") or [], default=str)})
    return rows


def _check(path: Path, src: Path) -> None:
    """An .ncu-rep to load: not empty and NVIDIA's magic at its start (ncu_report itself
    reads an empty or foreign file as a report of no kernels)."""
    with src.open("rb") as f:
        head = f.read(16)
    if not head:
        raise NotAReportError(f"{path}: an empty file; profile again with ncu --export, or "
                              "copy the report again")
    if head.startswith(b"SQLite format 3"):
        raise NotAReportError(f"{path}: is an nsys SQLite export, not an Nsight Compute report; "
                              "give it as the report and the .ncu-rep as --ncu")
    if not head.startswith(MAGIC):
        raise NotAReportError(f"{path}: not an Nsight Compute report (no NVR header); give a "
                              ".ncu-rep written by ncu --export")


def open_ncu(path: str | Path) -> NcuReport:
    """Open an Nsight Compute report (``.ncu-rep`` or ``.ncu-rep.xz``)."""
    return NcuReport(path)


def kernels(path: str | Path) -> pd.DataFrame:
    """Key metrics per kernel of the report at ``path`` (see ``NcuReport.kernels``)."""
    return NcuReport(path).kernels()


def tensor_evidence(kernels: pd.DataFrame) -> pd.DataFrame:
    """Per kernel name, what the tensor-pipe counters of ``kernels`` (``NcuReport.kernels``)
    measured: tensor_ops (summed over its profiled launches), tensor_precision (of the launch
    with the most ops) and ncu_tensor_active_pct (the most over its launches); the
    ``evidence`` of ``classify.refine``."""
    k = kernels[kernels["tensor_ops"].notna() | kernels["tensor_active_pct"].notna()]
    if k.empty:
        return pd.DataFrame(columns=["tensor_precision", "tensor_ops", "ncu_tensor_active_pct"])
    top = k.sort_values("tensor_ops", ascending=False).drop_duplicates("name").set_index("name")
    out = pd.DataFrame({"tensor_ops": k.groupby("name")["tensor_ops"].sum(min_count=1)})
    out["tensor_precision"] = top["tensor_precision"].reindex(out.index)
    out["ncu_tensor_active_pct"] = k.groupby("name")["tensor_active_pct"].max()
    return out


def _value(action, metric: str) -> float:
    """``metric``'s value in ``action`` (an ncu_report action, or a mapping of values read)."""
    if isinstance(action, dict):
        v = action.get(metric)
        return float(v) if v is not None else float("nan")
    m = action.metric_by_name(metric)
    try:
        return float(m.value()) if m is not None else float("nan")
    except (TypeError, ValueError):
        return float("nan")


def _by_pattern(action, names: list[str], patterns: list[re.Pattern]) -> tuple[float, str | None]:
    """(value, metric) of the first of ``patterns`` that a metric of ``names`` matches, the
    "% of peak sustained active" one before "% of elapsed"; (NaN, None) when none does."""
    for rx in patterns:
        for n in _hits(rx, tuple(names)):
            v = _value(action, n)
            if v == v:
                return v, n
    return float("nan"), None


@functools.lru_cache(maxsize=256)
def _hits(rx: re.Pattern, names: tuple[str, ...]) -> list[str]:
    """The metrics of ``names`` that ``rx`` matches, "% of peak sustained active" first (every
    kernel of a report has the same names: matched once)."""
    return sorted((n for n in names if rx.match(n)), key=lambda n: "elapsed" in n)


@functools.lru_cache(maxsize=64)
def _src_hits(names: tuple[str, ...]) -> list[tuple[str, re.Match]]:
    return [(n, h) for n in names if (h := _TENSOR_SRC.match(n))]


def _tensor_active(action, names: list[str]) -> tuple[float, str]:
    """(Tensor Core activity in %, the metric it came from) by ``TENSOR_ACTIVE_RULE``: the TC
    pipe's where it was active (a tcgen05 kernel on sm_100/sm_103), else the tensor pipe's;
    (NaN, why) when the report has neither."""
    tc, tc_metric = _by_pattern(action, names, _PATTERN_RES["tc_active_pct"])
    tensor, tensor_metric = _by_pattern(action, names, _PATTERN_RES["tensor_pipe_pct"])
    if tc_metric and tc > 0:
        return tc, f"{tc_metric} (tcgen05: the TC pipe was active)"
    if tensor_metric:
        return tensor, tensor_metric
    if tc_metric:
        return tc, tc_metric
    return float("nan"), ("not collected: the report has no sm__pipe_tensor*/sm__pipe_tc cycles "
                          "metric (profile with --section ComputeWorkloadAnalysis)")


def _tensor_source(action, names: list[str]) -> tuple[str | None, float, str]:
    """(precision of the operand types with the most tensor-pipe operations, all tensor ops,
    the counters read): per (source, destination) a counter's total, or its sparsity on + off
    parts where only those were collected. A counter that lumps types gives a lumped label
    ("fp8/fp6/fp4"). (None, NaN, why) when the report holds no per-type counters, (None, 0,
    counters) when the kernel ran no tensor-pipe operation, ("unknown", ops, counters) when
    the busiest type has no label (int1)."""
    totals: dict[tuple[str, str], float] = {}
    parts: dict[tuple[str, str], float] = {}
    read: list[str] = []
    for m, hit in _src_hits(tuple(names)):
        v = _value(action, m)
        if v != v:
            continue
        key = (hit.group(1), hit.group(2) or "")
        if hit.group(3):
            parts[key] = parts.get(key, 0.0) + v
        else:
            totals[key] = v
        read.append(m)
    for key, v in parts.items():
        totals.setdefault(key, v)  # the total where collected, else its two parts
    if not totals:
        return None, float("nan"), ("not collected: the report has no sm__ops_path_tensor_src_* "
                                    "counters (profile with --section "
                                    "SpeedOfLight_HierarchicalTensorRooflineChart)")
    per_src: dict[str, float] = {}
    for (src, _), v in totals.items():
        per_src[src] = per_src.get(src, 0.0) + v
    total = sum(per_src.values())
    counters = f"{len(read)} sm__ops_path_tensor_src_* counters"
    if total <= 0:
        return None, 0.0, counters
    src = max(per_src, key=per_src.get)
    return TENSOR_SRC_PRECISION.get(src, "unknown"), total, counters


def _nvtx(action) -> str | None:
    state = action.nvtx_state()
    if state is None:
        return None
    names = []
    for d in state.domains():
        dom = state.domain_by_id(d)
        names += [str(r) for r in dom.push_pop_ranges()]
    return "/".join(names) or None
