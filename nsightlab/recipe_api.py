"""Everything a recipe may import: the one stable surface for recipe authors.

A recipe (``recipes/<name>/recipe.py``, or a folder on ``NSIGHTLAB_RECIPE_PATH``) defines
``run(report, params) -> dict[str, DataFrame]`` and takes what it needs from here, never from
the modules behind it, which may move::

    from nsightlab.recipe_api import NoDataError, Report, describe, engine

    def run(report: Report, params: dict) -> dict:
        k = report.kernels(["name", "duration_ns"])
        if k.empty:
            raise NoDataError(report.missing_hint("kernels") or "no kernels")
        return {"kernel_sum": describe(k, ["name"], "duration_ns")}

What is here, by the question it answers:

- the report and its tables: ``Report`` (``report.kernels()``, ``.cuda_api()``, ``.nvtx()``...,
  ``report.missing_hint(table)``), ``TABLES`` (every column contract), ``nullable_int64``,
  ``release_memory`` (give a big intermediate's memory back to the OS);
- errors: ``NoDataError`` (the report lacks what the recipe needs: "no data", exit 0 with a
  note), ``NsightlabError``;
- statistics as ``nsys stats`` computes them: ``describe``, ``Groups``, ``group_ids``,
  ``STATS``;
- interval arithmetic on timelines: ``union``, ``covered``, ``gaps``, ``busy_time``,
  ``BusyByKey`` (busy time per key over a sorted stream);
- which call launched which GPU operation: ``launches``, ``launches_sql``, ``first_of_call``,
  ``match``, ``join_keys``, ``once_sql``, ``once_table``;
- NVTX ranges projected onto the GPU: ``project``, ``project_sql``;
- kernel class and precision from names: ``annotate``, ``sync_kind``;
- the time budget per iteration (``budget.compute``, ``budget.summarize``, ``ITERATION``,
  ``base_name``, ``WHOLE_RUN``);
- big reports out of core: ``engine`` (``engine.analyse(report, in_duckdb, in_numpy)``,
  ``engine.runs``, ``engine.medians``, ``engine.medians_at``);
- GPU metrics samples (``gpu_metrics``) and Nsight Compute reports (``ncu``);
- another recipe's tables, cached: ``run_recipe(name, report)``;
- where a recipe's time goes: ``trace.mark(what)`` (printed with NSIGHTLAB_TRACE=1).

This module sits in the layer order (``nsightlab._layers``) above the analysis and the recipe
runner and below the built-in recipes, so a recipe can use all of it and nothing it uses can
depend on a recipe.
"""
from __future__ import annotations

from nsightlab.analysis import budget, engine, gpu_metrics, loop
from nsightlab.analysis.budget import ITERATION, WHOLE_RUN, base_name
from nsightlab.analysis.classify import annotate, sync_kind
from nsightlab.analysis.launches import (
           first_of_call,
           keys as join_keys,
           launches,
           launches_sql,
           match,
           once_sql,
           once_table,
)
from nsightlab.analysis.projection import project, project_sql
from nsightlab.analysis.stats import STATS, Groups, describe, group_ids, median_in_place
from nsightlab.analysis.timeline import BusyByKey, busy_time, covered, gaps, union
from nsightlab.errors import NoDataError, NsightlabError
from nsightlab.formats import ncu
from nsightlab.read import trace
from nsightlab.read.frames import release_memory
from nsightlab.read.report import Report
from nsightlab.read.tables import TABLES, nullable_int64
from nsightlab.recipe_runner import run as run_recipe

__all__ = ["ITERATION", "WHOLE_RUN", "STATS", "TABLES", "BusyByKey", "Groups", "NoDataError",
           "NsightlabError", "Report", "annotate", "base_name", "budget", "busy_time", "loop", "covered",
           "describe", "engine", "first_of_call", "gaps", "gpu_metrics", "group_ids", "median_in_place",
           "join_keys", "launches", "launches_sql", "match", "ncu", "nullable_int64",
           "once_sql", "once_table", "project", "project_sql", "release_memory", "run_recipe", "sync_kind",
           "trace", "union"]
