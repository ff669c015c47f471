"""The compiled loops of ``nsightlab.analysis.compiled`` (imported only when Numba is
installed and the loops are asked for: importing Numba takes ~0.25 s)."""
import numba
import numpy as np

from nsightlab.analysis.budget_parts import LAUNCH_STRETCH_NS

_MIN, _MAX = np.iinfo(np.int64).min, np.iinfo(np.int64).max
STRETCH_NS = np.int64(LAUNCH_STRETCH_NS)
jit = numba.njit(cache=True, nogil=True)


@jit
def _has(bits, r):
    """Whether row ``r`` is in the bit set ``bits`` (``engine.RowBits``)."""
    return ((bits[r >> 3] >> (r & 7)) & 1) == 1


@jit
def cover(a, b, wstart, wend, ptr, k, out, j):
    """Add interval [a, b) to the covered time of each window it meets (``out[j]``);
    ``ptr[k]``: the first window not yet ended before an interval of this union."""
    n = len(wstart)
    w = ptr[k]
    while w < n and wend[w] <= a:
        w += 1
    ptr[k] = w
    while w < n and wstart[w] < b:
        lo = a if a > wstart[w] else wstart[w]
        hi = b if b < wend[w] else wend[w]
        if hi > lo:
            out[j, w] += hi - lo
        w += 1

@jit
def attribute(gs, ge, at, known, quick, wstart, wend, se, sync_code, st, idle, sync_idle,
              sync_count):
    """``budget_parts.idle_pieces`` for one gap [gs, ge): its pieces (one per window
    it meets), each cut where the launch call of the operation ending it started
    (``at``, when ``known``), attributed to sync / launch / host / unattributed.
    ``st``: [first window not ended before the gap, last sync ended at or before the
    previous cut] (gaps come in time order, so both only move forward)."""
    n, m = len(wstart), len(se)
    w = st[0]
    while w < n and wend[w] <= gs:
        w += 1
    st[0] = w
    while w < n and wstart[w] < ge:
        ps = gs if gs > wstart[w] else wstart[w]
        pe = ge if ge < wend[w] else wend[w]
        if pe > ps:
            cut = pe
            if known:
                cut = at if at > ps else ps
                if cut > pe:
                    cut = pe
            before, during = cut - ps, pe - cut
            k = st[1]
            while k + 1 < m and se[k + 1] <= cut:
                k += 1
            st[1] = k
            synced = k >= 0 and se[k] >= ps
            if synced:
                cause = 0
            elif known:
                cause = 1 if quick else 2
            else:
                cause = 3
            idle[cause, w] += before
            if known and during > 0:
                idle[0 if synced else 1, w] += during
            if synced:
                code = sync_code[k]
                sync_idle[code] += before + (during if known else 0)
                sync_count[code] += 1
        w += 1


@jit
def start_pass(s, e, part, api, row, bits, codes, alone, has, cs, ce, ptr, wstart,
               wend, se, sync_code, st, level_cov, alone_cov, idle, sync_idle, sync_count):
    """One GPU's operations of a batch in start order (``budget_stream._Device.add``):
    the union of every level (the parts up to ``codes[j]``; the last level is every
    operation) and of each copy part alone (``alone[j]``), carried in ``has``/``cs``/
    ``ce`` (levels first, then the alone unions); each final interval's covered time
    per window; and the idle gaps of the last level, each attributed by the operation
    that ends it (the first in the batch with its start)."""
    nc = len(codes)
    top = nc - 1
    for i in range(len(s)):
        si, ei, pi = s[i], e[i], part[i]
        for j in range(nc):
            if j != top and pi > codes[j]:
                continue
            if not has[j]:
                has[j] = 1
                cs[j], ce[j] = si, ei
                if j == top:  # the stretch before the GPU's first operation
                    attribute(_MIN, si, np.int64(0) if np.isnan(api[i]) else np.int64(api[i]),
                              not np.isnan(api[i]), row[i] >= 0 and _has(bits, row[i]),
                              wstart, wend, se, sync_code, st, idle, sync_idle, sync_count)
            elif si > ce[j]:
                cover(cs[j], ce[j], wstart, wend, ptr, j, level_cov, j)
                if j == top:
                    f = i
                    while f > 0 and s[f - 1] == si:  # an earlier operation, same start
                        f -= 1
                    attribute(ce[j], si, np.int64(0) if np.isnan(api[f]) else np.int64(api[f]),
                              not np.isnan(api[f]), row[f] >= 0 and _has(bits, row[f]),
                              wstart, wend, se, sync_code, st, idle, sync_idle, sync_count)
                cs[j], ce[j] = si, ei
            elif ei > ce[j]:
                ce[j] = ei
        for j in range(nc):
            if alone[j] and pi == codes[j]:
                k = nc + j
                if not has[k]:
                    has[k] = 1
                    cs[k], ce[k] = si, ei
                elif si > ce[k]:
                    cover(cs[k], ce[k], wstart, wend, ptr, k, alone_cov, j)
                    cs[k], ce[k] = si, ei
                elif ei > ce[k]:
                    ce[k] = ei


