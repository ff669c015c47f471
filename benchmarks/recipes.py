"""Benchmark: kernel_sum + launch_compute + sync_gaps on the 8M-kernel report, against nsys.

Each case runs in a fresh Python process (time from nsightlab.open to the three results;
peak RSS of that process):

  cold         no cache at all: tables are read from SQLite (and cached), then analysed
  tables warm  the Parquet table cache exists, recipe results do not: the analysis cost
  warm         everything cached: what a repeated `nsightlab recipe run` costs

If `nsys` is on PATH, its equivalents run on the same file (`nsys stats` gpukernsum /
kernexecsum or cuda_gpu_kern_sum / cuda_kern_exec_sum, `nsys analyze` GPU gaps and sync
APIs), each timed with its peak RSS, and the ratio is printed.

--each runs every recipe in its own fresh process instead (kernel_sum first, on no cache;
the others on the tables it cached), as the issue's table does, once per analysis engine
named by --engines (NSIGHTLAB_ENGINE: numpy, duckdb, auto), with peak RSS per recipe.

usage: python benchmarks/recipes.py [--copies N] [--work DIR] [--no-nsys] [--each]
                                    [--engines numpy,duckdb]
Targets (issue #3, 2-core machine): <= 18 s cold, <= 1.5 s warm, <= 1 GB peak RSS.
"""
from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from pathlib import Path

from common import DEFAULT_WORK, in_fresh_process, scaled_report

RECIPES = ("kernel_sum", "launch_compute", "sync_gaps")

CHILD = r"""
import json, resource, sys, time
import nsightlab, nsightlab.recipe_runner as R
path, cache_dir = sys.argv[1], sys.argv[2]
t0 = time.perf_counter()
r = nsightlab.open(path, cache_dir=cache_dir)
seconds = {}
for name in sys.argv[3:]:
    t = time.perf_counter(); R.run(name, r); seconds[name] = time.perf_counter() - t
print(json.dumps({"seconds": time.perf_counter() - t0, "each": seconds,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""

TIMED = r"""
import json, resource, subprocess, sys, time
t = time.perf_counter()
p = subprocess.run(sys.argv[1:], capture_output=True, text=True)
print(json.dumps({"seconds": time.perf_counter() - t, "rc": p.returncode,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
                  "tail": (p.stdout + p.stderr)[-300:]}))
