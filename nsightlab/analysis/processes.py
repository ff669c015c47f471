"""The CUDA processes of a report, their GPUs and ranks, and how processes share a GPU.

nsys records every process of a session; the export's process table holds only pid and name
(every ``torchrun`` rank is "python3"). Here each process that ran GPU work gets:

- the GPUs its kernels ran on, its kernel count and time, its NCCL kernels;
- a rank, only with evidence: processes that each drive one GPU and run NCCL kernels are the
  ranks of one job, numbered by the GPU they drive (``torchrun``'s local rank is the device it
  sets); otherwise none;
- its runtime (``analysis.runtime``).

``sharing`` says, per GPU that several processes used, whether they ran at once. Without MPS
the GPU time-slices their contexts: a kernel of one is never running while the other's is;
where their records overlap, the whole of one's kernel span holds the other's kernels (compute
preemption: the preempted kernel's span counts the other's slice). Under MPS kernels of two
processes run at once, their spans overlapping partly (measured on H100s: three processes
time-sliced, 727 contained overlaps and no partial one; two under MPS, 1,749 partial and 89
contained), and the MPS server is a process of the trace.
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from nsightlab.analysis import engine, runtime
from nsightlab.analysis.timeline import covered, union
from nsightlab.read.report import Report

COLUMNS = ["pid", "name", "gpus", "kernels", "graph_execs", "kernel_ns", "nccl_kernels", "nccl_ns",
           "rank", "rank_evidence", "runtime"]
#: a rank's number in its report's name (nsys profile -o rank_%q{RANK}: rank_3, rank-ddp-3, ...)
RANK_IN_NAME = re.compile(r"rank\D{0,20}?(\d+)", re.IGNORECASE)
#: NCCL kernel counts that differ by up to this share (%) are one job's collectives with the
#: trace's end inside a step; more, and they are not matched
TRUNCATED_PCT = 10.0
#: a rank that caused this share (%) of the waiting in its collectives (the others spinning for
#: it to arrive) is the one the others wait for: twice all the others' together
STRAGGLER_CAUSED_PCT = 200 / 3
#: ... and only when the others' exposed wait for it is this share (%) of their iteration: a
#: rank its peers wait 1.3 ms of a 19 ms step for (nsys-ai's 2-GPU fixture, 7%) is not named
STRAGGLER_WAIT_PCT = 10.0
#: the MPS control daemon and server, as the process table names them
MPS = ("nvidia-cuda-mps",)


def processes(report, **open_options) -> pd.DataFrame:
    """``nsightlab.processes(path)``: the CUDA processes of a report (a Report, or anything
    ``nsightlab.open`` takes), one row each (``table``). The export's own process table (pid,
    name, whether it used CUDA) is ``Report.processes``."""
    from nsightlab.read.opener import as_report
    return table(as_report(report, **open_options))


def cuda_pids(report: Report) -> list[int]:
    """Processes that created CUDA streams (cheap: the export's stream table), in pid order;
    where the export has no stream table (left out of it), the processes whose GPU work is
    traced."""
    if "processId" not in report.db.columns("TARGET_INFO_CUDA_STREAM"):
        return sorted(int(x) for x in _per_process_gpu(report)["pid"].unique())
    p = report.processes
    return sorted(int(x) for x in p.loc[p["uses_cuda"], "pid"]) if len(p) else []


def gpu_work(report: Report) -> bool:
    """Whether the report holds kernels or, under nsys's default graph-level trace, whole-graph
    executions (a process that only replays CUDA graphs has no kernel rows)."""
    return report.has_rows("kernels") or report.has_rows("graph_execs")


def table(report: Report, views: dict | None = None) -> pd.DataFrame:
    """One row per process that ran kernels or replayed CUDA graphs (``COLUMNS``; under a
    graph-level trace a replay is one ``graph_execs`` row, its kernels not rows, and
    ``kernel_ns`` counts the replays' time), in pid order. ``views``: pid -> that process's
    own Report (``read.split.of_process``), when the caller has them: each is read instead of
    the whole report (the reads the process's own analyses make anyway)."""
    if views:
        parts = [(_per_process_gpu(v), runtime.identify(v)) for v in views.values()
                 if gpu_work(v)]
        per = pd.concat([p for p, _ in parts], ignore_index=True) if parts else pd.DataFrame()
        ids = pd.concat([i for _, i in parts], ignore_index=True) if parts else pd.DataFrame()
    else:
        per = _per_process_gpu(report)
        ids = runtime.identify(report) if gpu_work(report) else pd.DataFrame()
    if per.empty:
        return pd.DataFrame(columns=COLUMNS)
    names = dict(zip(report.processes["pid"], report.processes["name"])) \
        if len(report.processes) else {}
    rt = ids.set_index("pid")["runtime"] if len(ids) else pd.Series(dtype=str)
    rows = []
    for pid, g in per.groupby("pid", sort=True):
        rows.append({"pid": int(pid), "name": str(names.get(pid, "")),
                     "gpus": [int(d) for d in sorted(g["device_id"])],
                     **{c: int(g[c].sum()) for c in ("kernels", "graph_execs", "nccl_kernels")},
                     **{c: float(g[c].sum()) for c in ("kernel_ns", "nccl_ns")},
                     "rank": None, "rank_evidence": "", "runtime": str(rt.get(pid, "unknown"))})
    out = pd.DataFrame(rows, columns=COLUMNS)
    rank_by_gpu(out)
    return out


def rank_by_gpu(t: pd.DataFrame) -> None:
    """Ranks, where the processes are one NCCL job whose processes each drive their own GPU."""
    job = t[(t["nccl_kernels"] > 0) & (t["gpus"].map(len) == 1)]
    gpus = job["gpus"].map(lambda g: g[0])
    if len(job) < 2 or gpus.nunique() != len(job):
        return
    for rank, (i, gpu) in enumerate(sorted(gpus.items(), key=lambda kv: kv[1])):
        t.at[i, "rank"] = rank
        t.at[i, "rank_evidence"] = (f"drives GPU {gpu} alone and runs NCCL kernels (ranks of one "
                                    "job, numbered by their GPUs)")


def _per_process_gpu(report: Report) -> pd.DataFrame:
    """pid, device_id, kernels, graph_execs, kernel_ns (of both), nccl_kernels, nccl_ns."""
    cols = ["pid", "device_id", "kernels", "kernel_ns", "nccl_kernels", "nccl_ns"]
    out = _per_process_kernels(report, cols)
    graphs = _per_process_graphs(report)
    if graphs.empty:
        return out.assign(graph_execs=0)
    both = out.merge(graphs, on=["pid", "device_id"], how="outer").fillna(0)
    both["kernel_ns"] = both["kernel_ns"] + both.pop("graph_ns")
    for c in ("kernels", "graph_execs", "nccl_kernels"):
        both[c] = both[c].astype(np.int64)
    return both


def _per_process_graphs(report: Report) -> pd.DataFrame:
    """pid, device_id, graph_execs, graph_ns of a graph-level trace's whole-graph executions."""
    if not report.has_rows("graph_execs"):
        return pd.DataFrame()
    g = report.graph_execs(["pid", "device_id", "start_ns", "end_ns"])
    g = g.assign(d=(g["end_ns"] - g["start_ns"]).astype(float)).groupby(["pid", "device_id"])
    return pd.DataFrame({"graph_execs": g.size(), "graph_ns": g["d"].sum()}).reset_index()


def _per_process_kernels(report: Report, cols: list[str]) -> pd.DataFrame:
    if not report.has_rows("kernels"):
        return pd.DataFrame(columns=cols)

    def in_duckdb(db) -> pd.DataFrame:
        return db.con.execute(
            f"SELECT pid, device_id, count(*) AS kernels, sum(end_ns - start_ns)::DOUBLE AS "
            f"kernel_ns, count(*) FILTER (WHERE starts_with(CAST(name AS VARCHAR), 'nccl')) "
            f"AS nccl_kernels, coalesce(sum(end_ns - start_ns) FILTER (WHERE starts_with("
            f"CAST(name AS VARCHAR), 'nccl')), 0)::DOUBLE AS nccl_ns "
            f"FROM {db.view('kernels')} GROUP BY ALL ORDER BY ALL").df()[cols]

    def in_numpy() -> pd.DataFrame:
        k = report.kernels(["pid", "device_id", "start_ns", "end_ns", "name"])
        d = (k["end_ns"] - k["start_ns"]).astype(float)
        nccl = _is_nccl(k["name"])
        f = pd.DataFrame({"pid": k["pid"], "device_id": k["device_id"], "d": d,
                          "n": nccl.astype(int), "nd": d.where(nccl, 0.0)})
        g = f.groupby(["pid", "device_id"])
        return pd.DataFrame({"kernels": g.size(), "kernel_ns": g["d"].sum(),
                             "nccl_kernels": g["n"].sum(), "nccl_ns": g["nd"].sum()}) \
            .reset_index()[cols]

    return engine.analyse(report, in_duckdb, in_numpy)


def gpu_spans(report: Report) -> pd.DataFrame:
    """pid, device_id, start_ns, end_ns, graph of the report's kernels and, under a
    graph-level trace, its whole-graph executions (``graph`` True: a replay's span, which
    holds its kernels and whatever else the GPU ran meanwhile)."""
    cols = ["pid", "device_id", "start_ns", "end_ns"]
    parts = [report.kernels(cols).assign(graph=False)] if report.has_rows("kernels") else []
    if report.has_rows("graph_execs"):
        parts.append(report.graph_execs(cols).assign(graph=True))
    return pd.concat(parts, ignore_index=True) if parts else \
        pd.DataFrame({c: pd.Series(dtype=np.int64) for c in cols}).assign(graph=False)


def sharing(report: Report, procs: pd.DataFrame, kernels: pd.DataFrame | None = None
            ) -> pd.DataFrame:
    """Per GPU used by two or more of ``procs``: device_id, pids, mode ("time-sliced" or
    "concurrent"), evidence (in words), busy_ns per process (its kernels' union), overlap_ns
    (time their kernel spans overlap), contained and partial (overlapping kernel pairs where
    one span holds the other, and where they overlap in part). ``kernels``: pid, device_id,
    start_ns, end_ns (and ``graph``: whole-graph executions, ``gpu_spans``) of the processes'
    GPU work, when already read (else the report's).

    Under a graph-level trace a replay's span holds the other processes' time slices as well
    as its own kernels, so graph spans overlap whether or not the GPU ran both at once: the
    mode then comes from the kernels traced one by one where they overlap, else from whether
    an MPS server is in the trace."""
    cols = ["device_id", "pids", "mode", "evidence", "busy_ns", "overlap_ns", "contained",
            "partial"]
    gpus = procs.explode("gpus")
    shared = gpus.groupby("gpus")["pid"].apply(list)
    shared = shared[shared.map(len) > 1]
    if shared.empty:
        return pd.DataFrame(columns=cols)
    k = kernels if kernels is not None else gpu_spans(report)
    graph = k["graph"].to_numpy(bool) if "graph" in k else np.zeros(len(k), bool)
    mps = [n for n in report.processes["name"].astype(str) if n.startswith(MPS)]
    rows = []
    for dev, pids in shared.items():
        on = (k["device_id"] == dev).to_numpy()
        mine = {int(p): k[on & (k["pid"] == p).to_numpy()].sort_values("start_ns") for p in pids}
        one = {p: g[~g["graph"].to_numpy(bool)] if "graph" in g else g for p, g in mine.items()}
        unions = {p: _union(g) for p, g in mine.items()}
        overlap, contained, partial = 0.0, 0, 0
        ps = list(mine)
        for i in range(len(ps)):
            for j in range(len(ps)):
                if i != j:  # kernels traced one by one: their overlaps tell the mode
                    c, q = _covered(one[ps[i]], one[ps[j]])
                    contained, partial = contained + c, partial + q
                if i < j:
                    overlap += _intersect(unions[ps[i]], unions[ps[j]])
        busy = {p: float((u[1] - u[0]).sum()) for p, u in unions.items()}
        graphs = sum(len(g) - len(one[p]) for p, g in mine.items())
        concurrent = partial > contained or bool(mps)
        said = (f"{partial:,} kernel spans of different processes overlap in part, {contained:,} "
                "hold another's whole")
        whole = (f"; {graphs:,} CUDA graph replays were traced whole (graph-level trace): a "
                 "replay's span holds the other processes' time slices too, so spans cannot "
                 "show it (--cuda-graph-trace=node records each kernel)") \
            if graphs and overlap else ""
        evidence = (f"MPS is running ({mps[0]} in the trace); " if mps else "") + said \
            if concurrent else (f"{contained:,} kernel spans hold another process's kernels whole"
                                + (f" and {partial:,} overlap one in part" if partial else "")
                                + " (kernels preempted by time-slicing: the GPU runs one "
                                "context at a time)" if contained
                                else "no MPS server in the trace" + whole if whole
                                else "their GPU work (kernels, whole-graph replays) never "
                                "overlaps" if graphs else "their kernels never overlap")
        rows.append({"device_id": int(dev), "pids": ps,
                     "mode": "concurrent" if concurrent else "time-sliced",
                     "evidence": evidence, "busy_ns": busy, "overlap_ns": overlap,
                     "contained": contained, "partial": partial})
    return pd.DataFrame(rows, columns=cols)


def _covered(a: pd.DataFrame, b: pd.DataFrame) -> tuple[int, int]:
    """Kernels of ``b`` held whole by a kernel of ``a``, and those overlapping one in part
    (by the longest-reaching span of ``a`` that starts before each; both sorted by start)."""
    if a.empty or b.empty:
        return 0, 0
    sa = a["start_ns"].to_numpy(np.int64)
    reach = np.maximum.accumulate(a["end_ns"].to_numpy(np.int64))
    sb, eb = b["start_ns"].to_numpy(np.int64), b["end_ns"].to_numpy(np.int64)
    i = np.searchsorted(sa, sb, side="right") - 1
    r = np.where(i >= 0, reach[np.clip(i, 0, None)], np.iinfo(np.int64).min)
    held = r >= eb
    return int(held.sum()), int(((r > sb) & ~held).sum())


def _union(k: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """The kernels' intervals merged (``timeline.union``): (starts, ends), sorted, disjoint."""
    return union(k["start_ns"].to_numpy(np.int64), k["end_ns"].to_numpy(np.int64))


def _intersect(a: tuple, b: tuple) -> float:
    """Total time two merged interval sets overlap."""
    return float(covered(b[0], b[1], a[0], a[1]).sum())


def collectives(report: Report, procs: pd.DataFrame, windows: dict | None = None) -> dict | None:
    """Ranks of one NCCL job, matched collective by collective: each rank's NCCL kernels in
    time order are its collectives, issued in the same order on every rank (how DDP and
    tensor parallelism run); a place in that order holding collectives of different groups
    of ranks is parted by their ends (``communicators``). A rank's kernel that starts before
    its peers' spins until the last of its collective's members arrives (its skew: their
    latest start minus its own, at most the kernel's length).

    ``windows``: pid -> (starts, ends) of each rank's steady iterations; only the collectives
    whose first rank's kernel starts inside one are counted, and the times are per iteration
    (else per collective run, over all). Per rank (``ranks``): collectives, ``last`` (how many
    it arrived last to: TraceLens's ``times_arrived_last``), ``nccl_ns``, ``exposed_ns`` (NCCL
    time no compute kernel of the same GPU overlaps), split into ``exposed_wait_ns`` (spinning
    for a peer) and ``exposed_transfer_ns``. ``straggler``: the rank the others wait for, when
    the waiting it caused (``caused_wait_ns``: the others' spin in the collectives it arrived
    last to) is ``STRAGGLER_CAUSED_PCT`` of all. None unless two or more ranks
    are known; ``mismatch`` when their NCCL kernel counts differ by more than
    ``TRUNCATED_PCT`` (fewer: the first collectives of each are matched; ``counts`` says).
    ``groups``: the groups of ranks the collectives ran on, with how many each;
    ``ends_apart_ns``: the median spread of a collective's ends on its members."""
    ranks = procs[procs["rank"].notna()].sort_values("rank")
    if len(ranks) < 2:
        return None
    nccl, compute = nccl_split(report.kernels(["pid", "start_ns", "end_ns", "name"]))
    return matched({int(p): nccl[nccl["pid"] == p] for p in ranks["pid"]},
                   {int(p): compute[compute["pid"] == p] for p in ranks["pid"]},
                   {int(p): int(r) for p, r in zip(ranks["pid"], ranks["rank"])}, windows)


def _is_nccl(names: pd.Series) -> pd.Series:
    """Whether each kernel name is NCCL's (by the names' categories: one test per name)."""
    if isinstance(names.dtype, pd.CategoricalDtype):
        cats = names.cat.categories.astype(str).str.startswith("nccl")
        codes = names.cat.codes.to_numpy()
        return pd.Series(np.where(codes >= 0, cats[np.clip(codes, 0, None)], False),
                         index=names.index)
    return names.astype(str).str.startswith("nccl")


def nccl_split(k: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(NCCL kernels, the other kernels) of a kernels table."""
    nccl = _is_nccl(k["name"])
    return k[nccl], k[~nccl]


def matched(nccl: dict, compute: dict, rank_of: dict, windows: dict | None = None,
            one_clock: bool = True) -> dict:
    """``collectives`` on kernels already read (and placed on one clock): per rank key, its
    NCCL kernels and its other kernels (start_ns, end_ns), and its rank. ``one_clock``: the
    ranks' times come from one session (else each place in their order is one collective:
    reports of one rank each, aligned by their sessions' start times, can be off by more
    than a collective's ends are apart, and would part falsely)."""
    per = {p: g.sort_values("start_ns") for p, g in sorted(nccl.items(), key=lambda kv: rank_of[kv[0]])}
    counts = {p: len(g) for p, g in per.items()}
    n = min(counts.values())
    if not n or max(counts.values()) - n > TRUNCATED_PCT / 100 * n:
        return {"mismatch": counts}
    # a trace that ends inside a step holds fewer of the last collectives on some ranks:
    # the first n are matched (every rank's trace begins with the job)
    per = {p: g.iloc[:n] for p, g in per.items()}
    first = next(iter(per))
    keep = np.ones(n, bool)
    if windows and first in windows:
        lo, hi = windows[first]
        t = per[first]["start_ns"].to_numpy(np.int64)
        j = np.searchsorted(lo, t, side="right") - 1
        keep = (j >= 0) & (t <= np.asarray(hi)[np.clip(j, 0, None)])
    starts = np.vstack([g["start_ns"].to_numpy(np.int64)[keep] for g in per.values()])
    ends = np.vstack([g["end_ns"].to_numpy(np.int64)[keep] for g in per.values()])
    c = Collectives(starts, ends, communicators(ends) if one_clock else np.zeros_like(ends))
    rows = []
    for i, pid in enumerate(per):
        other = _union(compute[pid])
        busy = union(starts[i], ends[i])
        wait = union(starts[i], starts[i] + c.skew[i])
        exposed = _length(busy) - _intersect(busy, other)
        exposed_wait = _length(wait) - _intersect(wait, other)
        n = len(windows[pid][0]) if windows and pid in windows else 1
        rows.append({"pid": pid, "rank": rank_of[pid],
                     "collectives": int(c.member[i].sum()), "last": int(c.last[i].sum()),
                     "nccl_ns": float((ends[i] - starts[i]).sum()) / n,
                     "exposed_ns": exposed / n, "exposed_wait_ns": exposed_wait / n,
                     "exposed_transfer_ns": (exposed - exposed_wait) / n, "per": n,
                     "caused_wait_ns": float(c.caused[i].sum()) / n,
                     # nsys's nccl_gpu_overlap_trace: NCCL kernel time that compute kernels
                     # of the same GPU overlap, as a share of the NCCL kernel time
                     "overlap_pct": 100.0 * (1 - exposed / max(_length(busy), 1))})
    t = pd.DataFrame(rows)
    # the straggler is the rank whose lateness the others spend their waits on: most of the
    # wait it caused, not a fixed share of arrivals (rank 1 of a DDP job with twice rank 0's
    # batch arrived last to 78% of the collectives and caused 90% of the waiting)
    caused = t["caused_wait_ns"]
    top = t.loc[caused.idxmax()] if caused.sum() > 0 else t.iloc[0]
    share = caused.max() / caused.sum() * 100 if caused.sum() > 0 else 0.0
    last_pct = 100.0 * top["last"] / max(top["collectives"], 1)
    named = share >= STRAGGLER_CAUSED_PCT and _waited_enough(t, int(top["pid"]), windows)
    return {"ranks": t, "straggler": int(top["pid"]) if named else None,
            "straggler_last_pct": float(last_pct), "straggler_caused_pct": float(share),
            "counts": counts,
            # a collective ends on its members together: how far apart they end checks clocks
            "ends_apart_ns": float(np.median(c.spread)) if len(c.spread) else 0.0,
            "groups": c.groups([rank_of[p] for p in per])}


def _waited_enough(t: pd.DataFrame, pid: int, windows: dict | None) -> bool:
    """Whether the other ranks' exposed wait is ``STRAGGLER_WAIT_PCT`` of their iteration
    (the median of their windows; without windows, of nothing to compare: yes)."""
    others = t[t["pid"] != pid]
    its = [float(np.median(np.asarray(windows[p][1]) - np.asarray(windows[p][0])))
           for p in others["pid"] if windows and p in windows and len(windows[p][0])]
    return not its or others["exposed_wait_ns"].mean() >= STRAGGLER_WAIT_PCT / 100 * np.mean(its)


#: the ends of one collective's kernels on its members lie within this of each other (ns):
#: the last chunk reaches every member at once. Kernels that end further apart at the same
#: place in their ranks' order are collectives of different groups of ranks
#: (communicators: the tensor-parallel pair and the data-parallel pair of a rank)
ALIGN_NS = 100_000


def communicators(ends: np.ndarray) -> np.ndarray:
    """Which ranks' kernels at each place in their order (``ends``: rank x place, one clock)
    are one collective: a label per rank and place. The ranks of one job issue their
    collectives in the same order, but a place can hold collectives of different groups of
    ranks (each rank's tensor-parallel pair, say, all at their first all-reduce of a step):
    split where the ends fall into groups of two or more ranks each whose ends chain within
    ``ALIGN_NS`` (or four times the typical closest pair of ends, where ranks end less
    together). A split that would leave a rank alone is not made: a collective's root can
    end before its peers arrive (a small broadcast), so ends apart alone do not part ranks."""
    if len(ends) < 3 or not ends.shape[1]:
        return np.zeros_like(ends)
    order = np.argsort(ends, axis=0, kind="stable")
    gaps = np.diff(np.take_along_axis(ends, order, axis=0), axis=0)
    slack = max(ALIGN_NS, 4 * float(np.median(gaps.min(axis=0))))
    labels = np.vstack([np.zeros((1, ends.shape[1]), np.int64),
                        np.cumsum(gaps > slack, axis=0)])
    # a label's ranks are adjacent in end order: a run of one is a rank alone
    next_, prev = np.ones(labels.shape, bool), np.ones(labels.shape, bool)
    next_[:-1] = labels[:-1] != labels[1:]
    prev[1:] = labels[1:] != labels[:-1]
    labels[:, (next_ & prev).any(axis=0)] = 0
    out = np.empty_like(labels)
    np.put_along_axis(out, order, labels, axis=0)
    return out


class Collectives:
    """The collectives of matched NCCL kernels (``starts``, ``ends``: rank x place; ``group``:
    ``communicators``' labels), computed run by run over the places' groups sorted by end
    (memory linear in the kernels however many ranks). ``member``: the rank is in a
    collective of two or more there; ``skew``: how long its kernel spun for the last of its
    collective's members (at most the kernel's length); ``last``: it arrived last (the
    lowest rank of those that arrived together); ``caused``: the others' skew in the
    collectives it arrived last to (the wait it made them spin); ``spread``: each
    collective's ends' spread."""

    def __init__(self, starts: np.ndarray, ends: np.ndarray, group: np.ndarray):
        ranks, places = ends.shape
        order = np.lexsort((np.arange(ranks)[:, None].repeat(places, 1), group), axis=0)
        rank = order.T.ravel()  # place by place, each place's ranks by group
        place = np.repeat(np.arange(places), ranks)
        label = group[rank, place]
        new = np.ones(len(rank), bool)
        new[1:] = (place[1:] != place[:-1]) | (label[1:] != label[:-1])
        first = np.flatnonzero(new)
        run = np.cumsum(new) - 1
        sizes = np.diff(np.append(first, len(rank)))
        size = sizes[run]
        s, e = starts[rank, place], ends[rank, place]
        latest = np.maximum.reduceat(s, first)[run]
        last = np.minimum.reduceat(np.where(s == latest, rank, ranks), first)[run]
        self.member = np.zeros((ranks, places), bool)
        self.member[rank, place] = size > 1
        spin = np.where(size > 1, np.minimum(latest - s, e - s), 0)
        self.skew = np.zeros((ranks, places), np.int64)
        self.skew[rank, place] = spin
        self.last = np.zeros((ranks, places), bool)
        self.last[rank, place] = (size > 1) & (last == rank)
        # the wait each collective's last member made the others spin, on that member
        self.caused = np.zeros((ranks, places), np.int64)
        waited = np.add.reduceat(spin, first)
        np.add.at(self.caused, (last[first].clip(max=ranks - 1), place[first]),
                  np.where(last[first] < ranks, waited, 0))
        many = sizes > 1
        self.spread = (np.maximum.reduceat(e, first) - np.minimum.reduceat(e, first))[many]
        self._runs = (rank, first, many)

    def groups(self, names: list[int]) -> list[tuple[tuple[int, ...], int]]:
        """The groups of ranks (``names``: each row's rank) the collectives ran on, and how
        many each: [(ranks, count)], the most frequent first."""
        rank, first, many = self._runs
        if not many.any():
            return []
        if len(names) <= 63:  # each collective's ranks as the bits of one number
            bits = np.bitwise_or.reduceat(np.left_shift(np.uint64(1), rank.astype(np.uint64)),
                                          first)[many]
            masks, counts = np.unique(bits, return_counts=True)
            sets = [tuple(sorted(names[r] for r in range(len(names)) if int(m) >> r & 1))
                    for m in masks]
        else:
            bounds = np.append(first, len(rank))
            seen: dict[tuple[int, ...], int] = {}
            for a, b, m in zip(bounds[:-1], bounds[1:], many):
                if m:
                    x = tuple(sorted(names[r] for r in rank[a:b]))
                    seen[x] = seen.get(x, 0) + 1
            sets, counts = list(seen), list(seen.values())
        return sorted(zip(sets, (int(c) for c in counts)), key=lambda kv: (-kv[1], kv[0]))


def _length(u: tuple) -> float:
    return float((u[1] - u[0]).sum())
