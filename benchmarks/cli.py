"""Benchmark: the commands users type, each a fresh process, side by side with NVIDIA's nsys.

On the scaled report (``make_scaled_report.py`` on the launch-bound fixture, 100 copies:
8M kernels, 16M API calls), in one run:

  three recipes   ``nsightlab recipe run kernel_sum|launch_compute|sync_gaps REPORT`` one
                  after the other, cold: a fresh cache that the three share (as a user typing
                  them)
  report          ``nsightlab report REPORT``, cold (its own fresh cache)
  diff            ``nsightlab diff REPORT REPORT``, cold (as benchmarks/diff.py runs it)
  served          the three recipes again: answers served from the cache
  nonvtx          the three recipes and ``report``, cold, on a copy of the report without its
                  NVTX table (iterations found in the trace: the common case of a shared trace)
  processes       ``nsightlab report`` on the same copies shared by two processes running at
                  once on one GPU (4M kernels each; issue 48's target: at most 1.1x the
                  one-process report)
  nsys            NVIDIA's four reports of the same questions (``nsys stats`` kernel summary
                  and kernel execution summary, ``nsys analyze`` GPU gaps and sync APIs)

Each command's time is wall clock from process start to exit (interpreter start, imports and
writing its output included; stdout goes to a file). ``main_rss_mb`` is the command's own peak
RSS (getrusage in the process); ``tree_pss_mb`` the peak PSS of it and its reader processes
together, sampled every 250 ms.

usage: python benchmarks/cli.py [--copies N] [--work DIR] [--no-nsys] [--only report,diff]
Targets (issue 29): three recipes >= 20x nsys 2025.3 on 16 cores (>= 4x Debian's nsys on 2
cores); report and diff <= 1.5x the three recipes; main RSS <= 1 GB, tree PSS <= 2 GB.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

from common import DEFAULT_WORK, in_fresh_process, scaled_report
from recipes import RECIPES, run_nsys

#: runs ``nsightlab`` with argv in this fresh interpreter, its stdout into a file; prints one
#: JSON line (its own peak RSS) on the real stdout at exit
COMMAND = r"""
import atexit, json, os, resource, sys
out, argv = sys.argv[1], sys.argv[2:]
real = os.dup(1)
fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
os.dup2(fd, 1)


def done():  # registered first, so it runs last: after the command's own exit handlers
    sys.stdout.flush()
    os.write(real, (json.dumps({"rc": 0, "peak_rss_mb":
        resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}) + "\n").encode())


atexit.register(done)
from nsightlab.cli import main
sys.argv = ["nsightlab", *argv]
main()  # exits as the installed command does (``nsightlab.cli.leave``)
"""


def command(args: list[str], out: Path, cache: Path) -> dict:
    """One nsightlab command in a fresh process: seconds (wall, from the parent), rc, main
    and tree memory."""
    import time

    os.environ["NSIGHTLAB_CACHE_DIR"] = str(cache)
    t = time.perf_counter()
    m = in_fresh_process(COMMAND, str(out), *args)
    m["seconds"] = time.perf_counter() - t
    if m["rc"] != 0:
        raise SystemExit(f"nsightlab {' '.join(args)} failed (exit {m['rc']})")
    m["out_mb"] = out.stat().st_size / 2**20
    return m


#: the packages a command imports (altair only renders charts: not on these commands' path)
IMPORTED = ("numpy", "pandas", "pyarrow", "duckdb", "click")


def cpu_model() -> str:
    """The processor's model name (hosts of one machine kind differ: compare within a call)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "processor unknown"


def byte_compiled() -> int:
    """Compile nsightlab, its recipes and the packages the commands import to bytecode in
    place before timing, as ``pip install`` does; returns the modules that had none.

    A checkout copied to another machine has none, and where PYTHONDONTWRITEBYTECODE is set
    (the GPU machine) every command then compiled ~150 modules of ours (0.4-0.6 s a command,
    ``builtins.compile`` in its profile). The GPU machine's NumPy has no bytecode either
    (its image installs without it), nor does a DuckDB unpacked there by hand: 0.4-0.6 s more
    a command (``-X importtime``: numpy 0.64 s). An installed user pays neither. (Not
    PYTHONPYCACHEPREFIX: Python then looks for every module's bytecode under the prefix
    alone, and compiles the packages not there in every command.)"""
    import compileall
    import importlib.util

    root = Path(__file__).resolve().parent.parent
    folders = [root / "nsightlab", root / "recipes"]
    for name in IMPORTED:
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.submodule_search_locations:
            folders += [Path(p) for p in spec.submodule_search_locations]
    missing = 0
    for folder in folders:
        if not os.access(folder, os.W_OK):
            continue
        sources = [p for p in folder.rglob("*.py")
                   if not Path(importlib.util.cache_from_source(str(p))).exists()]
        missing += len(sources)
        if sources:
            compileall.compile_dir(folder, quiet=2, workers=os.cpu_count() or 1)
    return missing


