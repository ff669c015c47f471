"""The reader processes' side of ``launch_parts``: one kernel part joined to the API row groups
its correlation ids can lie in, written as a launch part (``join_part``). A leaf of the read
layer: the workers run it, ``launch_parts`` plans it."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

#: kernel columns read from the kernels entry, and API columns from cuda_api
KERNEL_COLUMNS = ("device_id", "start_ns", "end_ns", "pid", "name", "correlation_id")
API_COLUMNS = ("pid", "correlation_id", "start_ns", "end_ns", "tid", "name")
#: columns whose row groups carry min/max: ``row`` lets the engine read the entry a range of
#: kernels at a time (``Engine.chunks``)
STATISTICS = ("start_ns", "end_ns", "row")


def schema():
    """A launch part's columns (``launch_parts``' docstring)."""
    import pyarrow as pa

    return pa.schema([("device_id", pa.int32()), ("start_ns", pa.int64()), ("end_ns", pa.int64()),
                      ("pid", pa.int32()), ("name", pa.int32()), ("row", pa.int64()),
                      ("api_start", pa.int64()), ("api_end", pa.int64()),
                      ("api_tid", pa.int32()), ("api_name", pa.int32()), ("api_row", pa.int64())])


def join_part(kernels: str, first_row: int, api: list, out: str, ident: dict, names: str,
              _names: dict = {}) -> dict:
    """Join one kernel part to its API row groups and write the launch part ``out`` (names
    as codes into the file ``names``): the rows written, or {"refused": why} (one call with
    two API rows)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from nsightlab.read.table_cache import READ, part_writer

    k = pq.ParquetFile(kernels, **READ).read(columns=list(KERNEL_COLUMNS))
    n = k.num_rows
    tables, rows = [], []
    for f, gs in api:
        pf = pq.ParquetFile(f, **READ)
        tables.append(pf.read_row_groups([g for g, _ in gs], columns=list(API_COLUMNS)))
        rows += [np.arange(start, start + pf.metadata.row_group(g).num_rows, dtype=np.int64)
                 for g, start in gs]
    a = pa.concat_tables(tables).unify_dictionaries().combine_chunks() if tables else None
    at = (_match(k.column("pid"), k.column("correlation_id"), a.column("pid"),
                 a.column("correlation_id")) if a is not None else np.full(n, -1, np.int64))
    if isinstance(at, str):
        return {"refused": at}
    miss = at < 0
    mask = miss if miss.any() else None
    typed = schema()
    if a is not None:
        called = a.select(["start_ns", "end_ns", "tid", "name"]).take(
            pa.array(np.maximum(at, 0), mask=mask))
        api_cols = [called.column(c).combine_chunks() for c in called.column_names]
        api_row = pa.array(np.concatenate(rows)[np.maximum(at, 0)], mask=mask)
    else:
        api_cols = [pa.nulls(n, typed.field(c).type)
                    for c in ("api_start", "api_end", "api_tid", "api_name")]
        api_row = pa.nulls(n, pa.int64())
    if names not in _names:  # each reader loads them once per entry
        _names.clear()
        _names[names] = {c: {s: i for i, s in enumerate(v)}
                         for c, v in json.loads(Path(names).read_text()).items()}
    codes = _names[names]
    part = pa.Table.from_arrays(
        [k.column("device_id"), k.column("start_ns"), k.column("end_ns"), k.column("pid"),
         _codes(k.column("name"), codes["name"]),
         pa.array(np.arange(first_row, first_row + n, dtype=np.int64)),
         *api_cols[:3], _codes(api_cols[3], codes["api_name"]), api_row],
        names=typed.names).cast(typed)
    writer = part_writer(Path(out), typed, ident, STATISTICS)
    try:
        writer.write_table(part, row_group_size=1 << 16)
    finally:
        writer.close()
    return {"rows": n, "launched": int(n - miss.sum())}


def _codes(col, code_of: dict[str, int]):
    """A dictionary column of names as int32 codes of ``code_of`` (NULL stays NULL)."""
    import pyarrow as pa

    col = col.combine_chunks() if hasattr(col, "combine_chunks") else col
    if not pa.types.is_dictionary(col.type):
        col = col.dictionary_encode()
    if not len(col.dictionary):
        return pa.nulls(len(col), pa.int32())
    local = np.array([code_of[s] for s in col.dictionary.to_pylist()], np.int32)
    idx = col.indices
    got = local[np.asarray(idx.fill_null(0) if idx.null_count else idx)]
    return pa.array(got, mask=idx.is_null().to_numpy(zero_copy_only=False)
                    if idx.null_count else None)


def _match(k_pid, k_id, a_pid, a_id) -> np.ndarray | str:
    """For each kernel, the index of the API row with its (pid, correlation id), -1 for none;
    a string when two API rows share a key. Keys with a NULL part match nothing."""
    n = len(k_id)
    if a_id is None or not len(a_id):
        return np.full(n, -1, np.int64)
    (kp, ki), k_ok = _keys(k_pid, k_id)
    (ap, ai), a_ok = _keys(a_pid, a_id)
    a_idx = np.flatnonzero(a_ok)
    # the process above the 32-bit correlation id: one int64 key (process ids span far
    # less than 2^31; np.unique of 1.5M pids for dense codes took half the job)
    low = min(int(ap.min()), int(kp.min()))
    if max(int(ap.max()), int(kp.max())) - low >= 1 << 31 or max(int(ai.max()), int(ki.max()),
                                                                 0) >= 1 << 32:
        return "process or correlation ids out of range"
    a_key = ((ap[a_ok] - low) << 32) | ai[a_ok]
    k_key = ((kp - low) << 32) | ki
    if len(a_key) > 1 and not np.all(a_key[1:] > a_key[:-1]):
        order = np.argsort(a_key, kind="stable")
        a_key, a_idx = a_key[order], a_idx[order]
        if np.any(a_key[1:] == a_key[:-1]):
            return "one call has two API rows"
    if not len(a_key):
        return np.full(n, -1, np.int64)
    pos = np.minimum(np.searchsorted(a_key, k_key), len(a_key) - 1)
    return np.where(k_ok & (a_key[pos] == k_key), a_idx[pos], -1)


def _keys(*cols) -> tuple[list[np.ndarray], np.ndarray]:
    """Columns as int64 (NULL as 0) and where none of them is NULL."""
    import pyarrow.compute as pc

    ok = np.ones(len(cols[0]), bool)
    out = []
    for c in cols:
        if c.null_count:
            ok &= ~pc.is_null(c).to_numpy(zero_copy_only=False)
            c = pc.fill_null(c, 0)
        out.append(np.asarray(c.to_numpy() if not hasattr(c, "combine_chunks")
                              else c.combine_chunks().to_numpy(zero_copy_only=False), np.int64))
    return out, ok
