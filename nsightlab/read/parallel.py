"""How a big table is read in parallel: how many readers, and which rowid ranges each reads.

A leaf of the read layer: the SQLite access (``db``), the table contract (``tables``), the
reader and the worker processes all plan their reads with these, and import nothing back.
"""
from __future__ import annotations

import contextlib
import os

from nsightlab.errors import UsageError

#: most SQLite reader threads per big table (each also converts, caches and copies its own
#: batches); the cores this process may use decide below that, and NSIGHTLAB_READERS caps it
MAX_READERS = 32
#: rows under which a table is read by one thread (thread start-up would cost more)
ROWS_PER_READER = 250_000
#: rowid ranges per worker process (even load when some ranges decode slower) ...
RANGES_PER_WORKER = 4
#: ... but at least one range per this many rows, and at most MAX_RANGES ranges (parts)
RANGE_ROWS = 500_000
MAX_RANGES = 256

#: no timestamp lies beyond +-2^62 ns (146 years): a larger one is damage (2^63 reads as a float)
MAX_NS = 1 << 62
#: the SQL of the trace's length (session duration, or its start-to-stop span: the longer)
DURATION_SQL = "SELECT max(max(duration), max(stopTime) - min(startTime)) FROM ANALYSIS_DETAILS"


#: the environment of processes that do no linear algebra (reader processes; the analysis
#: commands, set before NumPy loads): NumPy's OpenBLAS otherwise starts a thread per core at
#: import, and they spin: ~2 CPU-seconds a process on the 16-core GPU machine, where 16 reader
#: processes importing at once took 0.91 s instead of 0.52 s, their spinning stealing the
#: cores the reads and the command itself need
ONE_BLAS_THREAD = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


#: glibc's mallopt parameter: allocations of at least this many bytes are mapped alone
M_MMAP_THRESHOLD = -3
#: big arrays mapped on their own, and unmapped when freed (``eager_unmap``)
MMAP_FROM_BYTES = 1 << 20


def eager_unmap() -> None:
    """Have glibc map every allocation of ``MMAP_FROM_BYTES`` or more on its own, in this
    process, from now on. By default its threshold rises to 32 MB after the first big free, and
    later NumPy temporaries of up to 32 MB (chunks of millions of rows, on each of 16 threads)
    come from per-thread heaps that keep them after they are freed. Nothing where the C
    library has no ``mallopt``."""
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).mallopt(M_MMAP_THRESHOLD, MMAP_FROM_BYTES)


def duration_limit(query) -> int:
    """The longest any activity of a trace can last: the trace itself. ``query(sql)`` answers
    the first row of ``DURATION_SQL`` (None, or an error, without ANALYSIS_DETAILS: then only
    ``MAX_NS`` bounds it). Work already running when a capture or slice opened can have begun
    before the session's start, so no start bound is placed; its duration still cannot exceed
    the session's. Standard library only: ``store.ReadStore.start`` uses it before pyarrow loads."""
    try:
        row = query(DURATION_SQL)
    except Exception:  # no such table or column in an old or partial export
        return MAX_NS
    value = row[0] if row else None
    return int(value) if isinstance(value, int) and 0 < value < MAX_NS else MAX_NS


def readers(rows: int | None = None) -> int:
    """Readers (threads or worker processes) for a table of ``rows``: one per core available
    to this process (``os.sched_getaffinity``), capped by ``NSIGHTLAB_READERS`` and
    ``MAX_READERS``, and by the table's size (small tables are read by one thread)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    cap = os.environ.get("NSIGHTLAB_READERS", "").strip()
    if cap and not (cap.isdigit() and int(cap) > 0):
        raise UsageError(f"NSIGHTLAB_READERS={cap!r} is not a number of readers: set it to a "
                         "whole number, at least 1, or unset it (one per core)")
    n = min(cores, MAX_READERS, int(cap) if cap else MAX_READERS)
    if rows is not None:
        n = min(n, max(1, rows // ROWS_PER_READER))
    return max(1, n)


def range_count(span: int, workers: int) -> int:
    """How many rowid ranges (cache parts) a table of ``span`` rowids is read in by
    ``workers`` processes."""
    return min(MAX_RANGES, max(RANGES_PER_WORKER * workers, span // RANGE_ROWS))


def split_rowids(lo: int, hi: int, parts: int) -> list[tuple[int, int]]:
    """Rowids ``lo..hi`` (inclusive) as ``parts`` contiguous ranges [a, b) of similar size."""
    step = max(1, (hi - lo + parts) // parts)
    return [(a, min(a + step, hi + 1)) for a in range(lo, hi + 1, step)]


def rowid_ends_sql(table: str) -> str:
    """SQL for (min(rowid), max(rowid)) of ``table`` from its b-tree: two lookups. (Asked in
    one ``SELECT min(rowid), max(rowid)`` SQLite scans the whole table: 2 s at 16M rows.)"""
    t = f'"{table}"'
    return f"SELECT (SELECT min(rowid) FROM {t}), (SELECT max(rowid) FROM {t})"
