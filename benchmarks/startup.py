"""Benchmark: how long the CLI takes when there is nothing to compute.

    python benchmarks/startup.py [REPORT]     (default: the ViT FP16 fixture)

Times, in fresh processes (best of 5): `nsightlab --help`, `nsightlab info REPORT` and
`nsightlab recipe run kernel_sum REPORT` on a report whose tables and results are cached.
Targets (issue #13, development machine): --help <= 0.3 s, cached info / recipe <= 0.5 s.
"""
from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

from common import SHARED

EXE = Path(sys.executable).with_name("nsightlab")


def best(args: list[str], runs: int = 5) -> float:
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        subprocess.run([str(EXE), *args], check=True, capture_output=True)
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> None:
    report = sys.argv[1] if len(sys.argv) > 1 else str(SHARED / "fixtures/nsys/h200-vit-fp16.sqlite")
    if not EXE.exists() and shutil.which("nsightlab"):
        globals()["EXE"] = Path(shutil.which("nsightlab"))
    subprocess.run([str(EXE), "recipe", "run", "kernel_sum", report], check=True,
                   capture_output=True)  # tables and the result cached
    rows = [("nsightlab --help", best(["--help"]), 0.3),
            ("nsightlab info (cached)", best(["info", report]), 0.5),
            ("recipe run kernel_sum (cached)", best(["recipe", "run", "kernel_sum", report]), 0.5)]
    print(f"{'command':<32} {'best_s':>7} {'target_s':>9}")
    for name, s, target in rows:
        print(f"{name:<32} {s:7.2f} {target:9.1f}{'' if s <= target else '  (over)'}")


if __name__ == "__main__":
    main()
