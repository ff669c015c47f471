"""Is the trace complete enough to judge? Checked on every report before any verdict.

A report can be valid SQLite and still hold only part of what ran: CUPTI buffers lost when the
application crashed or was killed, CUDA tracing off while GPU metrics were on, ranges left
open. Judging such a report gives confident nonsense ("launch-bound, try CUDA graphs" for a
trace that kept 2 kernels), so these checks come first and their findings are said first.

Each finding is a dict: ``check`` (a stable name), ``severity`` (``partial``: the trace lacks
part of the run and verdicts built on it are withheld; ``warning``; ``note``) and
``message`` (one sentence with the numbers and what to do).
"""
from __future__ import annotations

import re

import numpy as np

from nsightlab.analysis import ending, engine
from nsightlab.analysis.ending import listed as _listed
from nsightlab.analysis.iterations import base_name, base_name_matches, iteration_pattern, nvtx_ranges
from nsightlab.read import tables
from nsightlab.read.metadata import traced
from nsightlab.read.parallel import readers
from nsightlab.read.report import Report
from nsightlab.read.table_cache import code_fingerprint

#: kernel-launching API calls: each should have kernel records (graph launches: several)
LAUNCH_CALLS = re.compile(ending.LAUNCH_CALLS)
GRAPH_LAUNCH = re.compile(r"^(cudaGraphLaunch|cuGraphLaunch)")
#: nsys diagnostics that are not news: every capture without CPU context switches carries the
#: first; the others are said per process, and programs start helper processes (torch.compile
#: workers) that use neither CUDA nor NVTX
BENIGN = re.compile(r"Scheduling information is absent|No [\w ]+ events collected|"
                    r"might have not been started correctly")
#: nsys hedging that part of a trace may be missing: it says so whenever collection stopped
#: before the application ended (--duration, a capture range, a crash or a kill) — whether
#: records were lost is what the kernel/launch checks measure, so this alone is a note
LOST = ending.STOPPED
#: nsys saying that records were dropped (CUPTI buffers exhausted): a warning. (Its "Some
#: CUPTI events might be missing ... let the application run until it quits" is the hedge
#: above, said when collection stops first, not a count of lost records.)
DROPPED = re.compile(r"events? (were|was|have been) dropped|dropped \d|buffers? overflow|"
                     r"buffers? (was|were|is) full", re.IGNORECASE)
#: fewer kernels than this share of non-graph launch calls means kernel records were lost
KERNEL_RECORD_SHARE = 0.9
#: SMs Active (mean over samples) above this, with no kernel traced, means unseen kernels
SM_ACTIVE_PCT = 1.0


def check(report: Report, every_table: bool = False) -> list[dict]:
    """Every completeness finding for ``report`` (empty when nothing is missing). The checks
    are counts and SQL aggregates (no table is read for them), kept in the report's result
    store. Rows left out as impossible or duplicated are said afresh for the tables read so
    far (``quality``: they change no number of a table a command does not read), or with
    ``every_table`` for all, counted in SQL where a table was not read (``nsightlab info``)."""
    return ordered(_kept(report, "completeness", _check)
                   + quality(report, tables.CHECKED, every_table) + _kept(report, "damaged", damaged))


#: the data-quality findings, said afresh by ``check``
_QUALITY = ("invalid_timestamps", "duplicate_rows", "damaged_kernels")


def _kept(report: Report, name: str, compute) -> list[dict]:
    """``compute(report)``'s findings: once per open report, kept in its result store."""
    if (name,) not in report.answers:
        report.answers[(name,)] = compute(report) if report.results is None else \
            report.results.get_or_compute(name, {}, [report.path], code_fingerprint(),
                                          lambda: ({}, {"findings": compute(report)}))[1]["findings"]
    return [dict(f) for f in report.answers[(name,)]]


#: a kernel may start this long (ns) before the call that launched it began (clock conversion)
BEFORE_LAUNCH_NS = 1_000


