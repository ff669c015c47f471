"""Kernels joined to their launch calls by the reader processes: a cache entry of its own.

The time budget and launch_compute pair every kernel with the API call that launched it (same
process, same correlation id). In DuckDB that join, with its result stored as a table, took
0.85 s of 8M kernels and 16M calls on the 16-core GPU machine and 3.0 s on 2 cores: a hash
table of the calls, and 8M joined rows written to the engine's database (past its memory limit,
to disk). Here each reader process joins one cached kernel part to the few API row groups its
correlation ids can lie in (the row groups' min/max; both tables are cached in call order on
exports before nsys 2025.6): the API keys are sorted already, so the join is a binary search,
and the result is a Parquet part beside the others. The engine reads these parts as a view
(``budget_stream``), nothing is copied into its database, and later commands on the same
report find the entry.

A part holds its kernel part's rows in the same order: ``device_id``, ``start_ns``, ``end_ns``,
``pid``, ``name``, ``row`` (the kernel's row in the kernels entry) and the call's ``api_start``,
``api_end``, ``api_tid``, ``api_name``, ``api_row`` (NULL where no call was recorded). The two
names are codes into the entry's ``names.json`` (``names``): DuckDB groups and counts 8M
integers read from Parquet several times faster than 8M strings (per kernel statistics over
the launch table: 0.07 s against 0.34 s a scan on 2 cores).

The entry is refused (``build`` answers None, the engine joins in DuckDB as before, and the
refusal is remembered in the entry) when the calls' correlation ids are spread so that a job
would read many times its kernels' worth of calls (``MAX_API_PER_KERNEL``), when an API row
group has no statistics, or when one call has two API rows (the engine's join keeps the last).
"""
from __future__ import annotations

import json
from pathlib import Path

from nsightlab.read.launch_join import join_part, schema
from nsightlab.read.table_cache import META

import numpy as np

#: the cache entry's name (beside the tables' entries)
ENTRY = "kernel_launches"
#: the launch table columns a part carries: what ``Engine.want_launches`` may ask for
OP_OFFER = ("start_ns", "end_ns", "device_id", "name")
API_OFFER = ("start_ns", "end_ns", "tid", "name")
#: a job may read up to this many API rows per kernel row (plus two row groups): more means
#: the calls' correlation ids are not in call order, and DuckDB's hash join does better
MAX_API_PER_KERNEL = 4
SLACK_ROWS = 1 << 17
#: the entry's file of the names its codes stand for: {"name": [...], "api_name": [...]}
NAMES = "names.json"


def names(report) -> dict[str, list[str]]:
    """The kernel and call names the entry's codes stand for (``files`` found it valid)."""
    return json.loads((report.cache.root / ENTRY / NAMES).read_text())


def _distinct_names(files: list[Path]) -> list[str]:
    """The distinct values of the ``name`` column of cache parts, sorted: their dictionaries
    (the codes alone are decoded, not the strings)."""
    import pyarrow.parquet as pq

    from nsightlab.read.table_cache import READ

    seen: set[str] = set()
    for f in files:
        for chunk in pq.ParquetFile(f, **READ).read(columns=["name"]).column(0).chunks:
            seen.update(chunk.dictionary.to_pylist() if hasattr(chunk, "dictionary")
                        else chunk.unique().to_pylist())
    seen.discard(None)
    return sorted(seen)


def offers(op_columns, api_columns) -> bool:
    """Whether the entry holds a launch table of these columns."""
    return set(op_columns) <= set(OP_OFFER) and set(api_columns) <= set(API_OFFER)


def _origin(cache) -> dict | None:
    """The kernels' and calls' entries an entry was built from (their parts' sizes): an entry
    built from other ones is stale."""
    got = {}
    for t in ("kernels", "cuda_api"):
        meta = cache.meta(t)
        if meta is None:
            return None
        got[t] = [p["size"] for p in meta["parts"]]
    return got


def files(report) -> list[Path] | None:
    """The entry's parts, built now by the reader processes when needed; None when the report
    has no cache, lacks kernels or calls, or the join was refused (the engine joins)."""
    cache = report.cache
    if cache is None or not (report.has_rows("kernels") and report.has_rows("cuda_api")):
        return None
    report.prefetch(["kernels", "cuda_api"])
    origin = _origin(cache)
    if origin is None:
        return None
    meta = cache.meta(ENTRY)
    if meta is None or meta.get("origin") != origin:
        meta = _build(report, origin)
    if meta is None or meta.get("refused"):
        return None
    return cache.files(ENTRY)


class _Failed(Exception):
    """A job failed (a reader died, a part could not be read): no entry, the engine joins."""


