"""Several CUDA processes in one report, each its own run (issue 48): real captures of
tests/data/procs (H100s, nsys 2025.3) with each process's own truth (CUDA events and wall
clock per pass or step, by pid): processes sharing one GPU time-sliced and under MPS, each
also run alone in the same trace (the solo truth of the stretch), DDP ranks with a straggler,
tensor-parallel all-reduces, one rank's report alone."""
from __future__ import annotations

import hashlib
import json
import lzma
import os
import shutil
import statistics
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

import nsightlab
from nsightlab.analysis import processes
from nsightlab.cli import cli
from nsightlab.run import report as run_report
from nsightlab.renderers.text import render

DATA = Path(__file__).parent / "data" / "procs"


pytestmark = pytest.mark.usefixtures("module_cache")  # every cache under a temporary folder


@pytest.fixture(scope="module")
def reports(module_cache, tmp_path_factory) -> dict:
    d = tmp_path_factory.mktemp("procs")
    out = {}
    for name in (*SHARED, "ddp-straggler", "ddp-tpdp"):
        shutil.copy(DATA / "nsys" / f"{name}.sqlite.xz", d)
        out[name] = run_report.build(d / f"{name}.sqlite.xz")
    return out


#: processes sharing GPU 0 (workloads.py shared, trimmed after round 0): each ran 10 passes
#: alone while the others waited, then all ran passes together
SHARED = {"st-vit2": "time-sliced", "st-mix3": "time-sliced", "st-big-small": "time-sliced",
          "st-big2": "time-sliced", "st-mps2": "concurrent",
          # CUDA graphs under nsys's default graph-level trace: beside an eager process, and
          # two processes whose trace starts at cudaProfilerStart (graph replays only)
          "st-graph-mix": "time-sliced", "st-graph2-range": "time-sliced"}


def truth(name: str) -> list[dict]:
    """The lines of a truth file (``truth/NAME``: JSON lines, xz)."""
    with lzma.open(DATA / "truth" / name, "rt") as f:
        return [json.loads(line) for line in f]


def passes(name: str) -> dict[int, list[dict]]:
    """pid -> its timed passes of round 0 (the trimmed capture's), from its own lines; the
    last pass together of each process left out (a peer may have stopped during it)."""
    out = {}
    for f in sorted((DATA / "truth").glob(f"{name}-*.jsonl.xz")):
        rows = truth(f.name)
        rows = [r for r in rows if r.get("phase") and r["round"] == 0]
        together = [r for r in rows if r["phase"] == "together"]
        out[rows[0]["pid"]] = [r for r in rows if r is not together[-1]]
    return out


def median_ms(rows: list[dict], phase: str | None = None) -> float:
    return statistics.median(r["wall_ms"] for r in rows if phase in (None, r["phase"]))


@pytest.mark.parametrize("name", SHARED)
def test_processes_sharing_a_gpu_are_each_their_own_run(reports, name):
    pr, mode = reports[name], SHARED[name]
    assert isinstance(pr, run_report.ProcessesReport)
    want = {pid: median_ms(rows) for pid, rows in passes(name).items()}
    assert sorted(pr.processes["pid"]) == sorted(want)
    for pid, rr in zip(pr.processes["pid"], pr.runs):
        med = rr.run_row()["wall_med_ns"] / 1e6  # passes alone and together, as in the truth
        assert med == pytest.approx(want[pid], rel=0.10), (pid, med, want[pid])
    (sh,) = pr.sharing.to_dict("records")
    assert sh["device_id"] == 0 and sh["mode"] == mode
    if mode == "concurrent":   # MPS: kernels of the two overlap in part, the server is traced
        assert sh["partial"] > sh["contained"] and "MPS" in sh["evidence"]
    else:  # time-slicing: spans held whole (preempted), seldom in part (two preempted)
        assert sh["partial"] <= 0.05 * sh["contained"]
    assert pr.processes["rank"].isna().all()  # no NCCL: no ranks


#: (capture, model) whose stretch the truth measures: together less alone, the host's own
#: work at the same pace in both (see tests/data/procs/README.md for the others)
MEASURED = [("st-big-small", "resnet50:128"), ("st-mix3", "resnet50"), ("st-mix3", "resnet18"),
            ("st-big2", "resnet50:128"), ("st-graph-mix", "resnet50:32@graph"),
            ("st-graph2-range", "resnet18:8@graph"), ("st-graph2-range", "vit_s:8@graph")]


