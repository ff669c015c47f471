"""Where a command's wall-clock time goes: with NSIGHTLAB_TRACE=1, timestamped marks on
stderr (``nsightlab: trace <seconds since the process started> <what>``), from this process
and, for table reads, from the reader processes' own clocks. A diagnostic for speed work
(``benchmarks/``), silent otherwise; standard library only, so it can mark the earliest steps."""
from __future__ import annotations

import os
import sys
import time

ON = bool(os.environ.get("NSIGHTLAB_TRACE"))


def _born() -> float:
    """This process's start on the ``time.time()`` clock (Linux: /proc; else: now)."""
    try:
        with open("/proc/self/stat") as f:
            ticks = int(f.read().rpartition(")")[2].split()[19])
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return time.time() - uptime + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return time.time()


#: the clock's zero: the first traced process's start, which the processes it starts inherit
#: (``NSIGHTLAB_TRACE_BORN``), so that their marks read on one clock
BORN = float(os.environ.get("NSIGHTLAB_TRACE_BORN") or _born()) if ON else 0.0
if ON:
    os.environ["NSIGHTLAB_TRACE_BORN"] = repr(BORN)


def mark(what: str, at: float | None = None) -> None:
    """Print ``what`` with the time since this process started (``at``: a ``time.time()``
    of another process, such as a reader's)."""
    if ON:
        t = (time.time() if at is None else at) - BORN
        print(f"nsightlab: trace {t:7.3f} {_rss_mb():6.0f} MB  {what}", file=sys.stderr,
              flush=True)


def _rss_mb() -> float:
    """This process's resident memory now (Linux; 0 elsewhere)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        return 0.0
