"""NVTX ranges projected onto the GPU: which kernels each range launched, and when they ran.

A kernel belongs to every NVTX range that was open, on the thread that launched it, when its
launching API call started (push/pop ranges: same thread; start/end ranges, which may cross
threads: same process). So an iteration range owns the kernels of all its layer ranges, and
kernels replayed from a CUDA graph belong to the ranges around their ``cudaGraphLaunch``.
This is NVIDIA's documented NVTX→runtime→kernel attribution, generalized to all enclosing
ranges, computed with one sort and ``searchsorted`` per thread.

Columns of ``project``: the NVTX columns (name, text, domain, kind, pid, tid, depth,
start_ns, end_ns, duration_ns) plus kernel_count, kernel_time_ns (sum of kernel durations),
launch_calls and launch_api_ns (the distinct launching calls and the sum of their durations: a
graph launch counts once, not once per kernel), gpu_start_ns / gpu_end_ns (first kernel
start, last kernel end) and gpu_span_ns (their distance: the range's duration on the GPU).
"""
from __future__ import annotations

import copy
import threading

import numpy as np
import pandas as pd

from nsightlab.analysis.launches import first_of_call, launches
from nsightlab.analysis.timeline import slice_reduce
from nsightlab.read.report import Report
from nsightlab.read.tables import nullable_int64

#: launches per batch of ``project_sql``'s stream, and batches added up at once
STREAM_ROWS = 1 << 20
ADD_THREADS = 4
NVTX_COLUMNS = ["name", "text", "domain", "kind", "pid", "tid", "depth", "start_ns", "end_ns",
                "duration_ns"]


def project(report: Report, launched: pd.DataFrame | None = None,
            max_ranges: int = 0) -> pd.DataFrame:
    """Every NVTX range (not marks) with the GPU work it launched (see module docstring);
    ``max_ranges`` > 0: only the outermost ones (``_ranges``).

    ``launched`` may be passed in when the caller already has ``launches(report)`` with at
    least start_ns, end_ns, api_start_ns, api_end_ns, api_tid and api_row.
    """
    if launched is None and max_ranges == 0 and report.db.knows(WHOLE):
        return report.db.once(WHOLE, None).copy()  # launch_compute's, over every range
    sums = _Sums(_ranges(report, max_ranges))
    if sums.n:
        if launched is None:
            launched = launches(report, op_columns=("start_ns", "end_ns"),
                                api_columns=("start_ns", "end_ns", "tid"))
        if len(launched):
            sums.add(launched, first_of_call(launched["api_row"].to_numpy()))
    return sums.frame()


#: the in-process memo of ``project(report)``, left by ``project_sql`` when it kept every
#: range: ``nsightlab report`` runs launch_compute, then nvtx_gpu over the same launches
#: (8M kernels on 16 cores: nvtx_gpu's own launch table and sums took 0.7 s)
WHOLE = "projection:every range"


def _ranges(report: Report, max_ranges: int = 0) -> pd.DataFrame:
    """The NVTX ranges (not marks); ``max_ranges`` > 0: at most that many, the outermost:
    every range down to the deepest nesting level that keeps the count within it (when even
    the outermost level has more, its first ``max_ranges`` in start order). A long TensorRT
    run has a range per layer per inference (13.6M for 8M kernels: ~6 GB as rows); the
    levels above them are the ones read per range. Only the kept rows are read whole."""
    return _kept_ranges(report, max_ranges)[0]


def _kept_ranges(report: Report, max_ranges: int = 0) -> tuple[pd.DataFrame, bool]:
    """``_ranges``, and whether it kept every range."""
    if max_ranges > 0:
        levels = report.nvtx(["kind", "depth"])
        depth = np.where((levels["kind"] != "mark").to_numpy(),
                         levels["depth"].to_numpy(np.int64, na_value=-1), -1)
        del levels
        per_level = np.bincount(depth[depth >= 0])
        fits = np.flatnonzero(np.cumsum(per_level) <= max_ranges)
        if len(fits) < len(per_level):
            return _outermost(report, depth, fits, max_ranges), False
    nvtx = report.nvtx(NVTX_COLUMNS)
    return nvtx[nvtx["kind"] != "mark"].reset_index(drop=True), True


def _outermost(report: Report, depth: np.ndarray, fits: np.ndarray, max_ranges: int
               ) -> pd.DataFrame:
    """The ranges of the levels that fit (``depth`` per NVTX row, -1 for marks), or the first
    ``max_ranges`` of the outermost level, with a note of what was left out."""
    rows = np.flatnonzero((depth >= 0) & (depth <= fits[-1])) if len(fits) else \
        np.flatnonzero(depth == 0)[:max_ranges]
    left = int((depth >= 0).sum()) - len(rows)
    report.note(f"{report.path.name}: {left:,} NVTX ranges left out of the per-range table "
                f"(it keeps the outermost {len(rows):,}: raise max_ranges, or 0 for all)")
    return report.take("nvtx", NVTX_COLUMNS, rows)


