"""Building a big table's cache entry in worker processes, one rowid range per job.

Decoding SQLite rows is CPU-bound, and in reader *threads* the Python glue between batches
(conversion to the column contract, dropping impossible rows, handing batches to the Parquet
writer) serializes on the GIL: on a 16-core machine 16 threads read the 8M-kernel table only
~1.6x faster than 2. Processes share nothing but the export file: each opens it read-only,
reads one rowid range, converts it and writes its own cache part (``cache.part_writer``), and
answers only its row counts. The parent then reads the finished entry like any other.

The workers are plain ``python -m nsightlab.read.workers`` processes taking one JSON job per
line on stdin and answering one JSON line on stdout — not ``multiprocessing``, whose
forkserver/spawn re-runs the user's main script in every worker (a script without an
``if __name__ == "__main__"`` guard would break) and whose ``fork`` is unsafe in a process
that has run threads. On Linux they are forked from one such process (``zygote``) that has
imported their modules and run no thread, not from the user's process. They start once per
process (~0.3 s), are reused for every later table and report, and exit when their stdin
closes (also when the parent is killed).
"""
from __future__ import annotations

import atexit
import importlib
import json
import os
import selectors
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from nsightlab.read import trace
from nsightlab.read.parallel import ONE_BLAS_THREAD, range_count, readers, split_rowids

_POOL: "Workers | None" = None
#: tables of at least this many rows have their cache entry built by worker processes, when
#: at least PROCESS_MIN_WORKERS cores are free for them. On 2 cores threads were ~12% faster
#: while every worker imported pandas and spun OpenBLAS threads; without those, 2 processes
#: took launch_compute's cold read of 16M calls 14.03 -> 13.62 s (4 runs each, the 2-core VM)
#: and kernel_sum's 8M kernels the same time (5.05 s)
PROCESS_MIN_ROWS = 1_000_000
PROCESS_MIN_WORKERS = 2

def in_processes(span: int) -> bool:
    """Whether a table of ``span`` rowids has its cache entry built by worker processes."""
    return span >= PROCESS_MIN_ROWS and readers(span) >= PROCESS_MIN_WORKERS


def plan(sqlite: Path, entry: str, lo: int, hi: int, folder: Path, ident: dict,
         limit: int | None, by_pid: dict[int, Path] | None = None) -> list[dict]:
    """The jobs (``cache_range``) that read rowids ``lo..hi`` of ``sqlite`` into the parts of
    cache entry ``entry`` in ``folder``, one rowid range each (several per worker: an even
    load, and a meter that moves), rows lasting longer than ``limit`` left out; ``by_pid``:
    pid -> the folder where that process's share of every part goes too."""
    ranges = split_rowids(lo, hi, range_count(hi - lo + 1, readers(hi - lo + 1)))
    return [{"db_path": str(sqlite), "table": entry, "rows": list(r),
             "out": str(folder / f"part-{i}.parquet"), "ident": ident, "limit": limit,
             "by_pid": {str(p): str(d / f"part-{i}.parquet") for p, d in (by_pid or {}).items()}}
            for i, r in enumerate(ranges)]


class WorkerDied(Exception):
    """A worker process ended without answering (killed, out of memory)."""