@pytest.mark.parametrize("name,model", MEASURED)
def test_the_stretch_of_sharing_is_the_measured_one(reports, name, model):
    """Each process ran alone, then beside the others, in the same trace: the stretch
    nsightlab replays from the iterations together is within 15% of the measured one (the
    median pass together less the median pass alone)."""
    pr = reports[name]
    for pid, rows in passes(name).items():
        if rows[0]["model"] != model:
            continue
        measured = median_ms(rows, "together") - median_ms(rows, "solo")
        said = pr.stretch.set_index("pid").loc[pid]
        assert said["stretch_ns"] / 1e6 == pytest.approx(measured, rel=0.15), (said, measured)
        # the iterations it ran alone replay to their own length
        t = pr.stretch_iterations[pid]
        alone = t[~t["shared"]]
        assert len(alone) >= 5 and (alone["stretch_ns"] / alone["wall_ns"]).abs().median() < 0.05
        out = render(pr)
        assert f"pid {pid}: the sharing stretched its iterations by" in out
        assert "a lower bound" not in out  # every kernel that shared the GPU also ran alone


def test_processes_that_replay_cuda_graphs_are_runs(reports):
    """Under nsys's default graph-level trace a replay is one whole-graph execution, its
    kernels not rows. A trace from cudaProfilerStart on (the warm-up's eager kernels before
    it) holds graph executions only: each process is still a run with its iterations, not "no
    GPU activity"; the spans of whole graphs cannot show time-slicing, which the evidence
    says where they overlap (beside an eager process: no MPS server in the trace)."""
    pr = reports["st-graph2-range"]
    assert (pr.processes["kernels"] == 0).all() and (pr.processes["graph_execs"] > 20).all()
    assert all(rr.run_row()["iterations"] >= 20 for rr in pr.runs)
    assert "never overlaps" in pr.sharing["evidence"].iloc[0]
    text = render(pr)
    assert "no GPU activity" not in text
    mix = reports["st-graph-mix"]
    assert sorted(mix.processes["graph_execs"] > 0) == [False, True]
    ev = mix.sharing["evidence"].iloc[0]
    assert ev.startswith("no MPS server in the trace") and "--cuda-graph-trace=node" in ev


def test_graph_replays_without_their_api_calls_are_still_gpu_work(tmp_path):
    """The graph-only capture with its CUDA API table dropped: each process still has its
    replays as iterations, and the completeness check says the calls are missing (as for
    kernels), not that the report holds no GPU work at all."""
    import lzma
    import sqlite3

    src = tmp_path / "st-graph2-range.sqlite"
    src.write_bytes(lzma.open(DATA / "nsys" / "st-graph2-range.sqlite.xz").read())
    db = sqlite3.connect(src)
    db.execute("DROP TABLE CUPTI_ACTIVITY_KIND_RUNTIME")
    db.commit()
    db.close()
    pr = run_report.build(src)
    for rr in pr.runs:
        assert rr.run_row()["iterations"] >= 20
        said = [w["message"] for w in rr.warnings]
        assert any("CUDA graph executions but no CUDA API call" in m for m in said), said
        assert not any("neither a kernel nor a launch" in m for m in said), said


def test_a_shared_process_says_its_kernel_time_holds_the_others(reports, tmp_path):
    """ResNet-50 batch 128 (GPU-bound) beside ResNet-18: time-slicing preempts its kernels,
    whose spans then hold the other's kernels. Its own report says how much of its kernel
    time that is: at most the other's kernel time during its passes together (by the truth's
    windows), and most of it (its kernels fill its passes)."""
    pr = reports["st-big-small"]
    (pid, rows), = [(p, r) for p, r in passes("st-big-small").items()
                    if r[0]["model"] == "resnet50:128"]
    shutil.copy(DATA / "nsys" / "st-big-small.sqlite.xz", tmp_path)
    r = nsightlab.open(tmp_path / "st-big-small.sqlite.xz")
    zero = nsightlab.read.metadata.session_start(r.db)
    k = r.kernels(["pid", "start_ns", "end_ns"])
    other = k[k["pid"] != pid]
    during = statistics.median(
        (other["end_ns"].clip(upper=x["end_ns"] - zero) - other["start_ns"].clip(
            lower=x["start_ns"] - zero)).clip(lower=0).sum() for x in rows
        if x["phase"] == "together")
    held = pr.stretch.set_index("pid").loc[pid, "held_ns"]
    assert 0.5 * during <= held <= 1.05 * during, (held, during)
    run = dict(zip(pr.processes["pid"], pr.runs))[pid]
    assert run.findings[0].startswith("GPU 0 is shared: its iterations took")
    assert "time-slicing preempted its kernels" in run.findings[0]


