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

from nsightlab.core.units import fmt_bytes
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


def _at(start: np.ndarray, end: np.ndarray, t: np.ndarray) -> np.ndarray:
    """The window (index, int32) each time ``t`` falls in, -1 where none."""
    at = (np.searchsorted(start, t, "right") - 1).astype(np.int32)
    at[(at >= 0) & (t > end[np.maximum(at, 0)])] = -1
    return at


class _Sums:
    """The signatures' sums, table by table (nothing of a table is held after it but its
    operations' windows and names, for the first iterations' words): two random-weight sums
    of the class tokens per window, and the count of each kind of operation."""

    KINDS = 5  # kernel, copy, memset, sync, graph execution or launch

    def __init__(self, n: int):
        self.n = n
        self.h = np.zeros((n, 2))
        self.counts = np.zeros((n, self.KINDS), np.int64)
        self.names: list[str] = []
        self.kept: list[tuple[np.ndarray, np.ndarray]] = []  # (window, name token)
        self._class_of: dict[str, int] = {}

    def add(self, at: np.ndarray, codes: np.ndarray, names: list[str], kind: int,
            classes: list[str] | None = None) -> None:
        """Operations in windows ``at`` (-1: none) with tokens ``codes`` into ``names``;
        ``classes``: each name's class token (kernels), else the name is its own class."""
        ok = at >= 0
        at, codes = at[ok], codes[ok].astype(np.int32)
        base = len(self.names)
        self.names.extend(names)
        key = [f"{kind}:{c}" for c in (classes if classes is not None else names)]
        cls = np.array([self._class_of.setdefault(k, len(self._class_of)) for k in key],
                       np.int64) if key else np.zeros(0, np.int64)
        coarse = cls[codes] if len(codes) else np.zeros(0, np.int64)
        for j, salt in enumerate((1, 2)):
            w = np.random.default_rng(_SEED + salt).integers(
                1, 1 << 20, max(len(self._class_of), 1)).astype(np.float64)
            self.h[:, j] += np.bincount(at, weights=w[coarse], minlength=self.n)
        self.counts[:, kind] += np.bincount(at, minlength=self.n)
        self.kept.append((at, codes + base))

    def ids(self) -> np.ndarray:
        key = np.concatenate([self.h, self.counts.astype(np.float64)], axis=1)
        return np.unique(key, axis=0, return_inverse=True)[1].reshape(-1).astype(np.int64)


def _sums(report: Report, start: np.ndarray, end: np.ndarray,
          syncs: pd.DataFrame | None) -> _Sums:
    """Every operation and sync call of the report in its window (``_Sums``)."""
    out = _Sums(len(start))
    if report.has_rows("kernels"):
        from nsightlab.analysis.classify import kernel_class
        k = report.table("kernels", ["start_ns", "name"])
        codes = k["name"].cat.codes.to_numpy()
        names = [str(c) for c in k["name"].cat.categories] + ["(no name)"]
        at = _at(start, end, k["start_ns"].to_numpy(np.int64))
        del k
        codes = np.where(codes >= 0, codes, len(names) - 1)  # a kernel named by nothing
        out.add(at, codes, names, 0, [kernel_class(c) for c in names])
        del at, codes
        graph = _graph_launches(report, start, end)
        if graph is not None:
            out.add(graph, np.zeros(len(graph), np.int32), ["graph launch"], 4)
    if report.has_rows("memcpy"):
        from nsightlab.analysis.budget_parts import BUSY_PARTS, copy_codes
        c = report.memcpy(["start_ns", "copy_kind", "src_kind", "dst_kind"])
        out.add(_at(start, end, c["start_ns"].to_numpy(np.int64)), copy_codes(c),
                [f"copy {p}" for p in BUSY_PARTS], 1)
    if report.has_rows("memset"):
        m = report.table("memset", ["start_ns"])
        out.add(_at(start, end, m["start_ns"].to_numpy(np.int64)), np.zeros(len(m), np.int32),
                ["memset"], 2)
    if syncs is None:
        from nsightlab.analysis.iterations import sync_calls
        syncs = sync_calls(report)
    if len(syncs):
        api, inv = np.unique(syncs["api_name"].to_numpy(object), return_inverse=True)
        out.add(_at(start, end, syncs["end_ns"].to_numpy(np.int64)), inv.reshape(-1),
                [f"sync {x}" for x in api], 3)
    if report.has_rows("graph_execs"):
        g = report.table("graph_execs", ["start_ns", "graph_id"])
        gid, inv = np.unique(g["graph_id"].to_numpy(), return_inverse=True)
        out.add(_at(start, end, g["start_ns"].to_numpy(np.int64)), inv.reshape(-1),
                [f"graph {x}" for x in gid], 4)
    return out


