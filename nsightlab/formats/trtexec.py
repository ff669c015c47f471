"""TensorRT ``trtexec`` exports as DataFrames: per-layer profile, layer info, per-iteration times.

- ``--exportProfile``: a JSON list, ``[{"count": N}, {"name", "timeMs", "averageMs",
  "medianMs"?, "percentage"}, ...]`` (medianMs appeared in TensorRT 8.x).
- ``--exportLayerInfo``: the engine inspector's ``{"Layers": [...]}``: dicts with Name,
  LayerType, Inputs/Outputs (with "Format/Datatype"), TacticValue/TacticName... under
  ``--profilingVerbosity=detailed``, plain layer-name strings otherwise.
- ``--exportTimes``: one object per inference, TensorRT 8+ keys (startEnqMs, startH2dMs,
  computeMs, h2dMs, d2hMs, latencyMs...) or TensorRT 7 ones (startInMs, inMs, outMs...).
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd

from nsightlab.errors import NotAReportError

# lowest precision first: a layer that reads INT8 and writes FP32 computes in INT8
_PRECISION = [("nvfp4", r"fp4|e2m1"), ("fp8", r"fp8|e4m3"), ("int8", r"int8"), ("bf16", r"bf16"),
              ("fp16", r"fp16|half"), ("fp32", r"fp32|float"), ("int32", r"int32"), ("bool", r"bool")]
_DETAILS = ["parameter_type", "kernel", "stride", "out_maps", "groups", "in_dims", "out_dims", "origin",
            "in_precision", "out_precision", "inputs", "outputs"]


def _load(path: str | Path):
    path = Path(path)
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise NotAReportError(f"{path}: not a readable trtexec JSON export ({e})") from None


def profile(path: str | Path) -> pd.DataFrame:
    """``--exportProfile`` JSON: one row per layer with name, total_ms, avg_ms, median_ms,
    time_pct and iterations (the profile's count)."""
    data = _load(path)
    if not isinstance(data, list) or not data:
        raise NotAReportError(f"{path}: not a trtexec --exportProfile file (expected a JSON list)")
    count = data[0].get("count") if isinstance(data[0], dict) else None
    rows = [d for d in data if isinstance(d, dict) and "name" in d]
    df = pd.DataFrame({
        "name": [d["name"] for d in rows],
        "total_ms": [float(d.get("timeMs", 0.0)) for d in rows],
        "avg_ms": [float(d.get("averageMs", 0.0)) for d in rows],
        "median_ms": [float(d["medianMs"]) if "medianMs" in d else float("nan") for d in rows],
        "time_pct": [float(d.get("percentage", 0.0)) for d in rows],
    })
    df["iterations"] = count
    return df


def layer_info(path: str | Path) -> pd.DataFrame:
    """``--exportLayerInfo`` JSON: name, layer_type, precision (the lowest among its inputs'
    and outputs' formats), output_format, tactic (name if recorded, else value)."""
    data = _load(path)
    layers = data.get("Layers") if isinstance(data, dict) else None
    if layers is None:
        raise NotAReportError(f"{path}: not a trtexec --exportLayerInfo file (no \"Layers\")")
    rows = []
    for layer in layers:
        if isinstance(layer, str):  # --profilingVerbosity=layer_names_only
            rows.append({"name": layer, "layer_type": None, "precision": None,
                         "output_format": None, "tactic": None})
            continue
        outputs = layer.get("Outputs") or []
        fmt = outputs[0].get("Format/Datatype") if outputs and isinstance(outputs[0], dict) else None
        formats = [t.get("Format/Datatype") for t in (layer.get("Inputs") or []) + outputs
                   if isinstance(t, dict)]
        rows.append({"name": layer.get("Name"), "layer_type": layer.get("LayerType"),
                     "precision": precision_of(" ".join(f for f in formats if f)),
                     "output_format": fmt,
                     "tactic": layer.get("TacticName") or layer.get("TacticValue")})
    return pd.DataFrame(rows, columns=["name", "layer_type", "precision", "output_format", "tactic"])


def layer_details(path: str | Path) -> pd.DataFrame:
    """``--exportLayerInfo`` JSON with what identifies a layer across engines: name,
    layer_type, parameter_type, precision, kernel, stride, out_maps, groups, in_dims, out_dims
    (shapes as text without the batch dimension, e.g. "64x56x56"), origin (TensorRT's reason
    for the layer: "QDQ", "REFORMAT"...), in_precision and out_precision (the lowest among the
    inputs' and the outputs' formats: a quantize reads FP32 and writes INT8), and the graph:
    inputs and outputs, lists of tensor names; None where not recorded."""
    base = layer_info(path)
    layers = [x for x in _load(path).get("Layers", []) if isinstance(x, (dict, str))]

    def dims(tensors) -> str | None:
        if not tensors or not isinstance(tensors[0], dict) or not tensors[0].get("Dimensions"):
            return None
        return "x".join(str(d) for d in tensors[0]["Dimensions"][1:])

    def text(v) -> str | None:
        return None if v is None else "x".join(map(str, v)) if isinstance(v, list) else str(v)

    def tensors(v) -> list[dict]:
        return [t for t in v or [] if isinstance(t, dict)]

    def lowest(ts: list[dict]) -> str | None:
        return precision_of(" ".join(t.get("Format/Datatype") or "" for t in ts))

    extra = [{"parameter_type": x.get("ParameterType"), "kernel": text(x.get("Kernel")),
              "stride": text(x.get("Stride")), "out_maps": text(x.get("OutMaps")),
              "groups": text(x.get("Groups")), "in_dims": dims(x.get("Inputs")),
              "out_dims": dims(x.get("Outputs")), "origin": x.get("Origin"),
              "in_precision": lowest(tensors(x.get("Inputs"))),
              "out_precision": lowest(tensors(x.get("Outputs"))),
              "inputs": [t.get("Name") for t in tensors(x.get("Inputs"))],
              "outputs": [t.get("Name") for t in tensors(x.get("Outputs"))]}
             if isinstance(x, dict) else {} for x in layers]
    return pd.concat([base, pd.DataFrame(extra, index=base.index, columns=_DETAILS)], axis=1)


def precision_of(fmt: str | None) -> str | None:
    if not fmt:
        return None
    low = fmt.lower()
    for prec, rx in _PRECISION:
        if re.search(rx, low):
            return prec
    return None


def times(path: str | Path) -> pd.DataFrame:
    """``--exportTimes`` JSON: one row per inference with snake_case *_ms columns (start_enq_ms,
    compute_ms, latency_ms, h2d_ms, d2h_ms, ...) plus iteration and enqueue_ms."""
    data = _load(path)
    if not isinstance(data, list):
        raise NotAReportError(f"{path}: not a trtexec --exportTimes file (expected a JSON list)")
    df = pd.DataFrame([d for d in data if isinstance(d, dict)])
    df = df.rename(columns={c: re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", c).lower()
                            for c in df.columns})  # camelCase to snake_case
    # TensorRT 7 names the copies in/out; 8+ h2d/d2h
    df = df.rename(columns={"in_ms": "h2d_ms", "out_ms": "d2h_ms", "start_in_ms": "start_h2d_ms",
                            "end_in_ms": "end_h2d_ms", "start_out_ms": "start_d2h_ms",
                            "end_out_ms": "end_d2h_ms"})
    if {"start_enq_ms", "end_enq_ms"} <= set(df.columns):
        df["enqueue_ms"] = df["end_enq_ms"] - df["start_enq_ms"]
    df.insert(0, "iteration", range(len(df)))
    return df


def layers(profile_path: str | Path, layer_info_path: str | Path | None = None) -> pd.DataFrame:
    """Per-layer profile joined with layer info by name: name, layer_type, precision,
    tactic, avg_ms, median_ms, total_ms, time_pct."""
    prof = profile(profile_path)
    if layer_info_path is None:
        info = pd.DataFrame(columns=["name", "layer_type", "precision", "output_format", "tactic"])
    else:
        info = layer_info(layer_info_path)
    out = prof.merge(info, on="name", how="left")
    return out[["name", "layer_type", "precision", "tactic", "avg_ms", "median_ms", "total_ms",
                "time_pct", "iterations"]]
