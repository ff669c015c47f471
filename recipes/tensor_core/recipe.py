"""tensor_core: Tensor Core activity from GPU metrics, Nsight Compute, or kernel names."""
import numpy as np
import pandas as pd

from nsightlab.recipe_api import annotate, gpu_metrics as gm, group_ids, ncu, project


def run(report, params):
    out = {}
    evidence = None
    if params["ncu"]:
        nk = ncu.kernels(params["ncu"])
        evidence = ncu.tensor_evidence(nk)
        out["ncu_kernels"] = annotate(nk, evidence=evidence)
    tensor = gm.samples(report, ("Tensor Active",))
    sm = gm.samples(report, ("SMs Active", "SM Active"))
    if tensor is None:  # estimates from names: per (GPU, name), not per kernel
        per = per_name(report)
        if per.empty:  # allowed only with an ncu report (metadata.json: requires ... unless ncu)
            return out
        per = annotate(per, evidence=evidence)
        per["uses_tensor_cores"] = per["tensor_core"]
        out["summary"] = summary(per, None, sm)
        out["by_kernel"] = by_kernel(per, pd.DataFrame(columns=["activity_pct", "covered_ns"]))
        return out
    k = report.kernels(["device_id", "name", "start_ns", "end_ns", "duration_ns"])
    if k.empty:
        return out
    measured = per_kernel_activity(k, tensor)
    # measured evidence refines the name-based labels: ncu counters first, Tensor Active after
    if len(measured):
        active = measured[["activity_pct"]].rename(columns={"activity_pct": "tensor_active_pct"})
        evidence = active if evidence is None else evidence.join(active, how="outer")
    k = annotate(k, evidence=evidence)
    k["uses_tensor_cores"] = k["tensor_core"]  # classify.uses_tensor_cores: one definition
    out["summary"] = summary(k, tensor, sm)
    if tensor is not None:
        out["over_time"] = over_time(tensor, sm, params["bin_ms"])
        out["by_range"] = by_range(report, tensor, sm)
    out["by_kernel"] = by_kernel(k, measured)
    return out


def per_name(report):
    """Kernels per (GPU, name) in order of first appearance: device_id, name (the kernel
    table's categories, so names are classified as one run), instances, duration_ns (their
    total). Without GPU metrics every number here is a sum over a name's kernels: 8M kernels
    need three columns and one group id each, not 8M labelled rows (the recipe peaked at
    0.8 GB that way)."""
    k = report.kernels(["device_id", "name", "duration_ns"])
    if k.empty:
        return pd.DataFrame()
    gid, keys = group_ids(k[["device_id", "name"]])
    keys["instances"] = np.bincount(gid, minlength=len(keys)).astype(np.int64)
    # sums in float64 are exact below 2**53 ns (104 days of kernel time per name)
    keys["duration_ns"] = np.rint(np.bincount(gid, weights=k["duration_ns"].to_numpy(),
                                              minlength=len(keys))).astype(np.int64)
    return keys


def per_kernel_activity(k, tensor):
    """Tensor Active per kernel name over the sampled windows (gpu_metrics.per_kernel), for
    names with an estimate: activity_pct, covered_ns. Empty without GPU metrics."""
    if tensor is None:
        return pd.DataFrame(columns=["activity_pct", "covered_ns"])
    parts = []
    for dev, kd in k.groupby("device_id"):
        t, y = _on(tensor, dev)
        est = gm.per_kernel(kd[["name", "start_ns", "end_ns"]], t, y).set_index("name")
        parts.append(est[est["activity_pct"].notna()][["activity_pct", "covered_ns"]])
    est = pd.concat(parts) if parts else pd.DataFrame(columns=["activity_pct", "covered_ns"])
    return est[~est.index.duplicated()]


def _on(samples, gpu):
    s = samples[samples["gpu"] == gpu]
    return s["timestamp_ns"].to_numpy(), s["value"].to_numpy(float)


