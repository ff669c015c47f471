"""Which runtime ran each process's GPU work, from the trace itself (issue 47, begun).

The evidence, per process that ran kernels (by ``pid``):

- kernel names a runtime writes itself: ``onnxruntime::`` (ONNX Runtime's CUDA EP), ATen's
  ``at::native`` / ``at::cuda`` and ``c10::`` (PyTorch eager), Inductor's
  ``triton_poi_/per_/red_/tem_`` (PyTorch under torch.compile), TensorRT's ``trt_`` and
  ``_trt`` kernels, ``nvinfer1::`` in a signature, Myelin's ``__myl_`` and
  ``generatedNativePointwise``;
- NVTX ranges a runtime writes: TensorRT's domains (``TensorRT``, Myelin's ``myelin-exec``),
  its ``ExecutionContext::enqueue`` and layer ranges (``{ForeignNode[...]}``);
- a capture's manifest (``nsightlab capture --ort`` or ``--trtexec``).

Library kernels (cuBLAS ``nvjet`` / ``gemm``, cuDNN, CUTLASS, flash-attention, NCCL) name a
library, not a runtime: a process with only those, or with its own kernels (``saxpy``), is
"unknown", and its libraries are said beside it. Several runtimes in one process (PyTorch
calling TensorRT) are said together, the one with more kernels first.
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from nsightlab.read.report import Report

#: runtime -> kernel names it writes (searched in the demangled name)
RUNTIME_KERNELS = {
    "ONNX Runtime": re.compile(r"onnxruntime::"),
    "PyTorch (torch.compile)": re.compile(r"^triton_(poi|per|red|tem|for|spl)_"),
    "PyTorch": re.compile(r"\bat::(native|cuda)::|\bc10::|\bat_cuda_detail::"),
    "TensorRT": re.compile(r"^trt_|_trt$|\bnvinfer1::|^__myl_|^generatedNativePointwise|"
                           r"^myelin", re.IGNORECASE),
}
#: library -> kernel names (a library is not a runtime)
LIBRARY_KERNELS = {
    "cuBLAS": re.compile(r"^nvjet_|cublas|gemv|^sm\d+_xmma_gemm|gemmSN|gemmk", re.IGNORECASE),
    "cuDNN": re.compile(r"cudnn", re.IGNORECASE),
    "CUTLASS": re.compile(r"cutlass", re.IGNORECASE),
    "flash-attention": re.compile(r"flash_fwd|flash::|fmha", re.IGNORECASE),
    "NCCL": re.compile(r"^ncclDevKernel|^ncclKernel"),
}
#: NVTX domain -> the library whose API nsys traced there (--trace=cublas,cudnn)
LIBRARY_DOMAINS = {"cuBLAS": "cuBLAS", "cuDNN": "cuDNN"}
#: NVTX domain -> the runtime that writes it
RUNTIME_DOMAINS = {"TensorRT": "TensorRT", "myelin-exec": "TensorRT",
                   "onnxruntime": "ONNX Runtime"}
#: runtime -> NVTX range names it writes
RUNTIME_RANGES = {
    "TensorRT": re.compile(r"^ExecutionContext::(?:enqueue|execute)|^\{ForeignNode\["),
}
COLUMNS = ["pid", "runtime", "evidence", "libraries", "kernels"]


def identify(report: Report) -> pd.DataFrame:
    """One row per process that ran kernels (``COLUMNS``): its runtime(s) ("unknown" without
    runtime evidence), the evidence in words, the libraries its kernels come from, and its
    kernel count. A capture manifest's runtime is said for every process when the trace
    holds no kernel of another runtime. Empty without kernels and without a manifest."""
    names = _kernel_names(report)
    nvtx = report.nvtx(["pid", "domain", "name"]) if report.has_rows("nvtx") else None
    ranges = _range_runtimes(nvtx)
    traced = _range_libraries(nvtx)
    manifest = _manifest_runtime(report)
    rows = []
    for pid, g in names.groupby("pid", sort=True):
        total = int(g["count"].sum())
        found, evidence = {}, []
        for runtime, pattern in RUNTIME_KERNELS.items():
            n = int(g["count"][g["name"].map(lambda x, p=pattern: bool(p.search(x)))].sum())
            if n:
                found[runtime] = n
                evidence.append(f"{n:,} of {total:,} kernels {_WHAT[runtime]}")
        for runtime, n in ranges.items():
            if runtime not in found:
                found[runtime] = 0
            evidence.append(f"{n:,} {runtime} NVTX ranges")
        if manifest and not found:
            found[manifest[0]] = 0
            evidence.append(manifest[1])
        libs = [lib for lib, p in LIBRARY_KERNELS.items()
                if lib in traced.get(int(pid), ())
                or g["name"].map(lambda x, p=p: bool(p.search(x))).any()]
        if "PyTorch" in found and "PyTorch (torch.compile)" in found:
            del found["PyTorch"]  # eager ops beside compiled ones: one runtime, compiled
        runtime = " + ".join(sorted(found, key=found.get, reverse=True)) or "unknown"
        if not found:
            evidence.append("no kernel a runtime writes"
                            + (f" (libraries only: {', '.join(libs)})" if libs else ""))
        rows.append({"pid": int(pid), "runtime": runtime, "evidence": "; ".join(evidence),
                     "libraries": ", ".join(libs), "kernels": total})
    if not rows and (manifest or ranges):  # no kernel: what the manifest or ranges say
        said = [(r, f"{n:,} {r} NVTX ranges") for r, n in ranges.items()] + \
            ([manifest] if manifest else [])
        rows.append({"pid": -1, "runtime": " + ".join(dict.fromkeys(r for r, _ in said)),
                     "evidence": "; ".join(e for _, e in said) + "; no kernel recorded",
                     "libraries": "", "kernels": 0})
    return pd.DataFrame(rows, columns=COLUMNS)


def named(rows: list[dict]) -> str:
    """The runtimes of ``identify``'s rows as one name: each distinct one, in process order
    ("unknown" when there is none, or none but unknown)."""
    known = [r["runtime"] for r in rows if r["runtime"] != "unknown"]
    return " / ".join(dict.fromkeys(known)) or "unknown"


_WHAT = {"ONNX Runtime": "in onnxruntime::", "PyTorch": "in ATen (at::native, c10::)",
         "PyTorch (torch.compile)": "generated by Inductor (triton_*)",
         "TensorRT": "of TensorRT (trt_, __myl_, nvinfer1::)"}


def _kernel_names(report: Report) -> pd.DataFrame:
    """(pid, name, count) of every distinct kernel name per process."""
    if not report.has_rows("kernels"):
        return pd.DataFrame(columns=["pid", "name", "count"])
    from nsightlab.analysis import engine

    def in_duckdb(db) -> pd.DataFrame:
        return db.con.execute(f"SELECT pid, CAST(name AS VARCHAR) AS name, count(*) AS count "
                              f"FROM {db.view('kernels')} GROUP BY ALL").df()

    def in_numpy() -> pd.DataFrame:
        k = report.kernels(["pid", "name"])
        out = k.groupby(["pid", "name"], observed=True, sort=False).size()
        return out.rename("count").reset_index().astype({"name": str})

    return engine.analyse(report, in_duckdb, in_numpy)


def _range_runtimes(n: pd.DataFrame | None) -> dict[str, int]:
    """runtime -> how many of its NVTX ranges the report holds: ranges in a runtime's NVTX
    domain (``RUNTIME_DOMAINS``) or named as it names them (``RUNTIME_RANGES``), over the
    whole report (a runtime's ranges are not tied to its kernels' process here); ``n`` the
    report's NVTX table (pid, domain, name), None without one."""
    if n is None:
        return {}
    # per distinct name (names are categories: 13.6M TensorRT layer ranges are a few
    # thousand names), then counted by code; names read "domain:text" as nsys stats prints
    names = n["name"].astype("category")
    cats = pd.Series([str(c) for c in names.cat.categories])
    counts = np.bincount(names.cat.codes.to_numpy() + 1, minlength=len(cats) + 1)[1:]
    domain, text = cats.str.split(":", n=1).str[0], cats.str.split(":", n=1).str[-1]
    out = {}
    for runtime in dict.fromkeys([*RUNTIME_DOMAINS.values(), *RUNTIME_RANGES]):
        hit = domain.isin([d for d, r in RUNTIME_DOMAINS.items() if r == runtime]).to_numpy()
        if runtime in RUNTIME_RANGES:
            hit = hit | text.map(lambda t, r=runtime: bool(RUNTIME_RANGES[r].search(t))).to_numpy()
        if hit.any():
            out[runtime] = int(counts[hit].sum())
    return out