class Workers:
    """``n`` worker processes; ``run(jobs, done)`` hands each a job as it becomes free."""

    def __init__(self, n: int):
        root = str(Path(__file__).resolve().parent.parent)  # this nsightlab, installed or not
        env = {**os.environ, **ONE_BLAS_THREAD, "PYTHONPATH": os.pathsep.join(
            [root, *filter(None, [os.environ.get("PYTHONPATH")])])}
        self.lock = threading.Lock()
        self.traced: set[int] = set()  # workers whose start NSIGHTLAB_TRACE has shown
        self.logs = [tempfile.TemporaryFile() for _ in range(n)]
        self.zygote = None
        if FORK and n:
            self.procs = self._forked(env)
        else:
            self.procs = [subprocess.Popen([sys.executable, "-m", "nsightlab.read.workers"],
                                           stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                           stderr=log, env=env, text=True, bufsize=1)
                          for log in self.logs]

    def _forked(self, env: dict) -> list["_Forked"]:
        """The workers as children of one process that imports their modules once and
        forks them (``zygote``): 16 interpreters each importing pyarrow and NumPy cost ~0.2
        CPU-s apiece, on the cores this process imports on. Each gets its own pipes and log;
        this process keeps only its ends, so a worker's death is an end of file here."""
        ours, theirs = [], []
        for log in self.logs:
            job_r, job_w = os.pipe()
            out_r, out_w = os.pipe()
            ours.append((job_w, out_r))
            theirs.append((job_r, out_w, log.fileno()))
        self.zygote = subprocess.Popen(
            [sys.executable, "-m", "nsightlab.read.workers", "--fork"],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=self.logs[0],
            env={**env, "NSIGHTLAB_WORKER_FDS": json.dumps(theirs)}, text=True,
            pass_fds=[fd for t in theirs for fd in t])
        for job_r, out_w, _ in theirs:
            os.close(job_r)
            os.close(out_w)
        pids = _Pids(self.zygote)
        return [_Forked(pids, i, job_w, out_r) for i, (job_w, out_r) in enumerate(ours)]

    def run(self, jobs: list[dict], done: Callable[[int, dict], None],
            workers: int | None = None) -> None:
        """Run every job on (the first) ``workers`` processes (default: all); ``done(index,
        answer)`` as each finishes (in the calling thread). An answer is ``{"rows": ..,
        "dropped": .., "order": ..}`` (``tables.StartOrder.answer``; a table with a start) or
        ``{"error": .., "kind": ..}``. One run at a
        time: a second caller (a reader while the early start's reads run) waits for the first.
        Raises WorkerDied when a worker ends without answering."""
        with self.lock:
            self._run(jobs, done, self.procs[:workers])

    def _run(self, jobs: list[dict], done: Callable[[int, dict], None], procs: list) -> None:
        todo = list(enumerate(jobs))[::-1]
        busy: dict[int, int] = {}  # worker -> job index
        sel = selectors.DefaultSelector()
        try:
            for w, p in enumerate(procs):
                sel.register(p.stdout, selectors.EVENT_READ, w)
                if todo:
                    busy[w] = self._send(w, todo.pop())
            while busy:
                for key, _ in sel.select():
                    w = key.data
                    line = self.procs[w].stdout.readline()
                    if not line:
                        raise WorkerDied(self._last_words(w))
                    answer = json.loads(line)
                    if trace.ON and "t" in answer:
                        born, t0, t1 = answer["t"]
                        if w not in self.traced:  # its start, once
                            self.traced.add(w)
                            trace.mark(f"reader {w} started", born)
                        trace.mark(f"reader {w} job {busy[w]} {answer.get('rows')} rows "
                                   f"took {t1 - t0:.3f} s", t1)
                    done(busy.pop(w), answer)
                    if todo:
                        busy[w] = self._send(w, todo.pop())
        finally:
            sel.close()

    def _send(self, w: int, job: tuple[int, dict]) -> int:
        try:
            self.procs[w].stdin.write(json.dumps(job[1]) + "\n")
            self.procs[w].stdin.flush()
        except OSError:
            raise WorkerDied(self._last_words(w)) from None
        return job[0]

    def _last_words(self, w: int) -> str:
        log = self.logs[w]
        log.seek(0)
        lines = log.read().decode(errors="replace").strip().splitlines()
        code = self.procs[w].poll()
        return (lines[-1] if lines else "no message") + (f" (exit code {code})" if code else "")

    def close(self, wait: bool = True) -> None:
        """Stop the workers (their stdin closed); ``wait``: until they have exited (killed
        after 5 s), so that none still writes a part."""
        trace.mark("closing the reader processes")
        for p in self.procs:
            try:
                p.stdin.close()
            except OSError:
                pass
        for p in self.procs if wait else ():
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
        for log in self.logs:
            log.close()
        if self.zygote is not None and self.zygote.stdout is not None:
            self.zygote.stdout.close()
        trace.mark("reader processes closed")


