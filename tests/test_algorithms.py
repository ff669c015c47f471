"""The core algorithms on small hand-built tables, checked against brute force: kernel-slot
matching (diff), occurrence counting (profile), grouped statistics (stats), the kernel ⋈ API
join (launches) and the containing-range lookup (profile)."""
from __future__ import annotations

from collections import Counter

import numpy as np
import pandas as pd
import pytest

from nsightlab.comparison.diff import _match_slots
from nsightlab.analysis.launches import first_of_call, match
from nsightlab.run.model import _containing, _occurrence
from nsightlab.analysis.stats import Groups, describe


# ---- profile._occurrence ---------------------------------------------------------------------
@pytest.mark.parametrize("groups", [5, 300])  # both code paths: few groups, many groups
@pytest.mark.parametrize("seed", range(3))
def test_occurrence_counts_earlier_rows_of_the_same_group_and_iteration(seed, groups):
    rng = np.random.default_rng(seed)
    it = np.sort(rng.integers(0, 6, 500))
    group = rng.integers(0, groups, 500)
    want = [sum(1 for j in range(i) if it[j] == it[i] and group[j] == group[i])
            for i in range(len(it))]
    assert _occurrence(group, it).tolist() == want


# ---- profile._containing ---------------------------------------------------------------------
def test_containing_finds_the_range_of_each_time_or_minus_one():
    starts, ends = np.array([10, 30, 60]), np.array([20, 50, 60])
    t = np.array([0, 10, 15, 20, 21, 30, 55, 60, 61])
    want = [next((i for i, (a, b) in enumerate(zip(starts, ends)) if a <= x <= b), -1) for x in t]
    assert _containing(starts, ends, t).tolist() == want == [-1, 0, 0, 0, -1, 1, -1, 2, -1]
    assert _containing(np.array([]), np.array([]), t).tolist() == [-1] * len(t)


# ---- stats.Groups / describe -----------------------------------------------------------------
@pytest.mark.parametrize("seed", range(3))
def test_group_statistics_match_pandas(seed):
    rng = np.random.default_rng(seed)
    n = 400
    df = pd.DataFrame({"k": rng.choice(list("abcdefg"), n), "v": rng.integers(0, 1000, n)})
    df.loc[df.sample(frac=0.1, random_state=seed).index, "v"] = np.nan  # NULLs are left out
    gid = pd.factorize(df["k"])[0]
    got = Groups(gid, gid.max() + 1).summarize(df["v"].to_numpy(float))
    ref = df.groupby(pd.Categorical.from_codes(gid, range(gid.max() + 1)), observed=False)["v"]
    assert got["count"].tolist() == ref.count().tolist()
    np.testing.assert_allclose(got["total"], ref.sum())
    np.testing.assert_allclose(got["avg"], ref.mean())
    np.testing.assert_allclose(got["med"], ref.median())
    np.testing.assert_allclose(got["min"], ref.min())
    np.testing.assert_allclose(got["max"], ref.max())
    np.testing.assert_allclose(got["stddev"], ref.std(ddof=1).fillna(0.0))


def test_describe_single_instances_have_zero_stddev_and_integer_totals():
    df = pd.DataFrame({"name": ["x", "y", "y", "y"], "duration_ns": [7, 1, 2, 6]})
    out = describe(df, ["name"], "duration_ns").set_index("name")
    assert out.loc["x", "stddev_ns"] == 0.0 and out.loc["y", "med_ns"] == 2.0
    assert out["total_ns"].dtype == np.int64 and out.loc["y", "total_ns"] == 9


# ---- launches.match / first_of_call ----------------------------------------------------------
@pytest.mark.parametrize("case", ["unique-sorted", "unique-shuffled", "duplicates"])
def test_match_returns_every_equal_key_pair(case):
    rng = np.random.default_rng(1)
    api = np.arange(100, dtype=np.int64)
    if case == "unique-shuffled":
        api = rng.permutation(api)
    if case == "duplicates":  # 2022-era backtrace duplicates: two API rows for one call
        api = np.sort(np.concatenate([api, api[::7]]))
    ops = rng.integers(-5, 110, 80)  # some ops have no API row
    got = sorted(zip(*(x.tolist() for x in match(ops, api))))
    want = sorted((i, j) for i in range(len(ops)) for j in range(len(api)) if ops[i] == api[j])
    assert got == want


def test_first_of_call_marks_one_kernel_per_launch_call():
    rows = np.array([0, 1, 1, 1, 2, 5, 5])
    assert first_of_call(rows).tolist() == [True, True, False, False, True, True, False]


# ---- comparison._match_slots -----------------------------------------------------------------
def _slots(rng, n: int, names: list[str]) -> pd.DataFrame:
    rows = []
    for layer in ("l0", "l1"):
        for cls in ("gemm", "elementwise"):
            for slot in range(rng.integers(0, n)):
                rows.append({"layer": layer, "kernel_class": cls, "slot": slot,
                             "name": str(rng.choice(names)), "precision": "fp16",
                             "time_ns": float(rng.integers(1, 100)), "seen": 1})
    return pd.DataFrame(rows, columns=["layer", "kernel_class", "slot", "name", "precision",
                                       "time_ns", "seen"])


