"""TensorRT layers of two engines matched across precisions, by the graph.

Engines built from one model at two precisions name and fuse its layers differently: the FP16
engine's ``Conv_3 + Relu_4`` is ``layer1.0.conv1.weight + QuantizeLinear_20 + Conv_22`` in a Q/DQ
(INT8/FP8) engine of a renumbered ONNX graph, a TensorFlow QAT model adds ``quant_`` to every
name, Myelin adds ``_myl0_12`` suffixes; one engine fuses a ResNet block's residual add into the
shortcut conv and the other into the block's last conv, one keeps the stem's padding apart or
runs Conv+MaxPool as one ConvActPool. So the layers are matched where they sit in the graph that
``--exportLayerInfo`` records (each layer's input and output tensors), in two passes:

1. **pairs**, walking A in engine order: each compute layer pairs with the free compute layer of
   B of the same kind (TensorRT's ParameterType, else its LayerType) and output shape that has
   the most in common with it: first the producers of its inputs (a layer that reads what the
   partners of its producers write sits where it sits: ``graph``), then its name (the fused name
   without Q/DQ, weight and bias tokens, unnamed shuffles and Myelin suffixes: ``name``), then
   its parameters and shapes (kernel, stride, output maps, groups, input and output shapes
   without the batch dimension: ``signature``). A pair needs a shared producer, the same name
   or all of the same parameters and shapes, and pairs by signature alone are made only after
   every pair by producer or name; ties go to the earliest layer of B, so repeated blocks pair
   in order. Q/DQ, reformat, shuffle and no-op layers are transparent: a tensor is traced
   through them to the compute layer that wrote it, so a QuantizeLinear standing between two
   convs of one engine does not break the walk.
2. **regions**: the layers left are grouped into connected runs; a run of A and a run of B that
   read from the same paired layers (or the network input) and feed the same paired layers (or
   the network output) did the same work, fused differently, and pair as a whole (``region``).

Without layer info (profile names alone) the first pass pairs by name, then by the op types left
in the names, in engine order.

Standalone Q/DQ layers and reformats are not matched: they are precision-conversion and layout
work, reported per engine (``role`` says which is which).
"""
from __future__ import annotations

import math
import re
from collections import defaultdict
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
_COPY = ("Reformatting CopyNode", "Reformatted ")
#: layer kinds that only move or re-type data
_LAYOUT_TYPES = {"reformat", "noop", "shuffle"}
#: the data types a quantize writes and a dequantize reads
_QUANTIZED = {"int8", "fp8", "nvfp4"}
#: what, beside a layer, identifies it in the other engine
_PARAMS = ("kernel", "stride", "out_maps", "groups", "in_dims", "out_dims")
#: the network's inputs and outputs, as the producer or reader of a layer's tensors
_INPUT, _OUTPUT = -1, -2


def tokens(name: str) -> list[str]:
    """The parts of a fused layer name that say what it computes (see the module docstring)."""
    name = _FOREIGN.sub(lambda m: f"{m.group(1)} + {m.group(2)}", str(name))
    out = []
    for t in (p.strip() for p in name.split(" + ")):
        t = _MYELIN.sub("", t)
        if t and not _QDQ.search(t) and not _DROP.search(t):
            out.append(t)
    return out


def role(name: str, layer_type: str | None = None, *, parameter_type: str | None = None,
         origin: str | None = None, in_precision: str | None = None,
         out_precision: str | None = None) -> str:
    """compute, qdq (a quantize or dequantize standing alone) or reformat (layout and copies).

    A layer is Q/DQ when its name holds only Q/DQ nodes, when TensorRT says so (Origin "QDQ", a
    Quantize or Dequantize layer or parameter type), or when a layout layer (reformat, no-op,
    shuffle, scale) turns a float tensor into a quantized one (INT8, FP8, FP4) or back, as TREx
    counts them: a ``Reformatting CopyNode`` from FP32 to Int8 is a quantize."""
    name = str(name)
    kinds = {t.lower() for t in (layer_type, parameter_type) if isinstance(t, str)}
    layout = name.startswith(_COPY) or bool(kinds & (_LAYOUT_TYPES | {"scale"}))
    converts = (bool(in_precision and out_precision)
                and (in_precision in _QUANTIZED) != (out_precision in _QUANTIZED))
    named_qdq = all(_QDQ.search(_MYELIN.sub("", p.strip())) for p in name.split(" + "))
    if origin == "QDQ" or any("quantize" in k for k in kinds) or (layout and converts) or named_qdq:
        return "qdq"
    if name.startswith(_COPY) or kinds & _LAYOUT_TYPES or (not kinds and not tokens(name)):
        return "reformat"  # without layer info, a name with no op left is an unnamed shuffle
    return "compute"


