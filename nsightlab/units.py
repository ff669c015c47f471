"""Units for people: nanoseconds as the milliseconds verdicts and tables show."""
from __future__ import annotations


def ms_columns(df):
    """A copy of DataFrame ``df`` with every ``*_ns`` column shown as ``*_ms``, in place."""
    out = df.copy()
    for c in list(out.columns):
        if str(c).endswith("_ns"):
            out.insert(list(out.columns).index(c), str(c)[:-3] + "_ms", out.pop(c) / 1e6)
    return out


def fmt_ms(ns: float) -> str:
    """Nanoseconds as '12.34 ms' (for verdicts and findings)."""
    return f"{ns / 1e6:.2f} ms"
