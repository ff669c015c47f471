"""NVFP4, MXFP4, MXFP8 and FP6 on Blackwell (issue 28): kernel names read by the grammars of
the libraries that define them, Nsight Compute metrics read by pattern per architecture, and
block-scale quantize work counted as conversion in a precision diff.

Data: ``tests/data/blackwell_names.csv`` (real names, each with its source), the real RTX 5090
report ``tests/data/ncu/rtx5090-flash-attn-bf16.ncu-rep.xz`` (DarrellThomas/blackwell-kernels,
MIT), and the tensor-pipe metric names Nsight Compute 2025.3.1 lists for H100 (gh100), B200
(gb100), B300 (gb110) and RTX 5090 (gb202) (``tests/data/ncu/metric_names``, from
``ncu --query-metrics --chip <chip>`` on the project's GPU machine). No Blackwell GPU can run
here: the ncu tests that need per-kernel values use a stand-in action that answers those real
metric names with given values (``FakeAction``), and the diff runs on exports whose kernel
names were replaced by real Blackwell names.
"""
from __future__ import annotations

import csv
import sqlite3
from pathlib import Path

import pytest

import nsightlab
from nsightlab.analysis import narrow_formats
from nsightlab.analysis.classify import PRECISIONS, classify_names, refine
from nsightlab.formats import ncu

DATA = Path(__file__).resolve().parent / "data"
NAMES = list(csv.DictReader(open(DATA / "blackwell_names.csv")))


@pytest.mark.parametrize("row", NAMES, ids=[r["name"][:60] for r in NAMES])
def test_real_blackwell_names(row):
    """Class, math precision, Tensor Cores and the formats the name spells, for every sourced
    name: the scale type decides NVFP4 vs MX (never the MMA atom's name), trtllm-gen's Mx
    prefix and block-size tokens override E2m1's NVFP4 default, a cast names the MMA's type,
    and the D (output) slot never decides the math precision."""
    t = classify_names([row["name"]]).iloc[0]
    got = (t["kernel_class"], t["precision"], int(t["tensor_core"]), t["precision_detail"])
    assert got == (row["kernel_class"], row["precision"], int(row["tensor_core"]),
                   row["precision_detail"]), t["rule"]


def test_every_label_is_a_known_precision_and_every_grammar_has_a_source():
    assert {r["precision"] for r in NAMES} <= set(PRECISIONS)
    assert all(len(src) > 40 for _, src in narrow_formats.GRAMMARS)
    rules = {t.split("; ")[1] for t in classify_names([r["name"] for r in NAMES])["rule"]}
    used = {g for g, _ in narrow_formats.GRAMMARS if g in rules}
    assert used == {g for g, _ in narrow_formats.GRAMMARS}  # each grammar read a real name


# ---- Nsight Compute ----------------------------------------------------------------------------
def _names(chip: str) -> list[str]:
    return (DATA / "ncu" / "metric_names" / f"{chip}.txt").read_text().split()


class FakeAction:
    """Stands in for an ncu_report action (no Blackwell GPU or report here): it has the metrics
    a report of ``chip`` has (Nsight Compute 2025.3.1's real names, as collected: percentages
    of cycle and instruction metrics, sums of op counters) and answers ``values`` for some,
    0 for the rest."""

    def __init__(self, chip: str, values: dict[str, float]):
        self.values = values
        self.names = []
        for base in _names(chip):
            if base.startswith("sm__ops_path_tensor_src"):
                self.names.append(f"{base}.sum")
            else:
                self.names += [f"{base}.avg.pct_of_peak_sustained_active",
                               f"{base}.avg.pct_of_peak_sustained_elapsed"]
        missing = set(values) - set(self.names)
        assert not missing, f"not a {chip} metric: {missing}"

    def metric_names(self):
        return self.names

    def metric_by_name(self, name):
        if name not in self.names:
            return None
        value = self.values.get(name, 0.0)
        return type("M", (), {"value": lambda self: value})()


PCT = ".avg.pct_of_peak_sustained_active"


