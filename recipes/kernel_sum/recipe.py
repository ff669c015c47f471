"""kernel_sum: GPU time by kernel name, like `nsys stats -r cuda_gpu_kern_sum`, plus the
kernel's class and precision. With iterations_only, only kernels that start inside the
budget's wall-clock iterations count (warm-up, compile and teardown left out). With ncu, the
tensor-pipe counters of an Nsight Compute report label kernels whose name says nothing."""
import numpy as np

from nsightlab import budget, ncu, recipes
from nsightlab.classify import annotate
from nsightlab.stats import describe


def run(report, params):
    k = report.kernels(["name", "start_ns", "duration_ns"])
    if params["iterations_only"]:
        it = recipes.run("budget", report)["iterations"]
        if len(it) and it["name"].iloc[0] != budget.WHOLE_RUN:
            ws = np.unique(it["start_ns"].to_numpy())
            we = it.groupby("start_ns")["end_ns"].max().reindex(ws).to_numpy()
            t = k["start_ns"].to_numpy()
            i = np.searchsorted(ws, t, "right") - 1
            k = k[(i >= 0) & (t < we[np.maximum(i, 0)])]
    out = describe(k, ["name"], "duration_ns")
    out = out.rename(columns={"count": "instances"})
    out["time_pct"] = 100.0 * out["total_ns"] / max(out["total_ns"].sum(), 1)
    out = out.sort_values("total_ns", ascending=False, kind="stable").reset_index(drop=True)
    evidence = ncu.tensor_evidence(ncu.kernels(params["ncu"])) if params["ncu"] else None
    return {"kernel_sum": annotate(out, explain=True, evidence=evidence)}