def damaged(report: Report) -> list[dict]:
    """A warning naming the file when kernel rows carry what no run records: a kernel that
    starts before the call that launched it, one that outlasts the next two kernels of its
    stream (a stream runs its kernels one after another; programmatic dependent launch lets
    only the next start early, and it still ends after), one longer than the whole session,
    or one named by nothing (its name NULL, or an id with no string). They are counted as
    they are: the numbers that count them are off. Reports of up to ``engine.MIN_ROWS``
    kernels (a check in memory); [] when nothing is damaged."""
    n = report.row_count("kernels")
    if not n or n > engine.MIN_ROWS:
        return []
    from nsightlab.analysis.launches import keys, match

    k = report.kernels(["start_ns", "end_ns", "pid", "device_id", "stream_id", "name",
                        "correlation_id"])
    start, end = k["start_ns"].to_numpy(np.int64), k["end_ns"].to_numpy(np.int64)
    said = []
    before = 0
    if report.has_rows("cuda_api"):  # joined here, in NumPy: the engine's pairs untouched
        api = report.cuda_api(["pid", "correlation_id", "start_ns"])
        oi, ai = match(*keys(k, api))
        if len(oi):
            called = api["start_ns"].to_numpy(np.int64)[ai]
            before = int((start[oi] < called - BEFORE_LAUNCH_NS).sum())
    if before:
        said.append(f"{_n(before)} before the call that launched {'it' if before == 1 else 'them'}")
    where = [k[c].to_numpy(np.int64, na_value=-1) for c in ("stream_id", "device_id", "pid")]
    order = np.lexsort((start, *where))
    stream = np.ones(max(len(order) - 1, 0), bool)  # the next kernel runs on the same stream
    for col in where:
        col = col[order]
        stream &= col[1:] == col[:-1]
    e = end[order]
    # a graph's parallel branches can run at once on the stream it was launched into: not
    # looked at where graph nodes were traced
    same = stream[1:] & stream[:-1] & (not report.has_rows("cuda_graph_nodes"))
    outlast = int((same & (e[1:-1] <= e[:-2]) & (e[2:] <= e[:-2])
                   & (e[2:] > start[order][2:])).sum())
    if outlast:
        said.append(f"{_n(outlast)} beyond the end of the next two kernels of "
                    f"{'its' if outlast == 1 else 'their'} stream (a stream runs its kernels one "
                    "after another)")
    span = report.span_ns
    longer = int((end - start > span[1] - span[0]).sum()) if span else 0
    if longer:
        said.append(f"{_n(longer)} longer than the whole session")
    unnamed = int(k["name"].isna().sum())
    if unnamed:
        said.append(f"{unnamed:,} kernel{'s' if unnamed > 1 else ''} named by nothing (a NULL "
                    "name, or an id with no string)")
    if not said:
        return []
    return [_f("damaged_kernels", "warning",
               f"{report.source.name} holds damaged kernel rows: {'; '.join(said)}; they are "
               f"counted as they are (of {n:,} kernels), so the numbers that count them are "
               "off: export the report again from its .nsys-rep (nsys export --type sqlite)")]


def _n(count: int) -> str:
    """'1 kernel runs' / '3 kernels run'."""
    return "1 kernel runs" if count == 1 else f"{count:,} kernels run"


def ordered(found: list[dict]) -> list[dict]:
    """Partial findings first, then warnings (the trace's, then data quality), then notes."""
    rank = {"partial": 0, "warning": 1, "note": 2}
    return sorted(found, key=lambda f: (rank.get(f["severity"], 1), f["check"] in _QUALITY))


