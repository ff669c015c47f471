"""Nsight Compute reports: nsightlab's parse and cached answers against ncu_report's own read.

    python benchmarks/ncu.py REPORT.ncu-rep[.xz] ... [--rounds 2]

For each report (decompressed first): ncu_report's own full read (every metric of every kernel,
in one process: the floor of any parse), then nsightlab as users run it, a fresh process per
command with an empty cache: ``info`` (the parse into Parquet), ``report`` (the judgement on
the cache), ``report`` again (the kept answer), ``diff`` of the report with itself twice.
Seconds of wall time and the peak RSS of the command's processes (``/usr/bin/time``; the
parse's worker processes are children of the command: their peak is the largest child's).
"""
from __future__ import annotations

import argparse
import lzma
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

FULL_READ = """
import sys, time, resource, ncu_report
t = time.perf_counter()
ctx = ncu_report.load_report(sys.argv[1])
n = k = 0
for ri in range(ctx.num_ranges()):
    r = ctx.range_by_idx(ri)
    for ai in range(r.num_actions()):
        a = r.action_by_idx(ai); k += 1
        for m in a.metric_names():
            a.metric_by_name(m).value(); n += 1
print(f"{time.perf_counter() - t:.2f} {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024} {k} {n}")
"""


def timed(args: list[str]) -> tuple[float, int]:
    """(seconds, peak RSS in MB: the command's, or its largest worker's where larger)."""
    import time

    t = time.perf_counter()
    out = subprocess.run(["/usr/bin/time", "-f", "%M", *args], capture_output=True, text=True)
    wall = time.perf_counter() - t
    if out.returncode != 0:
        sys.exit(f"{' '.join(args)} failed:\n{out.stderr[-2000:]}")
    return wall, int(out.stderr.strip().splitlines()[-1]) // 1024


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("reports", nargs="+")
    p.add_argument("--rounds", type=int, default=2)
    a = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="ncu-bench-"))
    nsl = [sys.executable, "-m", "nsightlab"]
    print(f"{'report':<34} {'step':<28} {'s':>6} {'MB':>6}")
    for src in map(Path, a.reports):
        rep = work / src.name.removesuffix(".xz")
        if src.name.endswith(".xz"):
            with lzma.open(src) as fin, rep.open("wb") as fout:
                shutil.copyfileobj(fin, fout)
        else:
            shutil.copy(src, rep)
        for r in range(a.rounds):
            out = subprocess.run([sys.executable, "-c", FULL_READ, str(rep)], capture_output=True,
                                 text=True, check=True).stdout.split()
            print(f"{rep.name:<34} {'ncu_report full read':<28} {float(out[0]):>6.2f} "
                  f"{int(out[1]):>6}   ({out[2]} kernels, {out[3]} metrics)")
            cache = work / f"cache-{r}"
            for step, args in (("info (parse, cold)", ["info", rep]),
                               ("report (on the cache)", ["report", rep]),
                               ("report again (kept)", ["report", rep]),
                               ("diff itself", ["diff", rep, rep]),
                               ("diff itself again (kept)", ["diff", rep, rep])):
                wall, rss = timed([*nsl, *map(str, args), "--cache-dir", str(cache)])
                print(f"{rep.name:<34} {step:<28} {wall:>6.2f} {rss:>6}")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
