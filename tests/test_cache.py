"""Parquet cache: built on first read, used afterwards, rebuilt when stale or damaged."""
from __future__ import annotations

import os

import numpy as np
import pytest

import nsightlab
from nsightlab.read.db import ExportDB


def entry_dirs(cache_dir):
    return sorted(p for p in cache_dir.iterdir() if p.is_dir())


def no_sqlite_reads(monkeypatch):
    def boom(self, sql):
        raise AssertionError("read SQLite although the cache was valid")
    monkeypatch.setattr(ExportDB, "stream", boom)


def test_first_read_writes_parquet_and_later_reads_use_it(sqlite_of, cache_dir, monkeypatch):
    import nsightlab.read.parallel
    import nsightlab.read.reader

    monkeypatch.setattr(nsightlab.read.parallel, "ROWS_PER_READER", 1000)  # 3120 rows: 2+ readers
    monkeypatch.setenv("NSIGHTLAB_READERS", "2")
    path = sqlite_of("h200-vit-fp16")
    first = nsightlab.open(path).kernels()
    (entry,) = entry_dirs(cache_dir)
    assert sorted(p.name for p in (entry / "kernels").iterdir()) == [
        "meta.json", "part-0.parquet", "part-1.parquet"]  # one part per parallel reader
    no_sqlite_reads(monkeypatch)
    again = nsightlab.open(path).kernels()
    assert again.equals(first)
    cols = nsightlab.open(path).kernels(["start_ns", "name"])
    assert cols.equals(first[["start_ns", "name"]])


def test_no_cache_writes_nothing(sqlite_of, cache_dir, monkeypatch):
    r = nsightlab.open(sqlite_of("h200-vit-fp16"), cache=False)
    assert len(r.kernels()) == 3120
    monkeypatch.setenv("NSIGHTLAB_NO_CACHE", "1")
    assert len(nsightlab.open(sqlite_of("h200-vit-fp16")).cuda_api()) == 11743
    assert not cache_dir.exists()


def test_cache_dir_argument_wins(sqlite_of, cache_dir, tmp_path):
    other = tmp_path / "elsewhere"
    nsightlab.open(sqlite_of("h200-vit-fp16"), cache_dir=other).memcpy()
    assert entry_dirs(other) and not cache_dir.exists()


def test_a_changed_source_is_not_served_from_the_old_cache(sqlite_of, cache_dir, tmp_path):
    mine = tmp_path / "r.sqlite"
    mine.write_bytes(sqlite_of("h200-vit-fp16").read_bytes())
    assert len(nsightlab.open(mine).kernels()) == 3120
    mine.write_bytes(sqlite_of("h200-vit-fp8").read_bytes())  # same path, new content
    assert len(nsightlab.open(mine).kernels()) == 12288


def test_stale_entry_in_a_capture_is_rebuilt(sqlite_of, cache_dir, tmp_path):
    cap = tmp_path / "cap"
    cap.mkdir()
    (cap / "report.sqlite").write_bytes(sqlite_of("h200-vit-fp16").read_bytes())
    assert len(nsightlab.open(cap).kernels()) == 3120
    (cap / "report.sqlite").write_bytes(sqlite_of("h200-vit-fp8").read_bytes())
    os.utime(cap / "report.sqlite", ns=(1, 1))
    assert len(nsightlab.open(cap).kernels()) == 12288


@pytest.mark.parametrize("damage", ["truncate_part", "garbage_meta", "delete_part"])
def test_damaged_entry_is_rebuilt_not_trusted(sqlite_of, cache_dir, damage):
    path = sqlite_of("h200-vit-fp16")
    good = nsightlab.open(path).kernels()
    (entry,) = entry_dirs(cache_dir)
    part = sorted((entry / "kernels").glob("*.parquet"))[0]
    if damage == "truncate_part":
        part.write_bytes(part.read_bytes()[: part.stat().st_size // 2])
    elif damage == "garbage_meta":
        (entry / "kernels" / "meta.json").write_text("{not json")
    else:
        part.unlink()
    assert nsightlab.open(path).kernels().equals(good)
    # and the rebuilt entry is valid again
    assert nsightlab.open(path).cache.files("kernels") is not None


def test_unwritable_cache_folder_falls_back_to_direct_reads(sqlite_of, tmp_path, monkeypatch):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the cache folder should be")
    monkeypatch.setenv("NSIGHTLAB_CACHE_DIR", str(blocker / "cache"))
    notes = []
    r = nsightlab.open(sqlite_of("h200-vit-fp16"), progress=notes.append)
    assert len(r.kernels()) == 3120 and len(r.nvtx()) == 297
    assert r.cache is None and any("cannot write the cache" in n for n in notes)


def test_extent_from_statistics_or_from_the_rows(tmp_path):
    """cache.extent reads min/max off row-group statistics, and reads the rows of a part
    written without them (caches from before statistics were kept): same answer."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from nsightlab.read.table_cache import extent

    rng = np.random.default_rng(5)
    start = rng.integers(10, 10**12, 5000)
    table = pa.table({"start_ns": start, "end_ns": start + rng.integers(0, 10**6, 5000)})
    with_stats, without = tmp_path / "a.parquet", tmp_path / "b.parquet"
    pq.write_table(table.slice(0, 3000), with_stats, row_group_size=700)
    pq.write_table(table.slice(3000), without, row_group_size=700, write_statistics=False)
    want = (int(start.min()), int(table["end_ns"].to_numpy().max()))
    assert extent([with_stats, without]) == want
    assert extent([without]) == (int(start[3000:].min()), int(table["end_ns"].to_numpy()[3000:].max()))


def test_two_threads_asking_for_one_uncached_table_build_it_once(sqlite_of, cache_dir, monkeypatch):
    """``report`` runs the profile on a thread beside the other recipes: both may ask for an
    entry that is not built yet. One builds it, the other reads what it built."""
    from concurrent.futures import ThreadPoolExecutor

    from nsightlab.read import table_cache

    builds = []
    real = table_cache.TableCache.build

    def counted(self, name, *args, **kwargs):
        builds.append(name)
        return real(self, name, *args, **kwargs)

    monkeypatch.setattr(table_cache.TableCache, "build", counted)
    r = nsightlab.open(sqlite_of("h200-vit-fp16"))
    alone = nsightlab.open(sqlite_of("h200-vit-fp16"), cache=False)
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda f: f(), [r.kernels, r.kernels, r.cuda_api, r.cuda_api]))
    assert got[0].equals(alone.kernels()) and got[1].equals(got[0])
    assert got[2].equals(alone.cuda_api()) and got[3].equals(got[2])
    assert {"kernels", "cuda_api"} <= set(builds) and len(builds) == len(set(builds)), builds
    (entry,) = entry_dirs(cache_dir)
    assert not [p for p in entry.iterdir() if p.name.startswith(".")]  # no build left behind