@dataclass(repr=False)
class LayerMatch(Result):
    """Two engines' layers side by side. Tables:

    - ``layers``: a_layer, b_layer, how (graph / name / signature / region / only_a / only_b),
      a_ms, b_ms, delta_ms, a_precision, b_precision (compute layers; per inference; a region
      lists its layers joined by `` | ``, its time is theirs summed);
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


@dataclass
class _Graph:
    """One engine's layers in engine order (NaN read as None; with their ``role``, ``kind`` and
    ``name_key``, the name's tokens) and, per compute layer, the compute layers that write its
    inputs (``feeds``; _INPUT for the network input) and read its outputs (``users``, keyed by
    layer or _INPUT; _OUTPUT for none)."""

    rows: list[dict]
    feeds: list[list[int]]
    users: dict[int, list[int]]

    def compute(self) -> list[int]:
        return [i for i, r in enumerate(self.rows) if r["role"] == "compute"]


def match(a: pd.DataFrame, b: pd.DataFrame) -> LayerMatch:
    """Match the layers of engine A and B. ``a``/``b``: one row per layer in engine order with
    ``name`` and ``ms`` (time per inference), and where known the layer-info columns of
    ``engine_layers`` (layer_type, parameter_type, precision, kernel, stride, out_maps, groups,
    in_dims, out_dims, origin, in/out_precision, inputs, outputs)."""
    ga, gb = _graph(a), _graph(b)
    partner = _pairs(ga, gb)
    groups = [([i], [j], how) for i, (j, how) in partner.items()]
    groups += _regions(ga, gb, {i: j for i, (j, _) in partner.items()})
    done_a = {i for g in groups for i in g[0]}
    done_b = {j for g in groups for j in g[1]}
    groups += [([i], [], "only_a") for i in ga.compute() if i not in done_a]
    groups += [([], [j], "only_b") for j in gb.compute() if j not in done_b]
    layers = pd.DataFrame([_row(ga, gb, g) for g in groups],
                          columns=["a_layer", "b_layer", "how", "a_ms", "b_ms", "a_precision",
                                   "b_precision", "order"])
    layers = layers.sort_values("order", kind="stable").drop(columns="order")
    layers.insert(5, "delta_ms", layers["b_ms"] - layers["a_ms"])
    conv = pd.DataFrame([{"run": run, "layer": r["name"], "role": r["role"], "ms": float(r["ms"]),
                          "precision": r.get("precision")}
                         for run, g in (("a", ga), ("b", gb)) for r in g.rows
                         if r["role"] != "compute"],
                        columns=["run", "layer", "role", "ms", "precision"])
    summary = pd.DataFrame([_summary("a", ga, layers), _summary("b", gb, layers)])
    return LayerMatch(layers.reset_index(drop=True), conv, summary)


def _graph(df: pd.DataFrame) -> _Graph:
    """``df`` as a graph of compute layers: each input tensor traced back through Q/DQ, reformat
    and other non-compute layers to the compute layer that wrote it."""
    # NaN (a value the layer info did not record, after the join) as None
    rows = [{k: None if isinstance(v, float) and math.isnan(v) else v for k, v in r.items()}
            for r in df.reset_index(drop=True).to_dict("records")]
    for r in rows:
        r["role"] = role(r["name"], r.get("layer_type"), parameter_type=r.get("parameter_type"),
                         origin=r.get("origin"), in_precision=r.get("in_precision"),
                         out_precision=r.get("out_precision"))
        r["kind"], r["name_key"] = _kind(r), " + ".join(tokens(r["name"]))
    writer = {t: i for i, r in enumerate(rows) for t in r.get("outputs") or []}

    def sources(tensor: str, seen: set[int]) -> list[int]:
        i = writer.get(tensor)
        if i is None:
            return [_INPUT]
        if rows[i]["role"] == "compute":
            return [i]
        if i in seen:
            return []
        seen.add(i)
        return [s for t in rows[i].get("inputs") or [] for s in sources(t, seen)]

    feeds = [list(dict.fromkeys(s for t in r.get("inputs") or [] for s in sources(t, set())))
             if r["role"] == "compute" else [] for r in rows]
    users: dict[int, list[int]] = defaultdict(list)
    for j, f in enumerate(feeds):
        for i in f:
            users[i].append(j)
    for i, r in enumerate(rows):
        if r["role"] == "compute" and r.get("outputs") and i not in users:
            users[i].append(_OUTPUT)
    return _Graph(rows, feeds, users)


def _kind(r: dict):
    """TensorRT's kind of layer, else (no layer info) the op types left in its name."""
    kind = r.get("parameter_type") or r.get("layer_type")
    if isinstance(kind, str) and kind:
        return kind
    return tuple(sorted({(_OP.match(t).group(1) if _OP.match(t) else t).lower()
                         for t in tokens(r["name"])}))


def _signature(r: dict) -> tuple:
    return (r["kind"], *(r.get(p) for p in _PARAMS))