def _graph_launches(report: Report, start: np.ndarray, end: np.ndarray) -> np.ndarray | None:
    """The window of each CUDA graph launch call whose kernels were traced one by one
    (node-level traces: the kernels are there, the launch is one call), by its first
    kernel's window (a graph's kernels carry their launch call's correlation id); None for a
    trace without graph nodes (nothing more is read then)."""
    if not report.has_rows("cuda_graph_nodes") or not report.has_rows("cuda_api"):
        return None
    names = report.cuda_api(["name"])["name"]
    graph = [c for c in names.cat.categories if "GraphLaunch" in str(c)]
    if not graph:
        return None
    rows = np.flatnonzero(names.isin(graph).to_numpy())
    calls = report.take("cuda_api", ["pid", "correlation_id"], rows)
    k = report.table("kernels", ["pid", "correlation_id", "start_ns"])
    key = lambda f: f["pid"].to_numpy(np.int64) * (1 << 32) + \
        f["correlation_id"].to_numpy(np.int64)  # noqa: E731
    kk = key(k)
    hit = np.flatnonzero(np.isin(kk, key(calls)))
    first = hit[np.unique(kk[hit], return_index=True)[1]]  # one per call: its first kernel
    return _at(start, end, k["start_ns"].to_numpy(np.int64)[first])


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


