"""CI gates on a comparison: ``--fail-if 'latency_p50 > +5%'``.

A rule is ``METRIC OP CHANGE``: the change of METRIC from the baseline (A) to the run (B) is
compared with CHANGE. CHANGE is relative (``+5%``, ``-10%``) or absolute with a time unit
(``+0.5ms``, ``200us``, ``1e6ns``); OP is ``>``, ``>=``, ``<`` or ``<=``. METRICs, all per
iteration:

- ``latency_mean``, ``latency_p50``, ``latency_p95``, ``latency_p99``, ``latency_min``,
  ``latency_max``: the wall-clock iteration; ``throughput``: iterations per second (use a
  relative CHANGE; ``throughput < -5%`` fails when it drops by more than 5%);
- ``kernel_time``: GPU kernel time; ``conversion``: precision-conversion kernels B adds (0 in A);
- ``class:NAME`` (``class:quantize``), ``precision:NAME`` (``precision:fp32``) and
  ``layer:NAME`` (``layer:block3``): kernel time of that class, precision or layer.

Examples: ``latency_p50 > +5%``, ``class:quantize > +0.5ms``, ``conversion > 1ms``,
``layer:block3 > +10%``. A run that breaks a rule makes the command exit with status 3.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from nsightlab.run.model import RunProfile, layer_key
from nsightlab.errors import UsageError

EXIT_FAILED = 3
_RULE = re.compile(r"^\s*(?P<metric>[A-Za-z_][A-Za-z0-9_]*(?::.+?)?)\s*(?P<op>>=|<=|>|<)\s*"
                   r"(?P<value>[+-]?\d+(?:\.\d+)?(?:e\d+)?)\s*(?P<unit>%|ms|us|µs|ns)\s*$")
_UNIT_NS = {"ms": 1e6, "us": 1e3, "µs": 1e3, "ns": 1.0}
_LATENCY = ("mean", "p50", "p95", "p99", "min", "max")
METRICS = (*(f"latency_{k}" for k in _LATENCY), "throughput", "kernel_time", "conversion",
           "class:NAME", "precision:NAME", "layer:NAME")


@dataclass(frozen=True)
class Rule:
    """One parsed ``--fail-if`` rule."""

    text: str
    metric: str
    op: str
    value: float   # percent, or ns
    relative: bool

    def broken(self, change: float) -> bool:
        return {">": change > self.value, ">=": change >= self.value,
                "<": change < self.value, "<=": change <= self.value}[self.op]


def parse(text: str) -> Rule:
    """A ``--fail-if`` rule (UsageError naming the grammar when it is not one)."""
    m = _RULE.match(text)
    metric = m.group("metric") if m else ""
    kind, _, name = metric.partition(":")
    known = metric in METRICS or (kind in ("class", "precision", "layer") and name.strip() != "")
    if not m or not known:
        raise UsageError(f"--fail-if {text!r}: not a rule; write METRIC OP CHANGE, e.g. "
                         f"'latency_p50 > +5%' or 'class:quantize > +0.5ms' (METRIC: "
                         f"{', '.join(METRICS)})")
    unit = m.group("unit")
    value = float(m.group("value")) * (1.0 if unit == "%" else _UNIT_NS[unit])
    return Rule(text.strip(), metric.strip(), m.group("op"), value, unit == "%")


def value_of(p: RunProfile, metric: str, conversion_ns: float = 0.0) -> float:
    """The run's value of ``metric`` (ns per iteration; iterations/s for throughput)."""
    if metric.startswith("latency_"):
        return p.latency.get(f"{metric[8:]}_ns", p.median_ns)
    if metric == "throughput":
        mean = p.latency.get("mean_ns", p.median_ns)
        return 1e9 / mean if mean else 0.0
    if metric == "kernel_time":
        return p.kernel_ns
    if metric == "conversion":
        return conversion_ns
    kind, name = metric.split(":", 1)
    if kind == "class":
        return float(p.by_class.loc[p.by_class["kernel_class"] == name, "time_ns"].sum())
    if kind == "precision":
        return float(p.by_precision.loc[p.by_precision["precision"] == name, "time_ns"].sum())
    return float(p.by_layer.loc[p.by_layer["layer"].map(layer_key) == layer_key(name), "time_ns"].sum())


def check(rules: list[Rule], a: RunProfile, b: RunProfile, conversion_ns: float) -> list[str]:
    """One line per rule that run ``b`` breaks against ``a``: what changed, from what to what."""
    out = []
    for r in rules:
        va, vb = value_of(a, r.metric), value_of(b, r.metric, conversion_ns)
        if r.relative:
            if not va:
                continue  # no relative change from nothing
            change = 100.0 * (vb - va) / va
            shown = f"{change:+.1f}%"
        else:
            change = vb - va
            shown = f"{change / 1e6:+.3f} ms"
        if r.broken(change):
            unit = "/s" if r.metric == "throughput" else " ms"
            scale = 1.0 if r.metric == "throughput" else 1e6
            out.append(f"FAIL {b.label}: {r.metric} changed {shown} ({va / scale:.3f}{unit} -> "
                       f"{vb / scale:.3f}{unit}), rule '{r.text}'")
    return out
