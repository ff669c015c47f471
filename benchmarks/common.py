"""Shared by the benchmarks: the scaled report, and measuring code in a fresh process."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SHARED = HERE.parent.parent / "shared"
DEFAULT_WORK = Path(os.environ.get("TMPDIR", "/tmp")) / "nsightlab-bench"
DEFAULT_SOURCE = SHARED / "fixtures/nsys/h200-launchbound.sqlite.xz"


def scaled_report(work: Path, copies: int, source: Path = DEFAULT_SOURCE) -> Path:
    """``source`` tiled ``copies`` times in time (built once, with make_scaled_report.py)."""
    work.mkdir(parents=True, exist_ok=True)
    report = work / f"launchbound-x{copies}.sqlite"
    if not report.exists():
        print(f"building {report} ({copies} copies of {source.name}) ...", file=sys.stderr)
        subprocess.run([sys.executable, str(SHARED / "bench/make_scaled_report.py"),
                        str(source), str(report), str(copies)], check=True)
    return report


def in_fresh_process(code: str, *args: str) -> dict:
    """Run ``code`` (which prints one JSON line last) in a new interpreter; return that JSON.
    Timing and peak RSS are measured inside the child, so each case starts cold in memory."""
    out = subprocess.run([sys.executable, "-c", code, *map(str, args)], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