def test_a_tcgen05_gemm_on_b200_reports_the_tc_pipe_with_the_tensor_pipe_beside_it():
    """Issue 28's B200 block-scaled GEMM: tensor pipe 14.6%, TC pipe 29.1%. Its work is
    tcgen05, so the TC pipe's figure is its Tensor Core activity, named, the other kept."""
    a = FakeAction("gb100", {f"sm__pipe_tensor_cycles_active{PCT}": 14.6,
                             f"sm__pipe_tc_cycles_active{PCT}": 29.1,
                             f"sm__inst_executed_pipe_tc{PCT}": 3.2,
                             "sm__ops_path_tensor_src_fp4_dst_fp32.sum": 5e11})
    names = a.metric_names()
    active, metric = ncu._tensor_active(a, names)
    assert active == 29.1 and metric.startswith("sm__pipe_tc_cycles_active") and "tcgen05" in metric
    assert ncu._by_pattern(a, names, ncu._PATTERN_RES["tensor_pipe_pct"])[0] == 14.6
    assert ncu._by_pattern(a, names, ncu._PATTERN_RES["tc_inst_pct"])[0] == 3.2
    hmma, hmma_metric = ncu._by_pattern(a, names, ncu._PATTERN_RES["hmma_inst_pct"])
    assert hmma == 0.0 and "subpipe_hmma" in hmma_metric  # read, not empty, on Blackwell


def test_a_legacy_mma_kernel_on_b200_reports_the_tensor_pipe():
    a = FakeAction("gb100", {f"sm__pipe_tensor_cycles_active{PCT}": 69.2,
                             f"sm__inst_executed_pipe_tensor_subpipe_hmma{PCT}": 69.2})
    active, metric = ncu._tensor_active(a, a.metric_names())
    assert active == 69.2 and metric == f"sm__pipe_tensor_cycles_active{PCT}"


@pytest.mark.parametrize("chip,counter,name,want", [
    # B200 lumps FP4, FP6 and FP8 in one counter: the name narrows it
    ("gb100", "sm__ops_path_tensor_src_fp4_fp6_fp8_dst_fp32.sum",
     "nvjet_sm100_qqtst_128x256_128x6_2x2_2cta_h_bz_Avec32UE8M0_Bvec32UE8M0_TNT", "mxfp8"),
    ("gb100", "sm__ops_path_tensor_src_fp4_fp6_fp8_dst_fp32.sum", "triton_tem_fused_mm_0",
     "fp8/fp6/fp4"),
    ("gb100", "sm__ops_path_tensor_src_fp4_dst_fp32.sum",
     "nvjet_sm100_oohsh_128x256_256x5_2x2_2cta_h_bz_Avec16UE4M3_Bvec16UE4M3_TNT", "nvfp4"),
    ("gb202", "sm__ops_path_tensor_src_fp4_fp6_dst_fp32_sparsity_off.sum",
     "cutlass3x_sm120_bstensorop_gemm_ue8m0xe2m3_ue8m0xe2m3_f32_void_e5m2_128x128x128_1x1x1_0_tnt_align128_pingpong_q",
     "mxfp6"),
    ("gb110", "sm__ops_path_tensor_src_fp8_dst_fp32.sum", "triton_tem_fused_mm_1", "fp8"),
    # a name that contradicts the counter loses: the counter measured it
    ("gb100", "sm__ops_path_tensor_src_bf16_dst_fp32.sum",
     "nvjet_sm100_oohsh_128x256_256x5_2x2_2cta_h_bz_Avec16UE4M3_Bvec16UE4M3_TNT", "bf16"),
])
def test_op_counters_that_lump_types_are_read_and_narrowed_by_the_name(chip, counter, name, want):
    """The counter names are the chip's real ones; a lumped counter gives a lumped label, the
    kernel name narrows it, and any non-zero tensor-pipe op counter means Tensor Cores."""
    a = FakeAction(chip, {counter: 7.5e11})
    if "sparsity" in counter:  # as the RTX 5090 report: only the sparsity parts collected
        total = counter.replace("_sparsity_off", "")
        a.names = [n for n in a.names if n != total]
    prec, ops, metrics = ncu._tensor_source(a, a.metric_names())
    assert ops == 7.5e11 and "sm__ops_path_tensor_src" in metrics
    labels = classify_names([name])
    evidence = ncu.tensor_evidence(
        __import__("pandas").DataFrame([{"name": name, "tensor_ops": ops, "tensor_precision": prec,
                                         "tensor_active_pct": 40.0}]))
    got = refine(labels, evidence).iloc[0]
    assert got["precision"] == want and bool(got["tensor_core"]), got["rule"]


