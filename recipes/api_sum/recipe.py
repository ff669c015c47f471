"""api_sum: CPU time in CUDA API calls by name, like `nsys stats -r cuda_api_sum`.

nsys groups by the recorded name id: runtime and driver flavours, and the CUDA-backtrace
duplicates that 2022-era exports record, stay separate rows. Grouping by (name, api_kind)
gives the same rows. Big reports are summarized in DuckDB over the table cache
(``nsightlab.analysis.engine``), in parallel: at 16M calls on 16 cores NumPy's one thread
took ~1.2 s."""
from nsightlab.recipe_api import describe, engine


def run(report, params):
    out = engine.analyse(report, summarize_sql, lambda: summarize(report))
    out["time_pct"] = 100.0 * out["total_ns"] / out["total_ns"].sum()
    out = out.sort_values("total_ns", ascending=False, kind="stable").reset_index(drop=True)
    return {"api_sum": out}


def summarize(report):
    """The summary in memory (NumPy): groups in order of first appearance."""
    a = report.cuda_api(["name", "api_kind", "duration_ns"])
    return describe(a, ["name", "api_kind"], "duration_ns").rename(columns={"count": "calls"})


def summarize_sql(db):
    """The same summary in DuckDB, out of core: groups in order of first appearance too."""
    return engine.describe_sql(db, db.view("cuda_api", rows=True), ["name", "api_kind"],
                               "duration_ns").rename(columns={"count": "calls"})