def test_a_sync_in_a_few_iterations_is_not_called_one_per_iteration(reports):
    """st-mix3's processes wait at a barrier after one cudaDeviceSynchronize (between their
    passes alone and together): the GPU idles after it once, for a second. The advice says
    that, not "(0 per iteration) ... remove it from the loop"."""
    run = reports["st-mix3"].runs[0]
    said = [f for f in run.findings if "cudaDeviceSynchronize" in f]
    assert said and all("(0 per iteration)" not in f for f in said)
    assert any("the GPU idled after cudaDeviceSynchronize 1 time(s) in the" in f for f in said)


def test_mps_barely_stretches_launch_bound_processes(reports):
    """Under MPS the two processes' kernels run at once: neither pass got longer together
    (truth within 0.1 ms), and nsightlab says so."""
    pr = reports["st-mps2"]
    for pid, rows in passes("st-mps2").items():
        assert abs(median_ms(rows, "together") - median_ms(rows, "solo")) < 0.1
        assert abs(pr.stretch.set_index("pid").loc[pid, "stretch_ns"]) < 100_000


def test_ddp_ranks_the_straggler_and_its_cause(reports):
    pr = reports["ddp-straggler"]
    p = pr.processes.set_index("rank")
    assert list(p["gpus"]) == [[0], [1]]
    slow = truth("ddp-straggler.rank1.jsonl.xz")
    assert slow[0]["host_work_ms"] == 25.0 and pr.collectives["straggler"] == slow[0]["pid"]
    t = pr.collectives["ranks"].set_index("rank")
    # rank 0 spins in NCCL for rank 1: its steps are ~25 ms longer (83.5 vs 58.7 ms inside
    # the step range, truth); exposed wait counts every spin no compute of its overlaps
    assert t.loc[0, "exposed_wait_ns"] > 20e6 and t.loc[1, "exposed_wait_ns"] < 1e6
    assert "rank 1" in pr.straggler and "its host holds it back" in pr.straggler
    from nsightlab.renderers.text import render
    text = render(pr)
    assert "communication-bound" in text.splitlines()[1]  # rank 0: waiting, not math


def test_tensor_and_data_parallel_ranks_and_their_straggler(reports):
    """Four ranks, each in a TP pair (0-1, 2-3: an all-reduce per layer) and a DP pair (0-2,
    1-3: a gradient all-reduce per step); rank 3 does 10 ms of host work before each step.
    Every rank's collectives are matched, rank 3 is the straggler and its host the cause, and
    no rank's own section says the report holds one rank or asks for every rank's trace."""
    pr = reports["ddp-tpdp"]
    c = pr.collectives
    t = c["ranks"]
    assert len(t) == 4 and t["collectives"].nunique() == 1 and t["collectives"].iloc[0] >= 10
    assert (t["exposed_transfer_ns"] > 0).all()
    slow = truth("ddp-tpdp.rank3.jsonl.xz")
    assert slow[0]["host_work_ms"] == 10.0 and c["straggler"] == slow[0]["pid"]
    assert "rank 3" in pr.straggler and "its host holds it back" in pr.straggler
    waiting = t.set_index("rank")["exposed_wait_ns"]
    assert (waiting[[0, 1, 2]] > 5e6).all() and waiting[3] < 1e6
    # each place in the ranks' order parted by the kernels' ends: the TP pairs' all-reduces
    # (4 a step each), the DP pairs' (1 a step, one place of four ranks where the two end
    # together): a rank waits only for its own collective's members
    groups = dict(c["groups"])
    assert groups[(0, 1)] == groups[(2, 3)] >= 4 * 4
    assert set(groups) <= {(0, 1), (2, 3), (0, 2), (1, 3), (0, 1, 2, 3)}
    last = t.set_index("rank")["last"]
    assert last[3] == t["collectives"].iloc[0] and last[[0, 1]].sum() >= groups[(0, 1)]
    for run in pr.runs:
        assert not any("holds one rank" in f or "read every rank together" in f
                       for f in run.findings), run.findings


