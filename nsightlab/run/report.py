"""``nsightlab report``: everything about one run, with the findings that matter.

Builds on the run profile (per iteration) and the recipes: top kernels (kernel_sum), the
launch-vs-compute verdict (launch_compute), host syncs and GPU gaps (sync_gaps), Tensor Core
activity (tensor_core) and the layer table. Each finding carries the numbers behind it.
Rendering (terminal text, HTML with charts) is ``nsightlab.renderers``' job.
"""
from __future__ import annotations

import json
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from nsightlab import recipe_runner as recipes
from nsightlab.analysis import budget, completeness, gpu_metrics as gm, iterations, kinds, loop, processes, steady, stretch
from nsightlab.analysis.budget import busy_pct
from nsightlab.renderers import words
from nsightlab.analysis.classify import MATH_CLASSES
from nsightlab.analysis.launches import want_pairs
from nsightlab.run import remedies
from nsightlab.run.model import RunProfile, loop_of, profile
from nsightlab.core.labels import run_labels
from nsightlab.core.result import Result, json_records, json_value
from nsightlab.core.units import fmt_ms as _ms
from nsightlab.errors import NsightlabError, UsageError
from nsightlab.read import metadata, split
from nsightlab.read.opener import as_report
from nsightlab.read.report import Report
from nsightlab.read.table_cache import process_root

#: GPU idle after host syncs worth a finding (advice starts at the budget's notable_pct)
SYNC_NOTE_PCT = 5.0
#: kernel time outside the iterations worth a finding (share of all kernel time)
WARMUP_NOTE_PCT = 10.0
#: the budget summary's steady-state numbers carried into the run row
STEADY_KEYS = ("steady_iterations", "warmup_iterations", "outlier_iterations", "kinds",
               "wall_med_ns", "wall_p95_ns", "wall_p99_ns", "wall_cov_pct", "warmup_ns",
               "main_iterations", "main_med_ns")
#: a share of the loop's time (%) that is named in the first lines (warm-up, outliers)
NAMED_PCT = 5.0
#: rows kept of the longer tables
TOP_KERNELS = 15
LONGEST_GAPS = 15


@dataclass(repr=False)
class RunReport(Result):
    """One run on one page. Tables (times in ns):

    - ``run``: label, iterations, iteration_source, mean_ns (the loop's mean iteration, wall
      clock; ``wall_med_ns`` its median), kernel_ns,
      kernels, busy_pct, verdict (one row, per iteration);
    - ``warnings``: check, severity, message (trace completeness, said first);
    - ``kinds``: the budget's kinds of iteration (first GPU): kind, pattern, which,
      iterations, med/min/max/mean_ns, share_pct of the loop's time, verdict, cause;
    - ``unsteady``: the warm-up and outlier iterations, one by one: iteration, phase (its
      kind), wall_ns, excess_ns (over the main kind's median), why (the budget part that grew
      most);
    - ``findings``: finding (one sentence each, with its numbers);
    - ``budget``: the budget recipe's summary (per GPU: parts, shares, verdict, advice);
    - ``by_class`` / ``by_layer``: the profile's time per iteration by kernel class / layer;
    - ``top_kernels``: kernel_sum's first rows; ``launch``: launch_compute's summary;
      ``syncs``: sync_gaps' by_api; ``gaps``: the longest GPU gaps; ``tensor_core``: its summary;
    - ``api``: CPU time in CUDA API calls (api_sum's first rows); ``ranges``: NVTX ranges by name.
    """

    label: str
    profile: RunProfile | None
    warnings: list[dict]
    budget: pd.DataFrame
    findings: list  # sentences that keep their records (``words.Said``)
    top_kernels: pd.DataFrame
    launch: pd.DataFrame
    syncs: pd.DataFrame
    gaps: pd.DataFrame
    tensor_core: pd.DataFrame
    api: pd.DataFrame
    ranges: pd.DataFrame
    sync_idle: pd.DataFrame
    iteration_ranges: int = 0  # NVTX iteration ranges, said when no GPU work was traced
    unsteady: pd.DataFrame = field(default_factory=pd.DataFrame)  # warm-up and outliers, why
    kinds: pd.DataFrame = field(default_factory=pd.DataFrame)  # kinds of iteration, first GPU
    outside: tuple = (None, None)  # session time before the first iteration and after the last
    session_recorded: bool = True  # the export's ANALYSIS_DETAILS says the session's span
    ort_record: dict = field(default_factory=dict)  # the ORT runner's record of an --ort capture

    def brief(self) -> str:
        run = self.run_row()
        return f"{self.label}: {run['verdict'] or 'no verdict'}"

    def run_row(self) -> dict:
        """The run's per-iteration summary as one dict (None where the report cannot say)."""
        p, b = self.profile, self.budget.iloc[0] if len(self.budget) else None
        n = self.iteration_ranges
        no_gpu = f"{n} NVTX iteration ranges, no GPU work traced" if n else "no GPU activity"
        return {"label": self.label,
                "iterations": int(b["iterations"]) if b is not None else (p.iterations if p else n),
                "iteration_source": b["iteration_source"] if b is not None else
                (p.iteration_source if p else no_gpu),
                "mean_ns": float(b["wall_ns"]) if b is not None else None,
                "before_ns": self.outside[0], "after_ns": self.outside[1],
                "session_recorded": self.session_recorded,
                "kernel_ns": p.kernel_ns if p else None, "kernels": p.kernels if p else None,
                "busy_pct": busy_pct(b) if b is not None else None,
                **{k: (float(b[k]) if k.endswith("_ns") or k.endswith("_pct") else int(b[k]))
                   if b is not None and k in b else None for k in STEADY_KEYS},
                "verdict": str(b["verdict"]) if b is not None and not self.partial else None,
                "verdict_code": str(b["verdict_code"]) if b is not None and not self.partial
                else None,
                "runtime": p.runtime if p else None}

    @property
    def partial(self) -> bool:
        """The trace lacks part of the run: no verdict is given."""
        return any(w["severity"] == "partial" for w in self.warnings)

    def tables(self) -> dict[str, pd.DataFrame]:
        out = {"run": pd.DataFrame([self.run_row()]),
               "warnings": pd.DataFrame(self.warnings, columns=["check", "severity", "message"]),
               "findings": pd.DataFrame({"finding": [str(f) for f in self.findings],
                                         "code": [f.code for f in self.findings]}, dtype=object),
               "budget": self.budget}
        if self.profile is not None:
            out.update(by_class=self.profile.by_class, by_layer=self.profile.by_layer)
        out.update(kinds=self.kinds, unsteady=self.unsteady, top_kernels=self.top_kernels, launch=self.launch, syncs=self.syncs,
                   gaps=self.gaps, tensor_core=self.tensor_core, api=self.api, ranges=self.ranges,
                   sync_idle=self.sync_idle)
        return out

    def manifest(self) -> dict:
        return {"kind": "report", "report": self.label, "run": self.run_row(),
                "warnings": [w["message"] for w in self.warnings]}

    def to_json(self) -> dict:
        """The run summary, warnings and findings as plain data, every other table as records."""
        out = {"run": json_value(self.run_row()), "warnings": json_value(self.warnings),
               "findings": [json_value(f.record()) for f in self.findings]}
        out.update({t: json_records(df) for t, df in self.tables().items()
                    if t not in ("run", "findings", "warnings")})
        return out