def summary(k, tensor, sm):
    rows = []
    for dev, g in k.groupby("device_id"):
        tc_time = g.loc[g["uses_tensor_cores"], "duration_ns"].sum()
        row = {"gpu": int(dev), "source": "estimate", "tensor_active_avg_pct": np.nan,
               "sm_active_avg_pct": np.nan, "samples": 0, "sampling_hz": np.nan,
               "tensor_kernel_time_pct": 100.0 * tc_time / max(g["duration_ns"].sum(), 1)}
        if tensor is not None:
            lo, hi = g["start_ns"].min(), g["end_ns"].max()
            t, y = _on(tensor, dev)
            (avg,), (n,) = gm.window_mean(t, y, [lo], [hi])
            if n:
                row.update(source="gpu_metrics", tensor_active_avg_pct=avg, samples=int(n),
                           sampling_hz=1e9 / gm.period_ns(t))
                if sm is not None:
                    ts, ys = _on(sm, dev)
                    row["sm_active_avg_pct"] = gm.window_mean(ts, ys, [lo], [hi])[0][0]
        rows.append(row)
    return pd.DataFrame(rows)


def over_time(tensor, sm, bin_ms):
    width = max(1, int(bin_ms * 1e6))
    frame = tensor.rename(columns={"value": "tensor"})
    if sm is not None:
        frame = frame.merge(sm.rename(columns={"value": "sm"}), on=["timestamp_ns", "gpu"], how="left")
    else:
        frame["sm"] = np.nan
    out = []
    for gpu, m in frame.groupby("gpu"):
        b = (m["timestamp_ns"] - m["timestamp_ns"].min()) // width
        agg = m.groupby(b).agg(bin_start_ns=("timestamp_ns", "min"), tensor_active_pct=("tensor", "mean"),
                               sm_active_pct=("sm", "mean"), samples=("tensor", "size"))
        agg.insert(0, "gpu", gpu)
        out.append(agg.reset_index(drop=True))
    return pd.concat(out, ignore_index=True)


def by_range(report, tensor, sm):
    proj = project(report)
    proj = proj[proj["kernel_count"] > 0].reset_index(drop=True)
    out = proj[["name", "depth", "start_ns", "gpu_start_ns", "gpu_end_ns", "kernel_count"]].copy()
    out["name"] = out["name"].astype(str)
    lo = proj["gpu_start_ns"].to_numpy(np.int64)
    hi = proj["gpu_end_ns"].to_numpy(np.int64)
    # NVTX ranges do not name a GPU: use the GPU with the most samples (single-GPU inference)
    gpu = tensor["gpu"].mode().iloc[0]
    t, y = _on(tensor, gpu)
    out["tensor_active_avg_pct"], out["samples"] = gm.window_mean(t, y, lo, hi)
    out["sm_active_avg_pct"] = np.nan
    if sm is not None:
        ts, ys = _on(sm, gpu)
        out["sm_active_avg_pct"] = gm.window_mean(ts, ys, lo, hi)[0]
    return out


def by_kernel(k, measured):
    """Per kernel name, from kernels or from ``per_name``'s sums (``instances`` given)."""
    g = k.groupby("name", observed=True, sort=False)
    counted = ("instances", "sum") if "instances" in k else ("duration_ns", "size")
    out = g.agg(kernel_class=("kernel_class", "first"), precision=("precision", "first"),
                instances=counted, total_ns=("duration_ns", "sum"),
                uses_tensor_cores=("uses_tensor_cores", "first")).reset_index()
    names = out["name"].astype(str)
    hit = names.isin(measured.index)
    out["source"] = np.where(hit, "gpu_metrics", "estimate")
    out["tensor_active_avg_pct"] = names.map(measured["activity_pct"]).astype(float)
    out["covered_ns"] = names.map(measured["covered_ns"]).fillna(0).astype("int64")
    return out.sort_values("total_ns", ascending=False, kind="stable").reset_index(drop=True)