def test_a_place_in_the_ranks_order_parts_into_groups_of_two_or_more_only():
    """``processes.communicators`` on ends (µs) as ddp-tpdp and ddp-straggler have them: two
    pairs 10 ms apart part; four ranks whose split would leave one alone (a broadcast's root
    ending before its peers) do not; two ranks never part."""
    us = 1000
    ends = np.array([[0, 0, 50], [1, 30_000, 0], [10_000, 30_001, 10_050],
                     [10_001, 30_002, 10_000]]) * us
    g = processes.communicators(ends)
    assert g[0, 0] == g[1, 0] != g[2, 0] == g[3, 0]  # the TP pairs, 10 ms apart
    assert len(set(g[:, 1])) == 1  # rank 0 alone 30 ms before the rest: not parted
    assert g[0, 2] == g[1, 2] != g[2, 2] == g[3, 2]  # within 50 µs: chained, 100 µs slack
    assert (processes.communicators(ends[:2]) == 0).all()
    # reports of one rank each (clocks aligned by their sessions' starts, possibly off by
    # more than a collective's ends are apart): every place is one collective of all ranks
    nccl = {r: pd.DataFrame({"start_ns": ends[r] - 10 * us, "end_ns": ends[r]}) for r in range(4)}
    none = {r: pd.DataFrame({"start_ns": [], "end_ns": []}) for r in range(4)}
    assert processes.matched(nccl, none, {r: r for r in range(4)}, one_clock=False)[
        "groups"] == [((0, 1, 2, 3), 3)]
    assert dict(processes.matched(nccl, none, {r: r for r in range(4)})["groups"]) == {
        (0, 1): 2, (2, 3): 2, (0, 1, 2, 3): 1}


def test_overlap_pct_is_nsys_nccl_gpu_overlap_trace_s(reports, tmp_path):
    """nccl_gpu_overlap_trace's overlap %: the NCCL kernel time that compute kernels of the
    same GPU overlap, as a share of the NCCL kernel time; here over every collective of each
    rank, counted kernel by kernel against the compute kernels (a plain loop, not nsightlab's
    interval code)."""
    shutil.copy(DATA / "nsys" / "ddp-tpdp.sqlite.xz", tmp_path)
    r = nsightlab.open(tmp_path / "ddp-tpdp.sqlite.xz")
    procs = reports["ddp-tpdp"].processes
    k = r.kernels(["pid", "device_id", "start_ns", "end_ns", "name"])
    nccl, compute = processes.nccl_split(k)
    c = processes.matched({int(p): nccl[nccl["pid"] == p] for p in procs["pid"]},
                          {int(p): compute[compute["pid"] == p] for p in procs["pid"]},
                          {int(p): int(x) for p, x in zip(procs["pid"], procs["rank"])})
    for row in c["ranks"].itertuples():
        mine = nccl[nccl["pid"] == row.pid].sort_values("start_ns").iloc[:row.collectives]
        other = compute[compute["pid"] == row.pid].sort_values("start_ns")
        total = over = 0
        for a, b in zip(mine["start_ns"], mine["end_ns"]):
            total += b - a
            cut = []
            for x, y in zip(other["start_ns"], other["end_ns"]):
                if x < b and y > a:
                    cut.append((max(x, a), min(y, b)))
            cut.sort()
            reach = a
            for x, y in cut:  # the union of the overlaps inside this kernel
                if y > reach:
                    over += y - max(x, reach)
                    reach = y
        assert row.overlap_pct == pytest.approx(100 * over / total, abs=0.01)
    assert "overlap with compute" in render(reports["ddp-tpdp"])


def test_a_process_reads_its_big_tables_cut_from_the_whole_reports_cache(tmp_path):
    """The kernels and API calls are not copied into a process's export: its Report reads
    cache entries cut from the whole report's, which hold exactly the whole report's rows of
    that process (in order, every column, the later columns too), with the kernel names of
    that process only; what it asks of them in SQL goes to the whole export with its filter."""
    from nsightlab.read import split

    shutil.copy(DATA / "nsys" / "st-mix3.sqlite.xz", tmp_path)
    r = nsightlab.open(tmp_path / "st-mix3.sqlite.xz")
    k, api = r.kernels(), r.cuda_api()
    cut = split.cuttable(r)
    assert cut == ("kernels", "cuda_api")
    for pid in sorted(k["pid"].unique()):
        v = split.of_process(r, int(pid), cut)
        assert v.db.count(r.spec("kernels").source) == 0  # not copied
        mine = k[k["pid"] == pid].reset_index(drop=True)
        got = v.kernels()
        pd.testing.assert_frame_equal(_text(got), _text(mine))
        assert set(got["name"].cat.categories) == set(mine["name"].astype(str))  # its own only
        calls = api[api["pid"] == pid].reset_index(drop=True)
        pd.testing.assert_frame_equal(_text(v.cuda_api()), _text(calls))
        assert v.has_rows("kernels") and v.row_count("cuda_api") == len(calls)
        lo = int(mine["start_ns"].median())
        assert v.count_where("kernels", f"start >= {lo}") == int((mine["start_ns"] >= lo).sum())
        assert not v.any_where("kernels", "graphNodeId IS NOT NULL")


