"""TensorRT layers of two engines matched across precisions.

Engines built from the same model in different precisions name their layers differently: the
FP16 engine's ``Conv_3 + Relu_4`` is ``layer1.0.conv1.weight + QuantizeLinear_20 + Conv_22`` in a
Q/DQ (INT8/FP8) engine built from a model with quantize nodes, and Myelin adds ``_myl0_12``
suffixes. Layers are matched in two passes:

1. by **normalized name**: the fused name split on `` + `` (``{ForeignNode[first...last]}``
   expanded to its ends), without Q/DQ nodes, weight and bias tokens, unnamed shuffles and
   Myelin suffixes: engines built from the same ONNX graph meet here;
2. the rest by **signature**, in engine order: layer kind (TensorRT's ParameterType, else its
   LayerType), kernel, stride, output maps, groups and the input/output shapes with the batch
   dimension dropped (from ``--exportLayerInfo``), else the op types left in the name. Equal
   runs of signatures are aligned like a text diff (``difflib``), so repeated blocks pair up in
   order.

Standalone Q/DQ layers and reformats (``Reformatting CopyNode ...``, Reformat/NoOp/Shuffle
layers) are not matched: they are precision-conversion and layout work, reported per engine.
"""
from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from nsightlab.core.result import Result, json_records
from nsightlab.formats import trtexec

_QDQ = re.compile(r"^(Quantize|Dequantize)Linear(_\d+)?$|^(quantize|dequantize)_", re.I)
_DROP = re.compile(r"\.(weight|bias)$|^\(Unnamed Layer\*|^(copied_)?(un)?squeeze_|_output$"
                   r"|^(Reformatted|Reformatting) ", re.I)
_MYELIN = re.compile(r"_myl\d+_\d+$")
_FOREIGN = re.compile(r"\{ForeignNode\[(.*?)\.\.\.(.*?)\]\}")
_OP = re.compile(r"^([A-Za-z]+?)(?:_\d+)?$")
#: layer kinds that only move or re-type data
_LAYOUT_TYPES = {"reformat", "noop", "shuffle"}


def tokens(name: str) -> list[str]:
    """The parts of a fused layer name that say what it computes (see the module docstring)."""
    name = _FOREIGN.sub(lambda m: f"{m.group(1)} + {m.group(2)}", str(name))
    out = []
    for t in (p.strip() for p in name.split(" + ")):
        t = _MYELIN.sub("", t)
        if t and not _QDQ.search(t) and not _DROP.search(t):
            out.append(t)
    return out


def role(name: str, layer_type: str | None = None) -> str:
    """compute, qdq (a standalone quantize/dequantize) or reformat (layout and copies)."""
    if str(name).startswith(("Reformatting CopyNode", "Reformatted ")):
        return "reformat"
    parts = [p.strip() for p in str(name).split(" + ")]
    if parts and all(_QDQ.search(_MYELIN.sub("", p)) for p in parts):
        return "qdq"
    if not tokens(name) or (layer_type or "").lower() in _LAYOUT_TYPES:
        return "reformat"
    return "compute"


def _signature(row: pd.Series) -> tuple:
    kind = row.get("parameter_type") or row.get("layer_type")
    if isinstance(kind, str) and kind:
        return (kind, row.get("kernel"), row.get("stride"), row.get("out_maps"),
                row.get("groups"), row.get("in_dims"), row.get("out_dims"))
    return tuple(sorted({(_OP.match(t).group(1) if _OP.match(t) else t).lower()
                         for t in tokens(row["name"])}))


@dataclass(repr=False)
class LayerMatch(Result):
    """Two engines' layers side by side. Tables:

    - ``layers``: a_layer, b_layer, how (name / signature / only_a / only_b), a_ms, b_ms,
      delta_ms, a_precision, b_precision (compute layers; per inference);
    - ``conversion``: run, layer, role (qdq / reformat), ms, precision: the standalone Q/DQ
      and reformat layers of each engine;
    - ``summary``: run, compute_ms, matched_ms, matched_pct, qdq_ms, reformat_ms, layers.
    """

    layers: pd.DataFrame
    conversion: pd.DataFrame
    summary: pd.DataFrame

    SECTIONS = ("layers", "conversion", "summary")

    def tables(self) -> dict[str, pd.DataFrame]:
        return {s: getattr(self, s) for s in self.SECTIONS}

    def manifest(self) -> dict:
        return {"kind": "trt_layers"}

    def to_json(self) -> dict:
        return {s: json_records(getattr(self, s)) for s in self.SECTIONS}