#: readers are forked from one process that imported their modules (``Workers._forked``);
#: Linux only (fork after imports, no threads started before it). NSIGHTLAB_NO_FORK=1 starts
#: one interpreter each. 8M kernels on 16 cores: the read 0.82 -> 0.76 s, 16M calls 0.96 ->
#: 0.84 s, the process tree's peak 1.11 -> 0.83 GB (shared pages); the three recipes' time the
#: same within the host's spread
FORK = sys.platform.startswith("linux") and not os.environ.get("NSIGHTLAB_NO_FORK")


class _Pids:
    """The forked workers' process ids, as the zygote writes them once it has forked them
    (read when first needed: the pool does not wait for the zygote's imports)."""

    def __init__(self, zygote: subprocess.Popen):
        self.zygote, self.pids = zygote, None

    def __getitem__(self, i: int) -> int | None:
        if self.pids is None:
            line = self.zygote.stdout.readline()
            self.pids = json.loads(line) if line else []
        return self.pids[i] if i < len(self.pids) else None


class _Forked:
    """A worker forked by the zygote: what the pool uses of ``subprocess.Popen`` (its
    pipes, ``pid``, ``poll``, ``wait``, ``kill``). It is the zygote's child, not this
    process's: whether it has ended is asked of the system (a zombie has ended)."""

    def __init__(self, pids: _Pids, i: int, job_w: int, out_r: int):
        self._pids, self._i = pids, i
        self.stdin = open(job_w, "w", buffering=1)  # noqa: SIM115 (closed by Workers.close)
        self.stdout = open(out_r)  # noqa: SIM115
        self.returncode = None

    @property
    def pid(self) -> int | None:
        return self._pids[self._i]

    def poll(self) -> int | None:
        if self.returncode is None and (self.pid is None or _ended(self.pid)):
            self.returncode = -1  # its code went to the zygote
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired("nsightlab reader", timeout)
            time.sleep(0.01)
        return self.returncode

    def kill(self) -> None:
        import signal

        if self.poll() is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _ended(pid: int) -> bool:
    """Whether process ``pid`` has ended: gone, or a zombie its parent has not reaped."""
    from nsightlab.read.table_cache import alive

    if not alive(pid):
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return False


def pool(n: int) -> Workers:
    """The worker pool of this process, with at least ``n`` workers (started on first use;
    a run may use fewer: ``Workers.run``'s ``workers``)."""
    global _POOL
    if _POOL is None or len(_POOL.procs) < n or any(p.poll() is not None for p in _POOL.procs):
        discard_pool()
        _POOL = Workers(n)
    return _POOL


def discard_pool() -> None:
    """Stop the pool (after a worker died, or at exit)."""
    global _POOL
    if _POOL is not None:
        _POOL.close()
    _POOL = None


def _leave_pool() -> None:
    """At exit: idle workers are told to stop and left to exit on their own (waiting for 16
    to end took 0.07 s of every cold command); while a read still runs (a command stopped
    mid-read; ``ReadStore._at_exit`` stops those of reads no reader took over) they are
    waited for."""
    global _POOL
    if _POOL is not None:
        _POOL.close(wait=_POOL.lock.locked())
    _POOL = None


atexit.register(_leave_pool)