def test_reports_built_apart_are_those_built_here(tmp_path, monkeypatch):
    """Past ``APART_KERNELS`` the processes' reports are built in interpreters of their own
    (``python -m nsightlab.run.apart``), reopening each process's export and cut
    cache: the same report as built on threads here."""
    said, real = [], run_report._start_apart
    for apart in (False, True):
        d = tmp_path / str(apart)
        d.mkdir()
        shutil.copy(DATA / "nsys" / "st-mix3.sqlite.xz", d)
        monkeypatch.setattr(run_report, "APART_KERNELS", 0 if apart else 10**12)
        started = []
        monkeypatch.setattr(run_report, "_start_apart",
                            lambda *a: started.append(real(*a)) or started[-1])
        said.append(render(run_report.build(d / "st-mix3.sqlite.xz")))
        assert (started[0] is not None) == apart
        cache = Path(os.environ["NSIGHTLAB_CACHE_DIR"])
        assert not list(cache.rglob(".run.*.tmp"))  # their answers read and removed
    assert said[0] == said[1]


def test_an_interpreter_started_for_a_process_that_is_not_wanted_ends(tmp_path, monkeypatch):
    """The processes' interpreters start while the big tables are read, before the report
    knows which processes did GPU work; one not told to go ends at once, writing nothing."""
    shutil.copy(DATA / "nsys" / "st-mix3.sqlite.xz", tmp_path)
    monkeypatch.setattr(run_report, "APART_KERNELS", 0)
    r = nsightlab.open(tmp_path / "st-mix3.sqlite.xz")
    pids = processes.cuda_pids(r)
    started = run_report._start_apart(r, pids, "st-mix3")
    try:
        assert sorted(started) == pids
        assert run_report._go(started, [], ()) == []
        for child, out in started.values():
            assert child.wait(timeout=120) == 0 and not out.exists()
    finally:
        run_report._stop(list(started.values()))


def test_a_process_whose_interpreter_cannot_build_its_report_is_built_here(tmp_path,
                                                                           monkeypatch):
    """An interpreter that ends before it is told to go (nsightlab not importable there: a
    path the caller added to ``sys.path`` only) is not an error: that process's report is
    built here, the same."""
    import subprocess

    shutil.copy(DATA / "nsys" / "st-vit2.sqlite.xz", tmp_path)
    monkeypatch.setattr(run_report, "APART_KERNELS", 10**12)
    here = render(run_report.build(tmp_path / "st-vit2.sqlite.xz"))
    real = subprocess.Popen

    def dead(args, **kw):
        if "nsightlab.run.apart" in args:
            args = [args[0], "-c", "raise SystemExit(1)"]
        return real(args, **kw)

    monkeypatch.setattr(subprocess, "Popen", dead)
    monkeypatch.setattr(run_report, "APART_KERNELS", 0)
    d = tmp_path / "dead"
    d.mkdir()
    shutil.copy(DATA / "nsys" / "st-vit2.sqlite.xz", d)
    assert render(run_report.build(d / "st-vit2.sqlite.xz")) == here