@dataclass(repr=False)
class ProcessesReport(Result):
    """A report of several CUDA processes: each process its own run. ``processes``: the
    processes that ran kernels (``analysis.processes.table``); ``sharing``: per GPU used by
    several, whether they were time-sliced or concurrent (``analysis.processes.sharing``);
    ``runs``: a RunReport per process, in ``processes``' order."""

    label: str
    processes: pd.DataFrame
    sharing: pd.DataFrame
    runs: list
    collectives: dict | None = None  # analysis.processes.collectives, per steady iteration
    straggler: str = ""  # the sentence naming the rank the others wait for, and its cause
    clocks: str = ""  # several reports: how their clocks were aligned, and the check
    #: per process on a shared GPU: pid, device_id, iterations (that shared it, of those
    #: replayed), wall_ns, alone_ns, stretch_ns (medians; analysis.stretch)
    stretch: pd.DataFrame = field(default_factory=pd.DataFrame)
    #: pid -> analysis.stretch.replay's table (each replayed iteration)
    stretch_iterations: dict = field(default_factory=dict)

    def brief(self) -> str:
        return f"{self.label}: {len(self.runs)} processes"

    @property
    def findings(self) -> list:  # what the renderers and data warnings read per run
        return [f for r in self.runs for f in r.findings]

    def tables(self) -> dict[str, pd.DataFrame]:
        out = {"processes": self.processes.assign(gpus=self.processes["gpus"].astype(str)),
               "sharing": self.sharing.astype({"pids": str, "busy_ns": str})
               if len(self.sharing) else self.sharing, "stretch": self.stretch}
        for pid, rr in zip(self.processes["pid"], self.runs):
            out.update({f"pid{pid}_{k}": v for k, v in rr.tables().items()})
        return out

    def manifest(self) -> dict:
        return {"kind": "report", "report": self.label,
                "processes": json_records(self.processes),
                "runs": [r.manifest() for r in self.runs]}

    def to_json(self) -> dict:
        return {"processes": json_records(self.processes), "sharing": json_records(self.sharing),
                "stretch": json_records(self.stretch),
                "runs": [dict(r.to_json(), pid=int(pid))
                         for pid, r in zip(self.processes["pid"], self.runs)]}


def build(report: Report | str | os.PathLike, process: int | str | None = None,
          rank: int | None = None, **open_options) -> "RunReport | ProcessesReport":
    """The report of one run: a Report, or anything ``nsightlab.open`` takes (opened with
    ``open_options``); the run is labelled as given. A report without kernels (NVTX and API
    calls only) gets what it has: API time, ranges and the completeness findings.

    A report of several CUDA processes is one run per process (``ProcessesReport``), unless
    ``process`` (a pid, or a name that one process has) or ``rank`` picks one."""
    open_options = {"prefetch": ("kernels", "cuda_api"),
                    "by_process": process is None and rank is None, **open_options}
    r = as_report(report, **open_options)
    label = run_labels([str(r.source if isinstance(report, Report) else report)])[0]
    if process is not None or rank is not None:
        pid = pick(processes.table(r), process, rank, r.source)
        return _one(split.of_process(r, pid), f"{label} (pid {pid})")
    pids = processes.cuda_pids(r)
    out = _several(r, label, pids) if len(pids) > 1 else None
    return _one(r, label) if out is None else out


def _several(r: Report, label: str, pids: list[int]) -> "ProcessesReport | None":
    """The report of each CUDA process of ``r`` (``pids``), and how they shared their GPUs;
    None when fewer than two of them did GPU work (then ``r`` is one run)."""
    started = _start_apart(r, pids, label)  # their imports beside the read below
    try:
        # each process's own export (on threads: SQLite writes them without the GIL) while
        # the big tables are read, once for every process; each process's share of those is
        # its cache (cut from the whole report's, where the read did not write it)
        planned = split.cut_tables(r)
        with ThreadPoolExecutor(min(len(pids), 4)) as pool:
            made = pool.map(lambda p: split.of_process(r, p, planned), pids)
            cut = split.cuttable(r)
            views = dict(zip(pids, made))
        if cut != planned:  # rows left out or duplicate: every table copied instead
            with ThreadPoolExecutor(min(len(pids), 4)) as pool:
                views = dict(zip(pids, pool.map(lambda p: split.of_process(r, p, cut), pids)))
        # the table and the GPU spans from the whole report when its cache holds the big
        # tables (read once, keyed by pid), else from the processes' own exports
        procs = processes.table(r, None if cut else views)
        if len(procs) < 2:
            return None
        views = [views[int(p)] for p in procs["pid"]]
        labels = [f"{label} (pid {p})" for p in procs["pid"]]
        with ThreadPoolExecutor(min(len(views), 4)) as pool:
            list(pool.map(lambda v: v.prefetch(list(cut)), views))
        pending = _go(started, procs["pid"], cut) \
            if started is not None and all(v.store.cut for v in views) else None
        if started is not None and pending is None:  # copies: the reports are built here
            _stop(list(started.values()))
        r.store.drop_shares()  # the shares of processes that did no GPU work: removed
        if pending is None:
            # small: the processes' reports side by side on threads (each mostly SQLite
            # reads, Arrow, DuckDB and NumPy, which release the GIL), two at a time
            with ThreadPoolExecutor(min(len(views), RUNS_AT_ONCE)) as pool:
                runs = list(pool.map(lambda v: _one(*v, True), zip(views, labels)))
        k = processes.gpu_spans(r) if cut else \
            pd.concat([processes.gpu_spans(v) for v in views], ignore_index=True)
        k = k[k["pid"].isin(procs["pid"])].reset_index(drop=True)
        shared = processes.sharing(r, procs, k)  # while the runs go on apart
        if pending is not None:  # the stretch too, once each run stored its budget
            _budgets_stored(views, pending)
        iters = _iterations(views, procs["pid"])  # each process's budget: read once
        stretched = _stretch(k, iters, views, procs, shared)
        if pending is not None:
            runs = _results(pending, views, labels)
    finally:
        if started is not None:
            _stop(list(started.values()))
    out = ProcessesReport(label, procs, shared, runs)
    out.stretch, out.stretch_iterations = stretched
    _say_shared(out)
    out.collectives = processes.collectives(r, procs, _steady_windows(iters))
    out.straggler = _straggler(out)
    return out