# ---- the worker side -------------------------------------------------------------------------
def cache_range(db_path: str, table: str, out: str, limit: int | None, ident: dict,
                sql: str | None = None, rows: list[int] | None = None,
                by_pid: dict[str, str] | None = None, _dbs: dict = {}) -> dict:
    """Read one rowid range of cache entry ``table`` (``sql``, or rowids ``rows`` [lo, hi)) from
    the export at ``db_path``, convert it to the column contract, leave out impossible rows
    (``drop_invalid`` with ``limit``; None: not checked) and write it to the cache part ``out``
    (and each process's share to ``by_pid``'s part of it: pid -> path). Answers the rows
    written and left out. A table of integers (``TableSpec.plain``) is read straight from the
    export's pages (``pages``), with SQL where they cannot be. The export stays open between
    jobs (StringIds are loaded once per worker)."""
    from nsightlab.read import pages
    from nsightlab.read.db import ExportDB
    from nsightlab.read.tables import entry_spec

    key = (db_path, ident.get("size"), ident.get("mtime_ns"))  # a re-exported file: reopened
    if key not in _dbs:
        for old in _dbs.values():
            if old[1] is not None:
                old[1].close()
        _dbs.clear()
        try:
            file = pages.PageFile(Path(db_path))
        except (pages.Unsupported, OSError):
            file = None
        _dbs[key] = (ExportDB(Path(db_path)), file)
    db, file = _dbs[key]
    spec = entry_spec(table)
    if rows is not None and file is not None and spec.plain is not None and spec.ranged is None:
        try:
            raws = pages.batches(file, db, spec.source, spec.plain(db), *rows)
            return _write_part(spec, db, raws, out, ident, limit, by_pid)
        except pages.Unsupported:
            pass  # written again by SQL
    return _write_part(spec, db, db.stream(sql or spec.range_sql(db, *rows)), out, ident, limit,
                       by_pid)


def _write_part(spec, db, raws, out: str, ident: dict, limit: int | None,
                by_pid: dict[str, str] | None = None) -> dict:
    """The batches ``raws`` of ``spec``'s SELECT, converted (``contract_batches``), written to
    the cache part ``out``, and each process's share of them to its part (``by_pid``): the
    rows written and left out, and their start order (of each share too)."""
    from nsightlab.read.table_cache import part_writer
    from nsightlab.read.tables import contract_batches

    whole = _Share(None, part_writer(Path(out), spec.schema, ident), spec)
    shares = []
    answer = {"dropped": 0}
    try:
        for p, o in (by_pid or {}).items():
            shares.append(_Share(int(p), part_writer(Path(o), spec.schema, ident), spec))
        for b, _read, left_out in contract_batches(spec, db, raws, limit):
            answer["dropped"] += left_out
            for s in (whole, *shares):
                s.add(b)
        for s in (whole, *shares):
            s.flush()
    finally:
        for s in (whole, *shares):
            s.writer.close()
    answer.update(whole.answer())
    if shares:
        answer["by_pid"] = {str(s.pid): s.answer() for s in shares}
    return answer


class _Share:
    """What one cache part receives of the batches read (``_write_part``): every row (``pid``
    None), or the rows of one process (``tables.rows_of_pid``), gathered into row groups of
    ``BATCH_ROWS`` rows as the whole parts have; the rows written and their start order."""

    def __init__(self, pid: int | None, writer, spec):
        from nsightlab.read.tables import StartOrder

        self.pid, self.writer, self.rows, self.held = pid, writer, 0, []
        self.order = StartOrder() if "start_ns" in spec.schema.names else None

    def add(self, batch) -> None:
        import pyarrow as pa

        from nsightlab.read.db import BATCH_ROWS
        from nsightlab.read.tables import rows_of_pid

        if self.pid is None:
            self._write(pa.Table.from_batches([batch]))
            return
        mine = rows_of_pid(batch, self.pid)
        if mine.num_rows:
            self.held.append(mine)
        if sum(t.num_rows for t in self.held) >= BATCH_ROWS:
            self.flush()

    def flush(self) -> None:
        import pyarrow as pa

        if self.held:
            self._write(pa.concat_tables(self.held))
            self.held = []

    def _write(self, t) -> None:
        self.writer.write_table(t, row_group_size=max(t.num_rows, 1))
        self.rows += t.num_rows
        if self.order is not None:
            for c in t.column("start_ns").chunks:
                self.order.add(c)

    def answer(self) -> dict:
        return {"rows": self.rows,
                **({"order": self.order.answer()} if self.order is not None else {})}