def test_the_first_read_writes_each_process_share_of_the_big_tables(tmp_path, monkeypatch):
    """``nsightlab report`` of several processes: the reader processes that read the big
    tables into the whole report's cache write each process's share beside it, and each
    process's cache takes that share (no cut); its entries name the whole export as their
    source. The report is the one built from shares cut afterwards."""
    import nsightlab.read.parallel
    from nsightlab.read import store, table_cache, workers

    monkeypatch.setattr(nsightlab.read.parallel, "ROWS_PER_READER", 1000)  # reader processes
    monkeypatch.setattr(workers, "PROCESS_MIN_ROWS", 1)  # for a small capture
    monkeypatch.setenv("NSIGHTLAB_READERS", "2")
    monkeypatch.setattr(run_report, "APART_KERNELS", 0)
    real, took, said = store.ReadStore.take_share, [], []
    monkeypatch.setattr(store.ReadStore, "take_share", lambda *a: _took(real, took, *a))
    for split in (True, False):
        d = tmp_path / str(split)
        d.mkdir()
        shutil.copy(DATA / "nsys" / "st-mix3.sqlite.xz", d)
        if not split:
            start = store.ReadStore.start  # one read of every process's rows
            monkeypatch.setattr(store.ReadStore, "start", lambda s, t, by_process: start(s, t))
        took.clear()
        rr = run_report.build(d / "st-mix3.sqlite.xz")
        said.append(render(rr))
        pids = [int(p) for p in rr.processes["pid"]]
        assert {(t, p) for t, p, got in took if got} == \
            ({(t, p) for t in ("kernels", "cuda_api") for p in pids} if split else set())
        whole = nsightlab.open(d / "st-mix3.sqlite.xz")
        for p in pids:
            meta = json.loads((table_cache.process_root(whole.cache.root, p) / "kernels" /
                               "meta.json").read_text())
            assert meta["source"] == whole.cache.ident  # rows read from the whole export
        cache = whole.cache.root
        assert not [f for f in cache.rglob(".*") if f.is_dir()]  # no share left behind
    assert said[0] == said[1]


def _took(real, took: list, read_store, entry, pid):
    got = real(read_store, entry, pid)
    took.append((entry, pid, got is not None))
    return got


def _text(df: pd.DataFrame) -> pd.DataFrame:
    """Categorical columns as text (a process's categories are its own values only)."""
    return df.astype({c: object for c in df if isinstance(df[c].dtype, pd.CategoricalDtype)})


def test_processes_without_the_exports_stream_table_are_still_each_a_run(tmp_path):
    """The stream table says cheaply which processes used CUDA; an export without it (the
    table left out) is read by the processes whose GPU work is traced, not as one run of
    every process's kernels mixed."""
    import sqlite3

    path = tmp_path / "st-mix3.sqlite"
    path.write_bytes(lzma.decompress((DATA / "nsys" / "st-mix3.sqlite.xz").read_bytes()))
    with sqlite3.connect(path) as c:
        c.execute("DROP TABLE TARGET_INFO_CUDA_STREAM")
    pr = run_report.build(path)
    assert isinstance(pr, run_report.ProcessesReport)
    assert list(pr.processes["pid"]) == [878, 879, 880]


def test_one_rank_alone_says_straggler_analysis_needs_all_ranks(tmp_path):
    shutil.copy(DATA / "nsys" / "rank-straggler-0.sqlite.xz", tmp_path)
    rr = run_report.build(tmp_path / "rank-straggler-0.sqlite.xz")
    assert isinstance(rr, run_report.RunReport)
    assert any("needs every rank's trace" in f for f in rr.findings)


def test_process_and_rank_pick_one_and_a_bad_pick_is_one_line(tmp_path):
    for n in ("ddp-straggler", "st-vit2"):
        shutil.copy(DATA / "nsys" / f"{n}.sqlite.xz", tmp_path)
    ddp, share = str(tmp_path / "ddp-straggler.sqlite.xz"), str(tmp_path / "st-vit2.sqlite.xz")
    res = CliRunner().invoke(cli, ["report", ddp, "--rank", "1"])
    said = [ln for ln in res.output.splitlines() if not ln.startswith("nsightlab: decompressing")]
    assert res.exit_code == 0 and said[0].startswith("ddp-straggler (pid 1966):")
    for args, said in ((["--rank", "0"], "no rank is known"),
                       (["--process", "python3"], "2 processes are named python3"),
                       (["--html", str(tmp_path / "x.html")], "--html/--png chart one run")):
        res = CliRunner().invoke(cli, ["report", share, *args])
        lines = [ln for ln in res.output.strip().splitlines()
                 if not ln.startswith("nsightlab: decompressing")]
        assert res.exit_code == 2 and "Traceback" not in res.output  # a usage error, as click
        assert len(lines) == 1 and said in lines[0] and lines[0].startswith("Error:")


