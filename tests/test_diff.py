"""`nsightlab diff` / `nsightlab report` on the real fixtures, and their HTML in a real browser."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

import nsightlab
from nsightlab.cli import cli


@pytest.fixture(scope="module")
def fp16_vs_fp8(sqlite_of, tmp_path_factory):
    import os

    os.environ["NSIGHTLAB_CACHE_DIR"] = str(tmp_path_factory.mktemp("cache"))
    return nsightlab.diff(sqlite_of("h200-vit-fp16"), sqlite_of("h200-vit-fp8"))


def test_fp8_regression_is_explained_by_conversion_overhead(fp16_vs_fp8):
    h = fp16_vs_fp8.headline
    assert 6.2e6 < h["a_median_ns"] < 6.6e6 and 13.5e6 < h["b_median_ns"] < 14.1e6
    assert 2.1 < 1 / h["speedup"] < 2.3  # B 2.2x slower
    assert -33 < h["gemm_change_pct"] < -25  # GEMMs ~29% faster in FP8
    assert 7.3e6 < h["conversion_overhead_ns"] < 8.2e6  # ~7.8 ms of casts/amax/divide per iteration
    assert h["conversion_overhead_ns"] > h["b_median_ns"] - h["a_median_ns"]
    assert "slower" in h["verdict"] and "more than the whole regression" in h["verdict"]
    assert h["verdict"].count(".") >= 1 and "\n" not in h["verdict"]


def test_fp8_diff_sections(fp16_vs_fp8):
    d = fp16_vs_fp8
    blocks = d.by_layer[d.by_layer["layer"].str.fullmatch(r"block\d+")]
    assert len(blocks) == 12 and (blocks["status"] == "matched").all()
    assert blocks["math_precision_changed"].all()
    # GEMMs go FP8; the flash attention stays FP16
    assert (blocks["a_math_precision"] == "fp16").all() and (blocks["b_math_precision"] == "fp16,fp8").all()
    # class times add up to the kernel time per iteration, in both runs
    assert abs(d.by_class["a_ns"].sum() - d.headline["a_kernel_ns"]) < 1
    assert abs(d.by_class["b_ns"].sum() - d.headline["b_kernel_ns"]) < 1
    gemms = d.kernels[(d.kernels["kernel_class"] == "gemm") & (d.kernels["status"] == "matched")]
    paired = gemms[gemms["a_name"].str.startswith("nvjet_sm90_hsh") & gemms["b_name"].str.startswith("nvjet_sm90_qqhsh")]
    assert len(paired) >= 36  # 3 GEMMs of each block line up with the FP8 GEMM that replaced them
    prec = d.by_precision.set_index(["precision", "kernel_class"])
    assert prec.loc[("fp8", "gemm"), "b_ns"] > 2e6 and prec.loc[("fp8", "gemm"), "a_ns"] == 0
    names = " ".join(d.conversion["b_name"])
    for token in ("DivFunctor", "float8_copy", "MaxNanFunctor", "AbsFunctor", "direct_copy"):
        assert token in names, token
    assert set(d.to_json()) == {"headline", "by_class", "by_precision", "by_layer", "kernels",
                                "conversion", "only_b", "overheads", "tensor_core", "budget"}
    # the budget of each run adds up to its wall-clock iteration, and both are compute-bound
    for side in ("a", "b"):
        assert d.budget[f"{side}_ns"].sum() == pytest.approx(d.headline[f"{side}_mean_ns"])
        assert d.headline[f"{side}_verdict"] == "compute-bound" and not d.headline[f"{side}_warnings"]


def test_cuda_graph_diff_same_kernels_less_launch_overhead(sqlite_of, cache_dir):
    d = nsightlab.diff(sqlite_of("h200-vit-fp16"), sqlite_of("h200-vit-fp16-cudagraph"))
    assert (d.kernels["status"] == "matched").all() and len(d.kernels) == 129
    ov = d.overheads.set_index("overhead")
    for k in ("launch_overhead", "api"):
        assert ov.loc[k, "b_ns"] < 0.4 * ov.loc[k, "a_ns"], k
    assert ov.loc["launch_overhead", "a_count"] == 129 and ov.loc["launch_overhead", "b_count"] == 1
    assert 0.97 < d.headline["speedup"] < 1.05
    # both runs are >= 95% busy (compute-bound): fewer launches are not a cause of anything
    assert d.headline["a_verdict"] == "compute-bound"
    # the work: the same kernels, launched as one graph (work, said); its pace: no measurable
    # difference, and no launch overhead named as a cause
    v = d.headline["verdict"]
    assert d.headline["work_change"] == "+1 graph launch" and "+1 graph launch" in v
    assert "overhead" not in v and "waiting for launches" not in v
    assert v.startswith("No measurable difference per iteration") or \
        "no part of the iteration changes by more than 2%" in v


def test_diff_cli_outputs(sqlite_of, cache_dir, tmp_path):
    a, b = str(sqlite_of("h200-vit-fp16")), str(sqlite_of("h200-vit-fp8"))
    res = CliRunner().invoke(cli, ["diff", a, b, "--json"])
    assert res.exit_code == 0, res.output
    j = json.loads(res.stdout)
    assert {"a_median_ns", "b_median_ns", "speedup", "conversion_overhead_ns", "verdict"} <= set(j["headline"])
    assert {"kernel_class", "a_ns", "b_ns", "delta_ns"} <= set(j["by_class"][0])
    out = tmp_path / "d"
    res = CliRunner().invoke(cli, ["diff", a, b, "-o", str(out), "--png", str(tmp_path / "png"),
                                   "--html", str(tmp_path / "d.html")])
    assert res.exit_code == 0, res.output
    assert "2.16x slower" in res.stdout
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ["budget.parquet", "by_class.parquet", "by_layer.parquet", "by_precision.parquet", "conversion.parquet",
         "headline.parquet", "kernels.parquet", "manifest.json", "only_b.parquet", "overheads.parquet", "tensor_core.parquet"])
    assert pd.read_parquet(out / "headline.parquet").iloc[0]["b_kernels"] == 513
    pngs = sorted((tmp_path / "png").glob("*.png"))
    assert [p.name for p in pngs] == ["classes.png", "kernels.png", "layers.png"]
    assert all(p.stat().st_size > 10_000 for p in pngs)
    page = (tmp_path / "d.html").read_text()
    assert "http://" not in page.split("<body>")[0][:2000] and "cdn.jsdelivr" not in page


def test_report_finds_the_sync_problem(sqlite_of, cache_dir, tmp_path):
    res = CliRunner().invoke(cli, ["report", str(sqlite_of("h200-vit-fp16-syncy")),
                                   "--html", str(tmp_path / "r.html")])
    assert res.exit_code == 0, res.output
    assert "host syncs: 12 per iteration" in res.stdout
    assert (tmp_path / "r.html").stat().st_size > 100_000
    res = CliRunner().invoke(cli, ["report", str(sqlite_of("h200-launchbound"))])
    assert res.exit_code == 0 and "launch-bound:" in res.stdout and "CUDA graph" in res.stdout


def test_diff_without_kernels_is_a_clear_error(sqlite_of, cache_dir):
    res = CliRunner().invoke(cli, ["diff", str(sqlite_of("pub-centerformer-trt-nvtx")),
                                   str(sqlite_of("h200-vit-fp16"))])
    assert res.exit_code == 1 and res.output.startswith("Error: ") and "--trace=cuda" in res.output


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         # the network is off: every host name fails to resolve
         "--host-resolver-rules=MAP * ~NOTFOUND", "--virtual-time-budget=10000"]


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed")
def test_html_report_renders_offline_in_headless_chromium(fp16_vs_fp8, tmp_path):
    from PIL import Image

    from nsightlab.renderers import html

    page = tmp_path / "diff.html"
    page.write_text(html.render(fp16_vs_fp8))
    profile = ["--user-data-dir=" + str(tmp_path / "profile")]
    dom = subprocess.run([CHROMIUM, *FLAGS, *profile, "--enable-logging=stderr", "--v=0",
                          "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    drawn = re.search(r'<(svg|canvas)[^>]*class="marks"[^>]*>', dom.stdout)
    assert drawn, "vega drew nothing"
    assert int(re.search(r'height="(\d+)"', drawn.group(0)).group(1)) > 800  # three charts
    for part in ("concat_0_marks", "concat_1_layer_1_marks", "concat_2_layer_1_marks"):
        assert part in dom.stdout, part  # class bars, layer bars, kernel scatter
    console = [line for line in dom.stderr.splitlines() if "CONSOLE" in line]
    assert not [line for line in console if "rror" in line], console
    shot = tmp_path / "shot.png"
    subprocess.run([CHROMIUM, *FLAGS, *profile, "--window-size=1200,4000",
                    f"--screenshot={shot}", page.as_uri()], capture_output=True, timeout=120, check=True)
    img = Image.open(shot).convert("L")
    w, h = img.size
    charts = img.crop((0, h // 2, w, h))  # the lower half holds tables and charts
    pixels = getattr(charts, "get_flattened_data", charts.getdata)()
    dark = sum(1 for px in pixels if px < 200)
    assert dark > 0.01 * charts.size[0] * charts.size[1]


@pytest.mark.parametrize("stem", [s for s in __import__("conftest").STEMS if s != "pub-centerformer-trt-nvtx"])
def test_diff_and_report_run_on_every_fixture_and_add_up(stem, sqlite_of, cache_dir):
    path = sqlite_of(stem)
    d = nsightlab.diff(path, path)
    h = d.headline
    assert abs(d.by_class["a_ns"].sum() - h["a_kernel_ns"]) < 1
    assert abs(d.by_class["b_ns"].sum() - h["b_kernel_ns"]) < 1
    assert abs(d.by_layer["a_ns"].sum() - h["a_kernel_ns"]) < 1
    assert abs(h["speedup"] - 1) < 1e-9 and h["conversion_overhead_ns"] == 0
    assert (d.kernels["status"] == "matched").all()
    res = CliRunner().invoke(cli, ["report", str(path)])
    assert res.exit_code == 0, res.output


def test_unclosed_ranges_and_no_iteration_ranges_synthetic_from_real(sqlite_of, cache_dir, tmp_path):
    """Synthetic edits of a real export: the last iteration never closed, and (second copy)
    no iteration ranges at all."""
    import sqlite3

    src = sqlite_of("h200-vit-fp16").read_bytes()
    unclosed, flat = tmp_path / "unclosed.sqlite", tmp_path / "flat.sqlite"
    unclosed.write_bytes(src)
    flat.write_bytes(src)
    with sqlite3.connect(unclosed) as c:
        c.execute("UPDATE NVTX_EVENTS SET [end] = NULL WHERE text = 'iter19'")
    with sqlite3.connect(flat) as c:
        c.execute("DELETE FROM NVTX_EVENTS WHERE text LIKE 'iter%'")
    d = nsightlab.diff(unclosed, flat)
    # the range never closed: its iteration's end is unknown, so it is left out (one NVTX
    # rule for the budget and the profile: before, the profile kept 20 and the budget, which
    # read the open range as nested at depth -1, kept that one range alone)
    assert d.headline["a_iterations"] == 19
    assert "the last (iter19) cut by the trace's end" in d.headline["a_iteration_source"]
    # without its iteration ranges, the 20 passes are found in the trace (within 10%)
    # (the trace also holds the workload's 3 unmarked warm-up passes: 20 to 23 are right)
    assert 20 <= d.headline["b_iterations"] <= 23
    assert "found in the trace (no NVTX iteration ranges)" in d.headline["b_iteration_source"]
    assert abs(d.by_class["b_ns"].sum() - d.headline["b_kernel_ns"]) < 1


def test_tensorrt_inferences_are_iterations_and_its_layers_are_layers(sqlite_of, cache_dir):
    """pub-realcugan-trt10 (TensorRT 10): one ExecutionContext::enqueue range per inference,
    with a range per engine layer inside it."""
    from nsightlab.run.model import profile

    p = profile(nsightlab.open(sqlite_of("pub-realcugan-trt10")))
    assert p.iterations == 137 and "ExecutionContext::enqueue" in p.iteration_source
    assert len(p.by_layer) > 50 and p.by_layer["layer"].str.contains("/conv").any()
    assert abs(p.by_layer["time_ns"].sum() - p.kernel_ns) < 1
    assert (p.by_layer.loc[p.by_layer["layer"].str.contains("conv"), "math_precision"] == "fp16").mean() > 0.5


GOLDEN = Path(__file__).parent / "data" / "golden"


@pytest.mark.parametrize("args,golden", [
    (["diff", "h200-vit-fp16.sqlite", "h200-vit-fp8.sqlite"], "diff-h200-vit-fp16-fp8.txt"),
    (["report", "h200-vit-fp16-syncy.sqlite"], "report-h200-vit-fp16-syncy.txt"),
])
def test_exact_text_output(args, golden, sqlite_of, cache_dir, monkeypatch):
    """The whole terminal output, character for character. After an intended change,
    regenerate: in a folder holding the decompressed fixtures, ``nsightlab ARGS >
    tests/data/golden/NAME`` (then read the diff of the golden file before committing)."""
    for name in args[1:]:
        sqlite_of(name.removesuffix(".sqlite"))
    monkeypatch.chdir(sqlite_of(args[1].removesuffix(".sqlite")).parent)
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 0, res.output
    assert res.stdout == (GOLDEN / golden).read_text()


# --- explanations on the model fixtures (tests/data/models, H100) ---

@pytest.fixture(scope="module")
def model(tmp_path_factory):
    from conftest import xz_fixtures
    return xz_fixtures(tmp_path_factory, Path(__file__).parent / "data" / "models")


def test_new_pooling_and_layout_kernels_are_not_conversion(model, cache_dir):
    """ResNet-50 FP32 -> FP16 channels-last: the NHWC max-pool and batch-norm kernels new in B
    are 'only in B', not precision conversion; the one conversion is a cast in a changed layer."""
    d = nsightlab.diff(model("h100-resnet50-fp32"), model("h100-resnet50-fp16"))
    only_b = " ".join(d.only_b["label"])
    assert "batch_norm_transform_input_channels_last" in only_b
    pool = d.kernels[d.kernels["b_name"].fillna("").str.contains("max_pool_forward_nhwc")]
    assert len(pool) and (pool["status"] == "matched").all()  # takes the NCHW pool's slot
    assert not d.conversion["label"].str.contains("pool|batch_norm").any()
    assert d.headline["conversion_overhead_ns"] < 0.02e6
    assert d.headline["workload_warnings"] == []


def test_launch_idle_is_a_cause_only_in_a_launch_bound_run(model, cache_dir):
    """The FP16 ResNet run is launch-bound (32% busy): its extra GPU idle is named, with the
    kernel and API counts behind it, and the fall in GPU work beside it."""
    d = nsightlab.diff(model("h100-resnet50-fp32"), model("h100-resnet50-fp16"))
    v = d.headline["verdict"]
    assert d.headline["b_verdict"] == "launch-bound"
    assert "GPU idle waiting for launches rose" in v and "B is launch-bound" in v
    assert "GPU work fell" in v


def test_lm_head_outside_the_layers_is_named(model, cache_dir):
    """GPT FP16 -> BF16: the only real change is the LM-head GEMM after the blocks; the verdict
    names it (and says it is outside the layers)."""
    d = nsightlab.diff(model("h100-gpt-fp16"), model("h100-gpt-bf16"))
    v = d.headline["verdict"]
    assert "cutlass_75_tensorop_bf16_s1688gemm" in v and "(outside layers)" in v
    assert d.headline["workload_warnings"] == []


def test_different_models_get_the_workload_warning(model, sqlite_of, cache_dir):
    d = nsightlab.diff(model("h100-resnet50-fp16"), model("h100-gpt-fp16"))
    assert any("their math kernels differ" in w and "conv: A" in w
               for w in d.headline["workload_warnings"])
    # ViT-B/16 and a GPT-2-small-shaped decoder share block names and class mix (both are 12
    # transformer blocks of width 768): the iteration counts still differ, and it says so
    d = nsightlab.diff(sqlite_of("h200-vit-fp16"), model("h100-gpt-fp16"))
    assert "A has 20 iterations, B 10: times are per iteration" in d.headline["workload_warnings"]
    text = CliRunner().invoke(cli, ["diff", str(model("h100-resnet50-fp16")),
                                    str(model("h100-gpt-fp16"))]).stdout
    assert "WARNING (workload): their math kernels differ" in text


def test_a_precision_change_is_not_a_different_workload(sqlite_of, model, cache_dir):
    """FP16 vs dynamic FP8 ViT-B/16 and ResNet-50 FP32 vs FP16: time moves between kernel
    classes (conversions, casts) and the kernel count grows, which is the point of the
    comparison, not a sign of another model."""
    for a, b in ((sqlite_of("h200-vit-fp16"), sqlite_of("h200-vit-fp8")),
                 (model("h100-resnet50-fp32"), model("h100-resnet50-fp16"))):
        d = nsightlab.diff(a, b)
        assert not any("math kernels" in w or "mix" in w for w in d.headline["workload_warnings"])


def test_runs_on_different_gpus_are_said_first(sqlite_of, model, cache_dir):
    d = nsightlab.diff(sqlite_of("h200-vit-fp16"), model("h100-gpt-fp16"))
    assert d.headline["workload_warnings"][0].startswith("they ran on different GPUs")
    assert "H200" in d.headline["workload_warnings"][0]


@pytest.mark.parametrize("stem", ["h200-vit-fp16", "h200-launchbound", "h200-vit-fp16-cudagraph"])
def test_launches_outside_iterations_left_out_but_counted(stem, sqlite_of, cache_dir):
    """The run profile leaves launches outside every iteration range out of its launch table
    before building it (memory) and still reports their kernel time: the same as the whole
    launch table filtered afterwards."""
    from nsightlab.run import model as profile
    from nsightlab.analysis.launches import launches

    report = nsightlab.open(sqlite_of(stem))
    iters = profile._iteration_ranges(report)[1]
    lk = launches(report, op_columns=("start_ns", "end_ns"), api_columns=("start_ns",))
    t = lk["api_start_ns"].to_numpy()
    i = iters["start_ns"].searchsorted(t, "right") - 1
    inside = (i >= 0) & (t <= iters["end_ns"].to_numpy()[i.clip(0)])
    dur = (lk["end_ns"] - lk["start_ns"]).to_numpy()
    p = profile._compute(report, "x")
    assert p.outside_kernel_ns == pytest.approx(float(dur[~inside].sum()), abs=0.5)
    # per-iteration numbers are over the steady iterations: all of them, or some left out
    steady = p.kernel_ns * p.steady_iterations
    if p.steady_iterations == p.iterations:
        assert steady == pytest.approx(float(dur[inside].sum()), rel=1e-12)
    else:
        assert 0 < steady < float(dur[inside].sum())
    assert len(iters) and (~inside).any()  # the case exercised: some launches are outside


@pytest.mark.parametrize("pair", [("h100-resnet50-fp32", "h100-resnet50-fp16"),
                                  ("h100-resnet50-fp16", "h100-resnet50-bf16"),
                                  ("h100-gpt-fp16", "h100-gpt-fp8")])
def test_the_headline_accounts_for_the_change(pair, model, cache_dir):
    """The budget's parts add up to the change of the steady mean, and every part that moves
    by 10% of that change or more is named in the headline, whatever either run's verdict."""
    from nsightlab.comparison.diff import _WALL_PARTS

    d = nsightlab.diff(model(pair[0]), model(pair[1]))
    h = d.headline
    change = h["b_mean_ns"] - h["a_mean_ns"]
    assert d.budget["delta_ns"].sum() == pytest.approx(change, abs=1e3)
    b = d.budget.set_index("part")["delta_ns"]
    for name, parts in _WALL_PARTS:
        moved = float(b.reindex(list(parts)).fillna(0).sum())
        if abs(moved) >= 0.1 * abs(change) and abs(moved) >= 0.02 * h["a_mean_ns"]:
            assert name in h["verdict"], (name, moved, h["verdict"])