def signatures(report: Report, start: np.ndarray, end: np.ndarray,
               syncs: pd.DataFrame | None = None) -> Work:
    """The work of every window [start, end] (in order, not overlapping). Kernels count by
    class (a GEMM for another GEMM is the same work: cuBLAS picks by shape, a decode step by
    KV length), so an optimizer step, an eval pass or an extra copy is other work and a
    kernel variant is not; ``tokens`` keep the names. Where even classes do not settle into
    a few kinds (``holds``), the work is unknown (``level`` "none"). ``syncs``: the run's
    synchronizing calls (api_name, end_ns) where the caller has them."""
    n = len(start)
    if not n:
        return Work(np.empty(0, np.int64), "none")
    sums = _sums(report, np.asarray(start, np.int64), np.asarray(end, np.int64), syncs)
    ids = sums.ids()
    if holds(ids, min(n // 4, 16)):
        return Work(ids, "classes", _table(ids, sums.counts), _first_tokens(ids, sums))
    return Work(ids, "none", _table(ids, sums.counts), {})


def _table(ids: np.ndarray, counts: np.ndarray) -> pd.DataFrame:
    uniq, first, cnt = np.unique(ids, return_index=True, return_counts=True)
    c = counts[first]
    return pd.DataFrame({"work": uniq, "iterations": cnt, "first": first,
                         "kernels": c[:, 0], "copies": c[:, 1], "memsets": c[:, 2],
                         "syncs": c[:, 3], "graphs": c[:, 4]})


def _first_tokens(ids: np.ndarray, sums: _Sums) -> dict:
    """{work id: {token name: count}} of each work's first iteration (counted in NumPy: a
    first iteration may hold millions of operations)."""
    uniq, first = np.unique(ids, return_index=True)
    of_iter = np.full(len(ids), -1, np.int64)
    of_iter[first] = uniq
    out: dict[int, dict[str, int]] = {int(w): {} for w in uniq}
    for at, tok in sums.kept:
        w = of_iter[at]
        sel = w >= 0
        if not sel.any():
            continue
        pairs, cnt = np.unique(np.stack([w[sel], tok[sel].astype(np.int64)]), axis=1,
                               return_counts=True)
        for (wi, ti), c in zip(pairs.T, cnt):
            d = out[int(wi)]
            name = sums.names[int(ti)]
            d[name] = d.get(name, 0) + int(c)
    return out


def difference(a: dict, b: dict, most: int = 2, a_shapes: dict | None = None,
               b_shapes: dict | None = None) -> str:
    """What changed from work ``a`` to work ``b`` (token counts of one iteration each), in
    words: kernels replaced by other variants of the same class (and the precisions they
    moved between), kernels added or removed by class with their names, and copies, memsets,
    syncs and graph executions added or removed: '48 gemm, 37 elementwise kernels replaced
    by other variants (fp16 -> bf16); +192 elementwise, +96 reformat/copy kernels; +72
    memsets'; copies with their bytes where ``a_shapes``/``b_shapes`` (``shapes``) have
    them: '-1 host-to-device copy from pageable memory (4.8 MB each)'."""
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
        if k.startswith("copy "):
            label = _copy_label(k)
            got = ((b_shapes if v > 0 else a_shapes) or {}).get(k, {}).get("bytes")
            words.append(f"{v:+,} {label if abs(v) > 1 else label.replace('copies', 'copy', 1)}"
                         + (f" ({fmt_bytes(got)} each)" if got else ""))
        elif not kernel(k):
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


# Shapes: what one kind of work ran on. Within a run a kind of work is blind to them (a KV
# cache grows, cuBLAS picks by shape); between two runs the same kernel on another grid, or a
# copy of other bytes, is other work: a batch or an input size changed, not the GPU's pace.

#: two runs' shapes of one kernel or copy differ beyond this (%): the same work's medians are
#: equal, a batch or an input size moves them by its own factor
SHAPE_PCT = 2.0
#: the first iterations of a kind of work whose shapes are read, and at most this many of
#: their kernels (an iteration of a million kernels is read in part: its first ones)
SHAPE_ITERATIONS = 20
SHAPE_KERNELS = 10_000
_GRID = ["grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z"]


def shapes(report: Report, start, end) -> dict:
    """What the windows [start, end] (iterations of one kind of work; the first
    ``SHAPE_ITERATIONS``, and of their kernels ``SHAPE_KERNELS`` at most) ran on, by the
    tokens of ``signatures``' words, medians over the windows: each kernel name's launches
    per iteration (``n``), blocks, threads and shared memory per launch, and its most common
    launch (``grid``, ``block``: 'x x y x z'); each copy token's copies (``n``) and bytes per
    copy."""
    start = np.asarray(start, np.int64)[:SHAPE_ITERATIONS]
    end = np.asarray(end, np.int64)[:SHAPE_ITERATIONS]
    out: dict = {}
    if not len(start):
        return out
    if report.has_rows("kernels"):
        t = report.table("kernels", ["start_ns"])["start_ns"].to_numpy(np.int64)
        lo, hi = 0, len(t)
        if len(t) and t[0] <= t[-1] and (t[1:] >= t[:-1]).all():  # in time order: the span
            lo, hi = np.searchsorted(t, [start[0], end[-1]], side="left")[0], \
                np.searchsorted(t, end[-1], side="right")  # of the windows alone
        at = _at(start, end, t[lo:hi])
        rows = np.flatnonzero(at >= 0)
        if len(rows) > SHAPE_KERNELS:  # the first iterations that hold SHAPE_KERNELS
            upto = np.cumsum(np.bincount(at[rows], minlength=len(start)))
            m = max(1, int(np.searchsorted(upto, SHAPE_KERNELS, "right")))
            start, end = start[:m], end[:m]
            rows = rows[at[rows] < m][:SHAPE_KERNELS]
        if len(rows):
            at, rows = at[rows], rows + lo
            f = report.launches_at(rows).fillna(0).astype(np.int64)
            f["name"] = report.take("kernels", ["name"], rows)["name"].astype(object) \
                .fillna("(no name)").to_numpy()  # the rows' names, not 8M of them
            f["at"] = at
            g = f["grid_x"] * f["grid_y"] * f["grid_z"]
            f["blocks"], f["threads"] = g, g * f["block_x"] * f["block_y"] * f["block_z"]
            f["smem"] = f["static_shared_bytes"] + f["dynamic_shared_bytes"]
            for name, one in f.groupby("name", sort=False):
                per = one.groupby("at")[["blocks", "threads", "smem"]].sum()
                n = one.groupby("at").size()
                top = one.groupby(_GRID).size().idxmax()
                out[str(name)] = {
                    "n": float(n.median()),
                    **{c: float((per[c] / n).median()) for c in ("blocks", "threads", "smem")},
                    "grid": " x ".join(map(str, top[:3])), "block": " x ".join(map(str, top[3:]))}
    if report.has_rows("memcpy"):
        from nsightlab.analysis.budget_parts import BUSY_PARTS, copy_codes
        c = report.memcpy(["start_ns", "bytes", "copy_kind", "src_kind", "dst_kind"])
        at = _at(start, end, c["start_ns"].to_numpy(np.int64))
        ok = at >= 0
        if ok.any():
            f = pd.DataFrame({"at": at[ok], "part": copy_codes(c)[ok],
                              "bytes": c["bytes"].fillna(0).to_numpy(np.float64)[ok]})
            for part, one in f.groupby("part"):
                per = one.groupby("at")["bytes"].agg(["sum", "size"])
                out[f"copy {BUSY_PARTS[int(part)]}"] = {
                    "n": float(per["size"].median()),
                    "bytes": float((per["sum"] / per["size"]).median())}
    return out


def reshaped(a: dict, b: dict) -> list[dict]:
    """The kernels and copies both runs' work holds whose shapes (``shapes``) differ by more
    than ``SHAPE_PCT``: each a record of its token, ``kind`` ('kernel' or 'copy'), ``what``
    changed ('grid', 'launch': the same blocks with other threads or shared memory, or
    'bytes'), A's and B's value (blocks or bytes per launch or copy) and their ``ratio``."""
    out = []
    for tok in sorted(set(a) & set(b)):
        x, y = a[tok], b[tok]
        moved = [c for c in ("blocks", "threads", "smem", "bytes") if c in x and c in y
                 and abs(y[c] - x[c]) > SHAPE_PCT / 100 * max(x[c], y[c])]
        if not moved:
            continue
        key = "bytes" if "bytes" in x else "blocks"
        what = "bytes" if key == "bytes" else "grid" if "blocks" in moved else "launch"
        out.append({"token": tok, "kind": "copy" if key == "bytes" else "kernel", "what": what,
                    "a": x[key], "b": y[key], "ratio": y[key] / x[key] if x[key] else np.inf,
                    "n": y.get("n", 0.0),
                    "a_launch": f"{x.get('grid', '')} blocks of {x.get('block', '')}",
                    "b_launch": f"{y.get('grid', '')} blocks of {y.get('block', '')}"})
    return out


def _copy_label(token: str) -> str:
    from nsightlab.analysis.budget_parts import COPY_WORDS
    return COPY_WORDS.get(token.removeprefix("copy "), token)


def reshape_words(changes: list[dict]) -> str:
    """``reshaped`` in words: 'layer_norm_kernel runs on a 1.50x larger grid (256 x 1 x 1 ->
    384 x 1 x 1 blocks)', '5 kernels (60 launches an iteration) run on larger grids (1.50x
    the blocks)',
    'host-to-device copies from pageable memory 4.8 MB -> 19.3 MB each'."""
    from nsightlab.core.units import kernel_label

    words = []
    kern = [c for c in changes if c["kind"] == "kernel"]
    grid = [c for c in kern if c["what"] == "grid"]
    if len(grid) == 1:
        c = grid[0]
        size = f"a {c['ratio']:.2f}x larger" if c["ratio"] > 1 else f"a {1 / c['ratio']:.2f}x smaller"
        words.append(f"{kernel_label(c['token'], 48)} runs on {size} grid "
                     f"({c['a_launch']} -> {c['b_launch']})")
    elif grid:
        r = np.array([c["ratio"] for c in grid])
        way = "larger" if (r > 1).all() else "smaller" if (r < 1).all() else "other"
        lo, hi = float(r.min()), float(r.max())
        factor = f"{np.median(r):.2f}x the blocks" if hi <= lo * 1.05 else \
            f"{lo:.2f}-{hi:.2f}x the blocks"
        n = sum(c["n"] for c in grid)
        words.append(f"{len(grid)} kernels ({n:,.0f} launches an iteration) run on {way} "
                     f"grids ({factor})")
    launch = [c for c in kern if c["what"] == "launch"]
    if launch:
        words.append(f"{len(launch)} kernel{'s' if len(launch) > 1 else ''} launched with "
                     "other blocks or shared memory on the same grid")
    for c in (c for c in changes if c["kind"] == "copy"):
        words.append(f"{_copy_label(c['token'])} {fmt_bytes(c['a'])} -> "
                     f"{fmt_bytes(c['b'])} each")
    return "; ".join(words)
