"""Kernel level (issue 64): real Nsight Compute reports opened, judged, joined and compared.

The H200 captures in tests/data/kernels carry their truth (tests/data/kernels/README.md): what
each kernel is bound by is known from the workload (an 8192^3 GEMM, a decode-shaped GEMM, a
weight-only cast, a strided gather, a one-block scan), and every verdict is checked against
the report's own Speed of Light figures, never against a fixed string.
"""
from __future__ import annotations

import json
import lzma
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

pytest.importorskip("ncu_report")

from nsightlab.cli import cli  # noqa: E402
from nsightlab.kernels import join, judge, pairs, report  # noqa: E402
from nsightlab.kernels.judge import HIGH  # noqa: E402
from nsightlab.read.ncu_store import NcuStore  # noqa: E402

HERE = Path(__file__).parent
DATA = HERE / "data"
K = DATA / "kernels"
SHARED = HERE.parent.parent / "shared" / "fixtures" / "ncu"
EXAMPLES = HERE.parent / "captures" / "examples"
TRUTH = json.loads((K / "truth.json").read_text())
MICRO = ["gemm_fp16", "gemm_fp8", "m16_fp16", "m16_fp8", "wo_fp8", "gather", "scan"]


def every_report() -> list[Path]:
    found = sorted(DATA.rglob("*.ncu-rep.xz")) + sorted(EXAMPLES.glob("*/*.ncu-rep.xz"))
    if SHARED.is_dir():
        found += sorted(SHARED.glob("*.ncu-rep*"))
    return found


