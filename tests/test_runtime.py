"""The runtime behind each process, from the trace itself (issue 47, begun): real reports of
PyTorch eager, torch.compile, TensorRT (a public trtexec-free TensorRT 10 app, and a public
TensorRT trace with NVTX only), two torchrun ranks, a plain CUDA program and an ONNX Runtime
capture; library kernels alone name no runtime."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

import nsightlab
from conftest import xz_fixtures
from nsightlab.analysis import runtime
from nsightlab.cli import cli

DATA = Path(__file__).parent / "data"


def said(path) -> list[dict]:
    return runtime.identify(nsightlab.open(path)).to_dict("records")


@pytest.mark.parametrize("stem,expected,library", [
    ("h200-vit-fp16", "PyTorch", "cuBLAS"),           # ATen kernels beside cuBLAS nvjet GEMMs
    ("pub-realcugan-trt10", "TensorRT", "cuDNN"),     # trt_ / __myl_ / nvinfer1:: kernels
    ("pub-pipit-saxpy-a100", "unknown", ""),          # a plain CUDA program: saxpy only
])
def test_the_runtime_is_named_from_its_own_kernels(sqlite_of, cache_dir, stem, expected, library):
    (r,) = said(sqlite_of(stem))
    assert r["runtime"] == expected
    assert library in r["libraries"]
    if expected == "unknown":
        assert "no kernel a runtime writes" in r["evidence"]
    else:
        assert "kernels" in r["evidence"]


def test_library_kernels_alone_name_no_runtime():
    """cuBLAS, cuDNN, CUTLASS and NCCL kernels are libraries, whoever called them."""
    for name in ("nvjet_sm90_hsh_128x128_64x6_1x2_h_bz_bias_TNT",
                 "cutlass::Kernel2<cutlass_80_wmma_tensorop_h161616gemm_32x32_128x1_tn_align8>",
                 "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
                 "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16"):
        assert not any(p.search(name) for p in runtime.RUNTIME_KERNELS.values()), name
        assert any(p.search(name) for p in runtime.LIBRARY_KERNELS.values()), name


def test_torch_compile_is_named(tmp_path_factory):
    model = xz_fixtures(tmp_path_factory, DATA / "models")
    (r,) = said(model("h100-gpt-compile-bf16"))
    assert r["runtime"] == "PyTorch (torch.compile)" and "Inductor" in r["evidence"]


def test_each_torchrun_rank_is_its_own_process(tmp_path_factory):
    """nsys-ai's 2-GPU slice: two python3 processes, each PyTorch with NCCL."""
    edges = xz_fixtures(tmp_path_factory, DATA / "edges")
    rows = said(edges("nsysai-mfu_2gpu_after"))
    assert len(rows) == 2 and len({r["pid"] for r in rows}) == 2
    assert all(r["runtime"] == "PyTorch" and "NCCL" in r["libraries"] for r in rows)


def test_tensorrt_nvtx_ranges_name_it_without_kernels(sqlite_of, cache_dir):
    """A public TensorRT trace with NVTX only (no CUDA trace): its TensorRT and myelin-exec
    domains and {ForeignNode[...]} layer ranges."""
    (r,) = said(sqlite_of("pub-centerformer-trt-nvtx"))
    assert r["runtime"] == "TensorRT" and "NVTX ranges" in r["evidence"] and r["kernels"] == 0


def test_an_ort_capture_is_named_by_its_manifest(tmp_path, cache_dir):
    shutil.copytree(DATA / "ort" / "captures" / "ort-cpu", tmp_path / "ort-cpu")
    (r,) = said(tmp_path / "ort-cpu")
    assert r["runtime"] == "ONNX Runtime (CPU EP)" and "manifest" in r["evidence"]


def test_info_shows_the_runtime(sqlite_of, cache_dir):
    path = sqlite_of("h200-vit-fp16")
    res = CliRunner().invoke(cli, ["info", str(path)])
    assert res.exit_code == 0 and "  runtime: PyTorch (" in res.stdout
    res = CliRunner().invoke(cli, ["info", str(path), "--json"])
    assert json.loads(res.stdout)["runtimes"][0]["runtime"] == "PyTorch"


def test_report_and_diff_say_the_runtime(sqlite_of, cache_dir):
    """report's second line names the runtime; diff across runtimes says the runtime change
    first, and does not ask whether the runs are the same model because their math kernels
    differ (two runtimes launch the same math differently: that is the comparison)."""
    vit, trt = sqlite_of("h200-vit-fp16"), sqlite_of("pub-realcugan-trt10")
    out = CliRunner().invoke(cli, ["report", str(vit)]).stdout.splitlines()
    assert out[1].startswith("  runtime: PyTorch (") and "ATen" in out[1]
    res = CliRunner().invoke(cli, ["diff", str(vit), str(trt)])
    assert res.exit_code == 0, res.output
    assert "runtime change: PyTorch -> TensorRT" in res.stdout
    assert "their math kernels differ" not in res.stdout
    d = nsightlab.diff(vit, trt)
    assert (d.headline["a_runtime"], d.headline["b_runtime"]) == ("PyTorch", "TensorRT")
    same = nsightlab.diff(vit, sqlite_of("h200-vit-fp8"))
    assert same.headline["runtime_change"] == ""