def test_op_counters_reading_zero_on_a_busy_tc_pipe_still_mean_tensor_cores():
    import pandas as pd

    name = "nvjet_sm100_oohsh_128x256_256x5_2x2_2cta_h_bz_Avec16UE4M3_Bvec16UE4M3_TNT"
    ev = ncu.tensor_evidence(pd.DataFrame([{"name": name, "tensor_ops": 0.0,
                                            "tensor_precision": None, "tensor_active_pct": 55.0}]))
    got = refine(classify_names([name]), ev).iloc[0]
    assert bool(got["tensor_core"]) and "op counters read 0" in got["rule"]
    ev = ncu.tensor_evidence(pd.DataFrame([{"name": "some_layernorm", "tensor_ops": 0.0,
                                            "tensor_precision": None, "tensor_active_pct": 0.5}]))
    assert not bool(refine(classify_names(["some_layernorm"]), ev).iloc[0]["tensor_core"])


def test_only_elapsed_metrics_fill_the_columns_and_say_so():
    """An A10G-style section set collected only the "% of elapsed" variants: the figures are
    read from them, and the metric named says elapsed; a report without any cycles metric
    says why the figure is empty."""
    class Elapsed(FakeAction):
        def __init__(self):
            super().__init__("gh100", {})
            self.names = [n for n in self.names if n.endswith("elapsed")]
            self.values = {"sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed": 41.0}
    a = Elapsed()
    active, metric = ncu._tensor_active(a, a.metric_names())
    assert active == 41.0 and metric.endswith("pct_of_peak_sustained_elapsed")
    empty = type("A", (), {"metric_names": lambda s: [], "metric_by_name": lambda s, n: None})()
    value, why = ncu._tensor_active(empty, [])
    assert value != value and why.startswith("not collected")
    assert ncu._tensor_source(empty, [])[2].startswith("not collected")


def test_hopper_names_still_read():
    a = FakeAction("gh100", {f"sm__inst_executed_pipe_tensor_op_hmma{PCT}": 12.0,
                             f"sm__inst_executed_pipe_tensor_op_gmma{PCT}": 80.0,
                             f"sm__pipe_tensor_cycles_active{PCT}": 90.0})
    names = a.metric_names()
    assert ncu._by_pattern(a, names, ncu._PATTERN_RES["gmma_inst_pct"]) == (
        80.0, f"sm__inst_executed_pipe_tensor_op_gmma{PCT}")
    assert ncu._tensor_active(a, names)[0] == 90.0


def test_a_real_rtx_5090_report():
    """DarrellThomas/blackwell-kernels' RTX 5090 flash-attention report (sm_120, BF16 mma.sync):
    the instruction mix is read from the subpipe metric (30.05%), the precision from its BF16
    counter, and every derived value names its metric."""
    pytest.importorskip("ncu_report")
    k = ncu.kernels(DATA / "ncu" / "rtx5090-flash-attn-bf16.ncu-rep.xz")
    row = k.iloc[0]
    assert len(k) == 1 and "flash_attn_v2_kernel" in row["name"]
    assert round(row["hmma_inst_pct"], 2) == 30.05
    assert k.attrs["metrics"]["hmma_inst_pct"] == f"sm__inst_executed_pipe_tensor_subpipe_hmma{PCT}"
    assert k.attrs["metrics"]["tc_active_pct"] == "not in this report"  # no TC pipe on sm_120
    assert round(row["tensor_active_pct"], 1) == 62.8
    assert row["tensor_active_metric"] == f"sm__pipe_tensor_cycles_active{PCT}"
    assert row["tensor_precision"] == "bf16" and row["tensor_ops"] > 1e9


# ---- the precision diff --------------------------------------------------------------------------
NVFP4_GEMMS = [
    "nvjet_sm100_oohsh_128x256_256x5_2x2_2cta_h_bz_Avec16UE4M3_Bvec16UE4M3_TNT",
    "cutlass3x_sm100_bstensorop_s256x128x64gemm_block_scaled_ue4m3xf4_ue4m3xf4_f32_f16_f16_256x128x256_0_tnn_align32_o_vs16_2sm_bias_f16_relu",
    "nvjet_sm103_oohsh_128x128_256x7_2x2_2cta_v_bz_Avec16UE4M3_Bvec16UE4M3_TNT",
]
MXFP8_GEMMS = [
    "nvjet_sm100_qqtst_128x256_128x6_2x2_2cta_h_bz_Avec32UE8M0_Bvec32UE8M0_TNT",
    "nvjet_sm100_qqsss_128x128_128x8_2x4_2cta_h_bz_Avec32UE8M0_Bvec32UE8M0_TNT",
    "cutlass3x_sm120_bstensorop_s16832gemm_block_scaled_ue8m0xe4m3_ue8m0xe4m3_f32_bf16_bf16_128x128x128_1x1x1_0_tnn_align16_q_bias_bf16_relu",
]
QUANT = ("void tensorrt_llm::kernels::quantize_with_block_size<(tensorrt_llm::BlockScaleQuantizationType){t}, "
         "__half, (int){v}, (bool){u}, (bool)0, (bool)0, (bool)0, std::integral_constant<bool, (bool)0>>"
         "(int, int, int, int, __half const *, float const *, unsigned int *, unsigned int *, "
         "tensorrt_llm::QuantizationSFLayout, int *)")
