"""The roofline charts and HTML pages of the kernel-level results (``kernels.report``), on
real Nsight Compute reports: the points are the kernels with FLOPs and DRAM bytes, at their
intensity and achieved FLOP/s; one ceiling per precision the kernels ran (and fp32 on the
CUDA cores) at the median of its peak; a diff draws one arrow per pair, A to B."""
from __future__ import annotations

import html
import math
import re
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("ncu_report")

from nsightlab.kernels import report  # noqa: E402
from nsightlab.renderers import charts, emit  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
FLASH = ROOT / "tests/data/ncu/rtx5090-flash-attn-bf16.ncu-rep.xz"
FP16 = ROOT / "captures/examples/vit-fp16/report.ncu-rep.xz"
FP8 = ROOT / "captures/examples/vit-fp8/report.ncu-rep.xz"
FP16_TRACE = ROOT / "captures/examples/vit-fp16/report.sqlite.xz"


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(scope="module")
def fp16(cache):
    return report.build(FP16, cache_dir=cache)


@pytest.fixture(scope="module")
def fp8(cache):
    return report.build(FP8, cache_dir=cache)


@pytest.fixture(scope="module")
def flash(cache):
    return report.build(FLASH, cache_dir=cache)


@pytest.fixture(scope="module")
def kdiff(cache):
    return report.diff(FP16, FP8, cache_dir=cache)


def layers(chart) -> dict[str, tuple[dict, list[dict]]]:
    """The chart's layers by name: (spec, rows of its data)."""
    spec = chart.to_dict()
    out = {}
    for layer in spec["layer"]:
        data = layer.get("data", {})
        rows = spec["datasets"][data["name"]] if "name" in data else data.get("values", [])
        out[layer.get("name")] = (layer, rows)
    return out


def subtitle(chart) -> str:
    return " | ".join(chart.to_dict()["title"]["subtitle"])


def with_point(k):
    """The kernels that belong on a roofline, counted here from the judged table."""
    return k[(k["flops"].fillna(0) > 0) & (k["dram_bytes"].fillna(0) > 0)
             & (k["duration_ns"] > 0)]


def compute_ceilings(rows) -> dict[str, float]:
    """{label: FLOP/s} of the compute ceilings' lines (each a flat line)."""
    out = {}
    for r in rows:
        out.setdefault(r["ceiling"], set()).add(r["y"])
    assert all(len(ys) == 1 for ys in out.values()), out  # horizontal
    return {c: ys.pop() for c, ys in out.items()}


def precisions_of(rows) -> set[str]:
    return {r["precision"] for r in rows}


def test_report_points_are_the_kernels_with_flops_and_bytes(fp16):
    k = fp16.judged.kernels
    chart = charts.charts_for(fp16)["roofline"]
    _, rows = layers(chart)["kernels"]
    want = with_point(k)
    assert 0 < len(want) and len(rows) == len(want)
    # each point sits at the kernel's intensity and achieved FLOP/s, on a log scale's range
    got = sorted((r["x"], r["y"]) for r in rows)
    expect = sorted(zip(want["intensity"], want["flops_per_s"]))
    assert np.allclose(got, expect, rtol=1e-9)
    assert all(math.isfinite(x) and x > 0 and math.isfinite(y) and y > 0 for x, y in got)
    spec = chart.to_dict()
    lo, hi = spec["layer"][-1]["encoding"]["x"]["scale"]["domain"]
    assert spec["layer"][-1]["encoding"]["x"]["scale"]["type"] == "log"
    assert lo < min(x for x, _ in got) and max(x for x, _ in got) < hi
    # all its kernels have a point: nothing said to be left out
    assert len(want) == len(k) and "not shown" not in subtitle(chart)
    # sized by ncu time without a trace
    assert spec["layer"][-1]["encoding"]["size"]["field"] == "ncu_us"