def _check(report: Report) -> list[dict]:
    out: list[dict] = []
    cuda_on = traced(report.capture_options, "CUDA")
    kernels = report.row_count("kernels")
    launches, graph_launches = _launch_calls(report, kernels)
    captured = _captured_launches(report) if kernels < KERNEL_RECORD_SHARE * (
        launches - graph_launches) else 0
    launches -= captured  # recorded into a CUDA graph: they run, and are traced, on replay
    graph_runs = report.row_count("graph_execs")
    if graph_launches and not graph_runs and not _graph_node_kernels(report):
        out.append(_f("graph_launches_untraced", "partial",
                      f"{graph_launches:,} CUDA graph launches but neither graph executions "
                      "nor kernels of graph nodes are recorded: the replays' GPU work is "
                      "missing (trace lost, or an nsys that records neither); profile with "
                      "nsys profile --trace=cuda (add --cuda-graph-trace=node for per-kernel "
                      "detail)"))
    if kernels == 0 and graph_runs:
        pass  # a graph-level trace: the graph executions are the GPU work
    elif kernels == 0 and launches:
        out.append(_f("kernels_missing", "partial",
                      f"{launches:,} kernel launch calls are recorded but no kernel: the kernel "
                      "trace was lost (the application crashed or was killed before nsys "
                      "flushed it, or the capture was cut); verdicts on GPU time are withheld"))
    elif kernels and launches - graph_launches > 0 and \
            kernels < KERNEL_RECORD_SHARE * (launches - graph_launches):
        out.append(_f("kernels_partial", "partial",
                      f"{kernels:,} kernels for {launches - graph_launches:,} launch calls: part "
                      "of the kernel trace is missing; GPU time is undercounted"))
    if (kernels or graph_runs) and not report.has_rows("cuda_api"):
        work = f"{kernels:,} kernels" if kernels else f"{graph_runs:,} CUDA graph executions"
        out.append(_f("api_trace_missing", "warning",
                      f"{work} but no CUDA API call is recorded: kernels cannot be "
                      "tied to the calls that launched them, so iteration windows are the NVTX "
                      "ranges alone and launch overhead is unknown "
                      f"({report.missing_hint('cuda_api') or 'the API trace was lost'})"))
    diagnostics = _diagnostics(report)
    lost = [t for t in diagnostics if LOST.search(t)]
    if kernels == 0 and not graph_runs:  # (a graph-level trace's replays are GPU work)
        active = _sm_active(report)
        streams = report.db.count("TARGET_INFO_CUDA_STREAM")
        if active is not None and active > SM_ACTIVE_PCT:
            why = ("CUDA tracing was off: profile with nsys profile --trace=cuda"
                   if cuda_on is False else "its kernel records were lost")
            out.append(_f("metrics_without_kernels", "partial",
                          f"GPU metrics show the SMs {active:.0f}% active on average but the "
                          f"report holds no kernel: {why}"))
        elif not launches and cuda_on and (streams or any("CUDA" in t for t in lost)):
            ran = len(nvtx_ranges(report))
            out.append(_f("kernels_missing", "partial", (
                f"the run died or was killed before nsys flushed its CUDA trace: {ran:,} NVTX "
                f"iteration ranges were recorded but not one kernel or launch ({streams} "
                "stream(s) created)" if ran else
                f"the application used CUDA ({streams} stream(s) created) but the report holds "
                "neither a kernel nor a launch: the capture ended before the GPU work began "
                "(--duration, a capture range), or the run died or was killed before nsys "
                "flushed its CUDA trace")
                + (f"; nsys: \"{ending.stopped_early(report)}\"" if lost else "")
                + "; verdicts on GPU time are withheld"))
    open_ranges = _open_ranges(report)
    named = iteration_pattern(report)
    open_iterations = [r for r in open_ranges if named.match(base_name(r))]
    if open_iterations and kernels:
        out.append(_f("iteration_open", "partial",
                      f"iteration range {open_iterations[-1]} never closed around its work: "
                      "the application ended inside it (crashed or killed?), so the trace "
                      "holds a cut iteration; verdicts are withheld"))
    if open_ranges:
        names = ", ".join(open_ranges[:3]) + (" ..." if len(open_ranges) > 3 else "")
        out.append(_f("ranges_open", "warning",
                      f"{len(open_ranges)} NVTX range(s) never closed ({names}): the application "
                      "ended inside them (crashed or killed?); the last iteration may be cut"))
    for text in diagnostics:
        out.append(_f("nsys_diagnostic", "warning" if DROPPED.search(text) and
                      not LOST.search(text) else "note",
                      f"nsys says: {text}"))
    out += _edge_work(report)
    impossible = _impossible_metrics(report)
    if impossible:
        out.append(_f("gpu_metrics_impossible", "warning",
                      f"left out of every number: {impossible:,} GPU-metrics samples that cannot "
                      "be (a share outside 0-100%, a clock outside 0-10 GHz, a time more than a "
                      "second before the session starts)"))
    unknown = _unknown_devices(report)
    if unknown:
        out.append(_f("unknown_gpus", "warning",
                      f"kernels ran on device(s) {unknown} that the report's GPU list does not "
                      "describe"))
    return out