def test_compare_has_a_runtime_column(tmp_path, cache_dir):
    shutil.copytree(DATA / "ort" / "captures", tmp_path / "c")
    lineup = nsightlab.compare([tmp_path / "c" / "torch-eager", tmp_path / "c" / "ort-cpu"],
                               labels=["eager", "ort"])
    s = lineup.summary.set_index("run")["runtime"]
    assert s["eager"] == "PyTorch" and s["ort"] == "ONNX Runtime (CPU EP)"
    res = CliRunner().invoke(cli, ["compare", str(tmp_path / "c" / "torch-eager"),
                                   str(tmp_path / "c" / "ort-cpu")])
    assert "runtime" in res.stdout.splitlines()[1]  # the column, since the runtimes differ


def test_launch_bound_pytorch_gets_pytorch_remedies(sqlite_of, cache_dir):
    """The real launch-bound PyTorch loop (h200-launchbound): CUDA graphs in PyTorch's terms,
    not trtexec's."""
    from nsightlab.run import report as run_report

    rr = run_report.build(sqlite_of("h200-launchbound"))
    todo = next(f for f in rr.findings if f.startswith("what to do"))
    assert "torch.cuda.graphs, or torch.compile mode='reduce-overhead'" in todo
    assert "trtexec" not in todo


def test_remedies_in_each_runtimes_terms_on_made_up_advice():
    """Made-up advice records (no TensorRT or CUDA-EP launch-bound trace here): each remedy
    is said in the runtime's terms, unknown runtimes get the CUDA calls, several the generic
    words; the records are the same for all."""
    from nsightlab.renderers import words
    from nsightlab.run import remedies

    advice = [words.record("launch"), words.record("pin_pageable", pageable_pct=80.0),
              words.record("sync_in_loop", about="cudaStreamSynchronize", per_iteration=1.0,
                           idle_per_iteration_ns=2e5, copy=False)]
    trt = words.said(advice, remedies.how("TensorRT"))
    assert "trtexec --useCudaGraph" in trt and "torch" not in trt
    ort = words.said(advice, remedies.how("ONNX Runtime (CUDA EP)"))
    assert "enable_cuda_graph" in ort and "io_binding" in ort and "torch" not in ort
    plain = words.said(advice, remedies.how("unknown"))
    assert "cudaStreamBeginCapture" in plain and "torch" not in plain
    assert words.said(advice, remedies.how("PyTorch / TensorRT")) == words.said(advice)


def test_trtexec_checks_stay_quiet_on_a_compute_bound_tensorrt_app(sqlite_of, cache_dir):
    """A public TensorRT 10 application: its enqueue ranges (median 1.3 ms) are far below the
    GPU compute (101 ms per inference), no copies: none of trtexec's warnings applies."""
    from nsightlab.run import report as run_report

    rr = run_report.build(sqlite_of("pub-realcugan-trt10"))
    text = "\n".join(rr.findings)
    assert rr.profile.runtime == "TensorRT"
    assert "--useCudaGraph" not in text and "--noDataTransfers" not in text
    assert "--useSpinWait" not in text and "torch" not in text


def test_trtexec_checks_on_fake_numbers():
    """FAKE numbers (no TensorRT can run where nsightlab is built or tested): trtexec's three
    end-of-run warnings, each on its own rule, and none on a balanced inference."""
    import pandas as pd

    from nsightlab.run import remedies

    bound = pd.Series({"kernels_ns": 1e6, "h2d_pageable_ns": 1.5e6, "h2d_pinned_ns": 0.0,
                       "d2h_pageable_ns": 0.0, "d2h_pinned_ns": 2e5, "wall_cov_pct": 12.0})
    codes, said = zip(*remedies.trt_checks(bound, (1.2e6, "the median ExecutionContext::enqueue range")))
    assert codes == ("trt_enqueue", "trt_copies", "trt_unstable")
    assert "--useCudaGraph" in said[0] and "1.20 ms" in said[0] and "1.00 ms" in said[0]
    assert said[1].startswith("host-to-device copies take 1.50 ms") and "--noDataTransfers" in said[1]
    assert "--useSpinWait" in said[2]
    calm = bound.copy()
    calm[["h2d_pageable_ns", "wall_cov_pct"]] = [3e5, 2.0]
    assert remedies.trt_checks(calm, (0.9e6, "CUDA API time per iteration")) == []