def invoke(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("ncu-cache")


@pytest.fixture(scope="module")
def judged(cache):
    got = {}

    def of(case: str) -> judge.Judged:
        if case not in got:
            got[case] = judge.of(NcuStore(K / f"h200-{case}.ncu-rep.xz", cache_dir=cache))
        return got[case]
    return of


@pytest.mark.parametrize("path", every_report(), ids=lambda p: p.name)
def test_every_report_opens_in_info_table_and_report(path, cache):
    for args in (["info", path], ["table", "ncu_judged", path], ["report", path],
                 ["report", path, "--json"], ["diff", path, path]):
        res = invoke(*args, "--cache-dir", cache)
        assert res.exit_code == 0, (args, res.output)
        assert "Traceback" not in res.output
    text = invoke("report", path, "--json", "--cache-dir", cache).stdout
    data = json.loads(text, parse_constant=lambda c: pytest.fail(f"{c} is not JSON"))
    assert len(data["kernels"]) >= 1 and all("limiter" in k for k in data["kernels"])


@pytest.mark.parametrize("path", every_report(), ids=lambda p: p.name)
def test_each_limiter_agrees_with_its_speed_of_light_figures(path, cache):
    k = judge.of(NcuStore(path, cache_dir=cache)).kernels
    for r in k.itertuples():
        c, m = r.compute_pct, r.memory_pct
        if not (c == c and m == m):
            assert r.limiter == "unknown"
            continue
        if max(c, m) < HIGH:
            assert r.limiter == "latency" and r.why
        elif r.limiter == "balanced":
            assert min(c, m) >= HIGH and abs(c - m) < judge.BALANCED
        else:
            assert r.limiter == ("compute" if c >= m else "memory")
        if r.limiter in ("compute", "memory") and r.unit_pct == r.unit_pct:
            # the unit named is a part of the figure that limits: never above it
            assert r.unit_pct <= max(c, m) + 0.5


@pytest.mark.parametrize("path", every_report(), ids=lambda p: p.name)
def test_no_claimed_gain_exceeds_the_roofline_distance(path, cache):
    j = judge.of(NcuStore(path, cache_dir=cache))
    room = j.rules["kernel"].map(j.kernels["headroom_pct"])
    has = room.notna() & j.rules["capped_pct"].notna()
    assert (j.rules.loc[has, "capped_pct"] <= room[has] + 1e-9).all()
    assert j.kernels["headroom_pct"].dropna().between(0, 100).all()
    t = j.kernels.dropna(subset=["t_min_ns"])
    assert (t["t_min_ns"] >= 0).all()


def test_what_each_kernel_is_bound_by_matches_the_workload(judged):
    big = judged("gemm_fp16").kernels.iloc[0]
    assert big["limiter"] in ("balanced", "compute") and "Tensor" in big["unit"]
    assert big["headroom_pct"] < 15  # close to its roofline
    fp8 = judged("gemm_fp8").kernels.iloc[0]
    assert fp8["limiter"] == "compute" and fp8["unit"] == "Tensor"
    assert fp8["precision"] == "fp8 (Tensor)"
    for case in ("m16_fp16", "m16_fp8"):
        k = judged(case).kernels.iloc[0]
        assert k["limiter"] == "memory" and k["unit"] == "DRAM" and k["roof"] == "memory"
    cast = judged("wo_fp8").kernels
    casts = cast[~cast["function"].str.startswith("nvjet")]
    assert len(casts) == 2 and (casts["limiter"] == "compute").all()
    assert (casts["memory_pct"] < 40).all()  # not memory: instruction throughput
    gather = judged("gather").kernels.iloc[0]
    assert gather["limiter"] == "memory" and gather["dram_pct"] > 80
    assert gather["used_pct"] < 20 and gather["headroom_pct"] > 80  # moved, not used
    scan = judged("scan").kernels
    assert (scan["limiter"] == "latency").all()
    assert scan["why"].str.contains("blocks for 132 SMs").all()


def test_nvidia_rules_are_kept_as_stated_and_ordered_by_the_limiter(judged):
    r = judged("gather").rules
    assert {"rule", "title", "message", "speedup_pct", "speedup_kind"} <= set(r.columns)
    assert not r["message"].str.contains("@section:").any()  # markup made plain
    unc = r[r["rule"] == "UncoalescedGlobalAccess"].dropna(subset=["speedup_pct"])
    assert len(unc) == 1 and unc["speedup_pct"].iloc[0] > 50
    scan = judged("scan").rules
    small = scan[scan["title"] == "Small Grid"].dropna(subset=["speedup_pct"])
    assert len(small) and small["speedup_pct"].max() > 90
    ordered = r[r["kernel"] == 0]["on_limiter"].tolist()
    assert ordered == sorted(ordered, reverse=True)


def test_diff_headline_gives_the_ratio_and_why(judged):
    d = pairs.of(judged("gemm_fp16"), judged("gemm_fp8"))
    p = d.pairs.iloc[0]
    assert p["why"] == "pair_compute" and 1.8 < p["ratio"] < 2.1
    assert abs(p["expected"] - 2.0) < 0.1  # the ratio of the fp8 and fp16 Tensor peaks
    truth = TRUTH["gemm_fp16"]["call_ms_median"] / TRUTH["gemm_fp8"]["call_ms_median"]
    assert abs(p["ratio"] / truth - 1) < 0.15  # the workload's own CUDA events agree
    m = pairs.of(judged("m16_fp16"), judged("m16_fp8")).pairs.iloc[0]
    assert m["why"] == "pair_memory" and 1.8 < m["bytes_ratio"] < 2.1
    assert m["ratio"] < m["bytes_ratio"] and m["dram_pct_a"] > m["dram_pct_b"]
    text = [str(f) for f in pairs.of(judged("m16_fp16"), judged("m16_fp8")).findings()]
    assert "memory-bound on both sides" in text[1] and "fewer DRAM bytes" in text[1]
    wo = pairs.of(judged("m16_fp16"), judged("wo_fp8"))
    assert len(wo.pairs) == 1 and 0.9 < wo.pairs["ratio"].iloc[0] < 1.1  # the GEMM: unchanged
    assert len(wo.only_b) == 2 and wo.only_b["duration_ns"].sum() > 0.85 * wo.b_ns


@pytest.fixture(scope="module")
def vits_trace(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("vits") / "h200-vits.sqlite"
    with lzma.open(K / "h200-vits.sqlite.xz") as src, out.open("wb") as dst:
        shutil.copyfileobj(src, dst)
    return out


def test_joined_to_the_loop_the_ranked_list_holds(judged, vits_trace):
    import nsightlab

    with nsightlab.open(vits_trace) as r:
        j = join.of(judged("vits"), r)
        g, wall, n = join.in_loop(r)
    assert n >= 25 and len(j.unmatched) == 0
    # under nsys this loop is launch-bound: the kernels' share says so before their savings
    assert j.kernel_share_pct < 50 and j.findings()[0].code == "kernel_share"
    saves = j.saves
    assert len(saves) >= 10 and (saves["saves_ns"] <= saves["time_ns"] + 1e-6).all()
    assert saves["saves_ns"].sum() <= g["time_ns"].sum()  # no more than the loop's kernels
    assert saves["saves_ns"].is_monotonic_decreasing
    assert (saves["rule_saves_ns"] <= saves["time_ns"] + 1e-6).all()
    # ncu profiled one launch per configuration: every top configuration of the loop is in
    assert j.unprofiled.empty or j.unprofiled["share_pct"].sum() < 20


def test_report_of_a_trace_with_ncu_and_of_a_capture_holding_both(vits_trace, cache):
    res = invoke("report", vits_trace, "--ncu", K / "h200-vits.ncu-rep.xz", "--cache-dir", cache)
    assert res.exit_code == 0, res.output
    assert "could save per iteration" in res.output and "in all: up to" in res.output
    res = invoke("report", EXAMPLES / "vit-fp16", "--json", "--cache-dir", cache)
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["kernel_level"]["saves"] and data["kernel_level"]["iterations"] >= 10


def test_diff_and_compare_of_ncu_reports_on_the_command_line(cache):
    a, b, c = (K / f"h200-{x}.ncu-rep.xz" for x in ("m16_fp16", "m16_fp8", "wo_fp8"))
    res = invoke("diff", a, b, "--cache-dir", cache)
    assert res.exit_code == 0 and "memory-bound on both sides" in res.output
    res = invoke("diff", a, c, "--json", "--cache-dir", cache)
    data = json.loads(res.stdout)
    assert len(data["only_b"]) == 2 and data["findings"][0]["code"] == "pair_total"
    res = invoke("compare", a, b, c, "--cache-dir", cache)
    assert res.exit_code == 0 and len(res.output.strip().splitlines()) == 2 + 3


def test_a_report_is_parsed_once(cache, monkeypatch):
    from nsightlab.read import ncu_store

    path = K / "h200-scan.ncu-rep.xz"
    first = NcuStore(path, cache_dir=cache)
    monkeypatch.setattr(ncu_store, "_parse", lambda *a: pytest.fail("parsed again"))
    again = NcuStore(path, cache_dir=cache)
    assert again.kernels().equals(first.kernels())
    assert len(again.metrics()) == first.meta["metrics_per_kernel"] * len(first.kernels())


def test_python_opens_an_ncu_report(cache):
    import nsightlab

    with nsightlab.open(K / "h200-wo_fp8.ncu-rep.xz", cache_dir=cache) as s:
        k = s.kernels()
        assert len(k) == 3 and k["tensor_precision"].notna().sum() >= 1
        assert len(s.rules()) > 10


def test_a_second_report_command_is_served_from_the_cache(tmp_path, monkeypatch):
    path = K / "h200-gather.ncu-rep.xz"
    first = invoke("report", path, "--cache-dir", tmp_path)
    assert first.exit_code == 0
    monkeypatch.setattr(report, "build", lambda *a, **k: pytest.fail("computed again"))
    again = invoke("report", path, "--cache-dir", tmp_path)
    assert again.exit_code == 0 and again.stdout == first.stdout and first.stdout


# ---- damaged and wrong inputs: one line naming the file, exit 1; or a warning -------------


@pytest.fixture(scope="module")
def damaged(tmp_path_factory) -> dict:
    d = tmp_path_factory.mktemp("damaged")
    whole = d / "whole.ncu-rep"
    with lzma.open(EXAMPLES / "vit-fp16" / "report.ncu-rep.xz") as src, whole.open("wb") as dst:
        shutil.copyfileobj(src, dst)
    data = whole.read_bytes()
    out = {"empty": d / "empty.ncu-rep", "cut": d / "cut.ncu-rep",
           "cut_to_nothing": d / "nothing.ncu-rep", "sqlite_named_ncu": d / "trace.ncu-rep",
           "cut_xz": d / "cut.ncu-rep.xz", "renamed": d / "renamed.sqlite"}
    out["empty"].write_bytes(b"")
    out["cut"].write_bytes(data[: int(len(data) * 0.6)])
    out["cut_to_nothing"].write_bytes(data[:200])
    out["sqlite_named_ncu"].write_bytes(lzma.open(K / "h200-vits.sqlite.xz").read(1 << 16))
    out["cut_xz"].write_bytes((K / "h200-scan.ncu-rep.xz").read_bytes()[:2000])
    out["renamed"].write_bytes(data)
    out["whole"] = whole
    return out


@pytest.mark.parametrize("kind", ["empty", "cut_to_nothing", "sqlite_named_ncu", "cut_xz"])
@pytest.mark.parametrize("command", [["info"], ["table", "ncu_kernels"], ["report"], ["export"]])
def test_a_broken_ncu_input_is_one_line_naming_the_file(damaged, kind, command, tmp_path):
    args = [*command, damaged[kind]] + (["-o", tmp_path / "x"] if command == ["export"] else
                                        ["--cache-dir", tmp_path])
    res = invoke(*args)
    assert res.exit_code == 1, (kind, command, res.output)
    lines = [x for x in res.output.splitlines() if x.startswith("Error:")]
    assert len(lines) == 1 and str(damaged[kind]) in lines[0] and "Traceback" not in res.output


def test_a_broken_ncu_input_in_diff_and_in_ncu_options(damaged, vits_trace, tmp_path):
    res = invoke("diff", damaged["empty"], K / "h200-scan.ncu-rep.xz", "--cache-dir", tmp_path)
    assert res.exit_code == 1 and str(damaged["empty"]) in res.output
    res = invoke("compare", K / "h200-scan.ncu-rep.xz", damaged["cut_to_nothing"], "--cache-dir",
                 tmp_path)
    assert res.exit_code == 1 and str(damaged["cut_to_nothing"]) in res.output
    res = invoke("report", vits_trace, "--ncu", damaged["sqlite_named_ncu"], "--cache-dir", tmp_path)
    assert res.exit_code == 1 and "not an Nsight Compute report" in res.output
    res = invoke("recipe", "run", "tensor_core", vits_trace, "--ncu", damaged["sqlite_named_ncu"],
                 "--cache-dir", tmp_path)
    assert res.exit_code == 1 and str(damaged["sqlite_named_ncu"]) in res.output


def test_a_report_cut_short_gives_what_it_holds_with_a_warning(damaged, tmp_path):
    whole = NcuStore(damaged["whole"], cache_dir=tmp_path).kernels()
    res = invoke("report", damaged["cut"], "--cache-dir", tmp_path)
    assert res.exit_code == 0
    warning = [x for x in res.output.splitlines() if x.startswith("WARNING") and "cut short" in x]
    assert len(warning) == 1
    cut = NcuStore(damaged["cut"], cache_dir=tmp_path)
    assert 0 < len(cut.kernels()) < len(whole)
    assert f"read the {len(cut.kernels())} kernels" in warning[0]
    res = invoke("export", damaged["cut"], "-o", tmp_path / "out")
    assert res.exit_code == 0 and "cut short" in res.output


def test_an_ncu_report_under_another_name_is_read_as_one(damaged, tmp_path):
    res = invoke("report", damaged["renamed"], "--cache-dir", tmp_path)
    assert res.exit_code == 0 and "kernels profiled by Nsight Compute" in res.output


# ---- what a review found: each a case that failed before its fix ---------------------------


def test_the_join_never_matches_by_name_alone(judged, vits_trace):
    """PyTorch's elementwise ops share a few names: a launch ncu did not profile is unprofiled,
    not judged by another op of the same name."""
    import nsightlab

    j = judged("vits")
    gelu = j.kernels[(j.kernels["function"] == "vectorized_elementwise_kernel")
                     & (j.kernels["grid"] == "9456x1x1")]
    assert len(gelu) == 1
    fewer = judge.Judged(j.kernels.drop(gelu.index), j.rules, j.missing)
    with nsightlab.open(vits_trace) as r:
        joined = join.of(fewer, r)
    row = joined.kernels[(joined.kernels["function"] == "vectorized_elementwise_kernel")
                         & (joined.kernels["grid"] == "9456x1x1")]
    assert len(row) == 1 and row["ncu_kernel"].isna().all()


def test_words_of_a_pair_with_no_time_or_no_bytes_say_so():
    from nsightlab.renderers import words

    t = words.say("pair_total", about="a -> b", a_ns=0.0, b_ns=5.0, ratio=0.0, only_b_ns=0.0,
                  only_b_pct=0.0, only_b=0, repeats_a=1, repeats_b=1)
    assert "no time on one side" in t
    m = words.say("pair_memory", about="k", a_ns=1.0, b_ns=1.0, ratio=1.0, expected=1.0,
                  bytes_ratio=0.0, dram_a=1.0, dram_b=1.0)
    assert "DRAM bytes unknown" in m


def test_no_cache_writes_no_cache(tmp_path):
    cache = tmp_path / "cache"
    res = invoke("report", K / "h200-scan.ncu-rep.xz", "--no-cache", "--cache-dir", cache)
    assert res.exit_code == 0 and not cache.exists()


def test_a_capture_replacing_its_ncu_report_is_parsed_again(tmp_path):
    cap = tmp_path / "cap"
    cap.mkdir()
    shutil.copy(K / "h200-m16_fp16.ncu-rep.xz", cap / "report.ncu-rep.xz")
    first = invoke("table", "ncu_kernels", cap, "--columns", "name")
    assert first.exit_code == 0 and "qqhsh" not in first.stdout
    shutil.copy(K / "h200-m16_fp8.ncu-rep.xz", cap / "report.ncu-rep.xz")
    again = invoke("table", "ncu_kernels", cap, "--columns", "name")
    assert again.exit_code == 0 and "qqhsh" in again.stdout


def test_a_capture_with_a_broken_ncu_report_still_gets_its_trace_report(tmp_path, vits_trace):
    cap = tmp_path / "cap"
    cap.mkdir()
    shutil.copy(vits_trace, cap / "report.sqlite")
    (cap / "report.ncu-rep").write_bytes(b"")
    res = invoke("report", cap, "--cache-dir", tmp_path / "c")
    assert res.exit_code == 0, res.output
    assert "top kernels" in res.stdout
    assert "Nsight Compute report was left out" in res.output


def test_a_report_with_itself_reads_as_the_same_work(judged):
    """A/A: every kernel pairs with itself at 1.00x, none on one side only."""
    for case in ("vits", "wo_fp8"):
        d = pairs.of(judged(case), judged(case))
        assert d.only_a.empty and d.only_b.empty
        assert (d.pairs["ratio"] == 1).all() and (d.pairs["expected"].dropna() == 1).all()
        assert d.findings()[0].values["ratio"] == 1


def test_more_work_reads_as_more_work(judged):
    """The same GEMM at M=16 against M=8192: the roofline expects far less time, and the
    measured ratio follows it."""
    p = pairs.of(judged("gemm_fp16"), judged("m16_fp16")).pairs.iloc[0]
    assert p["flops_a"] / p["flops_b"] > 400 and p["expected"] > 10 and p["ratio"] > 10


class _Without:
    """A parsed report with some metrics missing, as a smaller section set leaves it."""

    def __init__(self, store, drop: set[str]):
        self.store, self.drop = store, drop

    def __getattr__(self, name):
        return getattr(self.store, name)

    def metric_names(self):
        return [n for n in self.store.metric_names() if n not in self.drop]

    def metrics(self, names=None):
        m = self.store.metrics(names)
        return m[~m["metric"].isin(self.drop)]

    def values(self, names):
        v = self.store.values(names)
        return v.drop(columns=[c for c in v.columns if c in self.drop])


@pytest.mark.parametrize("case", ["gemm_fp16", "gather", "scan"])
def test_judged_with_any_metric_it_reads_missing(case, cache):
    """Generated faults: each metric the judgement reads, dropped in turn, and every group of
    them at once: a verdict the figures support, or none, never a traceback."""
    store = NcuStore(K / f"h200-{case}.ncu-rep.xz", cache_dir=cache)
    names = judge.needed(store.metric_names())
    groups = [{n} for n in names] + [set(names), set(judge.SOL.values()),
                                      set(judge.BREAKDOWN.values()),
                                      {n for n in names if n.startswith("sm__ops_path")}]
    for drop in groups:
        j = judge.of(_Without(store, drop))
        k = j.kernels
        assert k["limiter"].isin(["compute", "memory", "balanced", "latency", "unknown"]).all()
        assert k["headroom_pct"].dropna().between(0, 100).all()
        if judge.SOL["compute_pct"] in drop:
            assert (k["limiter"] == "unknown").all() and j.missing
