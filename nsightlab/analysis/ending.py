"""How the recording ended, and the iteration it cut.

A trace that ends inside an iteration ends there for one of two reasons, and they call for
different answers:

- **the capture stopped while the application ran** (``--duration``, a capture range,
  ``--delay`` with ``--duration``, ``nsys stop``). nsys then says that collection stopped
  before the application ended ("Not all CUDA events might have been collected", "Some CUPTI
  events might be missing ... let the application run until it quits") and flushes what it
  had. The cut iteration is left out of every number; the verdict on the whole ones stands.
- **the application ended inside it** (an uncaught exception, ``exit()``, a crash that still
  let nsys flush). nsys hedges nothing, yet the last iteration holds only the first part of
  what every other iteration runs. The run died there: verdicts are withheld. A capture's
  manifest that records a workload exit code other than 0 says the same.

An iteration is *cut* when it is the last one and either nsys closed its range at the
collection's end (NVTX ranges still open when collection stops end there: the capture cut
it), or its kernels are the start of the sequence the iteration before it ran, then nothing
(an NVTX range: launched by its calls, which are fewer; a found iteration: from its start
on) and the process launched nothing after it, or (found iterations) the capture stopped
before the next one began. A last iteration of another kind (other kernels, or as many) is
not cut, nor one that launched nothing, nor a shorter last step after which the process went
on launching work (a last step without its optimizer, then an evaluation): a run that died
launches nothing more.
Exports without ``DIAGNOSTIC_EVENT`` (nsys before 2024) cannot say which of the two cut it:
then the cut iteration is left out with a warning.
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from nsightlab.read.report import Report

#: nsys saying that collection stopped before the application ended: it says one of these
#: whenever --duration, a capture range or a stop command ends the session first, or the
#: application is killed before nsys can flush (then the kernels are missing too)
STOPPED = re.compile(r"Not all [\w ]+ events might have been collected|"
                     r"let the application run until it quits")
#: nsys saying a capture range (cudaProfilerStart/Stop, NVTX) opened the collection
RANGE = re.compile(r"Profiling started due to|[Cc]apture range")
#: a range nsys closed when collection stopped ends at the collection's end (exactly, in the
#: captures seen; within this many ns)
CLOSED_NS = 1_000
#: the last iteration is only looked into when its wall time is off the one before by this
#: share (a whole last iteration costs no read of the kernel names)
ODD_WALL = 0.2
#: earlier iterations looked at for one that ran what the last one ran (a kind of its own)
SEEN_BEFORE = 8
CUT_COLUMNS = ["iteration", "name", "start_ns", "end_ns", "kernels", "expected_kernels",
               "launches", "expected_launches", "closed_by_nsys"]
#: kernel-launching API calls (as ``completeness.LAUNCH_CALLS``, which imports this module)
LAUNCH_CALLS = r"^(cudaLaunch\w*|cuLaunch\w*|cudaGraphLaunch\w*|cuGraphLaunch\w*)"


def diagnostics(report: Report) -> list[str] | None:
    """Every message of the export's DIAGNOSTIC_EVENT (distinct, in time order); None when
    the export has no such table (nsys before 2024)."""
    if "text" not in report.db.columns("DIAGNOSTIC_EVENT"):
        return None
    rows = report.db.once("diagnostics", lambda: report.db.query(
        "SELECT text, min(timestamp) AS t FROM DIAGNOSTIC_EVENT GROUP BY text ORDER BY t"))
    return [str(t).strip() for t, _ in rows if t]


def stopped_early(report: Report) -> str | None:
    """nsys's own words when CUDA collection stopped before the application ended; None when
    it says no such thing (or keeps no diagnostics). Its NVTX and OS runtime hedges are not
    taken: nsys says them per process, also of helper processes that never use CUDA
    (torch.compile's workers), whose end says nothing of the application's."""
    return next((t for t in diagnostics(report) or []
                 if STOPPED.search(t) and ("CUDA" in t or "CUPTI" in t)), None)


def exit_code(report: Report) -> int | None:
    """The workload's exit code from the capture manifest beside the report (``nsightlab
    capture``), None for a report that is not a capture's."""
    src, m = report.source, report.capture_manifest
    if not isinstance(m.get("sqlite"), str) or \
            src.name not in (m["sqlite"], m["sqlite"] + ".xz") and not src.is_dir():
        return None
    code = m.get("exit_code")
    return int(code) if isinstance(code, int) else None


