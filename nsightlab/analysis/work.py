"""The work of each iteration: what it ran, exactly, whatever its pace.

The trace records exactly what every iteration ran; how long it took is what the machine made
of it (the host's speed between launches, the GPU's clocks, other processes). So kinds of
iteration are decided by work first (``kinds.classify(..., work=...)``) and pace is measured
within one kind of work.

An iteration's **signature** is the multiset of its GPU operations, each a token: a kernel by
class (``classify.kernel_class``: gemm, attention, elementwise...; blind to grids, and to the
variant cuBLAS or an attention library picks for a shape or a KV length), a copy by direction
and host memory kind (pageable, pinned; not by size: a growing copy is one kind of work whose
time grows), a memset, a CUDA graph execution by graph, and a synchronizing call by API. An
optimizer step (its elementwise kernels), an eval pass (its convolutions), a logged copy or
an extra sync is other work; a kernel variant is not. Operations belong to the iteration
window their GPU start falls in (windows tile the loop); sync calls by their end. The kernel
names of each work's first iteration are kept (``tokens``) for words and diffs.

Multisets are compared by two sums of random 20-bit weights per token (exact in float64 up to
2^33 operations an iteration), so an iteration's signature costs O(1) per operation and
operations may swap order between streams. Where the work does not settle into a few kinds
(``holds``), it is unknown (``level`` "none") and kinds come from pace alone.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from nsightlab.read.report import Report

#: a kind of work holds at least this many iterations (as ``kinds.MIN_KIND``)
MIN_KIND = 3
#: at most this share of the loop's iterations may run work seen fewer than ``MIN_KIND``
#: times for a level of signatures to hold (%)
RARE_MAX_PCT = 10.0
#: at most this many kinds of work recur at one level (a cycle counts as one)
MAX_WORK_KINDS = 6
#: cycles of work looked for: every 2nd ... every ``MAX_CYCLE``th iteration
MAX_CYCLE = 16
#: a cycle holds when this share of the iterations run the work of their place in it
CYCLE_AGREE = 0.9

_SEED = 0x5EED


@dataclass
class Work:
    """The work of every iteration: ``ids`` (one int per iteration; equal ids, equal work),
    ``level`` ("classes", or "none" where the work does not settle into kinds), and
    ``kinds``: one row per work id (id, iterations, kernels, copies, memsets, syncs, graphs,
    each per iteration of that work) with ``tokens`` (the kernel names or classes with their
    counts, of its first iteration) for words and diffs."""

    ids: np.ndarray
    level: str
    kinds: pd.DataFrame = field(default_factory=pd.DataFrame)
    tokens: dict = field(default_factory=dict)

    @property
    def known(self) -> bool:
        return self.level != "none" and len(self.ids) > 0


def _weights(n: int, salt: int) -> np.ndarray:
    return np.random.default_rng(_SEED + salt).integers(1, 1 << 20, n).astype(np.float64)


def _at(start: np.ndarray, end: np.ndarray, t: np.ndarray) -> np.ndarray:
    """The window (index) each time ``t`` falls in, -1 where none."""
    at = np.searchsorted(start, t, "right") - 1
    ok = (at >= 0) & (t <= end[np.maximum(at, 0)])
    return np.where(ok, at, -1)


def _tokens(report: Report, start: np.ndarray, end: np.ndarray
            ) -> tuple[list[tuple[np.ndarray, np.ndarray, np.ndarray]], list[str], np.ndarray]:
    """(window, token, kind) arrays of every operation and sync call in a window, the token
    names (kind: 0 kernel, 1 copy, 2 memset, 3 sync, 4 graph; kernels by name) and each
    token's class token (kernels by ``classify.kernel_class``, the others as they are)."""
    names: list[str] = []
    coarse: list[np.ndarray] = []
    out = []

    def add(at: np.ndarray, token_names: list[str], codes: np.ndarray, kind: int,
            classes: np.ndarray | None = None) -> None:
        ok = at >= 0
        base = len(names)
        names.extend(token_names)
        own = np.arange(base, base + len(token_names))
        coarse.append(own if classes is None else classes)
        out.append((at[ok], codes[ok].astype(np.int64) + base, np.full(int(ok.sum()), kind,
                                                                       np.int8)))

    if report.has_rows("kernels"):
        from nsightlab.analysis.classify import kernel_class
        k = report.table("kernels", ["start_ns", "name"])
        codes = k["name"].cat.codes.to_numpy()
        cats = [str(c) for c in k["name"].cat.categories] + ["(no name)"]
        codes = np.where(codes >= 0, codes, len(cats) - 1)  # a kernel named by nothing
        cls = np.array([kernel_class(c) for c in cats], dtype=object)
        uniq, inv = np.unique(cls, return_inverse=True)
        # class tokens after every name token (made unique later by offset)
        at = _at(start, end, k["start_ns"].to_numpy(np.int64))
        add(at, cats, codes, 0, -1 - inv.reshape(-1))
        del k
        graph = _graph_launches(report, at)
        if graph is not None:
            add(graph, ["graph launch"], np.zeros(len(graph), np.int64), 4)
    if report.has_rows("memcpy"):
        from nsightlab.analysis.budget_parts import BUSY_PARTS, copy_codes
        c = report.memcpy(["start_ns", "copy_kind", "src_kind", "dst_kind"])
        add(_at(start, end, c["start_ns"].to_numpy(np.int64)), [f"copy {p}" for p in BUSY_PARTS],
            copy_codes(c).astype(np.int64), 1)
    if report.has_rows("memset"):
        m = report.table("memset", ["start_ns"])
        add(_at(start, end, m["start_ns"].to_numpy(np.int64)), ["memset"],
            np.zeros(len(m), np.int64), 2)
    from nsightlab.analysis.iterations import sync_calls
    s = sync_calls(report)
    if len(s):
        kinds_, inv = np.unique(s["api_name"].to_numpy(object), return_inverse=True)
        add(_at(start, end, s["end_ns"].to_numpy(np.int64)), [f"sync {x}" for x in kinds_],
            inv.astype(np.int64), 3)
    if report.has_rows("graph_execs"):
        g = report.table("graph_execs", ["start_ns", "graph_id"])
        gid, inv = np.unique(g["graph_id"].to_numpy(), return_inverse=True)
        add(_at(start, end, g["start_ns"].to_numpy(np.int64)), [f"graph {x}" for x in gid],
            inv.astype(np.int64), 4)
    cls = np.concatenate(coarse) if coarse else np.empty(0, np.int64)
    # class tokens (negative) after the name tokens
    cls = np.where(cls < 0, len(names) - 1 - cls, cls)
    return out, names, cls