def engine_in_use() -> str:
    """What ``NSIGHTLAB_ENGINE`` gives on this machine: big reports go to DuckDB under
    ``auto`` only where it is installed (it is a dependency; a bare checkout may lack it)."""
    import importlib.util

    how = os.environ.get("NSIGHTLAB_ENGINE", "auto") or "auto"
    if importlib.util.find_spec("duckdb") is None:
        return f"{how} (DuckDB not installed: NumPy in memory)"
    import duckdb

    return f"{how} (DuckDB {duckdb.__version__})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--copies", type=int, default=100)
    ap.add_argument("--work", type=Path, default=DEFAULT_WORK)
    ap.add_argument("--no-nsys", action="store_true", help="skip the nsys comparison")
    ap.add_argument("--only", default="recipes,report,diff,served,nonvtx",
                    help="which cases (recipes, report, diff, served, nonvtx: the three "
                         "recipes and report on a copy without NVTX_EVENTS; processes: report "
                         "on the copies shared by two processes)")
    args = ap.parse_args()
    report = scaled_report(args.work, args.copies)
    compiled = byte_compiled()
    only = set(args.only.split(","))
    outs = args.work / "cli-out"
    shutil.rmtree(outs, ignore_errors=True)
    outs.mkdir(parents=True)
    rows: list[tuple[str, dict]] = []

    def fresh(name: str) -> Path:
        d = args.work / f"cli-cache-{name}"
        shutil.rmtree(d, ignore_errors=True)
        return d

    cores = len(os.sched_getaffinity(0))
    print(f"report: {report} ({report.stat().st_size / 2**30:.2f} GiB), {cores} cores "
          f"({cpu_model()}), engine: {engine_in_use()}; {compiled} modules compiled to bytecode "
          "first", flush=True)
    print(f"{'command':<40} {'time_s':>7} {'main_rss_mb':>12} {'tree_pss_mb':>12} {'out_mb':>7}",
          flush=True)

    def show(label: str, m: dict) -> None:
        rows.append((label, m))
        print(f"{label:<40} {m['seconds']:7.2f} {m['peak_rss_mb']:12.0f} {m['tree_pss_mb']:12.0f} "
              f"{m.get('out_mb', 0):7.2f}", flush=True)

    three = 0.0
    if "recipes" in only or "served" in only:
        cache = fresh("recipes")
        for name in RECIPES:
            m = command(["recipe", "run", name, str(report)], outs / f"{name}.txt", cache)
            three += m["seconds"]
            show(f"recipe run {name} (cold)", m)
        print(f"{'(the three recipes, cold)':<40} {three:7.2f}", flush=True)
    if "report" in only:
        show("report (cold)", command(["report", str(report)], outs / "report.txt", fresh("report")))
    if "diff" in only:
        show("diff REPORT REPORT (cold)", command(["diff", str(report), str(report)],
                                                  outs / "diff.txt", fresh("diff")))
    if "nonvtx" in only:  # the common path: a shared trace without NVTX (issue 45)
        from report import without_nvtx

        flat = without_nvtx(report)
        cache, three_flat = fresh("nonvtx"), 0.0
        for name in RECIPES:
            m = command(["recipe", "run", name, str(flat)], outs / f"{name}-flat.txt", cache)
            three_flat += m["seconds"]
            show(f"recipe run {name}, no NVTX (cold)", m)
        print(f"{'(the three recipes, no NVTX, cold)':<40} {three_flat:7.2f}", flush=True)
        m = command(["report", str(flat)], outs / "report-flat.txt", fresh("report-flat"))
        show("report, no NVTX (cold)", m)
        print(f"report, no NVTX (cold): {m['seconds'] / three_flat:.2f}x the three recipes on "
              "that file (target <= 1.5x)", flush=True)
    if "processes" in only:  # issue 48: two processes of half the copies each, at once
        two = scaled_report(args.work, args.copies, processes=2)
        m = command(["report", str(two)], outs / "report-2proc.txt", fresh("report-2proc"))
        show("report, 2 processes (cold)", m)
        one = dict(rows).get("report (cold)")
        if one:
            print(f"report, 2 processes (cold): {m['seconds'] / one['seconds']:.2f}x the "
                  "one-process report (target <= 1.1x)", flush=True)
    if "served" in only:
        for name in RECIPES:
            show(f"recipe run {name} (served)", command(
                ["recipe", "run", name, str(report)], outs / f"{name}-again.txt",
                args.work / "cli-cache-recipes"))
    by = dict(rows)
    if three:
        for label in ("report (cold)", "diff REPORT REPORT (cold)"):
            if label in by:
                print(f"{label}: {by[label]['seconds'] / three:.2f}x the three recipes (target <= 1.5x)")
    total = run_nsys(report, args.work, args.no_nsys)
    if total is None:
        return
    if three:
        print(f"\nthree recipes, cold, as commands: {total / three:.1f}x faster than nsys "
              f"(target >= 20x on 16 cores, >= 4x on 2)")


if __name__ == "__main__":
    sys.exit(main())
