"""budget: where each iteration's wall-clock time goes, and the verdict that follows."""
import pandas as pd

from nsightlab.recipe_api import budget


def run(report, params):
    table, by_sync, source = budget.compute(report)
    cut = table.attrs.pop("cut", pd.DataFrame(columns=budget.ending.CUT_COLUMNS))
    work = table.attrs.pop("work", pd.DataFrame(columns=budget.WORK_COLUMNS))
    how = table.attrs.pop("how", budget.HOW_NVTX)
    graphs = any(n.startswith("cudaGraphLaunch") for n in budget.api_names(report))
    summary = budget.summarize(table, by_sync, graphs, params)
    summary.insert(1, "iteration_source", source)
    summary.insert(2, "iteration_how", how)
    return {"summary": summary, "iterations": table, "sync_idle": by_sync,
            "kinds": budget.kinds_table(table, by_sync, graphs, params, work),
            "cut": cut, "work": work}