def quality(report: Report, names, every_table: bool = True) -> list[dict]:
    """Findings on the rows of tables ``names`` that every read leaves out: impossible times
    (``tables.invalid_sql``) and exact duplicates (``tables.duplicate_positions``). Counted
    while the tables were cached, else by one SQL count each: ``nsightlab table`` says them
    for the table it prints without the other checks."""
    bad = _invalid_rows(report, names, every_table)
    return [_f("invalid_timestamps", "warning",
               "left out of every number: " + _listed(bad) + " with a start/end that cannot be "
               "(NULL or not an integer, end before start, or lasting longer than the whole "
               "trace): the export is damaged there; export the report again (nsys export "
               "--type sqlite) or ask for the .nsys-rep")] * bool(bad) + _duplicates(report, names)


def _duplicates(report: Report, names) -> list[dict]:
    """The finding on exact duplicate rows of the tables ``names`` read so far."""
    twice = {t: n for t in names if t in tables.DEDUPED and report.spec(t).present(report.db)
             and (n := report.duplicate_rows(t))}
    if not twice:
        return []
    return [_f("duplicate_rows", "warning",
               f"left out of every number: {_listed(twice)} recorded twice (the same "
               "correlation id, device, stream, start and end): each is counted once; the "
               "export was merged or written twice: export the report again")]


def _invalid_rows(report: Report, names, every_table: bool) -> dict[str, int]:
    """Activity rows every read leaves out (``tables.invalid_sql``), per table with any: as
    counted when the table was read, else (``every_table``) by one SQL pass."""
    out = {}
    for name in [n for n in names if n in tables.CHECKED]:
        n = report.dropped_rows(name)
        if n is None and every_table:
            n = _facts(report, name, invalid=True).get("invalid", 0)
        if n:
            out[name] = int(n)
    return out


def start(report: Report, reading: tuple[str, ...]) -> None:
    """Start the checks' one scan, the launch calls counted over the API rows in SQL, on a
    thread now, when they are not stored yet and the command neither reads the API table nor
    finds it cached: the scan then runs while the command reads its own tables, not after its
    work (kernel_sum on the GPU machine: 0.58 s of 5 s, after)."""
    if "cuda_api" in reading or not report.has_rows("cuda_api") or report.results is None \
            or report.is_cached("cuda_api") \
            or report.results.has("completeness", {}, [report.path], code_fingerprint()):
        return  # (a cached API table answers in a fraction of a second, read where needed)
    _facts(report, "cuda_api", ahead=True)


def start_cached(report: Report) -> None:
    """Start the checks' facts of the API table on a thread now that it is cached (its launch
    calls counted on the names' codes: 0.2-0.3 s at 16M calls), when they are not stored: for
    a command with other work to do meanwhile (the time budget's join in DuckDB). Otherwise the
    first ``check``, which launch_compute's nested budget run makes, counted them in its
    way (0.2 s of launch_compute on 2 cores)."""
    if report.results is None or not report.has_rows("cuda_api") \
            or not report.is_cached("cuda_api") \
            or report.results.has("completeness", {}, [report.path], code_fingerprint()):
        return
    _facts(report, "cuda_api", ahead=True)