#: processes' reports built at once (each already reads and computes on every core)
RUNS_AT_ONCE = 2
#: kernels in the report (the table's rowid span: known before it is read) from which the
#: processes' reports are built in interpreters of their own:
#: on threads, two 4M-kernel reports took 11.4 s (their NumPy passes and pandas steps share
#: one GIL) where the 8M-kernel report of one process takes 10 s
APART_KERNELS = 1_000_000


def _start_apart(whole: Report, pids: list[int], label: str) -> dict | None:
    """Start an interpreter for each process's report (``run.apart``): each imports
    what it needs while the big tables are read, then waits for ``_go``. The started
    children by pid: (process, its answer's file); None when the report holds fewer than
    ``APART_KERNELS`` kernels or has no cache (then the reports are built here, on
    threads)."""
    if whole.cache is None or not whole.has("kernels") or \
            (whole.db.rowid_span(whole.spec("kernels").source) or 0) < APART_KERNELS:
        return None
    import subprocess
    import sys

    started = {}
    try:
        for pid in pids:
            folder = process_root(whole.cache.root, pid)
            folder.mkdir(parents=True, exist_ok=True)
            # a name later runs remove if this process is killed (``remove_stale``)
            out = folder / f".run.{os.getpid()}.tmp"
            out.unlink(missing_ok=True)
            child = subprocess.Popen([sys.executable, "-m", "nsightlab.run.apart",
                                      str(out)], stdin=subprocess.PIPE)
            started[pid] = (child, out)
            _tell(child, (str(whole.path), str(whole.cache.root), str(whole.source), pid,
                          f"{label} (pid {pid})"), last=False)
    except BaseException:
        _stop(list(started.values()))
        raise
    return started


def _go(started: dict, pids, cut: tuple[str, ...]) -> list:
    """Tell the interpreters ``_start_apart`` started for ``pids`` to build their reports
    (each process's export and cache are ready; ``cut``: the tables its cache took from the
    whole report's), and the others to stop: the children of ``pids``, in order."""
    wanted = [int(p) for p in pids]
    for pid, (child, _) in started.items():
        _tell(child, tuple(cut) if pid in wanted else None)  # None: the others end at once
    return [started[p] for p in wanted]


def _tell(child, message, last: bool = True) -> None:
    """Send ``message`` (pickled; None: nothing) to a child ``_start_apart`` started, and
    close its stdin if it is the ``last``. A child that has ended (nsightlab not importable
    there: a path the caller added to ``sys.path`` only) is not told: ``_results`` builds its
    report here."""
    import pickle

    try:
        if message is not None:
            child.stdin.write(pickle.dumps(message))
            child.stdin.flush()
        if last:
            child.stdin.close()
    except OSError:  # BrokenPipeError: it has ended
        pass


def _budgets_stored(views: list[Report], started: list) -> None:
    """Wait until each process's report (``_go``) has stored its time budget, the
    first thing it computes, or has ended: the stretch, which needs each process's
    iterations, then runs beside the rest of their work."""
    import time

    while not all(child.poll() is not None or loop.stored(v)
                  for v, (child, _) in zip(views, started)):
        time.sleep(0.05)


def _results(started: list, views: list[Report], labels: list[str]) -> list[RunReport]:
    """The reports ``_go`` started, in order (an error in one is raised here); one
    whose interpreter could not build it (nsightlab not importable there: a path the caller
    added to ``sys.path`` only) is built here."""
    import pickle

    runs = []
    for (child, out), v, lab in zip(started, views, labels):
        child.wait()
        if not out.is_file():
            runs.append(_one(v, lab, True))
            continue
        how, value = pickle.loads(out.read_bytes())
        out.unlink(missing_ok=True)
        if how == "error":
            raise value
        runs.append(value)
    return runs


def _stop(started: list) -> None:
    for child, out in started:
        _tell(child, None)
        if child.poll() is None:
            child.kill()
            child.wait()
        out.unlink(missing_ok=True)


def _stretch(k: pd.DataFrame, iters: dict, views: list[Report], procs: pd.DataFrame,
             shared: pd.DataFrame) -> tuple[pd.DataFrame, dict]:
    """How much sharing each GPU stretched each of its processes' iterations
    (``analysis.stretch``); ``iters``: pid -> its budget's iterations (``_iterations``)."""
    cols = ["pid", "device_id", *stretch.SUMMARY]
    rows, per = [], {}
    if shared.empty:
        return pd.DataFrame(columns=cols), per
    view = dict(zip(procs["pid"].astype(int), views))
    for g in shared.itertuples():
        for pid in g.pids:
            if pid not in iters:
                continue
            it = iters[pid]
            it = it[it["device_id"] == g.device_id]
            others = k[(k["device_id"] == g.device_id) & (k["pid"] != pid)]
            t = stretch.replay(view[pid], others, it, g.mode == "concurrent")
            per[pid] = t
            s = stretch.summary(t)
            if s is not None:
                rows.append({"pid": pid, "device_id": int(g.device_id), **s})
    return pd.DataFrame(rows, columns=cols), per


#: other processes' kernel time inside a process's kernels, as a share of its iteration, that
#: its own report says (its kernel time and verdict count it)
HELD_PCT = 5.0


