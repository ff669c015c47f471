"""nvtx_gpu: NVTX ranges projected onto the GPU kernels they launched."""
from nsightlab.recipe_api import NoDataError, project


def run(report, params):
    ranges = project(report).sort_values(["start_ns", "depth"], kind="stable").reset_index(drop=True)
    if ranges.empty:
        raise NoDataError(f"{report.path.name}: NVTX has only marks, no ranges")
    ranges = ranges.drop(columns=["text"])
    g = ranges.groupby(["name", "kind"], sort=False, observed=True)
    by_name = g.agg(depth=("depth", "min"), instances=("start_ns", "size"),
                    cpu_total_ns=("duration_ns", "sum"), cpu_avg_ns=("duration_ns", "mean"),
                    kernel_count=("kernel_count", "sum"), kernel_time_ns=("kernel_time_ns", "sum"),
                    gpu_span_avg_ns=("gpu_span_ns", "mean")).reset_index()
    by_name["kernel_time_avg_ns"] = by_name["kernel_time_ns"] / by_name["instances"]
    by_name = by_name.sort_values("kernel_time_ns", ascending=False, kind="stable")
    return {"ranges": ranges, "by_name": by_name.reset_index(drop=True)}
