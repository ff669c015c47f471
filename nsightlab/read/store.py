"""The reads of one export into one cache folder (``ReadStore``): its table cache and the
reads of its big tables under way in the worker processes (``Started``), which the open
starts before pandas and pyarrow are imported and the Report's reader takes over. Only the
standard library is imported here."""
from __future__ import annotations

import atexit
import shutil
import sqlite3
import threading
from pathlib import Path
from urllib.parse import quote

from nsightlab.read import workers
from nsightlab.read.parallel import duration_limit, readers, rowid_ends_sql
from nsightlab.read.table_cache import TableCache, build_dir, process_root

#: the tables whose first read ``start`` may start, and their cache entries
FIRST_READ = {"CUPTI_ACTIVITY_KIND_KERNEL": "kernels", "CUPTI_ACTIVITY_KIND_RUNTIME": "cuda_api"}


class Started:
    """A cache entry whose parts the pool is building in ``folder`` (``ReadStore.start``),
    not yet an entry: the reader that first needs the table takes it over and commits it
    (``TableReader._finish_started``)."""

    def __init__(self, folder: Path, jobs: list[dict], by_pid: dict[int, Path]):
        self.folder, self.jobs = folder, jobs
        #: pid -> the folder of that process's share of the parts (``take_share``); kept
        #: once the whole entry is committed with every row (none left out or duplicate)
        self.by_pid = by_pid
        self.whole = False
        self.answers: list[dict | None] = [None] * len(jobs)
        self.error: BaseException | None = None  # the pool's own failure (a worker died)
        self.done = threading.Event()
        self.lock = threading.Lock()  # held by the reader that finishes it
        self.finished = False

    def drop_shares(self) -> None:
        """The processes' shares of the parts, removed (the whole entry left rows out)."""
        for folder in self.by_pid.values():
            shutil.rmtree(folder, ignore_errors=True)
        self.by_pid = {}


