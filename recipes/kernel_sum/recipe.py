"""kernel_sum: GPU time by kernel name, like `nsys stats -r cuda_gpu_kern_sum`, plus the
kernel's class and precision. With iterations_only, only kernels that start inside the
budget's wall-clock iterations count (warm-up, compile and teardown left out). With ncu, the
tensor-pipe counters of an Nsight Compute report label kernels whose name says nothing.
Big reports are summarized in DuckDB over the table cache (``nsightlab.analysis.engine``)."""
import numpy as np
import pandas as pd

from nsightlab.recipe_api import annotate, budget, describe, engine, ncu, run_recipe


def run(report, params):
    windows = iteration_windows(report) if params["iterations_only"] else None
    out = engine.analyse(report, lambda db: summarize_sql(db, windows),
                         lambda: summarize(report, windows))
    out["time_pct"] = 100.0 * out["total_ns"] / max(out["total_ns"].sum(), 1)
    out = out.sort_values("total_ns", ascending=False, kind="stable").reset_index(drop=True)
    evidence = ncu.tensor_evidence(ncu.kernels(params["ncu"])) if params["ncu"] else None
    out = annotate(out, explain=True, evidence=evidence)
    if report.has_rows("graph_execs"):
        out = pd.concat([out, graph_rows(report, windows)], ignore_index=True)
    return {"kernel_sum": out}


def graph_rows(report, windows):
    """One row per CUDA graph of a graph-level trace (nsys's default --cuda-graph-trace=graph):
    its whole executions, whose kernels have no records of their own. Marked as graphs
    (kernel_class "cuda graph"), after the kernels and outside their percentages, so the
    kernel rows stay what nsys stats cuda_gpu_kern_sum prints."""
    g = in_windows(report.graph_execs(["graph_id", "start_ns", "duration_ns"]), windows)
    g = g.assign(name="(CUDA graph " + g["graph_id"].astype(str) + ": whole-graph executions)")
    out = describe(g, ["name"], "duration_ns").rename(columns={"count": "instances"})
    out["name"] = out["name"].astype(str)
    return out.assign(time_pct=np.nan, kernel_class="cuda graph", precision="unknown",
                      precision_confidence="none", tensor_core=False,
                      rule="graph-level trace: the graph's kernels were not recorded one by one "
                           "(profile with --cuda-graph-trace=node for them)",
                      precision_detail="", output_precision="unknown")


def iteration_windows(report):
    """(start_ns, end_ns) of the budget's wall-clock iterations, one row per distinct start;
    None when the run has no iteration ranges (then every kernel counts)."""
    it = run_recipe("budget", report)["iterations"]
    if not len(it) or it["name"].iloc[0] == budget.WHOLE_RUN:
        return None
    return it.groupby("start_ns", as_index=False)["end_ns"].max().sort_values("start_ns")


def in_windows(ops, windows):
    """The rows of ``ops`` that start inside one of the ``windows`` (all without windows)."""
    if windows is None:
        return ops
    ws, we = windows["start_ns"].to_numpy(), windows["end_ns"].to_numpy()
    t = ops["start_ns"].to_numpy()
    i = np.searchsorted(ws, t, "right") - 1
    return ops[(i >= 0) & (t < we[np.maximum(i, 0)])]


def summarize(report, windows):
    """The summary in memory (NumPy): groups in order of first appearance."""
    k = in_windows(report.kernels(["name", "start_ns", "duration_ns"]), windows)
    return describe(k, ["name"], "duration_ns").rename(columns={"count": "instances"})


def summarize_sql(db, windows):
    """The same summary in DuckDB, out of core: groups in order of first appearance too."""
    source = (db.view("kernels", rows=True) if windows is None else  # the kernels inside, once
              db.rows_inside("kernels", windows, ["name", "duration_ns", "row"]))
    return engine.describe_sql(db, source, ["name"], "duration_ns").rename(
        columns={"count": "instances"})
