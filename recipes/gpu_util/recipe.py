"""gpu_util: GPU busy % over time, per device and per stream."""
import numpy as np
import pandas as pd

from nsightlab.recipe_api import covered, union

OPS = ("kernels", "memcpy", "memset")


def run(report, params):
    cols = ["pid", "device_id", "stream_id", "start_ns", "end_ns"]
    ops = pd.concat([report.table(t, cols) for t in OPS if report.has_rows(t)], ignore_index=True)
    width = max(1, int(params["bin_ms"] * 1e6))
    return {"device": binned(ops, ["pid", "device_id"], width),
            "stream": binned(ops, ["pid", "device_id", "stream_id"], width)}


def binned(ops, keys, width):
    out = []
    for key, g in ops.groupby(keys, sort=True):
        lo, hi = int(g["start_ns"].min()), int(g["end_ns"].max())
        edges = np.arange(lo, hi + width, width, dtype=np.int64)
        ms, me = union(g["start_ns"].to_numpy(), g["end_ns"].to_numpy())
        busy = covered(ms, me, edges[:-1], edges[1:])
        counts = np.bincount((g["start_ns"].to_numpy() - lo) // width, minlength=len(edges) - 1)
        frame = pd.DataFrame({"bin_start_ns": edges[:-1], "bin_end_ns": edges[1:],
                              "busy_ns": busy, "busy_pct": 100.0 * busy / width,
                              "ops": counts[: len(edges) - 1]})
        for k, v in zip(keys, key):
            frame.insert(keys.index(k), k, v)
        out.append(frame)
    return pd.concat(out, ignore_index=True)