def _build(report, origin: dict) -> dict | None:
    from nsightlab.read import trace

    cache = report.cache
    jobs, why = plan(cache.files("kernels"), cache.meta("kernels"), cache.files("cuda_api"))

    def fill(parts):
        if jobs and not why:
            (parts.folder / NAMES).write_text(json.dumps(
                {"name": _distinct_names(cache.files("kernels")),
                 "api_name": _distinct_names(cache.files("cuda_api"))}))
        for j in jobs:
            j["out"], j["ident"] = str(parts.path(j.pop("part"))), parts.ident
            j["names"] = str(parts.folder / NAMES)
        answers = _run(jobs) if jobs and not why else []
        refused = why or next((a["refused"] for a in answers if "refused" in a), None)
        if refused:
            for f in parts.folder.glob("part-*.parquet"):
                f.unlink()
            return 0, refused
        return sum(a["rows"] for a in answers), None

    try:
        refused = cache.build(ENTRY, fill, schema(), extra=lambda: {"origin": origin})
    except (OSError, _Failed) as e:
        trace.mark(f"kernel launches: joined in DuckDB ({e})")
        return None
    if refused:  # remembered: later commands join in DuckDB without trying again
        meta = cache.meta(ENTRY) or {}
        meta["refused"] = refused
        try:
            (cache.root / ENTRY / META).write_text(json.dumps(meta, indent=1))
        except OSError:
            pass
        trace.mark(f"kernel launches: joined in DuckDB ({refused})")
        return {"refused": refused}
    trace.mark("kernel launches: joined by the reader processes")
    return cache.meta(ENTRY)


def _run(jobs: list[dict]) -> list[dict]:
    """The jobs' answers, from the reader processes when there are several, else from here.
    Raises ``_Failed`` when one fails."""
    from nsightlab.read import workers
    from nsightlab.read.parallel import readers

    n = readers()
    if n < 2 or len(jobs) < 2:
        return [join_part(**j) for j in jobs]
    answers: list = [None] * len(jobs)

    def done(i: int, answer: dict) -> None:
        if "error" in answer:
            raise _Failed(answer["error"])
        answers[i] = answer

    try:
        workers.pool(n).run([{"task": "join", **j} for j in jobs], done, n)
    except workers.WorkerDied as e:
        workers.discard_pool()
        raise _Failed(str(e)) from None
    except BaseException:
        workers.discard_pool()  # readers may still be writing: stop them first
        raise
    return answers


def plan(kernel_files, kernel_meta, api_files) -> tuple[list[dict], str | None]:
    """One job per kernel part: its file, its first row, and the API row groups ([file,
    [[group, its first row], ...]]) whose correlation ids meet the part's. ([], why) when
    refused."""
    import pyarrow.parquet as pq

    from nsightlab.read.table_cache import READ, id_ranges

    if not kernel_files or not api_files:
        return [], "no cached parts"
    groups = []  # (file, group, min id, max id, first row, rows)
    first = 0
    for f in api_files:
        md = pq.ParquetFile(f, **READ).metadata
        at = md.schema.to_arrow_schema().get_field_index("correlation_id")
        for g in range(md.num_row_groups):
            group = md.row_group(g)
            st = group.column(at).statistics
            if st is not None and st.has_null_count and st.null_count == group.num_rows:
                pass  # no ids at all: no kernel joins it
            elif st is None or not st.has_min_max:
                return [], "API row groups without statistics"
            else:
                groups.append((str(f), g, st.min, st.max, first, group.num_rows))
            first += group.num_rows
    lo = np.array([g[2] for g in groups], np.int64)
    hi = np.array([g[3] for g in groups], np.int64)
    jobs = []
    k_first = 0
    for i, (f, meta) in enumerate(zip(kernel_files, kernel_meta["parts"])):
        job = {"part": i, "kernels": str(f), "first_row": k_first, "api": []}
        k_first += meta["rows"]
        ids = id_ranges([f], "correlation_id")
        if ids is None:
            return [], "kernel row groups without statistics"
        if len(ids[0]):
            hit = np.flatnonzero((hi >= ids[0].min()) & (lo <= ids[1].max()))
            if sum(groups[h][5] for h in hit) > MAX_API_PER_KERNEL * meta["rows"] + SLACK_ROWS:
                return [], "the calls' correlation ids are not in call order"
            by_file: dict[str, list] = {}
            for h in hit:
                by_file.setdefault(groups[h][0], []).append([groups[h][1], groups[h][4]])
            job["api"] = [[f_, gs] for f_, gs in by_file.items()]
        jobs.append(job)
    return jobs, None