def _pairs(a: _Graph, b: _Graph) -> dict[int, tuple[int, str]]:
    """The first pass (module docstring): A's compute layer -> (B's compute layer, how).
    Candidates are the free layers of B that read from the partners of the layer's producers,
    carry its name, or have its signature; the one with the most in common wins."""
    by_name, by_sig = defaultdict(list), defaultdict(list)
    for j in b.compute():
        by_name[b.rows[j]["name_key"]].append(j)
        by_sig[_signature(b.rows[j])].append(j)
    free = set(b.compute())
    partner: dict[int, tuple[int, str]] = {}
    for by_signature_too in (False, True):
        for i in a.compute():
            if i in partner:
                continue
            r = a.rows[i]
            mapped = {partner[f][0] if f >= 0 else f for f in a.feeds[i] if f < 0 or f in partner}
            near = {u for f in mapped for u in b.users.get(f, [])}
            best = None
            named = set(by_name.get(r["name_key"], [])) if r["name_key"] else set()
            for j in sorted((near | named | set(by_sig.get(_signature(r), []))) & free):
                ev = _evidence(r, b.rows[j], mapped, b.feeds[j])
                if ev and (by_signature_too or ev[0] or ev[1]) and (best is None or ev > best[0]):
                    best = (ev, j)
            if best:
                (shared, same_name, _), j = best
                partner[i] = (j, "graph" if shared else "name" if same_name else "signature")
                free.discard(j)
    return partner


def _evidence(ra: dict, rb: dict, mapped: set[int], feeds_b: list[int]) -> tuple | None:
    """What layers ``ra`` of A and ``rb`` of B have in common, as a comparable (producers shared,
    same name, parameters equal); None when they cannot be one layer."""
    if ra["kind"] != rb["kind"] or (ra.get("out_dims") and rb.get("out_dims")
                                    and ra["out_dims"] != rb["out_dims"]):
        return None
    shared = len(mapped & set(feeds_b))
    same_name = bool(ra["name_key"]) and ra["name_key"] == rb["name_key"]
    same = sum(ra.get(p) == rb.get(p) for p in _PARAMS)
    if not (shared or same_name or same == len(_PARAMS)):
        return None
    return (shared, same_name, same)


def _regions(a: _Graph, b: _Graph, to_b: dict[int, int]) -> list[tuple[list[int], list[int], str]]:
    """The second pass (module docstring): runs of unpaired layers of A and B between the same
    paired layers, paired in engine order where several runs share their bounds."""
    runs_b = _runs(b, set(to_b.values()), lambda j: j)
    out = []
    # a layer of A next to a run is paired (or the network's input or output), else it has no
    # graph info: then the run's bounds name it apart from every layer of B
    for key, runs in _runs(a, set(to_b), lambda i: i if i < 0 else to_b.get(i, ("a", i))).items():
        out += [(ra, rb, "region") for ra, rb in zip(runs, runs_b.get(key, []))]
    return out


def _runs(g: _Graph, paired: set[int], as_b) -> dict[tuple, list[list[int]]]:
    """The connected runs of ``g``'s unpaired compute layers (those with graph info), keyed by
    the layers (as B's indices, via ``as_b``) that feed them and that read them."""
    left = {i for i in g.compute() if i not in paired and g.feeds[i]}
    runs: dict[tuple, list[list[int]]] = defaultdict(list)
    while left:
        run, todo = set(), [min(left)]
        while todo:
            i = todo.pop()
            if i in left:
                left.discard(i)
                run.add(i)
                todo += [n for n in g.feeds[i] + g.users.get(i, []) if n in left]
        ins = frozenset(as_b(f) for i in run for f in g.feeds[i] if f not in run)
        outs = frozenset(as_b(u) for i in run for u in g.users.get(i, []) if u not in run)
        runs[(ins, outs)].append(sorted(run))
    return runs


def _row(ga: _Graph, gb: _Graph, group: tuple[list[int], list[int], str]) -> dict:
    """One line of the ``layers`` table for paired layers (or a region, or one unpaired)."""
    ia, ib, how = group

    def side(g: _Graph, ids: list[int]) -> tuple:
        if not ids:
            return None, 0.0, None
        rows = [g.rows[i] for i in ids]
        precisions = dict.fromkeys(r["precision"] for r in rows if r.get("precision"))
        return (" | ".join(r["name"] for r in rows), sum(float(r["ms"]) for r in rows),
                ",".join(precisions) or None)

    (na, ma, pa), (nb, mb, pb) = side(ga, ia), side(gb, ib)
    return {"a_layer": na, "b_layer": nb, "how": how, "a_ms": ma, "b_ms": mb, "a_precision": pa,
            "b_precision": pb, "order": ia[0] if ia else len(ga.rows) + ib[0]}


def _summary(run: str, g: _Graph, layers: pd.DataFrame) -> dict:
    """One engine's line of the ``summary`` table: its compute time, the share of it in matched
    layers (pairs and regions), and its standalone Q/DQ and reformat time."""
    def ms(which: str) -> float:
        return float(sum(r["ms"] for r in g.rows if r["role"] == which))

    compute = ms("compute")
    matched = float(layers.loc[~layers["how"].isin(["only_a", "only_b"]), f"{run}_ms"].sum())
    return {"run": run, "compute_ms": compute, "matched_ms": matched,
            "matched_pct": 100.0 * matched / compute if compute else float("nan"),
            "qdq_ms": ms("qdq"), "reformat_ms": ms("reformat"),
            "layers": len(g.compute())}


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