def _say_shared(pr: "ProcessesReport") -> None:
    """In each report of a process that shared its GPU: how much of its kernel time is the
    other processes' (their kernels ran inside its preempted kernels' spans), and what its
    iterations would take alone, so its verdict is read with that."""
    runs = dict(zip(pr.processes["pid"].astype(int), pr.runs))
    mode = dict(zip(pr.sharing["device_id"], pr.sharing["mode"])) if len(pr.sharing) else {}
    for x in pr.stretch.itertuples():
        if x.pid not in runs:
            continue
        held = ""
        if x.held_ns > HELD_PCT / 100 * x.wall_ns:
            held = (f"; {_ms(x.held_ns)} per iteration of its kernels' time is other processes' "
                    "kernels running inside them (time-slicing preempted its kernels): its "
                    "kernel time and verdict count it" if mode.get(x.device_id) != "concurrent"
                    else f"; its kernels ran beside other processes' kernels (MPS: sharing the "
                    f"SMs) {_ms(x.held_ns)} per iteration")
        runs[x.pid].findings.insert(0, words.Said(
            f"GPU {x.device_id} is shared: its iterations took {_ms(x.wall_ns)} "
            f"beside the other process(es), {_ms(x.alone_ns)} replayed alone (stretch "
            f"{_ms(x.stretch_ns)}, median of {x.iterations} iterations){held}", "gpu_shared",
            x.device_id, values={"wall_ns": x.wall_ns, "alone_ns": x.alone_ns,
                                 "stretch_ns": x.stretch_ns}))


#: matched collectives ending further apart than this (median) say the clocks disagree
CLOCK_SLACK_NS = 1_000_000


def build_ranks(reports: list, **open_options) -> ProcessesReport:
    """The ranks of one job traced one report each (``nsys profile -o rank_%q{RANK}`` under
    torchrun), opened together: each report's CUDA processes are runs; the reports' clocks
    are aligned by their sessions' start times (TARGET_INFO_SESSION_START_TIME, the wall
    clock) and checked on the collectives, whose kernels end together on every rank. Ranks
    come from the reports' names, else from the GPU each process drives."""
    open_options = {"prefetch": ("kernels", "cuda_api"), **open_options}
    opened = [as_report(x, **open_options) for x in reports]
    labels = run_labels([str(r.source if isinstance(x, Report) else x)
                         for r, x in zip(opened, reports)])
    zero = [metadata.session_start(r.db) for r in opened]
    if any(z is None for z in zero):
        bad = next(str(r.source) for r, z in zip(opened, zero) if z is None)
        raise UsageError(f"{bad}: its export has no session start time "
                         "(TARGET_INFO_SESSION_START_TIME): its clock cannot be aligned with the "
                         "other ranks'; export it with nsys 2021 or newer")
    rows, runs, nccl, compute, windows = [], [], {}, {}, {}
    for r, lab, z in zip(opened, labels, zero):
        procs = processes.table(r)
        named = processes.RANK_IN_NAME.search(Path(str(r.source)).name)
        kernels = r.kernels(["pid", "start_ns", "end_ns", "name"])  # once per report
        for p in procs.itertuples():
            if p.pid in nccl:
                raise UsageError(f"{r.source}: pid {p.pid} is in two of the reports given: "
                                 "give the reports of one job's ranks, each once")
            view = split.of_process(r, int(p.pid)) if len(procs) > 1 else r
            runs.append(_one(view, f"{lab} (pid {p.pid})" if len(procs) > 1 else lab,
                             len(opened) > 1 or len(procs) > 1))
            row = p._asdict()
            row.pop("Index", None)
            if named and len(procs) == 1:
                row["rank"], row["rank_evidence"] = int(named.group(1)), f"the report's name ({lab})"
            rows.append(row)
            k = kernels[kernels["pid"] == p.pid].assign(start_ns=lambda d: d["start_ns"] + (z - zero[0]),
                                             end_ns=lambda d: d["end_ns"] + (z - zero[0]))
            nccl[int(p.pid)], compute[int(p.pid)] = processes.nccl_split(k)
            w = _steady_windows(_iterations([view], [p.pid]))
            if int(p.pid) in w:
                windows[int(p.pid)] = tuple(x + (z - zero[0]) for x in w[int(p.pid)])
    table = pd.DataFrame(rows, columns=processes.COLUMNS)
    if table["rank"].isna().any():  # not every report named its rank: by the GPU each drives
        table["rank"], table["rank_evidence"] = None, ""
        processes.rank_by_gpu(table)
    out = ProcessesReport(" + ".join(labels), table, pd.DataFrame(), runs)
    ranked = table[table["rank"].notna()]
    if len(ranked) > 1:
        out.collectives = processes.matched(
            {int(p): nccl[int(p)] for p in ranked["pid"]},
            {int(p): compute[int(p)] for p in ranked["pid"]},
            {int(p): int(k) for p, k in zip(ranked["pid"], ranked["rank"])}, windows,
            one_clock=False)
        apart = (out.collectives or {}).get("ends_apart_ns")
        out.clocks = (f"clocks aligned by the {len(opened)} sessions' start times; the matched "
                      f"collectives end a median {apart / 1e3:,.0f} µs apart"
                      + (" (more than 1 ms: the clocks disagree, the waits below are doubtful)"
                         if apart is not None and apart > CLOCK_SLACK_NS else "")
                      if apart is not None else "")
        out.straggler = _straggler(out)
    return out


def _iterations(views: list[Report], pids) -> dict:
    """pid -> its run's iterations (its loop's table, already computed), where it has any."""
    loops = {int(pid): loop_of(v) for v, pid in zip(views, pids)}
    return {pid: b.iterations for pid, b in loops.items() if b is not None and len(b.iterations)}


def _steady_windows(iters: dict) -> dict:
    """pid -> (starts, ends) of its run's steady iterations (``iters``: ``_iterations``)."""
    steady = {pid: it[it["phase"] != "warm-up"] if "phase" in it else it
              for pid, it in iters.items()}
    return {pid: (it["start_ns"].to_numpy(), it["end_ns"].to_numpy()) for pid, it in steady.items()}


#: a straggler's GPU work or copies beyond its peers' by this share of its iteration is its cause
CAUSE_PCT = 10.0


