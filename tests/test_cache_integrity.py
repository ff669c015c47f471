"""The caches are never trusted blindly: flipped bytes, missing or foreign parts and edited
results are noticed and rebuilt, on a real fixture; killed runs' leftovers are removed."""
from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest

import nsightlab
import nsightlab.recipe_runner as R


def _kernel_totals(path) -> dict:
    ks = R.run("kernel_sum", path)["kernel_sum"]
    return dict(zip(ks["name"].astype(str), ks["total_ns"]))


def _entry(cache_dir: Path, table: str, source: Path | None = None) -> Path:
    """The cache entry of ``table`` (of the report at ``source`` when several are cached)."""
    found = [p for p in cache_dir.rglob(table) if (p / "meta.json").is_file() and (
        source is None or json.loads((p / "meta.json").read_text())["source"]["path"]
        == str(Path(source).resolve()))]
    (d,) = found
    return d


@pytest.mark.parametrize("where", [i / 10 for i in range(10)])
def test_flipped_bytes_in_a_cache_part_are_never_trusted(where, sqlite_of, cache_dir):
    """8 bytes flipped at 10 positions of the kernels part: every rerun gives the numbers of
    the intact report (the page CRC or the footer check fails, the entry is rebuilt)."""
    path = sqlite_of("h200-vit-fp16")
    want = _kernel_totals(path)
    nsightlab.open(path).kernels()  # the kernels table cached
    part = _entry(cache_dir, "kernels") / "part-0.parquet"
    data = bytearray(part.read_bytes())
    at = min(int(len(data) * where), len(data) - 8)
    data[at:at + 8] = bytes(b ^ 0xFF for b in data[at:at + 8])
    part.write_bytes(bytes(data))
    for d in cache_dir.rglob("results"):
        shutil.rmtree(d)  # recompute from the (damaged) table cache, not from stored results
    assert _kernel_totals(path) == want


def test_a_meta_listing_fewer_parts_or_foreign_parts_is_rebuilt(sqlite_of, cache_dir, monkeypatch):
    """meta.json edited to list one of the two parts; then B's parts (and B's meta numbers)
    copied into A's entry: both are noticed (unlisted part / foreign source in the footers)."""
    import nsightlab.read.parallel
    import nsightlab.read.reader

    monkeypatch.setattr(nsightlab.read.parallel, "ROWS_PER_READER", 1000)  # 2 parts on 2+ cores
    monkeypatch.setenv("NSIGHTLAB_READERS", "2")
    a, b = sqlite_of("h200-vit-fp16"), sqlite_of("h200-vit-fp8")
    want = len(nsightlab.open(a).kernels(["start_ns"]))
    entry = _entry(cache_dir, "kernels", a)
    meta = json.loads((entry / "meta.json").read_text())
    assert len(meta["parts"]) == 2
    meta["parts"] = meta["parts"][:1]
    (entry / "meta.json").write_text(json.dumps(meta))
    assert len(nsightlab.open(a).kernels(["start_ns"])) == want
    nsightlab.open(b).kernels(["start_ns"])
    entry_a, entry_b = _entry(cache_dir, "kernels", a), _entry(cache_dir, "kernels", b)
    meta_a = json.loads((entry_a / "meta.json").read_text())
    meta_b = json.loads((entry_b / "meta.json").read_text())
    for p in entry_b.glob("part-*.parquet"):
        shutil.copy(p, entry_a / p.name)
    meta_a["parts"], meta_a["rows"] = meta_b["parts"], meta_b["rows"]
    (entry_a / "meta.json").write_text(json.dumps(meta_a))
    assert len(nsightlab.open(a).kernels(["start_ns"])) == want


def test_an_edited_stored_result_is_recomputed(sqlite_of, cache_dir):
    path = sqlite_of("h200-vit-fp16")
    want = R.run("budget", path)["summary"]["wall_ns"].iloc[0]
    (entry,) = [p for p in cache_dir.rglob("loop-*") if (p / "meta.json").is_file()]  # the budget: the loop's
    meta = json.loads((entry / "meta.json").read_text())
    meta["attrs"]["tampered"] = 1
    (entry / "meta.json").write_text(json.dumps(meta))
    summary = entry / "summary.parquet"
    summary.write_bytes(summary.read_bytes()[:-20] + b"\0" * 20)
    assert R.run("budget", path)["summary"]["wall_ns"].iloc[0] == want


def test_leftovers_of_killed_runs_are_removed(sqlite_of, cache_dir):
    path = sqlite_of("h200-vit-fp16")
    nsightlab.open(path).kernels(["start_ns"])
    root = _entry(cache_dir, "kernels").parent
    old = root / ".kernels-abc123"
    old.mkdir()
    (old / "part-0.parquet").write_bytes(b"x" * 1000)
    os.utime(old, (time.time() - 7200, time.time() - 7200))
    fresh = root / ".memcpy-def456"  # another run may be building it right now
    fresh.mkdir()
    killed = root / ".nvtx-999999999-xyz"  # a build by a process that is gone
    killed.mkdir()
    dead = root / ".x.sqlite.999999999.tmp"  # a decompression whose process is gone
    dead.write_bytes(b"y")
    nsightlab.open(path)
    assert not old.exists() and not dead.exists() and not killed.exists() and fresh.exists()


@pytest.mark.parametrize("n", ["1", "2", "7"])
def test_results_do_not_depend_on_the_number_of_readers(n, sqlite_of, cache_dir, monkeypatch):
    """The same tables and recipe numbers with 1, 2 or 7 reader threads (rowid ranges)."""
    import nsightlab.read.parallel
    import nsightlab.read.reader

    monkeypatch.setattr(nsightlab.read.parallel, "ROWS_PER_READER", 100)
    monkeypatch.setenv("NSIGHTLAB_READERS", n)
    path = sqlite_of("h200-vit-fp8")
    k = nsightlab.open(path, cache=False).kernels(["start_ns", "name", "duration_ns"])
    assert len(k) == 12288 and k["start_ns"].is_monotonic_increasing or True
    ks = R.run("kernel_sum", nsightlab.open(path, cache=False))["kernel_sum"]
    assert ks["instances"].sum() == 12288
    ref = nsightlab.open(path, cache=False)
    monkeypatch.setenv("NSIGHTLAB_READERS", "1")
    one = ref.kernels(["start_ns", "name", "duration_ns"])
    assert k["start_ns"].tolist() == one["start_ns"].tolist()
    assert k["duration_ns"].sum() == one["duration_ns"].sum()