@jit
def finish(codes, has, cs, ce, ptr, wstart, wend, se, sync_code, st, level_cov, alone_cov,
           idle, sync_idle, sync_count):
    """The last intervals (final now) and the stretch after the last operation."""
    nc = len(codes)
    for k in range(2 * nc):
        if has[k] and k < nc:
            cover(cs[k], ce[k], wstart, wend, ptr, k, level_cov, k)
        elif has[k]:
            cover(cs[k], ce[k], wstart, wend, ptr, k, alone_cov, k - nc)
    attribute(ce[nc - 1], _MAX, np.int64(0), False, False, wstart, wend, se, sync_code, st,
              idle, sync_idle, sync_count)


@jit
def busy_add(pid, tbl, row, s, e, keys, reach, total, n, first):
    """``BusyByKey.add`` per process for one GPU's operations of a batch, from position
    ``first``: each launched kernel (table 0, with an API row) adds its time beyond the
    latest end its process's launched kernels reached before it. ``keys``/``reach``/
    ``total``: one slot per process, ``n[0]`` used. Returns where it stopped: ``len(s)``,
    or the position of a process for which no slot was free (give more, call again)."""
    for i in range(first, len(s)):
        if tbl[i] != 0 or row[i] < 0:
            continue
        k = 0
        while k < n[0] and keys[k] != pid[i]:
            k += 1
        if k == n[0]:
            if k == len(keys):
                return i
            keys[k], reach[k], total[k] = pid[i], _MIN, 0
            n[0] += 1
        r = reach[k]
        lo = s[i] if s[i] > r else r
        if e[i] > lo:
            total[k] += e[i] - lo
        if e[i] > r:
            reach[k] = e[i]
    return len(s)


@jit
def launch_pass(t, row, e, bits, carry, rs, re_, gpu_end):
    """One GPU's launches of a batch in call order (``budget_stream._launch_pass``):
    the bit of every call whose previous distinct launch time on this GPU is at most
    the stretch before it, and each iteration's GPU end (a launch belongs to the last
    iteration begun at or before it, while that one lasts). ``carry``: [any launch
    yet, the last launch time, the distinct time before it]."""
    ni = len(rs)
    it = -1
    if len(t) and ni:  # the last iteration begun at or before the first launch
        lo, hi = 0, ni
        while lo < hi:
            mid = (lo + hi) // 2
            if rs[mid] <= t[0]:
                lo = mid + 1
            else:
                hi = mid
        it = lo - 1
    for i in range(len(t)):
        ti = t[i]
        if not carry[0]:
            prev = _MIN
            carry[0] = 1
        elif ti == carry[1]:
            prev = carry[2]
        else:
            prev = carry[1]
        carry[1], carry[2] = ti, prev
        if prev != _MIN and ti - prev <= STRETCH_NS and row[i] >= 0:
            bits[row[i] >> 3] |= np.uint8(1 << (row[i] & 7))
        while it + 1 < ni and rs[it + 1] <= ti:
            it += 1
        if it >= 0 and ti <= re_[it] and e[i] > gpu_end[it]:
            gpu_end[it] = e[i]


@jit
def any_seen_twice(rows, seen):
    """Mark ``rows`` in ``seen``; True as soon as one was marked before."""
    for r in rows:
        b, m = r >> 3, np.uint8(1 << (r & 7))
        if seen[b] & m:
            return True
        seen[b] |= m
    return False