def test_report_one_ceiling_per_precision_at_the_median_peak(fp16):
    k = fp16.judged.kernels
    ls = layers(charts.kernel_charts(fp16)["roofline"])
    _, lines = ls["ceilings"]
    present = set(k["precision"].dropna()) | {"fp32 (CUDA core)"}
    assert precisions_of(lines) == present
    ceilings = compute_ceilings(lines)
    assert len(ceilings) == len(present)
    tensor = next(c for c in ceilings if c.startswith("fp16 Tensor "))
    assert ceilings[tensor] == pytest.approx(float(k["peak_tensor_fp16"].median()))
    assert re.fullmatch(r"fp16 Tensor \d+ TFLOP/s", tensor)
    core = next(c for c in ceilings if c.startswith("fp32 CUDA core "))
    assert ceilings[core] == pytest.approx(float(k["peak_core_fp32"].median()))
    # each compute ceiling starts where the DRAM slope reaches it (the ridge point)
    dram = float(k["peak_dram"].median())
    for r in lines:
        if r["x"] != max(q["x"] for q in lines):
            assert r["x"] == pytest.approx(r["y"] / dram)
    _, slope = ls["dram"]
    assert {r["ceiling"] for r in slope} == {f"DRAM {dram / 1e12:.3g} TB/s"}
    assert all(r["y"] == pytest.approx(dram * r["x"]) for r in slope)
    assert max(r["y"] for r in slope) == pytest.approx(max(ceilings.values()))
    _, labels = ls["ceiling_labels"]
    assert {r["ceiling"] for r in labels} == set(ceilings)


def test_report_fp8_has_its_ceiling_and_says_what_it_leaves_out(fp8):
    k = fp8.judged.kernels
    chart = charts.charts_for(fp8)["roofline"]
    ls = layers(chart)
    assert len(ls["kernels"][1]) == len(with_point(k))
    missing = len(k) - len(with_point(k))
    assert missing > 0  # a kernel of this report runs no FLOPs
    assert f"{missing} kernel{'s' if missing > 1 else ''} without FLOPs or DRAM bytes not shown" \
        in subtitle(chart)
    ceilings = compute_ceilings(ls["ceilings"][1])
    assert precisions_of(ls["ceilings"][1]) == set(k["precision"].dropna()) | {"fp32 (CUDA core)"}
    assert any(c.startswith("fp8 Tensor ") for c in ceilings)


def test_report_without_bytes_draws_no_point_but_its_ceilings(flash):
    k = flash.judged.kernels
    chart = charts.charts_for(flash)["roofline"]
    ls = layers(chart)
    assert len(ls["kernels"][1]) == 0
    assert "1 kernel without FLOPs or DRAM bytes not shown" in subtitle(chart)
    assert precisions_of(ls["ceilings"][1]) == {"bf16 (Tensor)", "fp32 (CUDA core)"}
    ceilings = compute_ceilings(ls["ceilings"][1])
    bf16 = next(c for c in ceilings if c.startswith("bf16 Tensor "))
    assert ceilings[bf16] == pytest.approx(float(k["peak_tensor_bf16"].iloc[0]))


def test_report_joined_sizes_points_by_loop_time(cache):
    r = report.build(FP16, trace=FP16_TRACE, cache_dir=cache)
    assert r.joined is not None
    chart = charts.kernel_charts(r)["roofline"]
    spec, rows = layers(chart)["kernels"]
    assert spec["encoding"]["size"]["field"] == "loop_us"
    j = r.joined.kernels.dropna(subset=["ncu_kernel"])
    loop = j.groupby(j["ncu_kernel"].astype(int))["time_ns"].sum() / 1e3
    k = with_point(r.judged.kernels)
    got = sorted(row["loop_us"] for row in rows)
    expect = sorted(loop.get(int(i), 0.0) for i in k.index)
    assert np.allclose(got, expect)
    assert max(got) > 0 and min(got) == 0  # kernels not in the loop: the smallest size