def _range_libraries(n: pd.DataFrame | None) -> dict[int, set]:
    """pid -> the libraries whose API calls nsys traced as NVTX ranges in that process
    (``LIBRARY_DOMAINS``: a cuBLAS SGEMM runs a ``cutlass_*_sgemm`` kernel, named for CUTLASS,
    but the process called cuBLAS); ``n`` as ``_range_runtimes`` takes it."""
    if n is None:
        return {}
    n = n[n["domain"].astype(str).isin(list(LIBRARY_DOMAINS))]
    return {int(pid): {LIBRARY_DOMAINS[str(d)] for d in g.unique()}
            for pid, g in n.groupby("pid", observed=True)["domain"]}


def _manifest_runtime(report: Report) -> tuple[str, str] | None:
    """(runtime, evidence) from the capture manifest beside the report, if any."""
    m = report.capture_manifest
    preset = m.get("preset")
    argv = " ".join(map(str, m.get("command") or []))
    if isinstance(preset, dict) and preset.get("name") == "ort" or "nsightlab.runners.ort" in argv:
        ep = preset.get("ep") if isinstance(preset, dict) else None
        return ("ONNX Runtime" + (f" ({ep.upper()} EP)" if ep else ""),
                "the capture's manifest (nsightlab capture --ort"
                + (f" --ep {ep}" if ep else "") + ")")
    if "trtexec" in argv:
        return "TensorRT", "the capture's manifest (trtexec)"
    return None
