"""The loop of one run: one owner of its facts (how its iterations were found, their windows,
the per-iteration table with each one's phase, kind, work and budget parts, the kinds, the cut
iteration, idle time by sync API), built once per open report and kept in its result store.

``run/`` and ``comparison/`` read a ``Loop``'s fields; the ``budget`` recipe is a view of it
(``tables()``). The one rule for NVTX iteration ranges is ``iterations.nvtx_ranges``.
"""
from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from nsightlab.analysis import budget
from nsightlab.errors import NoDataError
from nsightlab.read.frames import plain_text
from nsightlab.read.report import Report
from nsightlab.read.table_cache import code_fingerprint

#: the tables a loop is stored as (the ``budget`` recipe's)
TABLES = ("summary", "iterations", "sync_idle", "kinds", "cut", "work")
#: the GPU operations a loop is made of (the ``budget`` recipe's ``requires``)
OPERATIONS = ("kernels", "memcpy", "memset", "graph_execs")


@dataclass(frozen=True, eq=False)
class Loop:
    """One run's loop. ``summary``: one row per GPU (parts, shares, verdict, advice, the
    iteration source and ``how``); ``iterations``: one row per iteration and GPU (window,
    wall, parts, phase, kind, work); ``kinds``: the kinds of iteration per GPU; ``cut``: the
    last iteration the trace's end cut (left out); ``work``: each work signature's tokens;
    ``sync_idle``: GPU idle after each sync API. Read, never changed: callers copy."""

    summary: pd.DataFrame
    iterations: pd.DataFrame
    sync_idle: pd.DataFrame
    kinds: pd.DataFrame
    cut: pd.DataFrame
    work: pd.DataFrame

    @property
    def how(self) -> str:
        """How the iterations were found (``budget.HOW_*``)."""
        return str(self.summary["iteration_how"].iloc[0]) if len(self.summary) else budget.HOW_NONE

    @property
    def source(self) -> str:
        """How the iterations were found, in words."""
        return str(self.summary["iteration_source"].iloc[0]) if len(self.summary) else ""

    def first_gpu(self, table: str = "iterations") -> pd.DataFrame:
        """``table``'s rows of the first GPU (iterations, kinds or summary)."""
        t = getattr(self, table)
        return t[t["device_id"] == t["device_id"].iloc[0]] if len(t) else t

    def tables(self) -> dict[str, pd.DataFrame]:
        return {t: getattr(self, t) for t in TABLES}


def of(report: Report, params: dict | None = None) -> Loop:
    """The loop of ``report`` (the budget's ``params``, default ``budget.DEFAULTS``): built once
    per open report, and kept in its result store when it has one.

    Raises:
        NoDataError: the report has no GPU operation.
    """
    values = {**budget.DEFAULTS, **(params or {})}
    key = ("loop", tuple(sorted(values.items())))
    if key not in report.answers:
        if not any(report.has_rows(t) for t in OPERATIONS):
            raise NoDataError(f"{report.source.name} has no rows in {' or '.join(OPERATIONS)}")
        if report.results is None:
            tables = build(report, values)
        else:
            tables = report.results.get_or_compute(
                "loop", values, [report.path], code_fingerprint(),
                lambda: (build(report, values), {}))[0]
        report.answers[key] = Loop(**{t: tables[t] for t in TABLES})
    return report.answers[key]


def stored(report: Report) -> bool:
    """Whether the loop of ``report`` (default parameters) is in its result store."""
    return report.results is not None and report.results.has(
        "loop", budget.DEFAULTS, [report.path], code_fingerprint())


def build(report: Report, params: dict) -> dict[str, pd.DataFrame]:
    """The loop's tables, computed (``budget.compute``, then the summary and kinds)."""
    table, by_sync, source = budget.compute(report)
    cut = table.attrs.pop("cut", pd.DataFrame(columns=budget.ending.CUT_COLUMNS))
    work = table.attrs.pop("work", pd.DataFrame(columns=budget.WORK_COLUMNS))
    how = table.attrs.pop("how", budget.HOW_NVTX)
    graphs = any(n.startswith("cudaGraphLaunch") for n in budget.api_names(report))
    summary = budget.summarize(table, by_sync, graphs, params)
    summary.insert(1, "iteration_source", source)
    summary.insert(2, "iteration_how", how)
    out = {"summary": summary, "iterations": table, "sync_idle": by_sync,
           "kinds": budget.kinds_table(table, by_sync, graphs, params, work), "cut": cut,
           "work": work}
    return {t: plain_text(df) for t, df in out.items()}
