"""Every capture with a workload's truth beside it, against nsightlab's first lines.

    python benchmarks/truth_sweep.py DIR [DIR...]   (NAME.sqlite or .sqlite.xz with
                                                     NAME.truth.json beside, or in ../truth/)

For each capture: the truth (iterations from the workload's CUDA events; the loop period,
start to start; each kind the workload labelled, with its count and median period) and what
nsightlab says (iterations, the loop's median, its kinds with their iterations), then the
first findings of ``nsightlab report``. A line ``CHECK`` flags what disagrees: an iteration
count off by more than 10% (1 for decode tokens), a loop median more than 10% from the
truth's, a truth kind that differs from the main one by 10% or more with no nsightlab kind
holding 80% of its iterations. Rerun it after every change to a verdict, statistic or
iteration rule (issue 45); the captures of ``tests/data/kinds`` and ``tests/data/steady``
were made with their ``capture.sh``.
"""
from __future__ import annotations

import json
import lzma
import sys
import tempfile
from pathlib import Path

import numpy as np


def truth_of(path: Path) -> dict | None:
    stem = path.name.split(".sqlite")[0]
    for folder in (path.parent, path.parent.parent / "truth"):
        t = folder / f"{stem}.truth.json"
        if t.exists():
            return json.loads(t.read_text())
        if t.with_suffix(".json.xz").exists():
            return json.loads(lzma.open(t.with_suffix(".json.xz")).read())
    return None


def summary(t: dict) -> dict:
    w = t["windows"]
    starts = np.array([x["host_start_ns"] for x in w], float)
    period = np.diff(starts) / 1e6
    kinds: dict[str, list[int]] = {}
    for i, x in enumerate(w):
        kinds.setdefault(x.get("kind", "main"), []).append(i)
    med = {k: float(np.median(period[[i for i in v if i < len(period)]] if
                              any(i < len(period) for i in v) else [np.nan]))
           for k, v in kinds.items()}
    return {"iterations": len(w), "period_ms": float(np.median(period)), "kinds": kinds,
            "kind_ms": med, "level": t.get("level")}


def check(name: str, truth: dict, b, kinds_t) -> list[str]:
    out = []
    n = int(b["iterations"])
    slack = 1 if truth["level"] == "token" else max(1, round(0.1 * truth["iterations"]))
    if abs(n - truth["iterations"]) > slack:
        out.append(f"iterations {n} vs truth {truth['iterations']}")
    med = float(b["wall_med_ns"]) / 1e6
    if abs(med / truth["period_ms"] - 1) > 0.1:
        out.append(f"loop median {med:.3f} ms vs truth {truth['period_ms']:.3f} ms")
    if n == truth["iterations"]:  # kinds by index only where the iterations line up
        main_k = max(truth["kinds"], key=lambda k: len(truth["kinds"][k]))
        ours = {r.kind: set(int(i) for i in r.rows) for r in kinds_t.itertuples()
                if r.kind not in ("warm-up", "outlier")}
        warm = set(range(int(b["warmup_iterations"])))

        def holder(rows: set) -> str | None:  # the nsightlab kind holding 80% of rows
            return next((q for q, v in ours.items() if len(rows & v) >= 0.8 * len(rows)), None)

        main_q = holder(set(truth["kinds"][main_k]) - warm)
        for k, rows in truth["kinds"].items():
            if k == main_k or abs(truth["kind_ms"][k] / truth["kind_ms"][main_k] - 1) < 0.1:
                continue
            rows = set(rows) - warm
            if len(rows) < 3:  # too few to be a kind: outliers, by the rules
                if not rows <= set(int(i) for r in kinds_t.itertuples() if r.kind == "outlier"
                                   for i in r.rows):
                    out.append(f"truth kind {k!r} ({len(rows)} iterations) not outliers")
                continue
            q = holder(rows)
            if q is None or q == main_q:
                out.append(f"truth kind {k!r} ({len(rows)} iterations, "
                           f"{truth['kind_ms'][k]:.2f} ms) not found as a kind")
    return out


def main(dirs: list[str]) -> int:
    from nsightlab.analysis import kinds as K
    from nsightlab.run import report as run_report
    import nsightlab.recipe_runner as R
    import nsightlab

    paths = sorted(p for d in dirs for p in Path(d).rglob("*.sqlite*")
                   if p.suffix in (".sqlite", ".xz") and (truth_of(p) or {}).get("windows"))
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        for p in paths:
            t = summary(truth_of(p))
            if p.suffix == ".xz":
                plain = Path(tmp) / p.name.removesuffix(".xz")
                plain.write_bytes(lzma.decompress(p.read_bytes()))
                p = plain
            r = nsightlab.open(p)
            out = R.run("budget", r)
            b, it = out["summary"].iloc[0], out["iterations"]
            it = it[it["device_id"] == it["device_id"].iloc[0]]
            rows = {k: np.flatnonzero(it["kind"].to_numpy() == k) for k in it["kind"].unique()}
            import pandas as pd
            kinds_t = pd.DataFrame({"kind": list(rows), "rows": list(rows.values())})
            rr = run_report.build(r)
            print(f"== {p.name}: truth {t['iterations']} {t['level']}s, period "
                  f"{t['period_ms']:.3f} ms; kinds "
                  + ", ".join(f"{k} {len(v)} ({t['kind_ms'][k]:.2f} ms)"
                              for k, v in t["kinds"].items()))
            print(f"   nsightlab: {b['iterations']} iterations, warm-up {b['warmup_iterations']}, "
                  f"median {b['wall_med_ns'] / 1e6:.3f} ms, mean {b['wall_ns'] / 1e6:.3f} ms; "
                  + ", ".join(f"{k} {len(v)}" for k, v in rows.items() if k != K.WARM_UP))
            for f in rr.findings[:4]:
                print(f"   - {f[:220]}")
            for c in check(p.name, t, b, kinds_t):
                bad += 1
                print(f"   CHECK {c}")
    print(f"{len(paths)} captures, {bad} checks failed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] or ["tests/data/kinds", "tests/data/steady"]))