@pytest.mark.parametrize("seed", range(6))
def test_slot_matching_against_brute_force(seed):
    rng = np.random.default_rng(seed)
    a = _slots(rng, 6, ["k1", "k2", "k3"])
    b = _slots(rng, 6, ["k2", "k3", "k4"])
    if a.empty or b.empty:
        pytest.skip("random case without slots on one side")
    m = _match_slots(a, b)
    for key, ga in a.groupby(["layer", "kernel_class"]):
        gb = b[(b["layer"] == key[0]) & (b["kernel_class"] == key[1])]
        gm = m[(m["layer"] == key[0]) & (m["kernel_class"] == key[1])]
        # every kernel of A and of B appears exactly once
        assert Counter(gm["a_name"].dropna()) == Counter(ga["name"])
        assert Counter(gm["b_name"].dropna()) == Counter(gb["name"])
        matched = gm[gm["status"] == "matched"]
        assert len(matched) == min(len(ga), len(gb))
        # as many same-name pairs as the names allow
        ca, cb = Counter(ga["name"]), Counter(gb["name"])
        assert (matched["a_name"] == matched["b_name"]).sum() == sum(min(ca[k], cb[k]) for k in ca)
        assert (gm["status"] == "new").sum() == max(0, len(gb) - len(ga))
        assert (gm["status"] == "vanished").sum() == max(0, len(ga) - len(gb))
    assert np.allclose(m["delta_ns"], m["b_ns"] - m["a_ns"])
    assert m["a_ns"].sum() == pytest.approx(a["time_ns"].sum())
    assert m["b_ns"].sum() == pytest.approx(b["time_ns"].sum())


def test_slot_matching_pairs_renamed_kernels_by_position():
    a = pd.DataFrame({"layer": "blk", "kernel_class": "gemm", "slot": [0, 1, 2],
                      "name": ["gemm_fp16_a", "gemm_fp16_b", "same"], "precision": "fp16",
                      "time_ns": [10.0, 20.0, 5.0], "seen": 1})
    b = pd.DataFrame({"layer": "blk", "kernel_class": "gemm", "slot": [0, 1, 2, 3],
                      "name": ["same", "gemm_fp8_a", "gemm_fp8_b", "extra"], "precision": "fp8",
                      "time_ns": [5.0, 6.0, 9.0, 1.0], "seen": 1})
    m = _match_slots(a, b).set_index("b_name")
    assert m.loc["same", "a_name"] == "same"
    assert m.loc["gemm_fp8_a", "a_name"] == "gemm_fp16_a"  # in launch order
    assert m.loc["gemm_fp8_b", "a_name"] == "gemm_fp16_b"
    assert m.loc["extra", "status"] == "new"


def _depth_by_definition(start, end, pid, tid, kind):
    """Nesting depth as defined: among the ranges of the same (pid, tid, kind), ordered by
    start then longest first, the ranges opened before minus those closed (end <= start)."""
    depth = [0] * len(start)
    groups = {}
    for i, k in enumerate(kind):
        if k != "mark":
            groups.setdefault((pid[i], tid[i], k), []).append(i)
    for rows in groups.values():
        rows = sorted(rows, key=lambda i: (start[i], -end[i]))
        for pos, i in enumerate(rows):
            depth[i] = pos - sum(1 for j in rows if end[j] <= start[i])
    return depth


@pytest.mark.parametrize("threads", [1, 3, 70])  # one group (no copies), a few, many (sorted)
def test_nvtx_depth_equals_its_definition(threads):
    """tables._nvtx_depth (NumPy, part by part) against the definition, on random nested
    ranges in start order with equal starts, marks, two kinds, and threads whose groups are
    found each way; the parts split the table anywhere."""
    import pyarrow as pa

    from nsightlab.read.tables import _nvtx_depth

    rng = np.random.default_rng(threads)
    n = 900
    start = np.sort(rng.integers(0, 400, n))  # many equal starts
    end = start + rng.integers(0, 60, n)
    kind = rng.choice(["push_pop", "start_end", "mark"] if threads > 1 else ["push_pop"], n)
    tid = rng.integers(0, threads, n).astype(np.int32)
    pid = np.full(n, 7, np.int32)
    end_col = pa.array(np.where(kind == "mark", 0, end), mask=(kind == "mark"))
    t = pa.table({"start_ns": start, "end_ns": end_col, "pid": pid, "tid": tid,
                  "kind": pa.array(kind).dictionary_encode()})
    cuts = [0, 1, 250, 251, 700, n]
    got = _nvtx_depth(t.slice(a, b - a) for a, b in zip(cuts[:-1], cuts[1:])).to_pylist()
    want = _depth_by_definition(start.tolist(), np.where(kind == "mark", start, end).tolist(),
                                pid.tolist(), tid.tolist(), kind.tolist())
    assert got == want
    assert max(got) >= 3


def test_sync_gaps_windows_equal_brute_force():
    """sync_gaps' merged look-back windows (``_windows``): the rows within ``back`` before
    each sorted row, repeats included, as np.unique of every window's rows gives them."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location(
        "sync_gaps_recipe", Path(__file__).parent.parent / "recipes/sync_gaps/recipe.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    rng = np.random.default_rng(5)
    for _ in range(300):
        rows = np.sort(rng.integers(0, 3000, rng.integers(1, 60)))  # repeats too
        back = int(rng.integers(0, 300))
        want = np.unique((rows[:, None] - np.arange(back + 1)[None, :]).ravel())
        assert np.array_equal(module._windows(rows, back), want[want >= 0]), (rows, back)
    assert len(module._windows(np.empty(0, np.int64), 5)) == 0