def _straggler(pr: "ProcessesReport") -> str:
    """The rank the others wait for, with the numbers, and its cause from its own budget:
    the part of its iteration that exceeds the other ranks' most (host work, GPU work other
    than NCCL, copies). "" when no rank is (or can be) named."""
    c = pr.collectives
    if not c or c.get("straggler") is None:
        return ""
    t = c["ranks"].set_index("pid")
    s = c["straggler"]
    runs = dict(zip(pr.processes["pid"].astype(int), pr.runs))
    it = {p: float(r.budget.iloc[0]["wall_ns"]) for p, r in runs.items() if len(r.budget)}
    others = t.drop(index=s)
    wait = others["exposed_wait_ns"].mean()
    if not it or wait < processes.STRAGGLER_WAIT_PCT / 100 * np.mean(
            [it[p] for p in others.index if p in it] or [1]):
        return ""
    # its own iteration, NCCL apart: more GPU work, more copies, or its host (the GPU idle
    # while the host works, after its syncs, waiting for its launches)
    procs = pr.processes.set_index("pid")
    parts = {}
    for p, r in runs.items():
        if not len(r.budget):
            continue
        b = r.budget.iloc[0]
        n = max(int(b["iterations"]), 1)
        parts[p] = {"GPU work other than NCCL": float(procs.loc[p, "kernel_ns"]
                                                      - procs.loc[p, "nccl_ns"]) / n,
                    "copies": float(sum(b.get(f"{x}_ns", 0.0) for x in budget.COPY_PARTS)),
                    "host": float(b["idle_host_ns"] + b["idle_sync_ns"] + b["idle_launch_ns"])}
    cause = ""
    if s in parts and len(parts) > 1:
        mine = parts[s]
        rest = {k: float(np.mean([parts[p][k] for p in parts if p != s])) for k in mine}
        more = {k: mine[k] - rest[k] for k in ("GPU work other than NCCL", "copies")}
        k, v = max(more.items(), key=lambda kv: kv[1])
        if v > CAUSE_PCT / 100 * it.get(s, 1.0):
            cause = (f"; its own budget says why: {k} {_ms(mine[k])} per iteration against "
                     f"{_ms(rest[k])} on the other rank(s)")
        else:
            b = runs[s].budget.iloc[0]
            cause = (f"; its GPU work matches theirs ({_ms(mine['GPU work other than NCCL'])} "
                     f"against {_ms(rest['GPU work other than NCCL'])} of kernels other than NCCL "
                     f"per iteration): its host holds it back, its GPU idle "
                     f"{_ms(mine['host'])} per iteration (while the host works "
                     f"{_ms(b['idle_host_ns'])}, after host syncs {_ms(b['idle_sync_ns'])}, "
                     f"waiting for launches {_ms(b['idle_launch_ns'])})")
    rank = int(t.loc[s, "rank"])
    return (f"straggler: rank {rank} (pid {s}): the other rank(s) spin in NCCL waiting for it "
            f"{_ms(wait)} per iteration (exposed: no compute of theirs overlaps), "
            f"{c.get('straggler_caused_pct', 100):.0f}% of the waiting in the collectives; it "
            f"arrived last to {c['straggler_last_pct']:.0f}% of the "
            f"{int(t.loc[s, 'collectives'])} collectives" + cause)


def pick(procs: pd.DataFrame, process: int | str | None, rank: int | None, source) -> int:
    """The pid ``process`` (a pid, or the name of exactly one process) or ``rank`` names among
    ``procs``; a one-line error naming what there is otherwise."""
    have = ", ".join(f"{p.pid} ({p.name}{f', rank {p.rank}' if p.rank is not None else ''})"
                     for p in procs.itertuples()) or "none"
    if rank is not None:
        hit = procs[procs["rank"] == rank]
        if hit.empty:
            why = ("no rank is known: ranks need NCCL kernels in processes that each drive "
                   "their own GPU" if procs["rank"].isna().all() else f"no rank {rank}")
            raise UsageError(f"{source}: {why}; its CUDA processes: {have} (give --process PID)")
        return int(hit["pid"].iloc[0])
    text = str(process)
    hit = procs[procs["pid"].astype(str) == text]
    if hit.empty:
        hit = procs[procs["name"] == text]
    if len(hit) != 1:
        why = f"{len(hit)} processes are named {text}" if len(hit) else f"no CUDA process {text}"
        raise UsageError(f"{source}: {why}; its CUDA processes: {have} (give --process PID)")
    return int(hit["pid"].iloc[0])


