"""Report: metadata, NVTX details, read-only access, missing tables."""
from __future__ import annotations

import hashlib

import numpy as np
import pandas as pd
import pytest

import nsightlab
import nsightlab.recipe_runner as R
from nsightlab.read.tables import TABLES


def test_metadata_of_a_2025_export(sqlite_of, cache_dir):
    r = nsightlab.open(sqlite_of("h200-vit-fp16"))
    assert r.nsys_version == "2025.3.2.0" and r.schema_version == "3.20.3"
    assert r.gpus.loc[0, "name"] == "NVIDIA H200" and r.gpus.loc[0, "sm_count"] == 132
    assert r.gpus.loc[0, "compute_capability"] == "9.0"
    assert r.processes.query("uses_cuda")["name"].tolist() == ["python3"]
    start, end = r.span_ns
    assert end - start == 7335194309  # ANALYSIS_DETAILS.duration
    info = r.info()
    assert info["tables"]["kernels"] == 3120 and info["tables"]["cuda_api"] == 11743


def test_metadata_of_a_2022_export_with_old_schema(sqlite_of, cache_dir):
    r = nsightlab.open(sqlite_of("pub-pipit-saxpy-a100"))
    assert r.schema_version == "2.9.1" and r.nsys_version == "2022.2.1.31"
    assert r.gpus.loc[0, "name"] == "NVIDIA A100-SXM4-40GB"
    # TARGET_INFO_SYSTEM_ENV holds non-UTF-8 bytes: reading everything must still work
    assert nsightlab.open(sqlite_of("pub-pipit-saxpy-a100")).threads()["thread_name"].notna().any()


def test_pid_tid_decoded_from_global_tid(sqlite_of, cache_dir):
    api = nsightlab.open(sqlite_of("pub-pipit-saxpy-a100")).cuda_api()
    assert set(api["pid"]) == {1230493} and set(api["tid"]) == {1230493}
    # driver and runtime calls are both there, told apart by api_kind
    kinds = set(api["api_kind"].astype(str))
    assert {"CUDA runtime", "CUDA driver"} <= kinds


def test_cuda_api_names_drop_the_version_suffix(sqlite_of, cache_dir):
    names = set(nsightlab.open(sqlite_of("h200-vit-fp16")).cuda_api()["name"].astype(str))
    assert "cudaDeviceSynchronize" in names and "cudaLaunchKernel" in names
    assert not any(n.endswith("_v3020") for n in names)


def test_nvtx_iteration_and_block_nesting(sqlite_of, cache_dir):
    n = nsightlab.open(sqlite_of("h200-vit-fp16")).nvtx()
    iters = n[n["name"].astype(str).str.fullmatch(r"iter\d+")]
    assert len(iters) == 20 and (iters["depth"] == 0).all()
    blocks = n[n["name"].astype(str).str.fullmatch(r"block\d+")]
    inside = blocks[blocks["start_ns"] >= iters["start_ns"].min()]
    assert len(inside) == 20 * 12 and (inside["depth"] == 1).all()
    cublas = n[n["domain"] == "cuBLAS"]
    assert cublas["name"].astype(str).tolist() == ["cuBLAS:cublasCreate_v2"]


def test_nvtx_text_from_string_ids_and_start_end_ranges(sqlite_of, cache_dir):
    n = nsightlab.open(sqlite_of("pub-centerformer-trt-nvtx")).nvtx()
    assert n["text"].notna().all()  # TensorRT registers its strings: text comes via textId
    assert set(n["domain"].dropna().astype(str)) == {"TensorRT", "myelin-exec"}
    se = n[n["kind"] == "start_end"]
    assert len(se) == 2444 and (se["domain"] == "myelin-exec").all()
    assert (n.loc[n["kind"] == "push_pop", "depth"] >= 0).all()
    assert n["depth"].max() >= 1


def test_gpu_metrics_long_form(sqlite_of, cache_dir):
    g = nsightlab.open(sqlite_of("h200-vit-fp16-gpumetrics")).gpu_metrics()
    # every GPU_METRICS row joined to its metric name, the 44 nsys stamped just before the
    # session's zero (0.09-0.19 ms) included: real samples
    assert len(g) == 1_487_750
    metrics = set(g["metric"].astype(str))
    assert "Tensor Active [Throughput %]" in metrics and "SMs Active [Throughput %]" in metrics
    tensor = g[g["metric"] == "Tensor Active [Throughput %]"]["value"]
    assert tensor.between(0, 100).all() and tensor.max() > 50
    assert set(g["gpu"]) == {0}