def test_splitting_leaves_the_users_file_alone(tmp_path):
    src = tmp_path / "st-vit2.sqlite"
    import lzma
    src.write_bytes(lzma.open(DATA / "nsys" / "st-vit2.sqlite.xz").read())
    before = hashlib.sha256(src.read_bytes()).hexdigest()
    r = nsightlab.open(src)
    from nsightlab.read.split import of_process
    one = of_process(r, 705)
    assert one.path != src and one.path.is_relative_to(r.cache.root)
    assert set(one.kernels(["pid"])["pid"]) == {705}
    assert hashlib.sha256(src.read_bytes()).hexdigest() == before
    assert processes.cuda_pids(one) == [705]
    t = nsightlab.processes(src)  # the public table: one row per CUDA process
    assert list(t["pid"]) == [705, 706] and list(t["gpus"]) == [[0], [0]]
    assert t["rank"].isna().all() and set(t["runtime"]) == {"PyTorch"}


def test_one_report_per_rank_opened_together(tmp_path):
    """nsys profile -o rank-straggler-$RANK under torchrun: two reports, two sessions. Their
    clocks are aligned by the sessions' start times and checked on the collectives' ends."""
    for r in (0, 1):
        shutil.copy(DATA / "nsys" / f"rank-straggler-{r}.sqlite.xz", tmp_path)
    pr = run_report.build_ranks([tmp_path / f"rank-straggler-{r}.sqlite.xz" for r in (0, 1)])
    p = pr.processes.set_index("rank")
    assert list(p["rank_evidence"].str.startswith("the report's name")) == [True, True]
    slow = truth("rank-straggler.rank1.jsonl.xz")[0]
    assert slow["host_work_ms"] == 25.0 and pr.collectives["straggler"] == slow["pid"]
    assert pr.collectives["ends_apart_ns"] < 100_000 and "µs apart" in pr.clocks
    res = CliRunner().invoke(cli, ["report", *(str(tmp_path / f"rank-straggler-{r}.sqlite.xz")
                                               for r in (0, 1))])
    assert res.exit_code == 0 and "straggler: rank 1" in res.output


def test_open_and_recipe_run_take_one_process(tmp_path):
    shutil.copy(DATA / "nsys" / "st-vit2.sqlite.xz", tmp_path)
    src = tmp_path / "st-vit2.sqlite.xz"
    one = nsightlab.open(src, process=706)
    assert set(one.kernels(["pid"])["pid"]) == {706}
    with pytest.raises(nsightlab.NsightlabError, match="no process 4242; its processes that "
                                                       r"used CUDA: \[705, 706\]"):
        nsightlab.open(src, process=4242)
    both = CliRunner().invoke(cli, ["recipe", "run", "kernel_sum", str(src), "--format", "json"])
    mine = CliRunner().invoke(cli, ["recipe", "run", "kernel_sum", str(src), "--process", "706",
                                    "--format", "json"])
    assert both.exit_code == mine.exit_code == 0

    def instances(out: str) -> int:
        body = out[out.index("{"):]
        return sum(r["instances"] for r in json.loads(body)["kernel_sum"])
    other = CliRunner().invoke(cli, ["recipe", "run", "kernel_sum", str(src), "--process", "705",
                                     "--format", "json"])
    assert 0 < instances(mine.output) < instances(both.output) \
        == instances(mine.output) + instances(other.output)


def test_diff_of_several_processes_says_which_it_compared(tmp_path):
    from nsightlab.comparison.diff import diff

    for n in ("ddp-straggler", "ddp-tpdp", "rank-straggler-1"):
        shutil.copy(DATA / "nsys" / f"{n}.sqlite.xz", tmp_path)
    h = diff(tmp_path / "ddp-straggler.sqlite.xz", tmp_path / "ddp-tpdp.sqlite.xz").headline
    said = h["workload_warnings"]
    assert said[0].startswith("A holds 2 CUDA processes") and "the busiest" in said[0]
    assert said[1].startswith("B holds 4 CUDA processes") and "rank 0, as on A" in said[1]
    # one rank's own report against the job's: the same rank, from the report's name
    h = diff(tmp_path / "rank-straggler-1.sqlite.xz", tmp_path / "ddp-straggler.sqlite.xz").headline
    assert "compared pid 1966 (python3, rank 1; rank 1, as on A)" in h["workload_warnings"][0]
    h = diff(tmp_path / "ddp-straggler.sqlite.xz", tmp_path / "ddp-tpdp.sqlite.xz",
             a_process=1966, b_process=2205).headline
    assert not any("CUDA processes" in w for w in h["workload_warnings"])
    assert h["a"].endswith("(pid 1966)") and h["b"].endswith("(pid 2205)")