def _one(r: Report, label: str, job: bool = False) -> RunReport:
    """The report of one process's run; ``job``: one of several processes read together (a
    report of the whole job, or each rank's report at once), whose straggler is said apart."""
    has_kernels = processes.gpu_work(r)  # kernels, or a graph-level trace's replays
    # launch_compute before the profile: in DuckDB it computes the time budget with the join
    # of kernels and calls it needs itself (one join of 8M kernels and 16M calls, not two:
    # 5.7 s of report on 2 cores); the profile then takes the stored budget, and the
    # kernel/call pairs of its launch table from that join
    if has_kernels:
        want_pairs(r)
    lc = _table(r, "launch_compute", "summary")
    # the profile (mostly NumPy over the launch table) on a thread while the other recipes
    # (mostly DuckDB and cache reads, each with its own connection) run here; an error or
    # Ctrl-C here does not wait for the profile to end
    beside = ThreadPoolExecutor(1, thread_name_prefix="nsightlab-profile")
    light = threading.Event()  # set once the profile's launch table is past its peak
    try:
        later = beside.submit(_profile, r, label, light) if has_kernels else None
        empty = pd.DataFrame()
        b = loop_of(r)
        budget_, sync_idle = (b.summary.copy(), b.sync_idle) if b is not None else (empty, empty)
        whole = _table(r, "kernel_sum", "kernel_sum")
        ks = whole  # the timed iterations' kernels when there are iterations; warm-up apart
        iterated = len(budget_) and budget_.iloc[0]["iteration_how"] in budget.ITERATED
        if iterated and len(whole):
            ks = recipes.run("kernel_sum", r, {"iterations_only": True})["kernel_sum"]
        sg = _run(r, "sync_gaps")
        ranges = _table(r, "nvtx_gpu", "by_name")
        # tensor_core and api_sum beside the profile's sums, not beside its launch table
        # (their columns beside it took the process past 1 GB at 8M kernels on 2 cores)
        light.wait() if later is not None else None
        tc = _table(r, "tensor_core", "summary")
        api = _table(r, "api_sum", "api_sum")
        p = later.result() if later is not None else None
    finally:
        beside.shutdown(wait=False, cancel_futures=True)
    syncs = sg["by_api"] if sg is not None else empty
    gaps = sg["gaps"].head(LONGEST_GAPS) if sg is not None else empty
    warnings = completeness.check(r)
    if b is not None:
        warnings = completeness.ordered([*warnings, *budget.trace_findings(r, b, warnings)])
    rr = RunReport(label, p, warnings, budget_, [], ks.head(TOP_KERNELS), lc, syncs, gaps, tc,
                   api.head(TOP_KERNELS), ranges.head(TOP_KERNELS), sync_idle,
                   0 if b is not None else len(iterations.nvtx_ranges(r)))
    if b is not None and len(b.iterations) and "kind" in b.iterations:
        it = b.iterations
        rr.unsteady = steady.explain(b.first_gpu())
        rr.kinds = b.first_gpu("kinds").reset_index(drop=True)
        rr.outside = _outside(r, it)
        rr.session_recorded = r.db.has("ANALYSIS_DETAILS")
    rr.ort_record = remedies.ort_record(r.source)
    rr.findings = findings(rr, ks, job)
    no_loop = len(budget_) and (budget_["verdict_code"] == "no_loop").all() and not rr.partial
    if no_loop:  # said first: there is no steady state, and why the trace has none
        rr.findings.insert(0, words.Said(_no_loop(r, budget_.iloc[0]), "no_loop"))
    if b is not None and p is not None and not rr.partial and len(budget_) and not no_loop:
        own = [words.Said(text, code) for code, text in remedies.findings(
            p.runtime, budget_.iloc[0], b.first_gpu(), ks, rr.ort_record,
            remedies.trt_enqueue(r, p) if p.runtime == "TensorRT" else None)]
        at = next((i for i, f in enumerate(rr.findings) if f.code in ("top_kernel", "top_graph")),
                  len(rr.findings))
        rr.findings[at:at] = own
        if any(f.code == "pytorch_fp32" for f in own):  # said there
            rr.findings = [f for f in rr.findings if f.code != "fp32_math"]
    outside = float(whole["total_ns"].sum() - ks["total_ns"].sum()) if len(whole) else 0.0
    if len(whole) and outside > WARMUP_NOTE_PCT / 100 * max(whole["total_ns"].sum(), 1) \
            and not rr.partial:
        top = whole.set_index("name")["total_ns"].sub(ks.set_index("name")["total_ns"],
                                                      fill_value=0).idxmax()
        rr.findings.append(words.say("outside_iterations", about=str(top)[:80], time_ns=outside,
                                     time_pct=100 * outside / whole["total_ns"].sum()))
    if len(ks) and not rr.partial and "name" in ks:
        nccl = ks[ks["name"].astype(str).str.startswith("nccl")]
        if len(nccl) and not job and len(processes.cuda_pids(r)) <= 1:
            rr.findings.append(words.say("one_rank", time_pct=nccl["time_pct"].sum()))
    memory = _memory_finding(r)
    if memory:
        rr.findings.append(words.Said(memory, "gpu_memory"))
    return rr


#: a run with fewer kernels than this, and nothing that repeats, did almost no GPU work
FEW_KERNELS = 10


def _no_loop(r: Report, b: pd.Series) -> str:
    """The first words on a run in which nothing repeats: what the trace holds (set-up copies
    and one pass, or almost no GPU work) and how it ended (the capture stopped, the workload's
    exit code where a capture recorded it)."""
    from nsightlab.analysis import ending

    kernels = r.row_count("kernels") + r.row_count("graph_execs")
    copies = r.table("memcpy", ["bytes"]) if r.has_rows("memcpy") else pd.DataFrame({"bytes": []})
    moved = float(copies["bytes"].sum())
    size = f"{moved / 2**20:,.1f} MB" if moved >= 2**20 else f"{moved:,.0f} bytes"
    span = float(b["wall_ns"])  # the span of GPU activity
    work = (f"{kernels:,} kernel{'s' if kernels != 1 else ''} and {len(copies):,} "
            f"cop{'ies' if len(copies) != 1 else 'y'} ({size})")
    stopped, code = ending.stopped_early(r), ending.exit_code(r)
    end = (f"then the capture stopped while the run went on (nsys: {stopped[:100]})" if stopped
           else f"then the run ended (exit code {code})" if code
           else "then the run ended, or the capture stopped (the trace does not say which)")
    if b.get("iteration_how") == budget.HOW_REJECTED:  # a found loop that contradicted itself
        said = str(b["iteration_source"]).removesuffix(budget.WHOLE_SPAN_WORDS)
        return (f"{said}; the trace holds {work}, the GPU busy "
                f"{busy_pct(b):.0f}% of {_ms(span)}; {end}. No steady-state verdict: capture "
                "the loop itself (one NVTX range per iteration, iterN, makes it exact)")
    if kernels < FEW_KERNELS:
        return (f"no loop: almost no GPU work in the trace ({work} in {_ms(span)} of GPU "
                f"activity): nothing repeats and nothing on the GPU to speed up; {end}")
    # a capture that stopped while the run went on holds a stretch of it, not its start:
    # "set-up and one pass" is said only of a run that ended by itself
    held = "what the trace holds" if stopped else "set-up and one pass"
    return (f"no loop: nothing repeats in the trace: {held} ({work}, the GPU busy "
            f"{busy_pct(b):.0f}% of {_ms(span)}); {end}. No steady-state verdict: capture the "
            "loop itself (one NVTX range per iteration, iterN, makes it exact)")


def _outside(r: Report, it: pd.DataFrame) -> tuple:
    """The session's time before the first iteration and after the last (start-up, set-up,
    teardown: in no number), ns; (None, None) without iterations or a recorded span."""
    span = r.span_ns
    if not span or not len(it) or (it["name"] == budget.WHOLE_RUN).all():
        return None, None
    return (max(float(it["start_ns"].min() - span[0]), 0.0),
            max(float(span[1] - it["end_ns"].max()), 0.0))


