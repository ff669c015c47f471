"""The machine's state around a captured run, as its capture's manifest recorded it
(``nsightlab.capture.machine``): what stands out in words, the mean clocks, and the state of
the run a report came from."""
from __future__ import annotations

import json
import os
from pathlib import Path


def words(before: dict | None, after: dict | None = None) -> list[str]:
    """What a person should know of the machine around one run, in words: other processes
    on the GPUs before it started (their work is not in the trace) and a loaded host; []
    when nothing stands out. ``after`` is kept in the manifest for the record (the run's own
    process is gone by then)."""
    out = []
    for g in _gpus(before):
        others = g.get("processes") if isinstance(g.get("processes"), list) else []
        if others:
            out.append(f"GPU {g.get('index', '?')} ran {len(others)} other process"
                       f"{'es' if len(others) > 1 else ''} before the run (pids "
                       f"{', '.join(map(str, others[:4]))}): their work is not in the trace")
    load = before.get("host_load") if isinstance(before, dict) else None
    cpus = os.cpu_count() or 1
    if isinstance(load, list) and load and isinstance(load[0], (int, float)) and \
            load[0] > 0.75 * cpus:
        out.append(f"the host was loaded before the run (load {load[0]:.1f} on {cpus} CPUs): "
                   "its pace moves the launches")
    return out


def summary(states: list[dict]) -> dict:
    """The mean SM and memory clocks, power and temperature of the first GPU over
    ``states`` (the before and after of every run); {} without data."""
    gpus = [g for g in (_gpus(s)[:1] for s in states) for g in g]
    if not gpus:
        return {}

    def mean(k: str) -> float:
        got = [float(g[k]) for g in gpus if isinstance(g.get(k), (int, float))]
        return sum(got) / len(got) if got else float("nan")

    return {"sm_mhz": mean("sm_mhz"), "mem_mhz": mean("mem_mhz"), "power_w": mean("power_w"),
            "temp_c": mean("temp_c"), "samples": len(gpus)}


def _gpus(state) -> list[dict]:
    """The GPUs of a recorded state (a damaged manifest's values are none)."""
    gpus = state.get("gpus") if isinstance(state, dict) else None
    return [g for g in gpus if isinstance(g, dict)] if isinstance(gpus, list) else []


def runs_in(folder: Path) -> list[dict] | None:
    """The runs a capture's manifest lists (``nsightlab capture --repeat``: run, sqlite,
    machine_before, machine_after); None where ``folder`` holds no readable manifest (a
    damaged one is the open's to explain)."""
    try:
        man = json.loads((Path(folder) / "manifest.json").read_text())
    except (OSError, ValueError):
        return None
    runs = man.get("runs") if isinstance(man, dict) else None
    return [r for r in runs if isinstance(r, dict)] if isinstance(runs, list) else []


def of_report(source) -> dict:
    """The machine's state around the run of report ``source`` from its capture's manifest:
    the first GPU's mean clocks, power and temperature (``summary``) and what stands out
    (``words``); {} for a report outside a capture, or one recorded without NVML/nvidia-smi."""
    p = Path(source)
    for folder in (p, p.parent, p.parent.parent.parent):  # capture, report.sqlite, runs/N/
        if (folder / "manifest.json").is_file():
            runs = runs_in(folder) or []
            rel = str(p.relative_to(folder)) if p != folder else "report.sqlite"
            run = next((r for r in runs if r.get("sqlite") == rel), runs[0] if runs else None)
            if not run:
                return {}
            states = [x if isinstance(x, dict) else None
                      for x in (run.get("machine_before"), run.get("machine_after"))]
            out = summary([x for x in states if x])
            said = words(*states)
            return {**out, "words": said} if out or said else {}
    return {}
