"""Benchmark: other report shapes at scale. Each fixture named is tiled COPIES times in time
(``make_scaled_report.py``), then kernel_sum (on no cache), launch_compute and sync_gaps (on
the tables it cached) each run in a fresh process: time, and peak RSS (VmHWM) of that process.
With ``--compare``, the same under NSIGHTLAB_ENGINE=numpy, and each table compared with the
first engine's (counts exact, numbers within 1e-9 relative).

The launch-bound benchmark (recipes.py) has one NVTX range per iteration, one call per
kernel, no graphs; these shapes are the ones it misses:

  h200-vit-fp16-cudagraph:2460   8.0M kernels replayed from CUDA graphs (13.7M calls)
  pub-realcugan-trt10:530        8.1M kernels, 13.6M TensorRT NVTX ranges (one per layer)
  h200-vit-fp16-syncy:2180       8.0M kernels, 29.8M calls, a host sync in every block

usage: python benchmarks/shapes.py FIXTURE:COPIES... [--work DIR] [--compare]
(fixtures from tests/data/nsys; the scaled report is deleted after its row)
"""
from __future__ import annotations

import argparse
import os
import pickle
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from common import DEFAULT_WORK, HERE, SHARED

RECIPES = ("kernel_sum", "launch_compute", "sync_gaps")
CHILD = r"""
import pickle, sys, time
import nsightlab, nsightlab.recipe_runner as R
path, cache, out, name = sys.argv[1:5]
t = time.perf_counter(); got = R.run(name, nsightlab.open(path, cache_dir=cache))
seconds = time.perf_counter() - t
pickle.dump((seconds, {k: got[k] for k in got}), open(out, "wb"))
print("peak_mb", int(open("/proc/self/status").read().split("VmHWM:")[1].split()[0]) // 1024)
"""


def child(engine: str, path: Path, cache: Path, out: Path, recipe: str):
    env = {**os.environ, "NSIGHTLAB_ENGINE": engine}
    p = subprocess.run([sys.executable, "-c", CHILD, str(path), str(cache), str(out), recipe],
                       capture_output=True, text=True, env=env)
    if p.returncode:
        print(p.stderr[-2000:])
        return None
    seconds, tables = pickle.load(open(out, "rb"))
    return seconds, tables, int(p.stdout.split("peak_mb")[1])


def same(a, b) -> str:
    import pandas as pd

    bad = []
    for k, x in a.items():
        try:
            pd.testing.assert_frame_equal(x.reset_index(drop=True), b[k].reset_index(drop=True),
                                          check_exact=False, rtol=1e-9, check_dtype=False,
                                          check_categorical=False)
        except AssertionError as e:
            bad.append(f"{k}: {str(e).splitlines()[0]}")
    return "equal" if not bad else "DIFFERS " + "; ".join(bad)[:400]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("shapes", nargs="+", metavar="FIXTURE:COPIES")
    ap.add_argument("--work", type=Path, default=DEFAULT_WORK / "shapes")
    ap.add_argument("--compare", action="store_true", help="also run NSIGHTLAB_ENGINE=numpy")
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    engines = ["auto", "numpy"] if args.compare else ["auto"]
    print(f"{'report':44} {'engine':6} {'recipe':15} {'time_s':>7} {'peak_mb':>8}")
    for shape in args.shapes:
        name, copies = shape.split(":")
        path = args.work / f"{name}-x{copies}.sqlite"
        path.unlink(missing_ok=True)
        t = time.time()
        subprocess.run([sys.executable, str(SHARED / "bench/make_scaled_report.py"),
                        str(HERE.parent / "tests/data/nsys" / f"{name}.sqlite.xz"), str(path),
                        copies], check=True, capture_output=True)
        with sqlite3.connect(path) as c:
            n = {t: c.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
                 for t in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME")}
        print(f"# {name} x{copies}: {n['CUPTI_ACTIVITY_KIND_KERNEL'] / 1e6:.1f}M kernels, "
              f"{n['CUPTI_ACTIVITY_KIND_RUNTIME'] / 1e6:.1f}M calls, "
              f"{path.stat().st_size / 2**30:.2f} GiB, built in {time.time() - t:.0f} s")
        first = {}
        for engine in engines:
            cache = args.work / "cache"
            shutil.rmtree(cache, ignore_errors=True)
            for recipe in RECIPES:
                got = child(engine, path, cache, args.work / "out.pkl", recipe)
                if got is None:
                    print(f"{path.name:44} {engine:6} {recipe:15} FAILED")
                    continue
                seconds, tables, peak = got
                note = same(first[recipe], tables) if recipe in first else ""
                first.setdefault(recipe, tables)
                print(f"{path.name:44} {engine:6} {recipe:15} {seconds:7.2f} {peak:8d}  {note}",
                      flush=True)
        shutil.rmtree(args.work / "cache", ignore_errors=True)
        path.unlink()


if __name__ == "__main__":
    main()