def time_by_kind(k: pd.DataFrame) -> list[str]:
    """Where the loop's time goes across its kinds of iteration (a ``kinds`` table of one
    GPU), largest share first: a sentence per kind other than the main one, the main kind's
    share after them; a trend's size and the part that grows; outliers; the warm-up when it
    holds ``NAMED_PCT`` or more of the loop's time. Empty for a loop of one kind, steady."""
    if not len(k):
        return []
    main = k[k["kind"] == kinds.MAIN]
    others = k[~k["kind"].isin([kinds.MAIN, kinds.OUTLIER, kinds.WARM_UP])] \
        .sort_values("share_pct", ascending=False)
    out = []
    m = main.iloc[0] if len(main) else None
    grows = m is not None and m.get("kernel_quarter", 0) and m["kernel_first_ns"] > 0
    if grows:  # the same kernels taking longer each iteration: said first
        up = m["kernel_last_ns"] > m["kernel_first_ns"]
        same = ("the same kernels take longer each iteration (a growing input, e.g. a KV cache)"
                if up else "the same kernels take less time each iteration (a shrinking input)")
        out.append(f"kernel time {'grows' if up else 'falls'} {_ms(m['kernel_first_ns'])} -> "
                   f"{_ms(m['kernel_last_ns'])} over the loop (medians of its first and last "
                   f"{int(m['kernel_quarter'])} iterations of the main kind): "
                   + (same if m.get("same_work") else
                      "its kernels take longer each iteration" if up else
                      "its kernels take less time each iteration"))
    cycle = _cycle_words(m, others) if m is not None else ""
    if cycle:  # the work's cycle first: what each place in it runs; then its pace
        out.append(cycle)
    for r in others.itertuples():
        cause = f" with {r.cause}" if r.cause else ""
        out.append(f"{r.which}{cause}, {_ms(r.min_ns)}-{_ms(r.max_ns)} each (median "
                   f"{_ms(r.med_ns)}): {r.share_pct:.0f}% of the loop's time")
    if len(others) and len(main):
        m = main.iloc[0]
        out.append(f"{m['base'] if cycle else m['which']}: median {_ms(m['med_ns'])}, "
                   f"{m['share_pct']:.0f}% of the loop's time")
    if len(main) and main.iloc[0]["pattern"] == "trend":
        m = main.iloc[0]
        out.append(f"a trend, not kinds: the loop {words.trend(m)}"
                   + (f"; {m['cause']}" if m["cause"] and not grows else ""))
    odd = k[k["kind"] == kinds.OUTLIER]
    for r in odd.itertuples():
        span = _ms(r.min_ns) if r.iterations == 1 else f"{_ms(r.min_ns)}-{_ms(r.max_ns)}"
        out.append(f"{r.iterations} outlier iteration{'s' if r.iterations > 1 else ''} "
                   f"({r.which}), {span}" + (f", {r.cause}" if r.cause else "")
                   + f": {r.share_pct:.1f}% of the loop's time, kept in every statistic")
    warm = k[k["kind"] == kinds.WARM_UP]
    if len(warm) and warm.iloc[0]["share_pct"] >= NAMED_PCT:
        w = warm.iloc[0]
        size = (f"{w['share_pct'] / 100:.1f}x the loop's time" if w["share_pct"] >= 100
                else f"{w['share_pct']:.0f}% of the loop's time")
        out.append(f"warm-up ({w['which']}): {_ms(w['time_ns'])}, as long as {size}; left out "
                   "of the loop's numbers")
    return out


def _cycle_words(m: pd.Series, others: pd.DataFrame) -> str:
    """The first words on a loop whose work repeats in a cycle (gradient accumulation: an
    optimizer step every 4th micro-batch): the cycle's length, then each place in it that
    runs other work than the main kind (which iterations, its kernels, what it adds or
    lacks, its median time), then the main kind's; "" for a loop without one."""
    period = m.get("period")
    if not period or period != period:
        return ""
    n = int(period)
    places = others[(others["basis"] == "work") & (others["pattern"] == "recurring")]
    if not len(places):
        return ""

    def kernels(r) -> str:
        k = r["work_kernels"]
        return f"{int(k):,} kernels" if k == k else "its work"

    parts = [f"{kernels(r)} in iterations {r['listed']}"
             + (f" ({r['work']})" if r["work"] else "") + f", median {_ms(r['med_ns'])}"
             for _, r in places.sort_values("first", kind="stable").iterrows()]
    parts.append(f"{kernels(m)} in the other {int(m['iterations'])}, median {_ms(m['med_ns'])}")
    return f"the work repeats in a cycle of {n} iterations: " + "; ".join(parts)


def _profile(r: Report, label: str, light: threading.Event) -> RunProfile | None:
    try:
        return profile(r, label, light)
    except NsightlabError:  # kernels without launch records
        return None
    finally:
        light.set()


def _memory_finding(r: Report) -> str | None:
    """One sentence on GPU memory when the run recorded it (nsys --cuda-memory-usage=true)."""
    m = _run(r, "gpu_memory")
    if m is None:
        return None
    dev = m["summary"][m["summary"]["memory"] == "device"]
    if dev.empty:
        return None
    d = dev.iloc[0]
    growth = m["by_range"]
    grew = growth[(growth["phase"] == "iteration") & (growth["depth"] == growth["depth"].min())]
    text = (f"GPU memory (device {int(d['device_id'])}): peak {d['peak_bytes'] / 2**20:,.0f} MiB"
            + (f" in {d['peak_in_range']}" if d["peak_in_range"] else "")
            + f", {d['end_bytes'] / 2**20:,.0f} MiB still allocated at the end")
    if len(grew) and grew["growth_bytes"].sum() > 0:
        text += (f"; it grew {grew['growth_bytes'].sum() / 2**20:,.0f} MiB over "
                 f"{len(grew)} iteration range(s) with activity (a leak, or a cache filling?)")
    return text + " (recipe gpu_memory)"


def _run(r: Report, name: str):
    """A recipe's result, or None when the report lacks what it needs."""
    try:
        return recipes.run(name, r)
    except recipes.NoDataError:
        return None



def _table(r: Report, name: str, table: str) -> pd.DataFrame:
    out = _run(r, name)
    return out[table] if out is not None and table in out else pd.DataFrame()