def _graph_launches(report: Report, at: np.ndarray) -> np.ndarray | None:
    """The window of each CUDA graph launch call that launched traced kernels (node-level
    traces: the kernels are there, the launch is one call), by its first kernel's window
    (a graph's kernels carry their launch call's correlation id); None without graph
    launches (their API names are looked at first: nothing more is read then)."""
    if not report.has_rows("cuda_api"):
        return None
    names = report.cuda_api(["name"])["name"]
    graph = [c for c in names.cat.categories if "GraphLaunch" in str(c)]
    if not graph:
        return None
    rows = np.flatnonzero(names.isin(graph).to_numpy())
    calls = report.take("cuda_api", ["pid", "correlation_id"], rows)
    k = report.table("kernels", ["pid", "correlation_id"])
    key = lambda f: f["pid"].to_numpy(np.int64) * (1 << 32) + \
        f["correlation_id"].to_numpy(np.int64)  # noqa: E731
    kk = key(k)
    hit = np.flatnonzero(np.isin(kk, key(calls)))
    first = np.unique(kk[hit], return_index=True)[1]  # one per call: its first kernel's window
    return at[hit[first]]


def _ids(parts, n_tokens: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(work id per window, count per window of each kind of token: n x 5)."""
    w1, w2 = _weights(n_tokens, 1), _weights(n_tokens, 2)
    h = np.zeros((n, 2))
    counts = np.zeros((n, 5), np.int64)
    for at, tok, kind in parts:
        h[:, 0] += np.bincount(at, weights=w1[tok], minlength=n)
        h[:, 1] += np.bincount(at, weights=w2[tok], minlength=n)
        counts += np.stack([np.bincount(at[kind == k], minlength=n) for k in range(5)], axis=1)
    key = np.concatenate([h, counts.astype(np.float64)], axis=1)
    _, ids = np.unique(key, axis=0, return_inverse=True)
    return ids.reshape(-1).astype(np.int64), counts


def holds(ids: np.ndarray, start: int = 0) -> bool:
    """Whether work ids ``ids`` settle into a few kinds after ``start``: few iterations of
    work seen fewer than ``MIN_KIND`` times, and at most ``MAX_WORK_KINDS`` kinds (or a
    cycle of them)."""
    x = ids[start:]
    if len(x) < MIN_KIND:
        return True
    _, inv, cnt = np.unique(x, return_inverse=True, return_counts=True)
    rare = (cnt[inv] < MIN_KIND).sum()
    if rare > max(1, RARE_MAX_PCT / 100 * len(x)):
        return False
    return (cnt >= MIN_KIND).sum() <= MAX_WORK_KINDS or cycle(x) is not None


def cycle(ids: np.ndarray) -> int | None:
    """The shortest period p (2..``MAX_CYCLE``) at which the work repeats: at least
    ``CYCLE_AGREE`` of the iterations run the most common work of their place in the cycle,
    not every place runs the same work, and 3 cycles at least; None when none."""
    n = len(ids)
    for p in range(2, min(MAX_CYCLE, n // 3) + 1):
        pos = np.arange(n) % p
        agree, common = 0, []
        for j in range(p):
            v, c = np.unique(ids[pos == j], return_counts=True)
            agree += int(c.max())
            common.append(int(v[c.argmax()]))
        if agree >= CYCLE_AGREE * n and len(set(common)) > 1:
            return p
    return None


def signatures(report: Report, start: np.ndarray, end: np.ndarray) -> Work:
    """The work of every window [start, end] (in order, not overlapping). Kernels count by
    class (a GEMM for another GEMM is the same work: cuBLAS picks by shape, a decode step by
    KV length), so an optimizer step, an eval pass or an extra copy is other work and a
    kernel variant is not; ``tokens`` keep the names. Where even classes do not settle into
    a few kinds (``holds``), the work is unknown (``level`` "none")."""
    n = len(start)
    if not n:
        return Work(np.empty(0, np.int64), "none")
    parts, names, cls = _tokens(report, np.asarray(start, np.int64), np.asarray(end, np.int64))
    coarse = [(at, cls[tok], kind) for at, tok, kind in parts]
    ids, counts = _ids(coarse, int(cls.max()) + 1 if len(cls) else 0, n)
    if holds(ids, min(n // 4, 16)):
        return Work(ids, "classes", _table(ids, counts), _first_tokens(ids, parts, names))
    return Work(ids, "none", _table(ids, counts), {})


def _table(ids: np.ndarray, counts: np.ndarray) -> pd.DataFrame:
    uniq, first, cnt = np.unique(ids, return_index=True, return_counts=True)
    c = counts[first]
    return pd.DataFrame({"work": uniq, "iterations": cnt, "first": first,
                         "kernels": c[:, 0], "copies": c[:, 1], "memsets": c[:, 2],
                         "syncs": c[:, 3], "graphs": c[:, 4]})


def _first_tokens(ids: np.ndarray, parts, names: list[str]) -> dict:
    """{work id: {token name: count}} of each work's first iteration (counted in NumPy: a
    first iteration may hold millions of operations)."""
    uniq, first = np.unique(ids, return_index=True)
    of_iter = np.full(len(ids), -1, np.int64)
    of_iter[first] = uniq
    out: dict[int, dict[str, int]] = {int(w): {} for w in uniq}
    for at, tok, _ in parts:
        w = of_iter[at]
        sel = w >= 0
        if not sel.any():
            continue
        pairs, cnt = np.unique(np.stack([w[sel], tok[sel]]), axis=1, return_counts=True)
        for (wi, ti), c in zip(pairs.T, cnt):
            d = out[int(wi)]
            d[names[int(ti)]] = d.get(names[int(ti)], 0) + int(c)
    return out


def difference(a: dict, b: dict, most: int = 2) -> str:
    """What changed from work ``a`` to work ``b`` (token counts of one iteration each), in
    words: kernels replaced by other variants of the same class (and the precisions they
    moved between), kernels added or removed by class with their names, and copies, memsets,
    syncs and graph executions added or removed: '48 gemm, 37 elementwise kernels replaced
    by other variants (fp16 -> bf16); +192 elementwise, +96 reformat/copy kernels; +72
    memsets'."""
    from nsightlab.analysis.classify import kernel_class, precision

    def kernel(k: str) -> bool:
        return not k.startswith(("copy ", "sync ", "graph ")) and k != "memset"

    more = {k: b.get(k, 0) - a.get(k, 0) for k in set(a) | set(b)}
    more = {k: v for k, v in more.items() if v}
    by_class: dict[str, list[tuple[str, int]]] = {}
    for k, v in more.items():
        if kernel(k):
            by_class.setdefault(kernel_class(k), []).append((k, v))
    replaced, changed, moved = {}, [], (set(), set())
    for cls, got in sorted(by_class.items()):
        plus = sum(v for _, v in got if v > 0)
        minus = -sum(v for _, v in got if v < 0)
        if min(plus, minus):
            replaced[cls] = min(plus, minus)
            for k, v in got:
                moved[v > 0].add(precision(k)[0])
        if plus != minus:
            changed.append((plus - minus, cls))
    words = []
    if replaced:
        was, now = ({x for x in m if x and x != "unknown"} for m in moved)
        if was - now and now - was:  # the precisions on one side only (fp32 stays in both)
            was, now = was - now, now - was
        frm, to = "/".join(sorted(was)), "/".join(sorted(now))
        words.append(", ".join(f"{v:,} {c}" for c, v in sorted(replaced.items(),
                                                              key=lambda t: -t[1]))
                     + " kernels replaced by other variants"
                     + (f" ({frm} -> {to})" if frm and to and frm != to else ""))
    if changed:  # by class, the largest first (the kernels table names them)
        changed.sort(key=lambda t: (-abs(t[0]), t[1]))
        rest = len(changed) - most - 2
        words.append(", ".join(f"{v:+,} {c}" for v, c in changed[:most + 2]) + " kernels"
                     + (f" (and {rest} more class{'es' if rest > 1 else ''})" if rest > 0
                        else ""))
    for k, v in sorted(more.items()):
        if not kernel(k):
            plural = {"memset": "memsets", "graph launch": "graph launches"}
            words.append(f"{v:+,} {plural.get(k, k) if abs(v) > 1 else k}")
    return "; ".join(words) or "the same operations"


def summary(tokens: dict) -> str:
    """One iteration's work in a few words: '126 kernels, 1 sync' (copies, memsets and graph
    executions where there are)."""
    kinds = {"kernels": 0, "copies": 0, "memsets": 0, "syncs": 0, "graph launches": 0,
             "graph executions": 0}
    for k, v in tokens.items():
        kind = ("copies" if k.startswith("copy ") else "memsets" if k == "memset" else
                "syncs" if k.startswith("sync ") else "graph launches" if k == "graph launch"
                else "graph executions" if k.startswith("graph ") else "kernels")
        kinds[kind] += v
    one = {"copies": "copy", "graph launches": "graph launch"}
    said = [f"{v:,} {k if v != 1 else one.get(k, k[:-1])}" for k, v in kinds.items() if v]
    return ", ".join(said) or "no GPU work"


def _short(name: str, width: int = 48) -> str:
    s = str(name)
    return s if len(s) <= width else s[:width - 3] + "..."
