"""The page reader (``nsightlab.read.pages``) against SQLite itself: on every real export the
rows and values it decodes equal those the SQL read returns, over whole tables and ranges;
an export it must not decode (WAL, a value that is not an integer, a default) is refused and
the reader processes' part is then written by SQL, the same bytes."""
from __future__ import annotations

import sqlite3

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import STEMS, edited_copy, xz_fixtures
from nsightlab.read import pages, workers
from nsightlab.read.db import ExportDB
from nsightlab.read.tables import TABLES, entry_spec, plain_sql

#: the specs read from pages: the API calls, the kernels (every column), their first read
#: and their later launch configuration, the copies, memsets, synchronizations and whole-graph executions
PLAIN = ("cuda_api", "kernels", "kernels_first", "kernels+", "memcpy", "memset", "syncs",
         "graph_execs")


def _spec(name):
    return entry_spec("kernels") if name == "kernels_first" else entry_spec(name) \
        if name.endswith("+") else TABLES[name]


def _both(path, name, lo=None, hi=None):
    """(pages' table, SQL's table) of spec ``name`` over rowids [lo, hi) (default: all)."""
    db = ExportDB(path)
    spec = _spec(name)
    plain = spec.plain(db)
    a, b = db.rowid_bounds(spec.source)
    lo = a if lo is None else lo
    hi = b + 1 if hi is None else hi
    got = pa.Table.from_batches(list(pages.batches(pages.PageFile(path), db, spec.source, plain,
                                                   lo, hi)),
                                schema=pa.schema([(n, pa.int64()) for n, _ in plain]))
    sql = f"{plain_sql(db, spec.source, plain)} WHERE rowid >= {lo} AND rowid < {hi}"
    ref = list(db.stream(sql))
    want = {n: [] for n, _ in plain}
    for r in ref:
        for n, _ in plain:
            want[n].append(r.column(n).cast(pa.int64()))
    return got, {n: pa.chunked_array(v, pa.int64()) for n, v in want.items()}, (lo, hi)


def _assert_equal(got, want):
    assert got.column_names == list(want)
    for n, col in want.items():
        assert got.column(n).combine_chunks().equals(col.combine_chunks()), n


def _exports(sqlite_of, tmp_path_factory):
    from conftest import HERE

    out = [sqlite_of(s) for s in STEMS]
    for folder in ("scenarios", "models"):
        get = xz_fixtures(tmp_path_factory, HERE / "data" / folder)
        out += [get(p.name.split(".sqlite")[0])
                for p in sorted((HERE / "data" / folder / "nsys").glob("*.sqlite.xz"))]
    return out


def test_pages_equal_sql_on_every_real_export(sqlite_of, tmp_path_factory):
    """Every fixture export (nsys 2021 to 2025 schemas, public and captured), every plain
    spec it has: the whole table, then three ranges that start and end inside leaf pages."""
    checked = 0
    rng = np.random.default_rng(7)
    for path in _exports(sqlite_of, tmp_path_factory):
        db = ExportDB(path)
        for name in PLAIN:
            spec = _spec(name)
            if not db.has(spec.source) or db.rowid_bounds(spec.source)[0] is None:
                continue
            got, want, (lo, hi) = _both(path, name)
            assert got.num_rows == db.query(f"SELECT count(*) FROM {spec.source}")[0][0]
            _assert_equal(got, want)
            for _ in range(3):
                a, b = sorted(rng.integers(lo, hi + 1, 2).tolist())
                _assert_equal(*_both(path, name, a, b)[:2])
            checked += 1
    assert checked >= 40  # every export has API calls, and most kernels


def _part(path, table, rows, out, page_reads=True, monkeypatch=None):
    """A reader process's job, run here: cache_range's part, read back."""
    workers.cache_range.__defaults__[-1].clear()  # the worker's open exports
    ident = {"size": path.stat().st_size, "mtime_ns": path.stat().st_mtime_ns}
    if not page_reads:
        monkeypatch.setattr(pages.PageFile, "__init__", _refuse)
    answer = workers.cache_range(str(path), table, str(out), None, ident, rows=list(rows))
    if not page_reads:
        monkeypatch.undo()
    workers.cache_range.__defaults__[-1].clear()
    return answer, pq.read_table(out)


def _refuse(self, path):
    raise pages.Unsupported("SQL asked for")


@pytest.mark.parametrize("table", ["cuda_api", "kernels", "kernels+"])
def test_reader_parts_from_pages_equal_parts_from_sql(sqlite_of, tmp_path, monkeypatch, table):
    """The whole job (conversion, dictionaries, dropped rows, start order) is the same from
    the pages as from SQL, on two exports of different nsys versions."""
    for stem in ("h200-vit-fp16", "pub-realcugan-trt10"):
        path = sqlite_of(stem)
        lo, hi = ExportDB(path).rowid_bounds(_spec(table).source)
        rows = (lo + 3, hi - 2)
        a, ta = _part(path, table, rows, tmp_path / "a.parquet")
        b, tb = _part(path, table, rows, tmp_path / "b.parquet", False, monkeypatch)
        assert a == b and ta.num_rows > 100
        assert ta.equals(tb)


def _edited(sqlite_of, tmp_path, *sql):
    return edited_copy(sqlite_of("h200-vit-fp16-syncy"), tmp_path / "e.sqlite",
                       "CUPTI_ACTIVITY_KIND_RUNTIME", sql)


