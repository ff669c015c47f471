"""The kernel-level answers as results: one report (``build``), two (``diff``), N (``lineup``).

Inputs: an ``.ncu-rep`` (``.ncu-rep.xz``), or a capture folder holding one (its ``manifest.json``
``ncu_rep``, else its only ``*.ncu-rep*``); with a trace (the capture's own, or ``trace``) the
kernels are joined to its loop (``join``).
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from nsightlab.core.result import Result, json_value
from nsightlab.errors import NotAReportError
from nsightlab.formats.ncu_file import ncu_in, reports_in
from nsightlab.kernels import judge, join, pairs
from nsightlab.read.ncu_store import NcuStore
from nsightlab.read.table_cache import keyed_dir

#: the columns of the judged table a report shows first
SHOWN = ["kernel", "function", "nvtx", "grid", "block", "duration_ns", "limiter", "unit",
         "unit_pct", "compute_pct", "memory_pct", "dram_pct", "tensor_pct", "precision", "flops",
         "dram_bytes", "used_pct", "roof", "headroom_pct", "achieved_occupancy_pct",
         "theoretical_occupancy_pct", "occupancy_limit", "waves", "why"]


def store_of(path: str | Path, cache_dir=None, progress=None, cache: bool = True) -> NcuStore:
    """The parsed store of the ncu report ``path`` is or holds: in ``cache_dir`` when given,
    else a capture's own ``cache/`` (keyed by the report file, where it can be written), else
    the cache root; ``cache`` False: a scratch folder removed at exit.

    Raises:
        NotAReportError: ``path`` holds no Nsight Compute report.
    """
    rep = ncu_in(path)
    if rep is None:
        many = Path(path).is_dir() and len(reports_in(Path(path))) > 1
        raise NotAReportError(
            f"{path}: holds " + ("several Nsight Compute reports; give one of them" if many else
                                 "no Nsight Compute report (.ncu-rep); give one, or capture with "
                                 "--ncu"))
    if not cache:
        from nsightlab.read.locate import scratch

        return NcuStore(rep, cache_dir=scratch(), progress=progress)
    capture = Path(path) if Path(path).is_dir() else None
    folder = None
    if cache_dir is None and capture is not None and os.access(capture, os.W_OK | os.X_OK):
        folder = keyed_dir(capture / "cache", rep)
    return NcuStore(rep, cache_dir=cache_dir, folder=folder, progress=progress)


@dataclass(repr=False)
class KernelReport(Result):
    """One Nsight Compute report judged (``judge``), joined to a trace's loop when there is
    one (``join``). ``findings``: records, the most telling first."""

    source: str
    judged: judge.Judged
    joined: join.Joined | None = None
    warnings: list[str] = field(default_factory=list)

    def brief(self) -> str:
        k = self.judged.kernels
        top = k.sort_values("duration_ns", ascending=False).head(1)
        lead = f"{len(k)} kernels profiled"
        if len(top):
            r = top.iloc[0]
            lead += f"; the longest, {r['function']}, is {r['limiter']}-bound"
        return lead

    def findings(self) -> list:
        out = list(self.joined.findings()) if self.joined is not None else []
        k = self.judged.kernels.sort_values("duration_ns", ascending=False).drop_duplicates(
            ["function", "grid", "block"])
        for i in k.index[:5]:
            out += self.judged.findings(i)[:3]
        return out

    def tables(self) -> dict[str, pd.DataFrame]:
        out = {"kernels": self.judged.kernels[[c for c in SHOWN if c in self.judged.kernels]]
               .reset_index(drop=True), "rules": self.judged.rules}
        if self.joined is not None:
            out["saves"] = self.joined.saves
            out["unprofiled"] = self.joined.unprofiled
        out["findings"] = pd.DataFrame([f.record() for f in self.findings()])
        return out

    def to_json(self) -> dict:
        out = super().to_json()  # its findings: the records of the findings table
        out["not_judged"] = self.judged.missing
        if self.joined is not None:
            out["loop_ns"] = self.joined.loop_ns
            out["iterations"] = self.joined.iterations
        return json_value(out)

    def manifest(self) -> dict:
        return {"source": self.source, "joined": self.joined is not None}


@dataclass(repr=False)
class KernelDiff(Result):
    """Two ncu reports compared at the counter level (``pairs``)."""

    a: str
    b: str
    paired: pairs.Paired
    judged: tuple = ()

    def brief(self) -> str:
        return str(self.paired.findings()[0])

    def findings(self) -> list:
        return self.paired.findings()

    def tables(self) -> dict[str, pd.DataFrame]:
        return {"pairs": self.paired.pairs, "only_a": self.paired.only_a,
                "only_b": self.paired.only_b,
                "findings": pd.DataFrame([f.record() for f in self.findings()])}

    def to_json(self) -> dict:
        return json_value(super().to_json())

    def manifest(self) -> dict:
        return {"a": self.a, "b": self.b}


@dataclass(repr=False)
class KernelLineup(Result):
    """N ncu reports against the first: each one's profiled time and its diff's headline."""

    table: pd.DataFrame

    def brief(self) -> str:
        return f"{len(self.table)} Nsight Compute reports"

    def tables(self) -> dict[str, pd.DataFrame]:
        return {"lineup": self.table}

    def manifest(self) -> dict:
        return {"reports": self.table["report"].tolist()}


def build(path: str | Path, trace: str | Path | None = None, cache_dir=None,
          progress=None, cache: bool = True) -> KernelReport:
    """Judge the ncu report that ``path`` is or holds; join it to ``trace`` (a report or
    capture), or to the capture's own trace when ``path`` is a capture holding one."""
    store = store_of(path, cache_dir, progress, cache)
    judged = judge.of(store)
    warnings = list(store.warnings)
    if trace is None and Path(path).is_dir():
        trace = path if _has_trace(Path(path)) else None
    joined = None
    if trace is not None:
        from nsightlab.read.opener import open as open_report

        with open_report(trace, cache=cache, cache_dir=cache_dir, progress=progress) as r:
            try:
                joined = join.of(judged, r)
            except (ValueError, KeyError) as e:
                warnings.append(f"{trace}: the kernels could not be joined to its loop ({e})")
        if joined is not None and len(joined.unmatched) == len(judged.kernels):
            warnings.append(f"{store.path}: none of its {len(judged.kernels)} kernels runs in "
                            f"the loop of {trace}: are they of the same program?")
    return KernelReport(str(path), judged, joined, warnings)