def test_sm_clock_from_gpu_metrics_in_report_and_diff(sqlite_of, cache_dir):
    """The SM (GPC) clock inside the iterations, from the samples in SQL: report says it fell
    below what the run reached (H200 under GEMMs: ~1,720 MHz against 1,980), diff says
    two runs' clocks apart, the trace's over the capture's record."""
    import dataclasses
    import sqlite3

    from nsightlab.comparison import diff as D
    from nsightlab.run.model import profile

    path = sqlite_of("h200-vit-fp16-gpumetrics")
    r = nsightlab.open(path)
    p = profile(r, "a")
    it = R.run("budget", r)["iterations"]
    con = sqlite3.connect(path)
    rows = con.execute(
        "SELECT g.timestamp, g.value FROM GPU_METRICS g JOIN TARGET_INFO_GPU_METRICS m ON "
        "g.typeId = m.typeId AND g.metricId = m.metricId WHERE m.metricName LIKE "
        "'GPC Clock Frequency%' ORDER BY g.timestamp").fetchall()
    t, v = np.array(rows, float).T
    v = v / 1e6  # the export stores Hz under the name's [MHz]
    centre = t + np.median(np.diff(t)) // 2
    inside = np.zeros(len(t), bool)
    for lo, hi in zip(it["start_ns"], it["end_ns"]):
        inside |= (centre >= lo) & (centre <= hi)
    assert p.machine["trace_sm_mhz"] == pytest.approx(v[inside].mean(), rel=1e-3)
    assert p.machine["trace_sm_mhz_max"] == pytest.approx(v.max(), abs=1)  # MHz, read as integers
    text = nsightlab.report(r).findings
    said = [f for f in text if f.startswith("the SM clock averaged")]
    assert len(said) == 1 and f"{p.machine['trace_sm_mhz']:,.0f} MHz inside" in said[0]
    slow = dataclasses.replace(p, machine={"trace_sm_mhz": v.mean(), "trace_sm_mhz_max": v.max()})
    words = D._machine_words(p, slow)
    assert words == [f"B's SM clock averaged {v.mean():,.0f} MHz inside its iterations (GPU "
                     f"metrics), A's {p.machine['trace_sm_mhz']:,.0f} MHz"]
    assert D._machine_words(p, p) == []


def test_graph_replayed_kernels_carry_graph_node_ids(sqlite_of, cache_dir):
    r = nsightlab.open(sqlite_of("h200-vit-fp16-cudagraph"))
    k = r.kernels()
    nodes = r.cuda_graph_nodes()
    replayed = k[k["graph_node_id"].notna()]
    assert len(replayed) > 2000 and len(nodes) == 528
    known = set(nodes["graph_node_id"]) | set(nodes["original_graph_node_id"].dropna())
    assert set(replayed["graph_node_id"]) <= known


def test_missing_table_is_empty_with_columns_and_a_hint(sqlite_of, cache_dir):
    r = nsightlab.open(sqlite_of("pub-centerformer-trt-nvtx"))
    k = r.kernels()
    assert k.empty and list(k.columns) == [c.name for c in TABLES["kernels"].columns]
    assert not r.has("kernels")
    assert "nsys profile --trace=cuda" in r.missing_hint("kernels")
    assert "--gpu-metrics-devices" in r.missing_hint("gpu_metrics")
    assert r.missing_hint("nvtx") is None


def test_column_selection(sqlite_of, cache_dir):
    r = nsightlab.open(sqlite_of("h200-vit-fp16"))
    k = r.kernels(["name", "start_ns"])
    assert list(k.columns) == ["name", "start_ns"] and len(k) == 3120
    with pytest.raises(nsightlab.NsightlabError, match="no column"):
        r.kernels(["nope"])
    with pytest.raises(nsightlab.NsightlabError, match="not an nsightlab table"):
        r.table("kernel")


def test_the_input_report_is_never_written(sqlite_of, cache_dir, tmp_path):
    src = sqlite_of("h200-vit-fp16")
    copy = tmp_path / "mine.sqlite"
    copy.write_bytes(src.read_bytes())
    before = (hashlib.sha256(copy.read_bytes()).hexdigest(), copy.stat().st_mtime_ns)
    r = nsightlab.open(copy)
    for name in TABLES:
        r.table(name)
    r.info()
    r.close()
    assert (hashlib.sha256(copy.read_bytes()).hexdigest(), copy.stat().st_mtime_ns) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache", "mine.sqlite"]


def test_open_a_capture_directory_and_a_capture_name(sqlite_of, tmp_path, monkeypatch, cache_dir):
    cap = tmp_path / "store" / "fp16"
    cap.mkdir(parents=True)
    (cap / "report.sqlite").write_bytes(sqlite_of("h200-vit-fp16").read_bytes())
    (cap / "manifest.json").write_text('{"name": "fp16", "sqlite": "report.sqlite"}')
    monkeypatch.setenv("NSIGHTLAB_STORE", str(tmp_path / "store"))
    monkeypatch.chdir(tmp_path)
    for r in (nsightlab.open(cap), nsightlab.open("fp16")):
        assert len(r.kernels()) == 3120
    assert (cap / "cache" / "kernels" / "meta.json").is_file()  # capture keeps its own cache
    assert isinstance(r.kernels(), pd.DataFrame)


def test_frame_builder_widens_dictionary_codes_past_int16():
    """More distinct strings than int16 codes can hold (synthetic batches: no real report
    small enough for tests has 33k kernel names)."""
    import pyarrow as pa

    from nsightlab.read.frames import FrameBuilder

    spec = TABLES["kernels"]
    b = FrameBuilder(spec, ["name", "start_ns"], 40_000)
    names = [f"k{i}" for i in range(40_000)]
    for off in range(0, 40_000, 10_000):
        part = names[off:off + 10_000]
        b.put(off, pa.record_batch({"name": pa.array(part).dictionary_encode(),
                                    "start_ns": pa.array(range(off, off + 10_000), pa.int64())}))
    df = b.frame([(0, 40_000)])
    assert df["name"].astype(str).tolist() == names
    assert df["start_ns"].tolist() == list(range(40_000))