#: kernels that wait to start with no traced GPU work running are the GPU's time elsewhere
#: when the wait is this share of the median iteration (%) and of its launch idle
OUTSIDE_PCT, OUTSIDE_OF_LAUNCH = 20.0, 0.5


def _outside_wait(p: RunProfile | None, b) -> float:
    """The time per iteration a run's kernels waited to start after their launch calls
    returned, with no traced GPU work running (``RunProfile.pace`` queued_ns), where the GPU
    was busy with work the trace does not hold (another process): its idle is then neither
    launch overhead nor something a CUDA graph removes; 0 otherwise."""
    if p is None or not p.pace or not p.median_ns or p.pace.get("others_traced"):
        return 0.0
    q = p.pace.get("queued_ns", 0.0)
    launch = float(b.get("idle_launch_ns", 0.0)) + float(b.get("idle_unattributed_ns", 0.0))
    return 0.0 if q < OUTSIDE_PCT / 100 * p.median_ns or q < OUTSIDE_OF_LAUNCH * launch else q


#: completeness notes that are findings of the report (the iteration left out, and why)
CUT_NOTES = ("capture_cut",)


def findings(rr: RunReport, ks: pd.DataFrame, job: bool = False) -> list:
    """Findings about the run, most important first, each a sentence that keeps its record
    (``words.Said``: code, numbers): the budget's verdict and advice (none for a partial
    trace; the advice in the run's runtime's terms, ``job``: read with the whole job's
    straggler line), the top kernel, FP32 math left, quantize cost and Tensor Core activity
    (measured or estimated)."""
    out = []
    p, tc = rr.profile, rr.tensor_core
    if rr.partial:
        out.append(words.say("no_verdict"))
    elif len(rr.budget):
        # how the trace ended, when it cut an iteration: said before the numbers it changes
        out += [words.Said(w["message"], w["check"]) for w in rr.warnings if w["check"] in CUT_NOTES]
        out += [words.Said(t, "kinds") for t in time_by_kind(rr.kinds)]
        for _, b in rr.budget.iterrows():
            dev = int(b["device_id"])
            gpu = dict(gpu=dev, prefix=f"GPU {dev}: " if len(rr.budget) > 1 else "")
            advice, verdict, code = json.loads(b["advice_records"]), b["verdict"], b["verdict_code"]
            waited = _outside_wait(p, b)
            if waited:  # the launch-idle time is the GPU's time elsewhere: said first
                out.append(words.say("busy_outside_trace", **gpu, queued_ns=waited,
                                     queued_pct=100 * waited / p.median_ns))
                advice = []
                if code == "launch":
                    verdict = "waiting for a GPU busy outside the trace"
            main = rr.kinds[rr.kinds["kind"] == kinds.MAIN] if len(rr.kinds) else rr.kinds
            if b["kinds"] > 1 and len(main) and b["device_id"] == rr.kinds["device_id"].iloc[0]:
                m = main.iloc[0]
                out.append(words.say("main_kind", **gpu, which=m["which"], med_ns=m["med_ns"],
                                     verdict=m["verdict"]))
                out.append(words.say("loop_verdict", **gpu, verdict=verdict, verdict_code=code,
                                     evidence=b["evidence"]))
            elif code == "no_loop":  # where its time went, no verdict
                out.append(words.say("no_loop_time", **gpu, evidence=b["evidence"]))
            else:
                out.append(words.say("verdict", **gpu, verdict=verdict, verdict_code=code,
                                     evidence=b["evidence"]))
            if advice:
                how = remedies.how(p.runtime if p else "unknown", rr.ort_record, job)
                out.append(words.say("advice", **gpu, words=words.said(advice, how),
                                     advice=advice))
            said = any(a["code"] == "sync_rare" or (a["code"] == "sync_in_loop"
                                                     and not a["values"]["copy"]) for a in advice)
            if SYNC_NOTE_PCT <= b["idle_sync_pct"] and len(rr.sync_idle) and \
                    code != "no_loop" and not said:  # said there already
                top = rr.sync_idle.iloc[0]
                out.append(words.say("host_syncs", **gpu, about=str(top["api_name"]),
                                     per_iteration=top["stretches"] / b["iterations"],
                                     idle_ns=top["idle_ns_per_iteration"],
                                     idle_pct=b["idle_sync_pct"]))
    elif not len(ks):
        out.append(words.say("no_gpu_activity"))
    if rr.partial or p is None:
        return out
    it = p.median_ns or 1.0
    if len(ks):
        top = ks.iloc[0]
        if top["kernel_class"] == "cuda graph":  # a graph-level trace: whole graphs, no kernels
            out.append(words.say("top_graph", about=str(top["name"])[:80], time_pct=100 * top[
                "total_ns"] / max(ks["total_ns"].sum(), 1)))
        else:
            out.append(words.say("top_kernel", about=str(top["name"])[:80],
                                 kernel_class=top["kernel_class"], precision=top["precision"],
                                 time_pct=top["time_pct"]))
        fp32 = ks[(ks["precision"] == "fp32") & ks["kernel_class"].isin(MATH_CLASSES)]
        if len(fp32) and fp32["time_pct"].sum() > 5:
            out.append(words.say("fp32_math", time_pct=fp32["time_pct"].sum()))
    conv = p.by_class.set_index("kernel_class")["time_ns"].get("quantize", 0.0)
    if conv > 0.05 * it:
        out.append(words.say("quantize", time_ns=conv, time_pct=100 * conv / it))
    clock, most = p.machine.get("trace_sm_mhz"), p.machine.get("trace_sm_mhz_max")
    if clock and most and clock < (1 - gm.CLOCK_DROP_PCT / 100) * most:
        out.append(words.say("clock_low", sm_mhz=clock, sm_mhz_max=most))
    if p.tensor_core.get("source") == "gpu_metrics" and len(tc):
        out.append(words.say("tensor_active_loop", all_pct=tc.iloc[0]["tensor_active_avg_pct"],
                             tensor_active_pct=p.tensor_core["tensor_active_pct"]))
    elif len(tc):
        t = tc.iloc[0]
        out.append(words.say("tensor_active_run", tensor_active_pct=t["tensor_active_avg_pct"],
                             sm_active_pct=t["sm_active_avg_pct"])
                   if t["source"] == "gpu_metrics" else
                   words.say("tensor_estimate", time_pct=t["tensor_kernel_time_pct"]))
    return out