@pytest.mark.parametrize("value", ["1.5", "'text'", "x'00'"])
def test_a_value_that_is_not_an_integer_is_refused(sqlite_of, tmp_path, value):
    path = _edited(sqlite_of, tmp_path, f"UPDATE {{t}} SET correlationId = {value} "
                   "WHERE rowid = (SELECT min(rowid) + 50 FROM {t})")
    with pytest.raises(pages.Unsupported, match="not an integer"):
        _both(path, "cuda_api")


def test_a_refused_job_is_written_by_sql(sqlite_of, tmp_path, monkeypatch):
    """A float in the middle of a range: the part the pages began is written again by SQL,
    equal to an SQL-only part."""
    path = _edited(sqlite_of, tmp_path, "UPDATE {t} SET returnValue = 2.5 "
                   "WHERE rowid = (SELECT max(rowid) - 5 FROM {t})")
    lo, hi = ExportDB(path).rowid_bounds("CUPTI_ACTIVITY_KIND_RUNTIME")
    a, ta = _part(path, "cuda_api", (lo, hi + 1), tmp_path / "a.parquet")
    b, tb = _part(path, "cuda_api", (lo, hi + 1), tmp_path / "b.parquet", False, monkeypatch)
    assert a == b and ta.equals(tb)


def test_wal_mode_and_defaults_are_refused(sqlite_of, tmp_path):
    path = _edited(sqlite_of, tmp_path, "SELECT 1")
    with sqlite3.connect(path) as c:
        c.execute("PRAGMA journal_mode=WAL")
    with pytest.raises(pages.Unsupported, match="WAL"):
        pages.PageFile(path)
    path2 = edited_copy(sqlite_of("h200-vit-fp16-syncy"), tmp_path / "d.sqlite",
                        "CUPTI_ACTIVITY_KIND_RUNTIME",
                        ("ALTER TABLE {t} ADD COLUMN extra INTEGER DEFAULT 7",))
    with pytest.raises(pages.Unsupported, match="default"):
        _both(path2, "cuda_api")


def test_records_older_than_a_new_column_read_as_null(sqlite_of, tmp_path):
    """Rows written before ALTER TABLE ADD COLUMN lack it in their records: NULL, as SQL
    reads them; rows after it have values."""
    path = _edited(sqlite_of, tmp_path, "ALTER TABLE {t} ADD COLUMN extra INTEGER",
                   "INSERT INTO {t} SELECT start, end, eventClass, globalTid, correlationId, "
                   "nameId, returnValue, callchainId, 5 FROM {t} LIMIT 100")
    db = ExportDB(path)
    plain = (("start", ("start",)), ("extra", ("extra",)), ("callchainId", ("callchainId",)))
    lo, hi = db.rowid_bounds("CUPTI_ACTIVITY_KIND_RUNTIME")
    got = pa.Table.from_batches(list(pages.batches(pages.PageFile(path), db,
                                                   "CUPTI_ACTIVITY_KIND_RUNTIME", plain, lo,
                                                   hi + 1)))
    ref = db.query("SELECT start, extra FROM CUPTI_ACTIVITY_KIND_RUNTIME ORDER BY rowid")
    assert got.column("start").to_pylist() == [r[0] for r in ref]
    assert got.column("extra").to_pylist() == [r[1] for r in ref]
    assert got.column("extra").null_count == len(ref) - 100


@pytest.mark.parametrize("page_size", [512, 65536])
def test_other_page_sizes_and_rewritten_pages(sqlite_of, tmp_path, page_size):
    """Another page size (VACUUM), then rows deleted and inserted (free blocks, cells out
    of order within pages): still the SQL read's rows."""
    path = _edited(sqlite_of, tmp_path, "SELECT 1")
    c = sqlite3.connect(path, isolation_level=None)
    c.execute(f"PRAGMA page_size={page_size}")
    c.execute("VACUUM")
    t = "CUPTI_ACTIVITY_KIND_RUNTIME"
    c.execute(f"DELETE FROM {t} WHERE rowid % 3 = 0")
    c.execute(f"INSERT INTO {t} SELECT * FROM {t} WHERE rowid % 5 = 1")
    c.close()
    assert pages.PageFile(path).page_size == page_size
    got, want, _ = _both(path, "cuda_api")
    _assert_equal(got, want)


def test_every_integer_size_and_sign(sqlite_of, tmp_path):
    """Values of each stored size (1, 2, 3, 4, 6 and 8 bytes), both signs, the constants 0
    and 1, NULL, and the extremes of 64 bits: decoded as SQL reads them."""
    values = [0, 1, -1, 127, -128, 300, -300, 70000, -70000, 2**31 - 1, -2**31, 2**40,
              -2**40, 2**47 - 1, -2**47, 2**62, -2**62, 2**63 - 1, -2**63, "NULL"]
    sets = [f"UPDATE {{t}} SET returnValue = {5 if v == 'NULL' else v}, callchainId = {v} "
            f"WHERE rowid = (SELECT min(rowid) + {i} FROM {{t}})" for i, v in enumerate(values)]
    path = _edited(sqlite_of, tmp_path, *sets)
    got, want, _ = _both(path, "cuda_api")
    _assert_equal(got, want)
    db = ExportDB(path)
    lo = db.rowid_bounds("CUPTI_ACTIVITY_KIND_RUNTIME")[0]
    ref = [r[0] for r in db.query("SELECT callchainId FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE "
                                  f"rowid < {lo + len(values)} ORDER BY rowid")]
    assert got.column("callchainId").to_pylist()[:len(values)] == ref
    assert ref[:3] == [0, 1, -1] and ref[-2:] == [-2**63, None]