def test_diff_one_arrow_per_pair_from_a_to_b(kdiff):
    p = kdiff.paired.pairs
    ka, kb = (j.kernels for j in kdiff.judged)
    ls = layers(charts.charts_for(kdiff)["roofline"])
    spec, rows = ls["arrows"]
    ends = (ka.loc[p["kernel_a"]].pipe(with_point).index, kb.loc[p["kernel_b"]].pipe(with_point).index)
    both = p[p["kernel_a"].isin(ends[0]) & p["kernel_b"].isin(ends[1])]
    assert 0 < len(both) <= len(p)  # a pair without FLOPs or bytes on a side has no arrow
    by_pair = {}
    for r in rows:
        by_pair.setdefault(r["pair"], {})[r["side"]] = (r["x"], r["y"])
    assert len(by_pair) == len(both)
    assert all(set(e) == {"A", "B"} for e in by_pair.values())
    assert all(math.isfinite(v) and v > 0 for e in by_pair.values() for xy in e.values() for v in xy)
    assert spec["encoding"]["detail"]["field"] == "pair"
    # each end sits on its kernel's point: its intensity, its FLOPs over the pair's duration
    # (the median of that launch's profiled durations)
    for pair, e in by_pair.items():
        row = p.loc[pair]
        for side, k, col in (("A", ka, "kernel_a"), ("B", kb, "kernel_b")):
            kernel = k.loc[row[col]]
            s = side.lower()
            assert e[side] == pytest.approx((kernel["intensity"],
                                             row[f"flops_{s}"] / (row[f"duration_ns_{s}"] * 1e-9)))
    # a marker at each B end, a triangle; a circle at each A end
    bspec, brows = ls["b"]
    assert bspec["mark"]["shape"] == "triangle" and len(brows) == len(both)
    assert {(r["x"], r["y"]) for r in brows} == {e["B"] for e in by_pair.values()}
    assert len(ls["a"][1]) == len(both)
    subtitle = " | ".join(charts.kernel_diff_charts(kdiff)["roofline"].to_dict()["title"]
                          .get("subtitle", []))
    missing = len(p) - len(both)
    assert (f"{missing} pair" in subtitle) if missing else "not shown" not in subtitle


def test_diff_ceilings_of_both_sides_precisions(kdiff):
    p = kdiff.paired.pairs
    _, lines = layers(charts.kernel_diff_charts(kdiff)["roofline"])["ceilings"]
    present = set(p["precision_a"].dropna()) | set(p["precision_b"].dropna()) | {
        "fp32 (CUDA core)"}
    assert {"fp16 (Tensor)", "fp8 (Tensor)"} <= present
    assert precisions_of(lines) == present
    ceilings = compute_ceilings(lines)
    assert len(ceilings) == len(present)
    ka, kb = (j.kernels for j in kdiff.judged)
    fp8 = next(c for c in ceilings if c.startswith("fp8 Tensor "))
    both = np.concatenate([ka["peak_tensor_fp8"], kb["peak_tensor_fp8"]])
    assert ceilings[fp8] == pytest.approx(float(np.nanmedian(both)))


@pytest.mark.parametrize("which", ["fp16", "flash", "kdiff"])
def test_html_page_holds_the_roofline_findings_and_tables(which, request, tmp_path):
    result = request.getfixturevalue(which)
    out = tmp_path / "x.html"
    assert emit(result, "html", out) == [out]
    page = out.read_text()
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert "Roofline: " in page and re.search(r'"name":\s*"ceilings"', page)
    assert "TFLOP/s" in page
    assert "cdn.jsdelivr" not in page  # self-contained: the Vega JavaScript is inlined
    first = str(result.findings()[0])
    assert html.escape(first) in page
    # the findings, the charts, then one section per table
    assert len(re.findall(r"<h2>[^<$]+</h2>", page)) == 2 + len(result.tables())
    assert page.index("<h2>Findings</h2>") < page.index("<h2>Charts</h2>")
    heading = "Kernels only in B" if which == "kdiff" else "NVIDIA&#x27;s rule results"
    assert f"<h2>{heading}</h2>" in page
