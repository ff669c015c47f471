"""Numbers as the words of a verdict: the one formatting helper models (not renderers) need."""
from __future__ import annotations


def fmt_ms(ns: float) -> str:
    """Nanoseconds as '12.34 ms' (for verdicts and findings)."""
    return f"{ns / 1e6:.2f} ms"