def _facts(report: Report, name: str, invalid: bool = False, ahead: bool = False) -> dict:
    """What the checks need of an activity table, in at most one pass: rows left out as
    impossible ("invalid"), the first start and last end of the others ("lo", "hi"; of an
    API table not cached, bounds of them: ``_api_facts``), and of the API calls the kernel
    and graph launch calls ("launch", "graph"). From the cache
    entry's meta.json and statistics when the table is cached, else one SQL aggregate over
    rowid ranges in parallel (never a read of the table); once per export. ``ahead``: start it
    on a thread (``ExportDB.ahead``), answer nothing."""
    spec = report.spec(name)
    if not report.timed(name):
        return {}  # a damaged or missing table: reading it says so

    def compute() -> dict:
        dropped = report.dropped_rows(name)
        if dropped is not None:  # cached: its meta and statistics, and the API names' codes
            ext = report.extent(name)
            return {"invalid": dropped, "lo": ext[0] if ext else None,
                    "hi": ext[1] if ext else None,
                    **(_cached_launches(report) if name == "cuda_api" else {})}
        if name == "cuda_api" and not invalid:
            return _api_facts(report, spec.source)
        # without the count of rows left out, every row is read as it is: min and max skip
        # NULLs, and a damaged extent only moves the edge notes (the rule costs 40% more)
        bad = tables.invalid_sql(tables.duration_limit(report.db)) if invalid else "0"
        # one pass over the rows every read keeps; the rows left out are the others
        rows = _scan(report, spec.source,
                     f'SELECT count(*), min(start), max("end") FROM "{spec.source}" '
                     f"WHERE NOT ({bad})")
        total = report.db.count(spec.source) if invalid else 0
        rows = [(total - sum(r[0] or 0 for r in rows), *r[1:]) if k == 0 and invalid
                else (0, *r[1:]) for k, r in enumerate(rows)]
        los = [r[1] for r in rows if r[1] is not None]
        his = [r[2] for r in rows if r[2] is not None]
        return {"invalid": int(sum(r[0] or 0 for r in rows)),
                "lo": min(los) if los else None, "hi": max(his) if his else None}
    if ahead:
        return report.db.ahead(f"facts:{name}:{invalid}", compute)
    return report.db.once(f"facts:{name}:{invalid}", compute)


def _api_facts(report: Report, source: str) -> dict:
    """``_facts`` of an API table that is not cached: its kernel and graph launch calls
    counted in one SQL pass over rowid ranges that reads the names' ids alone, and bounds of
    its extent from its first and last rows ("lo_at_most", "hi_at_least"), not the extent:
    a command that reads no API table (kernel_sum) pays this pass, CPU its own reads need
    (16M calls, 2 cores: 3.6 CPU-seconds with the extent, 1.3 without). ``_edge_work``
    scans for the extent only where a table's reaches past a bound."""
    launch, graph = _launch_ids(report)
    counts = [0, 0]
    if launch:
        ids = [", ".join(map(str, i)) for i in (launch, graph)]
        graphs = f"count(CASE WHEN nameId IN ({ids[1]}) THEN 1 END)" if graph else "0"
        rows = _scan(report, source, f'SELECT count(*), {graphs} FROM "{source}" '
                     f"WHERE nameId IN ({ids[0]})")  # graph launches are launch calls
        counts = [int(sum(r[k] or 0 for r in rows)) for k in (0, 1)]
    if source in report.db.views:  # no rowid, so no first and last rows: the extent itself
        lo, hi = _api_extent(report)
        return {"invalid": 0, "lo": lo, "hi": hi, "launch": counts[0], "graph": counts[1]}
    first = report.db.query(f"SELECT start FROM \"{source}\" WHERE typeof(start) = 'integer' "
                            "ORDER BY rowid LIMIT 1")
    last = report.db.query(f"SELECT \"end\" FROM \"{source}\" WHERE typeof(\"end\") = 'integer' "
                           "ORDER BY rowid DESC LIMIT 1")
    return {"invalid": 0, "lo_at_most": first[0][0] if first else None,
            "hi_at_least": last[0][0] if last else None, "launch": counts[0], "graph": counts[1]}


