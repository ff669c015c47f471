"""One place that turns a DataFrame into output: terminal table, CSV, JSON or Parquet.

Commands never branch on the format themselves; they call ``render``.
"""
from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pandas as pd

FORMATS = ("table", "csv", "json", "parquet")


def render(df: pd.DataFrame, fmt: str, out: str | Path | None = None) -> None:
    """Write ``df`` as ``fmt`` to ``out`` (a path) or stdout. Parquet needs a path."""
    if fmt == "parquet":
        if out is None:
            raise ValueError("parquet output needs -o FILE")
        df.to_parquet(out, index=False)
        return
    if fmt == "csv":
        text = df.to_csv(index=False)
    elif fmt == "json":
        text = json.dumps(json.loads(df.to_json(orient="records")), indent=1) + "\n"
    elif fmt == "table":
        text = table_text(df)
    else:
        raise ValueError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
    if out is None:
        sys.stdout.write(text)
    else:
        Path(out).write_text(text)


def fmt_ms(ns: float) -> str:
    """Nanoseconds as '12.34 ms' (for verdicts and findings)."""
    return f"{ns / 1e6:.2f} ms"


def table_text(df: pd.DataFrame, max_width: int = 60) -> str:
    """Aligned plain-text table; long cells are shortened in the middle so rows stay readable."""
    if df.empty:
        return "(no rows)\n" if len(df.columns) == 0 else "  ".join(df.columns) + "\n(no rows)\n"

    def cell(v) -> str:
        if isinstance(v, float) and not pd.isna(v):
            # nsys prints ns times and percentages to 0.1; small values (ms) keep 3 decimals
            return f"{v:.1f}" if abs(v) >= 100 or v == int(v) else f"{v:.3f}"
        s = "" if v is None or (not isinstance(v, str) and pd.isna(v)) else str(v)
        return s if len(s) <= max_width else s[: max_width // 2 - 1] + "…" + s[-(max_width // 2):]

    cols = [str(c) for c in df.columns]
    rows = [[cell(v) for v in r] for r in df.itertuples(index=False, name=None)]
    numeric = [pd.api.types.is_numeric_dtype(df[c]) for c in df.columns]
    widths = [max([len(c)] + [len(r[i]) for r in rows]) for i, c in enumerate(cols)]
    buf = io.StringIO()

    def line(vals: list[str]) -> None:
        parts = [v.rjust(w) if num else v.ljust(w) for v, w, num in zip(vals, widths, numeric)]
        buf.write("  ".join(parts).rstrip() + "\n")

    line(cols)
    line(["-" * w for w in widths])
    for r in rows:
        line(r)
    return buf.getvalue()


def info_text(info: dict) -> str:
    """Human summary of ``Report.info()`` for the terminal."""
    out = [str(info["path"])]
    out.append(f"  nsys {info['nsys_version'] or '?'} · export schema {info['schema_version'] or '?'}")
    for g in info["gpus"]:
        mem = f", {g['memory_bytes'] / 2**30:.1f} GiB" if g.get("memory_bytes") else ""
        sms = f", {g['sm_count']} SMs" if g.get("sm_count") else ""
        cc = f", cc {g['compute_capability']}" if g.get("compute_capability") else ""
        out.append(f"  GPU {g['device_id']}: {g['name']} ({g.get('chip') or '?'}{sms}{mem}{cc})")
    if not info["gpus"]:
        out.append("  GPUs: none recorded")
    procs = [p for p in info["processes"] if p.get("uses_cuda")]
    shown = ", ".join(f"{p['name']} ({p['pid']})" for p in procs[:4])
    out.append(f"  CUDA processes: {shown or 'none'}"
               + (f" and {len(procs) - 4} more" if len(procs) > 4 else "")
               + f"  [{len(info['processes'])} processes recorded]")
    if info["span_ns"] is not None:
        out.append(f"  span: {info['span_ns'] / 1e9:.3f} s "
                   f"({info['start_ns']} → {info['end_ns']} ns)")
    out.append("  tables:")
    width = max(len(t) for t in info["tables"])
    for t, n in info["tables"].items():
        hint = info["missing"].get(t)
        if hint:
            out.append(f"    {t:<{width}}  {'—':>11}  not recorded ({hint.split(': ', 1)[-1]})")
        else:
            out.append(f"    {t:<{width}}  {n:>11,}")
    return "\n".join(out) + "\n"