def cut(report: Report, iters: pd.DataFrame, host: bool = True
        ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(the iterations kept, the last one when the trace cut it: ``CUT_COLUMNS``). ``host``:
    the iterations are host ranges (NVTX), whose kernels are those their calls launched;
    else GPU windows (found in the trace), whose kernels are those that start in them. The
    kernel names are read only when the last iteration's wall time is off the one before by
    ``ODD_WALL`` or more, or nsys closed its range."""
    none = pd.DataFrame(columns=CUT_COLUMNS)
    if len(iters) < 3:
        return iters, none
    start, end = iters["start_ns"].to_numpy(np.int64), iters["end_ns"].to_numpy(np.int64)
    span = report.span_ns
    closed = bool(span and abs(int(end[-1]) - span[1]) <= CLOSED_NS)
    wall, before = end[-1] - start[-1], end[-2] - start[-2]
    if not closed and abs(wall - before) <= ODD_WALL * before:
        return iters, none
    # found iterations tile the loop start to start: the last holds all work after its start
    stop = end if host else np.append(start[1:], np.iinfo(np.int64).max)
    (last, calls), (ref, ref_calls) = (_kernels(report, start[k], stop[k], host) for k in (-1, -2))
    # the start of the same sequence, then nothing: what an iteration stopped midway leaves
    # (a last iteration of another kind runs other kernels, or as many)
    prefix = 0 < len(last) < len(ref) and last == ref[:len(last)]
    if prefix:  # a shorter kind of iteration the loop ran before is not a cut one
        prefix = not any(_kernels(report, start[k], stop[k], host)[0] == last
                         for k in range(-3, -min(len(iters), SEEN_BEFORE + 2), -1))
    # a last step that runs less (no optimizer step, a final bucket) is no cut when the
    # process went on to launch more work after it: a run that died launches nothing more
    stopped = prefix and (not host or (calls < ref_calls and (
        closed or not _went_on(report, int(end[-1])))))
    # a found iteration ends where its next begins: when the capture stopped before that, its
    # time is unknown (its kernels may all be there)
    unknown = not host and wall < (1 - ODD_WALL) * before and stopped_early(report) is not None
    if not (closed or stopped or unknown):
        return iters, none
    row = {"iteration": len(iters) - 1, "name": str(iters["name"].iloc[-1]),
           "start_ns": int(start[-1]), "end_ns": int(end[-1]), "kernels": len(last),
           "expected_kernels": len(ref), "launches": calls, "expected_launches": ref_calls,
           "closed_by_nsys": closed}
    return iters.iloc[:-1].reset_index(drop=True), pd.DataFrame([row], columns=CUT_COLUMNS)


def untraced_tail(report: Report, iters: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """(the iterations kept, words on those left out) when nsys says CUDA events may be
    missing and the process's CUDA trace ends before its iteration ranges do: the ranges that
    begin after its last CUDA call (two or more, not all) hold no CUDA call at all, so nsys
    lost the rest of its CUDA records (seen: one rank of a --duration slice, its records gone
    155 ms into the second its ranges cover). They are left out of every number; (the same,
    '') when there is no such tail (an nsys older than the driver that records no launch at
    all is ``budget``'s ``launches_untraced``)."""
    said = stopped_early(report)
    if said is None or len(iters) < 3 or not report.has_rows("cuda_api"):
        return iters, ""
    last = report.extent("cuda_api")
    if last is None:
        return iters, ""
    start = iters["start_ns"].to_numpy(np.int64)
    after = start > last[1]
    n = int(after.sum())
    if n < 2 or n == len(iters) or not after[-n:].all():
        return iters, ""
    why = f" (nsys: \"{_short(said)}\")"
    return (iters.iloc[:-n].reset_index(drop=True),
            f"the last {n} ({iters['name'].iloc[-n]}...) hold no CUDA call: this process's "
            f"CUDA trace ends {(start[-n] - last[1]) / 1e6:,.1f} ms before the first of them "
            f"begins{why}, so nsys lost the rest of its CUDA records; they are left out")


def _went_on(report: Report, after: int) -> bool:
    """Whether the process made a kernel launch or copy call that starts after ``after``: it
    went on past the iteration (an evaluation, a final sync and copy), so it did not die in
    it. One query of the calls after it (no read of every call's name)."""
    from nsightlab.analysis import engine  # (engine imports the read layer only)

    work = LAUNCH_CALLS + r"|^cu(da)?Memcpy"

    def in_duckdb(db) -> bool:
        return bool(db.con.execute(
            f"SELECT count(*) FROM {db.view('cuda_api')} WHERE start_ns > {int(after)} AND "
            f"regexp_matches(name, '{work}')").fetchone()[0])

    def in_numpy() -> bool:
        api = report.cuda_api(["start_ns", "name"])
        later = api["name"][api["start_ns"].to_numpy(np.int64) > after].astype(str).unique()
        return any(re.match(work, n) for n in later)

    return engine.analyse(report, in_duckdb, in_numpy)


def _kernels(report: Report, lo: int, hi: int, host: bool) -> tuple[list, int]:
    """(the names of the kernels launched by the API calls that start in [lo, hi) (joined by
    process and correlation id) in launch order, and the kernel launch calls among those
    calls): what the host asked for in that window, wherever the GPU ran it (an asynchronous
    loop's kernels run after its range ends). Without an API trace, or for GPU windows (not
    ``host``): the kernels that start in the window, and -1 (the calls are not counted)."""
    if not report.has_rows("kernels"):
        return [], 0
    if not host or not report.has_rows("cuda_api"):
        k = report.kernels(["start_ns", "name"])
        t = k["start_ns"].to_numpy(np.int64)
        rows = np.flatnonzero((t >= lo) & (t < hi))
        names = [str(x) for x in k["name"].iloc[rows[np.argsort(t[rows], kind="stable")]]]
        return names, -1
    from nsightlab.analysis import engine  # (engine imports the read layer only)

    def in_duckdb(db) -> list[tuple]:  # the window's calls alone, joined: no full read
        return db.con.execute(
            f"SELECT a.start_ns, a.name, k.name FROM (SELECT pid, correlation_id, name, start_ns "
            f"FROM {db.view('cuda_api')} WHERE start_ns >= {int(lo)} AND start_ns < {int(hi)}) a "
            f"LEFT JOIN {db.view('kernels')} k ON a.pid = k.pid AND "
            "a.correlation_id = k.correlation_id ORDER BY a.start_ns").fetchall()

    def in_numpy() -> list[tuple]:
        api = report.cuda_api(["pid", "start_ns", "correlation_id", "name"])
        t = api["start_ns"].to_numpy(np.int64)
        calls = api.iloc[np.flatnonzero((t >= lo) & (t < hi))].sort_values("start_ns",
                                                                            kind="stable")
        key = ["pid", "correlation_id"]
        got = calls.merge(report.kernels([*key, "name"]), on=key, how="left", sort=False)
        return list(zip(got["start_ns"], got["name_x"], got["name_y"]))

    rows = engine.analyse(report, in_duckdb, in_numpy)
    launches = len({(t, str(c)) for t, c, _ in rows if re.match(LAUNCH_CALLS, str(c))})
    return [str(k) for _, _, k in rows if k is not None and k == k], launches


def listed(counts: dict[str, int]) -> str:
    """Counts by table as words: "3 kernels, 2 memcpy"."""
    return ", ".join(f"{n:,} {t}" for t, n in counts.items())


def finding(report: Report, cut_rows: pd.DataFrame, in_flight: dict | None = None
            ) -> dict | None:
    """The completeness finding for a cut last iteration (``cut``): a note when the capture
    cut it (the verdict stands), ``partial`` when the run died in it, a warning when the
    export cannot tell which. ``in_flight``: the words of GPU work running past the trace's
    edges (rows by table: a slice of a longer export, a capture opened on running work:
    ``completeness``' edge notes), which say the trace was cut around a running application
    where the export keeps no nsys diagnostics (a slice).
    Without a cut iteration: ``exited_with``."""
    if not len(cut_rows):
        return exited_with(report)
    c = cut_rows.iloc[0]
    launched = 0 <= int(c["launches"]) < int(c["expected_launches"])
    ran = int(c["kernels"]) < int(c["expected_kernels"])
    what = (f"iteration {c['name']} (the last) was cut: "
            + (f"it made {int(c['launches'])} of the {int(c['expected_launches'])} launch calls "
               "the one before it made" if launched else
               f"it ran {int(c['kernels'])} of the {int(c['expected_kernels'])} kernels the one "
               "before it ran" if ran else
               "its kernels ran, but the trace ends before the next iteration begins, so its "
               "time is unknown")
            + (", and nsys closed its range when collection stopped" if c["closed_by_nsys"]
               else ""))
    # nsys closes every range open when collection ends, a dying application's too: that
    # says the capture stopped only where the export keeps no diagnostics to say more; so
    # does work already running when the trace begins (a slice of a longer export)
    unsaid = not diagnostics(report)
    stopped = stopped_early(report) or (
        f"{listed(in_flight)} already running when the trace begins" if in_flight and unsaid
        else None) or (
        "nsys closed its range at the collection's end" if c["closed_by_nsys"] and unsaid
        else None)
    code = exit_code(report)
    if stopped:
        opened = next((t for t in diagnostics(report) or [] if RANGE.search(t)), None)
        how = f"; a capture range: \"{_short(opened)}\"" if opened else ""
        return _f("capture_cut", "note",
                  f"the capture ended while the application ran ({_evidence(stopped)}{how}): "
                  f"{what}; it is left out of every number, and the verdict on the whole "
                  "iterations stands")
    if unsaid and code is None:
        return _f("trace_cut", "warning",
                  f"the trace ends inside an iteration: {what}; it is left out of every number. "
                  "This export keeps no nsys diagnostics, so whether the capture stopped early "
                  "or the application died there cannot be told")
    why = (f"the workload exited with code {code}" if code else
           "the application ended there by itself (nsys flushed its trace and says nothing "
           "was left uncollected): an uncaught exception or exit()")
    return _f("run_died", "partial",
              f"the run died inside its last iteration: {what}; {why}. The whole iterations' "
              "numbers are below; verdicts are withheld")


def exited_with(report: Report) -> dict | None:
    """``partial`` when a capture's manifest records a workload exit code other than 0 and
    nsys did not stop the collection itself (it stops a --duration run with SIGTERM)."""
    code = exit_code(report)
    if not code or stopped_early(report):
        return None
    return _f("run_died", "partial",
              f"the workload exited with code {code} (the capture's manifest): the run did not "
              "finish, so its iterations may not be the loop it meant to run; verdicts are "
              "withheld")


def _evidence(text: str) -> str:
    return f"nsys: \"{_short(text)}\"" if STOPPED.search(text) else text


def _short(text: str) -> str:
    return text.split(". ")[0].rstrip(".")


def _f(check: str, severity: str, message: str) -> dict:
    return {"check": check, "severity": severity, "message": message}


#: the first nsys release of each CUDA major's CUPTI (2023.1 shipped CUPTI 12, 2025.3
#: CUPTI 13): an older nsys traces an application on a newer driver through an older CUPTI
NSYS_FOR_CUDA = {12: (2023, 1), 13: (2025, 3)}


def older_than_driver(report: Report) -> str | None:
    """Words saying the tracer is older than the driver's CUDA (the CUPTI nsys loaded, as
    its diagnostics name it, else nsys's own release against ``NSYS_FOR_CUDA``); None when
    the report does not show it."""
    cuda = report.drivers.get("cuda")
    if not cuda:
        return None
    major = int(cuda.split(".")[0])
    said = next((t for t in diagnostics(report) or [] if "libcupti.so." in t), None)
    m = re.search(r"libcupti\.so\.(\d+)", said or "")
    if m:
        return (f"nsys loaded CUPTI {m.group(1)} for a driver of CUDA {cuda}"
                if int(m.group(1)) < major else None)
    v = re.match(r"(\d{4})\.(\d+)", report.nsys_version or "")
    need = NSYS_FOR_CUDA.get(major)
    if not v or not need or (int(v.group(1)), int(v.group(2))) >= need:
        return None
    return f"recorded by nsys {report.nsys_version} on a driver for CUDA {cuda}"
