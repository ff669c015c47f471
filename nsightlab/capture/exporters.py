"""Turn every artifact a profiled run leaves into something nsightlab reads fast.

    nsightlab export INPUT... [-o DIR]

- ``.nsys-rep`` / ``.qdrep`` -> ``<stem>.sqlite`` (``nsys export``; a report newer than the
  local nsys gets a message naming both versions);
- ``.ncu-rep`` (or ``.ncu-rep.xz``) -> ``<stem>.ncu_kernels.parquet`` (key metrics per kernel)
  and ``<stem>.ncu_metrics.parquet`` (every metric, long form) with the ncu-report wheel;
- trtexec ``--exportProfile`` / ``--exportLayerInfo`` / ``--exportTimes`` JSON ->
  ``<stem>.trt_profile|trt_layer_info|trt_times.parquet``; a profile beside its layer info
  (``X.profile.json`` + ``X.layers.json`` or ``X.graph.json``) also gives ``X.trt_layers.parquet``;
- ONNX Runtime profiler JSON -> ``<stem>.ort_nodes.parquet``.

The kind of a JSON file is read from its content, not its name. Inputs are never modified.
"""
from __future__ import annotations

import sys

import json
from pathlib import Path

from nsightlab.core.result import atomic_file
from nsightlab.errors import NotAReportError
from nsightlab.formats import ncu, ort_profile, trtexec
from nsightlab.read import nsys_export as nsys_cli


def _stem(path: Path) -> str:
    name = path.name
    for suffix in (".ncu-rep.xz", ".ncu-rep", ".nsys-rep", ".qdrep", ".json"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return path.stem


def sniff_json(path: Path) -> str | None:
    """'trt_profile', 'trt_layer_info', 'trt_times', 'ort_profile' or None."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if isinstance(data, dict) and "Layers" in data:
        return "trt_layer_info"
    if isinstance(data, dict) and "traceEvents" in data:
        return "ort_profile"
    if isinstance(data, list) and data and isinstance(data[0], dict):
        first = data[0]
        if "count" in first or ("name" in first and "averageMs" in first):
            return "trt_profile"
        if any(k in first for k in ("computeMs", "latencyMs", "startEnqMs", "startInMs")):
            return "trt_times"
        if "cat" in first or "ph" in first:
            return "ort_profile"
    return None


def export_file(src: Path, outdir: Path, nsys: str | None = None) -> list[Path]:
    """Export one input into ``outdir``; returns the files written (empty for files that are
    not profiler artifacts, e.g. a manifest)."""
    src, outdir = Path(src), Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    stem = _stem(src)
    name = src.name
    if name.endswith((".nsys-rep", ".qdrep")):
        out = outdir / f"{stem}.sqlite"
        return [nsys_cli.export_sqlite(src, out, nsys_cli.find_nsys(nsys))]
    if name.endswith((".ncu-rep", ".ncu-rep.xz")):
        rep = ncu.open_ncu(src)
        count = rep.count()
        if count == 0:
            raise NotAReportError(f"{src}: holds no profiled kernel" + (
                "; it is cut short: copy it again" if not rep.whole else
                "; ncu profiled nothing: check its kernel filters"))
        if not rep.whole:
            sys.stderr.write(f"WARNING: {src}: cut short (its last record runs to byte "
                             f"{rep.expected_bytes:,} of a {rep.size:,}-byte report): exported the "
                             f"{count} kernels before the cut; copy it again for the rest\n")
        outs = [outdir / f"{stem}.ncu_kernels.parquet", outdir / f"{stem}.ncu_metrics.parquet"]
        for out, df in zip(outs, (rep.kernels(), rep.metrics())):
            with atomic_file(out, "wb") as f:
                df.to_parquet(f, index=False)
        return outs
    if name.endswith(".json"):
        kind = sniff_json(src)
        if kind is None:
            return []
        reader = {"trt_profile": trtexec.profile, "trt_layer_info": trtexec.layer_info,
                  "trt_times": trtexec.times, "ort_profile": ort_profile.nodes}[kind]
        base = stem[: -len(".profile")] if stem.endswith(".profile") else stem
        tag = "ort_nodes" if kind == "ort_profile" else kind
        out = outdir / f"{base}.{tag}.parquet"
        with atomic_file(out, "wb") as f:
            reader(src).to_parquet(f, index=False)
        written = [out]
        if kind == "trt_profile":
            for info in (src.with_name(f"{base}.layers.json"), src.with_name(f"{base}.graph.json")):
                if info.is_file() and sniff_json(info) == "trt_layer_info":
                    joined = outdir / f"{base}.trt_layers.parquet"
                    with atomic_file(joined, "wb") as f:
                        trtexec.layers(src, info).to_parquet(f, index=False)
                    written.append(joined)
                    break
        return written
    raise NotAReportError(f"{src}: nsightlab does not export this kind of file; give a .nsys-rep, "
                          ".ncu-rep, trtexec JSON or ONNX Runtime profile JSON")


def export(inputs: list[str], outdir: str | Path = ".", nsys: str | None = None) -> list[Path]:
    """Export every input (see the module docstring) into ``outdir``."""
    written: list[Path] = []
    for item in inputs:
        p = Path(item)
        if not p.exists():
            raise NotAReportError(f"{item}: no such file")
        written += export_file(p, Path(outdir), nsys)
    return written
