"""The time budget's two ordered passes as compiled loops (Numba), where Numba is installed.

The streamed budget (``budget_stream``) walks every GPU operation of a run twice in a fixed
order: by launch call (the launch-stretch bit of every call, each iteration's GPU end) and by
start (busy unions, idle gaps and their causes). In NumPy each batch costs dozens of
vectorised passes, and on 16 cores those passes and their helper threads wait on the GIL:
NumPy's ``repeat``, ``bincount`` and fancy indexing hold it on 64K-element chunks, and 8-16
threads attributed the 8M gaps of the launch-bound run no faster than 3 (0.32 s against
0.073 s in 16 processes, H100 host). The loops in ``budget_loops`` do the same arithmetic in
one pass per batch, without the GIL. They give the same integers as the NumPy path
(``_Device``, ``budget_parts.idle_pieces``; the tests compare both on real reports), which
stays for machines without Numba; ``NSIGHTLAB_NO_NUMBA=1`` chooses it.

The loops are compiled on first use and cached (beside ``budget_loops``, else in Numba's
user cache): an installation pays the compilation once, not every command.
"""
from __future__ import annotations

import os
import threading

import numpy as np

_LOOPS = None  # the module of compiled loops once imported (False: not available)
_WARMING: threading.Thread | None = None


def loops():
    """The compiled loops (``budget_loops``), or None where Numba is not installed or
    ``NSIGHTLAB_NO_NUMBA`` is set. Imported on first use: Numba takes ~0.25 s to import."""
    global _LOOPS
    if os.environ.get("NSIGHTLAB_NO_NUMBA"):
        return None
    warming = _WARMING
    if warming is not None and warming is not threading.current_thread():
        warming.join()
    if _LOOPS is None:
        try:
            from nsightlab.analysis import budget_loops
        except ImportError:
            _LOOPS = False
        else:
            _LOOPS = budget_loops
    return _LOOPS or None


def warm_up() -> None:
    """Import Numba and load the compiled loops on a thread now (~0.3-0.6 s of a fresh
    process, once), so that they are ready when the passes start: the streamed budget calls
    this before its join, whose SQL releases the GIL."""
    global _WARMING
    if _WARMING is not None or _LOOPS is not None or os.environ.get("NSIGHTLAB_NO_NUMBA"):
        return
    _WARMING = threading.Thread(target=_load_all, name="nsightlab-numba", daemon=True)
    _WARMING.start()


def _load_all() -> None:
    """Every loop called once on empty arrays of the types the passes give it (each
    signature is loaded from Numba's cache, or compiled, on its first call)."""
    try:
        got = loops()
        if got is None:
            return
        i8, u8, f8 = (np.zeros(0, t) for t in (np.int64, np.uint8, np.float64))
        two = np.zeros((1, 1), np.int64)
        one = np.zeros(1, np.int64)
        state = np.zeros(2, np.int64)
        got.start_pass(i8, i8, i8, f8, i8, u8, one, np.zeros(1, bool), one, one, one, one, one,
                       one, i8, i8, state, two, two, two, i8, i8)
        got.finish(one, np.zeros(2, np.int64), np.zeros(2, np.int64), np.zeros(2, np.int64),
                   np.zeros(2, np.int64), one, one, i8, i8, np.array([0, -1]), two, two,
                   np.zeros((4, 1), np.int64), i8, i8)
        got.busy_add(i8, i8, i8, i8, i8, one, one, one, one, 0)
        got.launch_pass(i8, i8, i8, u8, np.zeros(3, np.int64), i8, i8, i8)
        got.any_seen_twice(i8, u8)
    except Exception:  # noqa: BLE001 - the passes load (and report) what failed themselves
        pass
