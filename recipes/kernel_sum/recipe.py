"""kernel_sum: GPU time by kernel name, like `nsys stats -r cuda_gpu_kern_sum`, plus the
kernel's class and precision."""
from nsightlab.classify import annotate
from nsightlab.stats import describe


def run(report, params):
    k = report.kernels(["name", "duration_ns"])
    out = describe(k, ["name"], "duration_ns")
    out = out.rename(columns={"count": "instances"})
    out["time_pct"] = 100.0 * out["total_ns"] / out["total_ns"].sum()
    out = out.sort_values("total_ns", ascending=False, kind="stable").reset_index(drop=True)
    return {"kernel_sum": annotate(out)}