class ReadStore:
    """The reads of export ``sqlite`` into cache folder ``root`` (None: no cache). One per
    Report; a process's view has its own (``for_pid``) that keeps this one as ``whole``."""

    def __init__(self, sqlite: Path, root: Path | None, whole: ReadStore | None = None,
                 pid: int | None = None, cut: tuple[str, ...] = ()):
        self.sqlite, self.root = Path(sqlite), root
        #: the table cache (None without one, or once its folder proved unwritable)
        self.cache = TableCache(root, self.sqlite, cut, whole and whole.sqlite) if root else None
        #: of a process's view (``for_pid``): the whole report's store, the pid, and the
        #: tables whose entries are cut from that store's (never read from this export)
        self.whole, self.pid, self.cut = whole, pid, cut if root is not None else ()
        #: reads of big tables into this cache under way (``start``), by cache entry
        self.started: dict[str, Started] = {}
        #: the TableReader of this store (set by its Report): a process's view cuts through it
        self.reader = None

    def for_pid(self, pid: int, sqlite: Path, cut: tuple[str, ...]) -> ReadStore:
        """The store of process ``pid``'s own export ``sqlite`` (``read.split``): its cache
        in this store's folder (``process_root``), its tables ``cut`` from this store's."""
        root = None if self.cache is None else process_root(self.cache.root, pid)
        return ReadStore(sqlite, root, self, pid, cut)

    def start(self, tables: tuple[str, ...] = ("kernels",), by_process: bool = False) -> bool:
        """Start reading now (``read``) those of ``tables`` (of ``FIRST_READ``: those the
        command will read) that are not cached yet and big enough for worker processes,
        when a cache is kept. ``by_process``: the command reads each CUDA process on its own
        (``read.split``): where the export holds several, the same read writes each one's
        share of every part too (``take_share``). ``nsightlab.open`` calls this before
        importing pandas and pyarrow, so the workers start (~0.9 s for 16 on the GPU machine)
        and read while this process imports (~1 s there). Returns whether it started them."""
        if self.cache is None or workers._POOL is not None:
            return False
        try:
            con = sqlite3.connect(f"file:{quote(str(self.sqlite.resolve()))}?mode=ro&immutable=1",
                                  uri=True)
        except sqlite3.Error:
            return False
        todo, pids = [], []
        try:
            for table, entry in FIRST_READ.items():
                if entry not in tables or (self.root / entry / "meta.json").exists():
                    continue
                try:
                    lo, hi = con.execute(rowid_ends_sql(table)).fetchone()
                except sqlite3.Error:  # no such table, a view, not a database: the open says
                    continue
                if lo is not None and workers.in_processes(hi - lo + 1):
                    todo.append((entry, lo, hi))
            limit = duration_limit(lambda sql: con.execute(sql).fetchone()) if todo else None
            if todo and by_process:  # the processes that created CUDA streams
                pids = sorted(int(r[0]) for r in con.execute(
                    "SELECT DISTINCT processId FROM TARGET_INFO_CUDA_STREAM") if r[0])
        except sqlite3.Error:  # (no stream table: read as one process)
            pass
        finally:
            con.close()
        if not todo:
            return False
        try:
            self.read(todo, limit, pids if len(pids) > 1 else [])
        except OSError:  # an unwritable cache: the reader will say so
            return False
        return True

    def read(self, todo: list[tuple[str, int, int]], limit: int | None, pids: list[int] = (),
             processes: int | None = None) -> list[Started]:
        """Build the entries ``todo`` ((entry, first rowid, last rowid)) in one run of the
        pool (on its first ``processes``; default all) on a thread of its own, one after the
        other with no wait between them (``workers.plan``); rows lasting longer than ``limit``
        (``tables.duration_limit``) are left out. ``pids``: processes whose share of each
        part is written too, in a build folder of their own cache (``process_root``).
        Raises OSError when the cache folder cannot be written."""
        root, started, jobs = self.cache.root, [], []
        root.mkdir(parents=True, exist_ok=True)
        for entry, lo, hi in todo:
            by_pid = {}
            for p in pids:
                process_root(root, p).mkdir(parents=True, exist_ok=True)
                by_pid[p] = build_dir(process_root(root, p), entry)
            folder = build_dir(root, entry)
            started.append(Started(folder, workers.plan(
                self.sqlite, entry, lo, hi, folder, self.cache.ident_of(entry), limit, by_pid),
                by_pid))
            jobs += [(started[-1], i, job) for i, job in enumerate(started[-1].jobs)]
        pool = workers.pool(readers())
        if not self.started:
            atexit.register(self._at_exit)
        self.started.update((entry[0], s) for entry, s in zip(todo, started))

        def done(k: int, answer: dict) -> None:
            s, i, _ = jobs[k]
            s.answers[i] = answer
            if all(a is not None for a in s.answers):
                s.done.set()

        def run() -> None:
            try:
                pool.run([job for _, _, job in jobs], done, processes)
            except BaseException as e:  # the taker raises it
                for s in started:
                    s.error = e
            finally:
                for s in started:
                    s.done.set()

        threading.Thread(target=run, daemon=True, name="nsightlab-first-read").start()
        return started

    def take_share(self, entry: str, pid: int) -> tuple[Path, list[dict]] | None:
        """Process ``pid``'s share of the parts that the started read of ``entry`` wrote
        (``start(by_process=True)``), once the whole entry is committed with every row: the
        folder of its parts and each part's answer (rows, start order). Taken once; None
        when there is none."""
        s = self.started.get(entry)
        if s is None or not s.finished or not s.whole or pid not in s.by_pid:
            return None
        return s.by_pid.pop(pid), [a["by_pid"][str(pid)] for a in s.answers]

    def drop_shares(self) -> None:
        """The processes' shares of finished reads that no process's view took (no GPU work,
        or the tables copied), removed now rather than when this interpreter ends."""
        for s in self.started.values():
            if s.finished:
                s.drop_shares()

    def _at_exit(self) -> None:
        """At exit: the folders of reads no reader took over and the shares no process took,
        removed (this run knows they are its own); the workers stopped first if still busy."""
        if any(not s.finished for s in self.started.values()):
            workers.discard_pool()
        for s in self.started.values():
            if not s.finished:
                shutil.rmtree(s.folder, ignore_errors=True)
            s.drop_shares()