class _NoPandas:
    """An import finder that refuses pandas (``main``: reader processes convert batches in
    Arrow alone). A ``sys.modules`` entry of None does not do: pyarrow's Cython import takes
    it for the module."""

    def find_spec(self, name: str, path=None, target=None):
        if name.partition(".")[0] == "pandas":
            raise ImportError("pandas is not imported in nsightlab's reader processes")
        return None


def zygote() -> None:
    """``--fork``: import what a worker needs once, fork one worker per entry of
    NSIGHTLAB_WORKER_FDS ((job pipe, answer pipe, log) descriptors), write their process
    ids on stdout, and reap them until all have ended. Nothing runs a thread before the
    forks (OpenBLAS is held to one thread; Arrow starts its pools on first use)."""
    fds = json.loads(os.environ.pop("NSIGHTLAB_WORKER_FDS"))
    _prepare()
    sys.stdout.flush()
    pids = []
    for job_r, out_w, log in fds:
        pid = os.fork()
        if pid == 0:
            os.dup2(job_r, 0)
            os.dup2(out_w, 1)
            os.dup2(log, 2)
            for fd in {f for t in fds for f in t}:
                os.close(fd)
            main(prepared=True)
            sys.stdout.flush()
            os._exit(0)
        pids.append(pid)
    for fd in {f for t in fds for f in t}:
        os.close(fd)
    try:
        print(json.dumps(pids), flush=True)
    except BrokenPipeError:  # the pool was closed before it asked: its children still reaped
        pass
    while True:
        try:
            os.wait()
        except ChildProcessError:
            break
        except KeyboardInterrupt:
            pass


def _prepare() -> None:
    """pandas refused (``_NoPandas``), the worker's modules imported."""
    sys.meta_path.insert(0, _NoPandas())
    import pyarrow  # noqa: F401

    for module in ("table_cache", "db", "tables", "pages"):  # imported before the first job
        importlib.import_module(f".{module}", __package__)


def main(prepared: bool = False) -> None:
    """Worker loop: one JSON job per stdin line, one JSON answer per stdout line.

    pandas is made unimportable first: the worker never uses it, but pyarrow imports it on
    the first ``pa.array``/``pa.scalar`` of a process when it is installed (to recognise
    pandas objects), which cost each of 16 workers ~0.8 s before its first batch on the GPU
    machine (0.22 s on the 2-core VM)."""
    born = time.time()
    if not prepared:
        _prepare()
    import pyarrow as pa

    from nsightlab.errors import NsightlabError

    try:
        for line in sys.stdin:
            try:
                t0 = time.time()
                answer = cache_range(**json.loads(line))
                answer["t"] = [born, t0, time.time()]  # for NSIGHTLAB_TRACE
            except NsightlabError as e:
                answer = {"error": str(e), "kind": "report"}
            except (pa.ArrowException, OverflowError, ValueError) as e:
                answer = {"error": str(e).splitlines()[0][:200], "kind": "values"}
            except OSError as e:
                answer = {"error": str(e), "kind": "os", "errno": e.errno}
            print(json.dumps(answer), flush=True)
    except KeyboardInterrupt:  # the user's Ctrl-C reached the whole process group
        pass


if __name__ == "__main__":
    if sys.argv[1:] == ["--fork"]:
        zygote()
        os._exit(0)  # its workers have ended and been reaped
    main()
    sys.stdout.flush()
    os._exit(0)  # stdin closed: nothing left to do, and no interpreter teardown (pyarrow's)