def _api_extent(report: Report) -> tuple:
    """(first start, last end) of the API calls: one SQL pass over rowid ranges."""
    source = report.spec("cuda_api").source
    rows = _scan(report, source, f'SELECT min(start), max("end") FROM "{source}" WHERE 1')
    los, his = [r[0] for r in rows if r[0] is not None], [r[1] for r in rows if r[1] is not None]
    return (min(los), max(his)) if los and his else (None, None)


def _scan(report: Report, source: str, sql: str) -> list[tuple]:
    """The one-row aggregate ``sql`` over each rowid range of ``source``, the ranges read at
    once by one thread per core (``ExportDB.over_ranges``)."""
    return report.db.over_ranges(sql, source, readers(report.db.rowid_span(source) or 0))


def _launch_codes(report: Report) -> tuple[np.ndarray, list[int], list[int]]:
    """The API table's name column as codes (-1: no name), and the codes of kernel launch
    calls and of graph launch calls (``LAUNCH_CALLS``, ``GRAPH_LAUNCH``)."""
    names = report.cuda_api(["name"])["name"]
    cats = [str(c) for c in names.cat.categories]
    return (names.cat.codes.to_numpy(), [i for i, c in enumerate(cats) if LAUNCH_CALLS.match(c)],
            [i for i, c in enumerate(cats) if GRAPH_LAUNCH.match(c)])


#: API rows counted at once in ``_cached_launches``
COUNT_CHUNK = 1 << 22


def _cached_launches(report: Report) -> dict:
    """Kernel and graph launch calls counted on the cached API table's name column (its
    dictionary codes, ~0.2 s at 16M calls, against ~2 s for the SQL pass on 2 cores)."""
    codes, launch, graph = _launch_codes(report)
    counts = np.zeros(max([*launch, *graph], default=-1) + 2, np.int64)
    for a in range(0, len(codes), COUNT_CHUNK):  # bincount copies its input as int64:
        got = np.bincount(codes[a:a + COUNT_CHUNK] + 1)  # 640 MB at 80M calls, whole
        counts[:min(len(got), len(counts))] += got[:len(counts)]
    return {"launch": int(counts[np.asarray(launch, np.int64) + 1].sum()),
            "graph": int(counts[np.asarray(graph, np.int64) + 1].sum())}


def _launch_ids(report: Report) -> tuple[list[int], list[int]]:
    """The string ids of kernel launch calls and of graph launch calls (``LAUNCH_CALLS``)."""
    api = report.spec("cuda_api").source
    if not report.db.has("StringIds") or "nameId" not in report.db.columns(api):
        return [], []
    launch, graph = [], []
    for i, name in report.db.query("SELECT id, value FROM StringIds WHERE value LIKE 'cu%'"):
        if LAUNCH_CALLS.match(name or ""):
            launch.append(int(i))
            if GRAPH_LAUNCH.match(name):
                graph.append(int(i))
    return launch, graph