def diff(a: str | Path, b: str | Path, cache_dir=None, progress=None,
         cache: bool = True) -> KernelDiff:
    ja, jb = (judge.of(store_of(p, cache_dir, progress, cache)) for p in (a, b))
    return KernelDiff(str(a), str(b), pairs.of(ja, jb, (_name(a), _name(b))), (ja, jb))


def lineup(paths: list, cache_dir=None, progress=None, cache: bool = True) -> KernelLineup:
    judged = [judge.of(store_of(p, cache_dir, progress, cache)) for p in paths]
    rows = []
    for p, j in zip(paths, judged):
        pr = pairs.of(judged[0], j, (_name(paths[0]), _name(p)))
        rows.append({"report": str(p), "kernels": len(j.kernels),
                     "profiled_ns": pr.b_ns,  # one repetition, as vs_first counts it
                     "vs_first": pr.a_ns / pr.b_ns if pr.b_ns else float("nan"),
                     "pairs": len(pr.pairs), "only_here": len(pr.only_b),
                     "headline": str(pr.findings()[1]) if len(pr.pairs) else ""})
    return KernelLineup(pd.DataFrame(rows))


def _name(p) -> str:
    """A report's name in a diff: its file's stem, or its capture's name for report.ncu-rep."""
    p = Path(p)
    if p.is_dir():
        return p.name
    stem = p.name.split(".")[0]
    return p.resolve().parent.name if stem == "report" else stem


def _has_trace(folder: Path) -> bool:
    return any(folder.glob(g) for g in ("*.sqlite", "*.sqlite.xz", "*.nsys-rep"))