def test_diff_without_ranks_lines_processes_up_by_name_and_order(tmp_path):
    """No ranks: B's process is the one of A's pick's name at its place (pid order)."""
    from nsightlab.comparison.diff import diff

    for n in ("st-vit2", "st-mix3"):
        shutil.copy(DATA / "nsys" / f"{n}.sqlite.xz", tmp_path)
    h = diff(tmp_path / "st-mix3.sqlite.xz", tmp_path / "st-vit2.sqlite.xz").headline
    a, b = h["workload_warnings"][:2]
    assert "compared pid 879 (python3; the busiest)" in a  # ResNet-50: most kernel time
    # the 2nd python3 of st-mix3: the 2nd of st-vit2 (pid 706), not st-vit2's busiest
    assert "compared pid 706 (python3; the 2nd python3 process by pid, as on A)" in b
    h = diff(tmp_path / "st-mix3.sqlite.xz", tmp_path / "st-vit2.sqlite.xz",
             a_process=880).headline
    # the 3rd python3: st-vit2 has two, so its busiest
    assert "compared pid 705 (python3; the busiest)" in h["workload_warnings"][0]


def test_nsys_ai_public_two_gpu_export(tmp_path):
    """nsys-ai's public 2-GPU fixture (MIT, nsys 2026.2, rows out of time order): two ranks,
    their collectives matched, NCCL apart from compute; neither waits for the other enough to
    be called a straggler."""
    src = Path(__file__).parent / "data" / "edges" / "nsys" / "nsysai-mfu_2gpu_after.sqlite.xz"
    shutil.copy(src, tmp_path)
    pr = run_report.build(tmp_path / src.name)
    assert isinstance(pr, run_report.ProcessesReport)
    assert list(pr.processes["rank"]) == [0, 1] and list(pr.processes["gpus"]) == [[0], [1]]
    t = pr.collectives["ranks"]
    assert t["collectives"].nunique() == 1 and (t["exposed_transfer_ns"] > 0).all()
    assert pr.collectives["straggler"] is None and pr.straggler == ""


def test_compare_takes_the_baselines_rank_and_says_so(tmp_path):
    from nsightlab.comparison.lineup import compare

    for n in ("ddp-straggler", "ddp-tpdp"):
        shutil.copy(DATA / "nsys" / f"{n}.sqlite.xz", tmp_path)
    l = compare([tmp_path / "ddp-straggler.sqlite.xz", tmp_path / "ddp-tpdp.sqlite.xz"])
    assert l.runs == ["ddp-straggler (pid 1965)", "ddp-tpdp (pid 2204)"]
    assert "the busiest" in l.notes[0] and "rank 0, as on the baseline" in l.notes[1]


@pytest.mark.parametrize("engine", ["numpy", "duckdb"])
def test_the_budget_has_a_communication_part(tmp_path, monkeypatch, engine):
    """NCCL kernels where no compute runs are their own part, in either engine, and equal to
    the exposed time the collectives' matching measures for that rank."""
    from nsightlab import recipe_runner as R

    monkeypatch.setenv("NSIGHTLAB_ENGINE", engine)
    monkeypatch.setenv("NSIGHTLAB_CACHE_DIR", str(tmp_path / "cache"))
    shutil.copy(DATA / "nsys" / "ddp-straggler.sqlite.xz", tmp_path)
    waiting = nsightlab.open(tmp_path / "ddp-straggler.sqlite.xz", process=1965)
    s = R.run("budget", waiting)["summary"].iloc[0]
    assert s["communication_pct"] > 30 and "NCCL kernels with no compute beside them" in s["evidence"]
    parts = [c for c in s.index if c.endswith("_pct") and c not in ("wall_cov_pct",)]
    assert sum(s[c] for c in parts) == pytest.approx(100.0, abs=0.01)
    other = nsightlab.open(tmp_path / "ddp-straggler.sqlite.xz", process=1966)
    assert R.run("budget", other)["summary"].iloc[0]["communication_pct"] < 2


def test_a_folder_of_rank_reports_is_the_job(tmp_path):
    ranks = tmp_path / "ranks"
    ranks.mkdir()
    for r in (0, 1):
        shutil.copy(DATA / "nsys" / f"rank-straggler-{r}.sqlite.xz", ranks)
    res = CliRunner().invoke(cli, ["report", str(ranks)])
    assert res.exit_code == 0, res.output
    assert "rank-straggler-0 + rank-straggler-1: 2 CUDA processes" in res.output
    assert "straggler: rank 1" in res.output