def test_overlapping_kernel_times_are_said():
    """Kernel times of kernels on several streams at once add up to more than the GPU's busy
    time: the headline says so rather than let per-kernel figures pass for wall time."""
    from types import SimpleNamespace

    from nsightlab.comparison.diff import _overlap_note

    serial = SimpleNamespace(kernel_ns=5e6, budget={"kernels_ns": 5e6})
    streams = SimpleNamespace(kernel_ns=9e6, budget={"kernels_ns": 6e6})
    assert _overlap_note(serial, serial) == ""
    assert "overlap across streams in B" in _overlap_note(serial, streams)


def test_different_drivers_are_said(sqlite_of, cache_dir, tmp_path):
    """The NVIDIA driver recorded in TARGET_INFO_SYSTEM_ENV: a copy of a real export with
    another driver gets the workload warning; an old export's numeric form reads as one."""
    import sqlite3

    b = tmp_path / "b.sqlite"
    b.write_bytes(sqlite_of("h200-vit-fp16").read_bytes())
    with sqlite3.connect(b) as c:
        c.execute("UPDATE TARGET_INFO_SYSTEM_ENV SET value = '570.86.10' "
                  "WHERE name = 'NvDriverVersion'")
    assert nsightlab.open(sqlite_of("h200-vit-fp16")).drivers == {"driver": "580.159.04",
                                                                   "cuda": "13.0"}
    d = nsightlab.diff(sqlite_of("h200-vit-fp16"), b)
    assert any("different NVIDIA drivers (A 580.159.04, B 570.86.10)" in w
               for w in d.headline["workload_warnings"])
    # nsys 2022.2 (schema 2.9.1) records the driver as one number, 52510517
    assert nsightlab.open(sqlite_of("pub-pipit-saxpy-a100")).drivers == {"driver": "525.105.17",
                                                                         "cuda": "12.0"}