class _Sums:
    """Per NVTX range: kernels, their time, launch calls and their time, first kernel start
    and last kernel end, added up over batches of launches (``add``): the same numbers from
    the whole launch table at once or from a stream of it."""

    def __init__(self, nvtx: pd.DataFrame):
        self.nvtx, n = nvtx, len(nvtx)
        self.n = n
        self.count, self.ktime = np.zeros(n, np.int64), np.zeros(n, np.int64)
        self.api, self.calls = np.zeros(n, np.int64), np.zeros(n, np.int64)
        self.gstart = np.full(n, np.iinfo(np.int64).max)
        self.gend = np.full(n, np.iinfo(np.int64).min)
        self.end = nvtx["end_ns"].fillna(np.iinfo(np.int64).max).to_numpy(np.int64)
        self.start = nvtx["start_ns"].to_numpy(np.int64)
        push_pop = (nvtx["kind"] == "push_pop").to_numpy()
        tids = np.where(push_pop, nvtx["tid"].to_numpy(), -1)  # start/end: any thread
        self.groups = list(_groups(nvtx["pid"].to_numpy(), tids))

    def add(self, launched, first: np.ndarray) -> None:
        """Add launches (pid, api_tid, api_start_ns, api_end_ns, start_ns, end_ns: a DataFrame
        or a dict of arrays); ``first``:
        the first operation of its call (a graph launch's call time counts once).

        One method on purpose: the per-thread loop shares a dozen arrays over every launch
        (millions); split up, they would be passed or copied around."""
        lp = np.asarray(launched["pid"])
        lt = np.asarray(launched["api_tid"])
        l_api_start = np.asarray(launched["api_start_ns"], np.int64)
        l_api_end = np.asarray(launched["api_end_ns"], np.int64)
        l_start = np.asarray(launched["start_ns"], np.int64)
        l_end = np.asarray(launched["end_ns"], np.int64)
        single = len(np.unique(lt[:1000])) == 1 and np.all(lt == lt[0]) and np.all(lp == lp[0])
        for (pid, tid), rows in self.groups:
            if single and pid == lp[0] and tid in (-1, lt[0]):
                sel = None  # one launching thread (the usual case): use the columns as they are
            else:
                sel = np.flatnonzero((lp == pid) & ((lt == tid) if tid >= 0 else True))
                if not len(sel):
                    continue
            take = _ordered(l_api_start, sel)
            api_start = l_api_start if take is None else l_api_start[take]
            k_start = l_start if take is None else l_start[take]
            k_end = l_end if take is None else l_end[take]
            once = first if take is None else first[take]
            lo = np.searchsorted(api_start, self.start[rows], "left")
            hi = np.searchsorted(api_start, self.end[rows], "right")
            self.count[rows] += hi - lo
            self.ktime[rows] += _slice_sum(k_end, k_start, lo, hi)
            self.api[rows] += _slice_sum(l_api_end if take is None else l_api_end[take],
                                         api_start, lo, hi, once)
            self.calls[rows] += _slice_sum(once, 0, lo, hi)
            gpu_first = slice_reduce(np.minimum, k_start, lo, hi, np.iinfo(np.int64).max)
            gpu_last = slice_reduce(np.maximum, k_end, lo, hi, np.iinfo(np.int64).min)
            self.gstart[rows] = np.minimum(self.gstart[rows], gpu_first)
            self.gend[rows] = np.maximum(self.gend[rows], gpu_last)

    @staticmethod
    def threads() -> int:
        """Threads ``add_all`` adds batches on."""
        from nsightlab.read.reader import readers

        return min(ADD_THREADS, readers())

    def add_all(self, batches) -> None:
        """``add`` every Arrow batch of launches (with ``once``), up to ``ADD_THREADS`` at a
        time into copies of the sums, merged at the end (NumPy releases the GIL)."""
        from concurrent.futures import ThreadPoolExecutor

        def add(sums: "_Sums", batch) -> None:  # NumPy columns: no DataFrame (8M launches
            # on 2 cores: to_pandas of the batches took 0.19 s)
            got = {c: np.asarray(batch.column(c)) for c in batch.schema.names}
            sums.add(got, got["once"].astype(bool, copy=False))

        workers = self.threads()
        if workers < 2:
            for batch in batches:
                add(self, batch)
            return
        parts = [self._empty_copy() for _ in range(workers)]
        free = list(parts)
        lock = threading.Lock()

        def work(batch) -> None:
            with lock:
                part = free.pop()
            try:
                add(part, batch)
            finally:
                with lock:
                    free.append(part)

        with ThreadPoolExecutor(workers) as pool:
            pending = []
            for batch in batches:
                pending.append(pool.submit(work, batch))
                while len(pending) >= workers:  # one batch per thread, the next read included
                    pending.pop(0).result()
            for f in pending:
                f.result()
        for part in parts:
            self.count += part.count
            self.ktime += part.ktime
            self.api += part.api
            self.calls += part.calls
            np.minimum(self.gstart, part.gstart, out=self.gstart)
            np.maximum(self.gend, part.gend, out=self.gend)

    def _empty_copy(self) -> "_Sums":
        """The same ranges with sums of its own (``add_all``'s threads)."""
        part = copy.copy(self)
        part.count, part.ktime = np.zeros_like(self.count), np.zeros_like(self.ktime)
        part.api, part.calls = np.zeros_like(self.api), np.zeros_like(self.calls)
        part.gstart = np.full_like(self.gstart, np.iinfo(np.int64).max)
        part.gend = np.full_like(self.gend, np.iinfo(np.int64).min)
        return part

    def frame(self) -> pd.DataFrame:
        out = self.nvtx.copy()
        out["kernel_count"] = self.count
        out["kernel_time_ns"] = self.ktime
        out["launch_calls"] = self.calls
        out["launch_api_ns"] = self.api
        has = self.count > 0
        out["gpu_start_ns"] = nullable_int64(self.gstart, ~has)
        out["gpu_end_ns"] = nullable_int64(self.gend, ~has)
        out["gpu_span_ns"] = out["gpu_end_ns"] - out["gpu_start_ns"]
        return out