def _edge_work(report: Report) -> list[dict]:
    """Notes on GPU work in flight at the trace's edges: begun before its first recorded CUDA
    call (a capture started with --delay, a capture range, cudaProfilerStart, or a slice of a
    longer export) or ending after its last. Their launches are not in the trace, but the
    work is real: every number counts it, as ``nsys stats`` does. Extents come from cache
    statistics or one SQL aggregate each; rows are counted only past an edge."""
    facts = _facts(report, "cuda_api") if report.has_rows("cuda_api") else {}
    api = (facts.get("lo"), facts.get("hi"))
    if api[0] is None and facts.get("lo_at_most") is None:
        return []
    exts = {}
    for name in ("kernels", "memcpy", "memset"):
        f = _facts(report, name)
        exts[name] = (f["lo"], f["hi"]) if f.get("lo") is not None else None
    if api[0] is None and facts.get("lo_at_most") is not None:  # bounds of it, not the extent
        bounds = (facts["lo_at_most"], facts["hi_at_least"])
        if all(e is None or (e[0] >= bounds[0] and e[1] <= bounds[1]) for e in exts.values()):
            return []  # nothing starts before a call's start, nor ends after a call's end
        api = _api_extent(report)
    if api[0] is None:
        return []
    before, after = {}, {}
    for name, ext in exts.items():
        if ext is not None and ext[0] < api[0]:
            before[name] = report.count_where(name, f"start < {api[0]}")
        if ext is not None and ext[1] > api[1]:
            after[name] = report.count_where(name, f'"end" > {api[1]}')
    out = []
    before, after = ({t: n for t, n in d.items() if n} for d in (before, after))
    if before:
        out.append(_f("capture_edges", "note", f"{_listed(before)} already running when the "
                      "trace begins (a delayed capture, a capture range or a slice of a longer "
                      "one): their launches are not in it; they are counted, as nsys stats "
                      "counts them", in_flight=before))
    if after:
        out.append(_f("capture_edges", "note", f"{_listed(after)} still running after the last "
                      "recorded CUDA call (the capture or slice closed while they ran, or the "
                      "application exited without waiting for them); they are counted, as "
                      "nsys stats counts them"))
    return out


def _f(check_: str, severity: str, message: str, **facts) -> dict:
    """A finding: its check, severity and sentence, and the facts behind it (``facts``)."""
    return {"check": check_, "severity": severity, "message": message, **facts}


def _launch_calls(report: Report, kernels: int) -> tuple[int, int]:
    """(kernel launch calls, graph launch calls) in the API trace: one SQL aggregate over
    rowid ranges in parallel, on the names' ids (no API column is read). Only when the rows
    outnumber the kernels are calls counted by (pid, correlation id), since 2022-era exports
    hold two API rows for one call (CUDA backtraces)."""
    if not report.has_rows("cuda_api"):
        return 0, 0
    facts = _facts(report, "cuda_api")
    launch, graph = facts.get("launch", 0), facts.get("graph", 0)
    if kernels >= KERNEL_RECORD_SHARE * (launch - graph):
        return launch, graph
    codes, launch_ids, graph_ids = _launch_codes(report)

    def calls(ids: list[int]) -> int:
        rows = np.flatnonzero(np.isin(codes, ids))
        if not len(rows):
            return 0
        k = report.take("cuda_api", ["pid", "correlation_id"], rows)
        key = (k["pid"].to_numpy(np.int64) << 32) | k["correlation_id"].to_numpy(np.int64)
        key.sort()
        return int(1 + np.count_nonzero(key[1:] != key[:-1]))

    return calls(launch_ids), calls(graph_ids)


CAPTURE_BEGIN = re.compile(r"^(cudaStreamBeginCapture|cuStreamBeginCapture)")
CAPTURE_END = re.compile(r"^(cudaStreamEndCapture|cuStreamEndCapture)")


def _captured_launches(report: Report) -> int:
    """Kernel launch calls made inside a stream capture (between ``cudaStreamBeginCapture`` and
    ``cudaStreamEndCapture`` on the same thread): they record graph nodes, never run then, and
    leave no kernel record of their own."""
    if not report.has_rows("cuda_api"):
        return 0
    names = report.cuda_api(["name"])["name"]
    cats = [str(c) for c in names.cat.categories]
    begin = [c for c in cats if CAPTURE_BEGIN.match(c)]
    if not begin:
        return 0
    end = [c for c in cats if CAPTURE_END.match(c)]
    launch = [c for c in cats if LAUNCH_CALLS.match(c) and not GRAPH_LAUNCH.match(c)]
    rows = np.flatnonzero(names.isin(begin + end + launch).to_numpy())
    calls = report.take("cuda_api", ["name", "tid", "start_ns"], rows)
    calls["name"] = calls["name"].astype(str)
    captured = 0
    for _, g in calls.sort_values("start_ns", kind="stable").groupby("tid", sort=False):
        depth = np.cumsum(np.where(g["name"].str.match(CAPTURE_BEGIN.pattern), 1,
                                   np.where(g["name"].str.match(CAPTURE_END.pattern), -1, 0)))
        is_launch = g["name"].isin(launch).to_numpy()
        captured += int((is_launch & (depth > 0)).sum())
    return captured