def match(a: pd.DataFrame, b: pd.DataFrame) -> LayerMatch:
    """Match the layers of engine A and B. ``a``/``b``: one row per layer in engine order with
    ``name`` and ``ms`` (time per inference), and where known the layer-info columns of
    ``engine_layers`` (layer_type, parameter_type, precision, kernel, stride, out_maps, groups,
    in_dims, out_dims)."""
    a, b = (_with_roles(x) for x in (a, b))
    ca, cb = a[a["role"] == "compute"], b[b["role"] == "compute"]
    pairs: list[tuple[int | None, int | None, str]] = []
    key_a = {}
    for i, r in ca.iterrows():
        key_a.setdefault(" + ".join(tokens(r["name"])), []).append(i)
    left_b = []
    for j, r in cb.iterrows():
        hit = key_a.get(" + ".join(tokens(r["name"])))
        if hit:
            pairs.append((hit.pop(0), j, "name"))
        else:
            left_b.append(j)
    left_a = [i for ids in key_a.values() for i in ids]
    left_a.sort()
    sa = [_signature(a.loc[i]) for i in left_a]
    sb = [_signature(b.loc[j]) for j in left_b]
    done_a, done_b = set(), set()
    for blk in difflib.SequenceMatcher(None, sa, sb, autojunk=False).get_matching_blocks():
        for k in range(blk.size):
            i, j = left_a[blk.a + k], left_b[blk.b + k]
            pairs.append((i, j, "signature"))
            done_a.add(i)
            done_b.add(j)
    pairs += [(i, None, "only_a") for i in left_a if i not in done_a]
    pairs += [(None, j, "only_b") for j in left_b if j not in done_b]
    rows = []
    for i, j, how in pairs:
        ra = a.loc[i] if i is not None else None
        rb = b.loc[j] if j is not None else None
        rows.append({"a_layer": ra["name"] if ra is not None else None,
                     "b_layer": rb["name"] if rb is not None else None, "how": how,
                     "a_ms": float(ra["ms"]) if ra is not None else 0.0,
                     "b_ms": float(rb["ms"]) if rb is not None else 0.0,
                     "a_precision": ra.get("precision") if ra is not None else None,
                     "b_precision": rb.get("precision") if rb is not None else None,
                     "order": i if i is not None else len(a) + (j or 0)})
    layers = pd.DataFrame(rows).sort_values("order", kind="stable").drop(columns="order")
    layers.insert(5, "delta_ms", layers["b_ms"] - layers["a_ms"])
    conv = pd.concat([x.loc[x["role"] != "compute", ["name", "role", "ms"]]
                      .assign(run=run, precision=x.get("precision"))
                      for run, x in (("a", a), ("b", b))], ignore_index=True)
    conv = conv.rename(columns={"name": "layer"})[["run", "layer", "role", "ms", "precision"]]
    summary = pd.DataFrame([_summary(run, x, layers, side) for run, x, side in
                            (("a", a, "a_"), ("b", b, "b_"))])
    return LayerMatch(layers.reset_index(drop=True), conv, summary)


def _with_roles(df: pd.DataFrame) -> pd.DataFrame:
    df = df.reset_index(drop=True).copy()
    lt = df["layer_type"] if "layer_type" in df else pd.Series([None] * len(df))
    df["role"] = [role(n, t) for n, t in zip(df["name"], lt)]
    return df


def _summary(run: str, x: pd.DataFrame, layers: pd.DataFrame, side: str) -> dict:
    compute = float(x.loc[x["role"] == "compute", "ms"].sum())
    matched = float(layers.loc[layers["how"].isin(["name", "signature"]), f"{side}ms"].sum())
    return {"run": run, "compute_ms": compute, "matched_ms": matched,
            "matched_pct": 100.0 * matched / compute if compute else float("nan"),
            "qdq_ms": float(x.loc[x["role"] == "qdq", "ms"].sum()),
            "reformat_ms": float(x.loc[x["role"] == "reformat", "ms"].sum()),
            "layers": int((x["role"] == "compute").sum())}


def engine_layers(profile_path: str | Path, layer_info_path: str | Path | None = None) -> pd.DataFrame:
    """One engine's layers from trtexec exports: the ``--exportProfile`` times (``ms``: average
    per inference) joined with the ``--exportLayerInfo`` details when given (found beside the
    profile as ``X.layers.json`` or ``X.graph.json`` otherwise)."""
    profile_path = Path(profile_path)
    if layer_info_path is None:
        base = profile_path.name.removesuffix(".json").removesuffix(".profile")
        for cand in (f"{base}.layers.json", f"{base}.graph.json"):
            if (profile_path.parent / cand).is_file():
                layer_info_path = profile_path.parent / cand
                break
    prof = trtexec.profile(profile_path).rename(columns={"avg_ms": "ms"})[["name", "ms"]]
    if layer_info_path is None:
        return prof
    return prof.merge(trtexec.layer_details(layer_info_path), on="name", how="left")