"""


def nsys_commands(report: Path, out: Path) -> list[tuple[str, list[str]]]:
    """nsys's equivalents of the three recipes, with this nsys's report names."""
    nsys = shutil.which("nsys")
    reports = subprocess.run([nsys, "stats", "--help-reports"], capture_output=True,
                             text=True).stdout
    new = "cuda_gpu_kern_sum" in reports
    ksum, kexec = ("cuda_gpu_kern_sum", "cuda_kern_exec_sum") if new else ("gpukernsum", "kernexecsum")
    rules = subprocess.run([nsys, "analyze", "--help-rules"], capture_output=True, text=True).stdout
    gaps = "gpu_gaps" if "gpu_gaps" in rules else "gpu-starv"
    sync = "cuda_api_sync" if "cuda_api_sync" in rules else "cuda-sync-api"
    common = ["--format", "csv", "--force-export", "false"]
    return [
        (ksum, [nsys, "stats", "--report", ksum, *common, "-o", str(out / "k"), str(report)]),
        (kexec, [nsys, "stats", "--report", kexec, *common, "-o", str(out / "x"), str(report)]),
        (gaps, [nsys, "analyze", "--rule", gaps, "--format", "csv", "-o", str(out / "g"), str(report)]),
        (sync, [nsys, "analyze", "--rule", sync, "--format", "csv", "-o", str(out / "s"), str(report)]),
    ]


def run_nsys(report: Path, work: Path, skip: bool = False) -> float | None:
    """NVIDIA's four equivalents (``nsys_commands``) on ``report``, each in a fresh process,
    printed with time and peak RSS; their total seconds, or None when nsys is skipped or not
    on PATH (said)."""
    if skip or not shutil.which("nsys"):
        print("" if skip else "\n(nsys not on PATH: no comparison)")
        return None
    version = re.search(r"\d{4}\.\d+\.\d+", subprocess.run(["nsys", "--version"], capture_output=True,
                                                            text=True).stdout)
    out = work / "nsys-out"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir()
    print(f"\nnsys {version.group(0) if version else '?'} on the same file:", flush=True)
    total, peak = 0.0, 0.0
    for label, cmd in nsys_commands(report, out):
        m = in_fresh_process(TIMED, *cmd)
        ok = "" if m["rc"] == 0 else f"  (exit {m['rc']}: {m['tail'].strip().splitlines()[-1][:80]})"
        print(f"  {label:<22} {m['seconds']:7.2f} s {m['peak_rss_mb']:8.0f} MB{ok}", flush=True)
        total += m["seconds"]
        peak = max(peak, m["peak_rss_mb"])
    print(f"  {'total':<22} {total:7.2f} s {peak:8.0f} MB (max)")
    return total


def per_recipe(report: Path, cache: Path, engines: list[str], cold_only: bool = False) -> None:
    """One fresh process per recipe and engine: cold (kernel_sum on no cache, the others on
    the tables it cached, as a user running three commands) and tables warm."""
    import os

    print(f"\nreport: {report} ({report.stat().st_size / 2**30:.2f} GiB), one process per recipe")
    print(f"{'engine':<8} {'case':<12} {'recipe':<16} {'time_s':>7} {'peak_rss_mb':>12} "
          f"{'tree_pss_mb':>12}")
    for engine in engines:
        os.environ["NSIGHTLAB_ENGINE"] = engine
        shutil.rmtree(cache, ignore_errors=True)
        for case in ("cold",) if cold_only else ("cold", "tables warm"):
            total = 0.0
            for d in cache.glob("*/results"):
                shutil.rmtree(d)
            for name in RECIPES:
                m = in_fresh_process(CHILD, report, cache, name)
                total += m["seconds"]
                print(f"{engine:<8} {case:<12} {name:<16} {m['seconds']:7.2f} "
                      f"{m['peak_rss_mb']:12.0f} {m['tree_pss_mb']:12.0f}", flush=True)
            print(f"{engine:<8} {case:<12} {'(the three)':<16} {total:7.2f}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--copies", type=int, default=100)
    ap.add_argument("--work", type=Path, default=DEFAULT_WORK)
    ap.add_argument("--no-nsys", action="store_true", help="skip the nsys comparison")
    ap.add_argument("--each", action="store_true", help="one fresh process per recipe")
    ap.add_argument("--engines", default="auto", help="with --each: engines to compare")
    ap.add_argument("--cold-only", action="store_true", help="with --each: skip 'tables warm'")
    args = ap.parse_args()
    report = scaled_report(args.work, args.copies)
    cache = args.work / "recipe-cache"
    shutil.rmtree(cache, ignore_errors=True)
    if args.each:
        per_recipe(report, cache, args.engines.split(","), args.cold_only)
        return
    rows = []
    cold = in_fresh_process(CHILD, report, cache, *RECIPES)
    rows.append(("cold (no cache)", cold))
    for d in cache.glob("*/results"):  # derived results, not the tables
        shutil.rmtree(d)
    rows.append(("tables warm", in_fresh_process(CHILD, report, cache, *RECIPES)))
    rows.append(("warm", in_fresh_process(CHILD, report, cache, *RECIPES)))

    print(f"\nreport: {report} ({report.stat().st_size / 2**30:.2f} GiB)")
    print(f"{'nsightlab':<18} {'time_s':>7} {'peak_rss_mb':>12} {'tree_rss_mb':>12} "
          f"{'tree_pss_mb':>12}  " + "  ".join(f"{r}_s" for r in RECIPES))
    for label, m in rows:
        each = "  ".join(f"{m['each'][r]:>{len(r) + 2}.2f}" for r in RECIPES)
        print(f"{label:<18} {m['seconds']:7.2f} {m['peak_rss_mb']:12.0f} {m['tree_rss_mb']:12.0f} "
              f"{m['tree_pss_mb']:12.0f}  {each}")

    total = run_nsys(report, args.work, args.no_nsys)
    if total is None:
        return
    print(f"\nnsightlab cold is {total / cold['seconds']:.1f}x faster than nsys on this file; "
          f"cached results {total / rows[2][1]['seconds']:.0f}x")


if __name__ == "__main__":
    sys.exit(main())