INTERLEAVE = ("void flashinfer::block_scale_interleave_kernel<unsigned char>(int, int, unsigned char "
              "const *, unsigned char *)")


def _renamed(src: Path, out: Path, gemms: list[str], quant: str) -> Path:
    """The H200 FP8 ViT export with its FP8 GEMMs, its FP8 cast and its clamp renamed to
    Blackwell GEMMs, a block-scale quantize and a scale-factor swizzle: a block-scaled run's
    kernel names on a real timeline (no Blackwell report can be captured here)."""
    out.write_bytes(src.read_bytes())
    out.chmod(0o644)
    with sqlite3.connect(out) as c:
        rows = c.execute("SELECT id, value FROM StringIds WHERE value LIKE 'nvjet_sm90_qq%' "
                         "ORDER BY value").fetchall()
        for (i, _), new in zip(rows, gemms):
            c.execute("UPDATE StringIds SET value = ? WHERE id = ?", (new, i))
        c.execute("UPDATE StringIds SET value = ? WHERE value LIKE '%float8_copy_kernel_cuda%'", (quant,))
        c.execute("UPDATE StringIds SET value = ? WHERE value LIKE '%launch_clamp_scalar%'",
                  (INTERLEAVE,))
    return out


def test_block_scale_quantize_work_is_conversion_in_nvfp4_and_mxfp8_diffs(sqlite_of, tmp_path,
                                                                         cache_dir):
    """FP16 vs NVFP4, and NVFP4 vs MXFP8: the block-scale quantize kernels (NVFP4: FP16->FP4
    with UE4M3 scales on 16 elements; MXFP8: UE8M0 on 32) and the scale-factor swizzle are
    precision-conversion work of the narrow run, and its GEMMs read NVFP4 / MXFP8."""
    from nsightlab.comparison import diff

    fp16, fp8 = sqlite_of("h200-vit-fp16"), sqlite_of("h200-vit-fp8")
    nvfp4 = _renamed(fp8, tmp_path / "vit-nvfp4.sqlite", NVFP4_GEMMS, QUANT.format(t=0, v=16, u=0))
    mxfp8 = _renamed(fp8, tmp_path / "vit-mxfp8.sqlite", MXFP8_GEMMS, QUANT.format(t=2, v=32, u=1))
    d = diff.diff(fp16, nvfp4)
    conv = d.conversion
    assert conv["b_name"].str.startswith("void tensorrt_llm::kernels::quantize_with_block_size").any()
    assert conv["b_name"].str.contains("block_scale_interleave_kernel").any()
    gemms = d.by_precision[d.by_precision["kernel_class"] == "gemm"]
    assert "nvfp4" in set(gemms.loc[gemms["b_ns"] > 0, "precision"])
    assert d.headline["conversion_overhead_ns"] > 0 and "precision-conversion" in d.headline["verdict"]
    d2 = diff.diff(fp16, mxfp8)
    conv2 = d2.conversion
    assert conv2["b_name"].str.contains(r"BlockScaleQuantizationType\)2", regex=True).any()
    gemms2 = d2.by_precision[d2.by_precision["kernel_class"] == "gemm"]
    assert "mxfp8" in set(gemms2.loc[gemms2["b_ns"] > 0, "precision"])
    # NVFP4 against MXFP8 on the same timeline: the same slots, their formats told apart
    d3 = diff.diff(nvfp4, mxfp8).kernels
    pairs = set(zip(d3["kernel_class"], d3["a_precision"], d3["b_precision"]))
    assert {("gemm", "nvfp4", "mxfp8"), ("quantize", "nvfp4", "mxfp8")} <= pairs
    k = nsightlab.open(nvfp4).kernels(["name"])
    assert k["name"].astype(str).str.contains("Avec16UE4M3").any()