def _ordered(api_start: np.ndarray, sel: np.ndarray | None) -> np.ndarray | None:
    """Row indices putting the selected launches in call order (None: all rows, already)."""
    if sel is None:
        if np.all(api_start[1:] >= api_start[:-1]):
            return None
        return np.argsort(api_start, kind="stable")
    return sel[np.argsort(api_start[sel], kind="stable")]


def _slice_sum(a: np.ndarray, b, lo: np.ndarray, hi: np.ndarray,
               where: np.ndarray | None = None) -> np.ndarray:
    """Sum of ``a - b`` (only where ``where``) over every [lo, hi) slice, in one buffer: one
    8M-row array, not three (difference, cumulative sum, its shifted copy)."""
    cum = np.empty(len(a) + 1, np.int64)
    cum[0] = 0
    np.subtract(a, b, out=cum[1:])
    if where is not None and not where.all():
        cum[1:][~where] = 0
    np.cumsum(cum[1:], out=cum[1:])
    return cum[hi] - cum[lo]


def _groups(pids: np.ndarray, tids: np.ndarray):
    """(pid, tid) -> row indices; tid -1 stands for "any thread of the process"."""
    frame = pd.DataFrame({"pid": pids, "tid": tids})
    for key, idx in frame.groupby(["pid", "tid"], sort=False).indices.items():
        yield key, idx


def project_sql(report: Report, db, max_ranges: int = 0) -> pd.DataFrame:
    """``project`` over the launch table ``lk`` in DuckDB (``launches.launches_sql`` with
    start_ns, end_ns, api_start_ns, api_end_ns, api_tid), read a million launches at a time
    and added up per range: bounded memory for every kind of range (push/pop or start/end)."""
    from nsightlab.analysis.engine import read_ahead
    from nsightlab.analysis.launches import ONCE_TABLE, once_table

    ranges, every = _kept_ranges(report, max_ranges)
    sums = _Sums(ranges)
    if sums.n:
        table, once = once_table(db)  # per call: a window over the whole table, kept
        # a quarter of the rows a batch on each of 4 threads: as many in flight as one
        # thread had (million-row batches on 4 threads, read ahead, could hold 8 at once:
        # launch_compute peaked at 1.44 GB on 8M graph-launched kernels on 16 cores)
        chunks = read_ahead(db.chunks(
            table, f"pid, api_tid, api_start_ns, api_end_ns, start_ns, end_ns, {once} AS once",
            STREAM_ROWS // sums.threads()))
        sums.add_all(chunks)
        db.con.execute(f"DROP TABLE IF EXISTS {ONCE_TABLE}")
    out = sums.frame()
    if every:  # every range, over every launch (lk): what project(report) would give
        report.db.remember(WHOLE, out.copy())
    return out


