"""api_sum: CPU time in CUDA API calls by name, like `nsys stats -r cuda_api_sum`.

nsys groups by the recorded name id: runtime and driver flavours, and the CUDA-backtrace
duplicates that 2022-era exports record, stay separate rows. Grouping by (name, api_kind)
gives the same rows."""
from nsightlab.recipe_api import describe


def run(report, params):
    a = report.cuda_api(["name", "api_kind", "duration_ns"])
    out = describe(a, ["name", "api_kind"], "duration_ns").rename(columns={"count": "calls"})
    out["time_pct"] = 100.0 * out["total_ns"] / out["total_ns"].sum()
    out = out.sort_values("total_ns", ascending=False, kind="stable").reset_index(drop=True)
    return {"api_sum": out}