def _graph_node_kernels(report: Report) -> bool:
    """Whether any kernel was recorded as a graph node (a node-level trace of the replays)."""
    if not report.has_rows("kernels") or "graphNodeId" not in report.db.columns(
            report.spec("kernels").source):
        return False
    return report.any_where("kernels", "graphNodeId IS NOT NULL")


def _impossible_metrics(report: Report) -> int:
    """GPU-metrics samples every read leaves out (``tables.GPU_METRICS_IMPOSSIBLE``): one
    count in SQLite, only where the report has GPU metrics."""
    if not report.db.has(tables.GM) or not report.db.has(tables.GMI):
        return 0
    return int(report.db.query(tables.gpu_metrics_impossible_sql())[0][0])


def _sm_active(report: Report) -> float | None:
    """Mean of the "SMs Active" GPU metric, or None without GPU metrics."""
    if not report.has_rows("gpu_metrics"):
        return None
    m = report.gpu_metrics(["metric", "value"])
    sel = m["metric"].astype(str).str.match(r"(?i)^SMs? Active")
    return float(m.loc[sel, "value"].mean()) if sel.any() else None


def _open_ranges(report: Report) -> list[str]:
    """Names of push/pop and start/end ranges without an end."""
    if not report.has_rows("nvtx"):
        return []
    if not report.is_cached("nvtx") and "end" in report.db.columns("NVTX_EVENTS"):
        ranges = [k for k, v in tables.NVTX_KIND.items() if v != "mark"]
        if not report.db.query(f'SELECT EXISTS (SELECT 1 FROM NVTX_EVENTS WHERE "end" IS NULL '
                               f"AND eventType IN ({', '.join(map(str, ranges))}))")[0][0]:
            return []  # none open: known without reading the ranges

    def in_numpy():
        n = report.nvtx(["kind", "end_ns"])  # then the names of the few open ones
        rows = np.flatnonzero((n["kind"] != "mark").to_numpy() & n["end_ns"].isna().to_numpy())
        del n
        return [str(x) for x in report.take("nvtx", ["name"], rows)["name"]]

    return engine.analyse(report, lambda db: [str(x) for (x,) in db.con.execute(
        f"SELECT name FROM {db.view('nvtx', rows=True)} WHERE kind != 'mark' AND end_ns IS NULL "
        "ORDER BY row").fetchall()], in_numpy)


def _diagnostics(report: Report) -> list[str]:
    """nsys warnings and errors about the capture (DIAGNOSTIC_EVENT), without the benign ones."""
    if "severity" not in report.db.columns("DIAGNOSTIC_EVENT"):
        return []
    rows = report.db.query("SELECT DISTINCT text FROM DIAGNOSTIC_EVENT WHERE severity IN (2, 3)")
    return [str(t).strip() for (t,) in rows if t and not BENIGN.search(str(t))]


def kernel_devices(report: Report) -> list[int]:
    """The devices the kernels ran on (distinct ``device_id``; in DuckDB on big reports)."""
    if not report.has_rows("kernels"):
        return []
    seen = engine.analyse(
        report, lambda db: db.arrays(f"SELECT DISTINCT device_id FROM {db.view('kernels')}")[
            "device_id"], lambda: np.unique(report.kernels(["device_id"])["device_id"].to_numpy()))
    return sorted(int(d) for d in seen)


def _unknown_devices(report: Report) -> list[int]:
    if report.gpus.empty:
        return []
    known = set(report.gpus["device_id"].astype(int))
    return [d for d in kernel_devices(report) if d not in known]


def partial(findings: list[dict]) -> bool:
    """Whether the findings withhold verdicts (the trace lacks part of the run)."""
    return any(f["severity"] == "partial" for f in findings)
