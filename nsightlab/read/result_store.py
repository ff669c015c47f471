"""One store for derived results (recipe outputs, run profiles), beside a report's table cache.

``ResultStore.get_or_compute(name, params, inputs, compute)`` returns what ``compute()``
returned the last time it ran with the same *key*, else runs it and keeps the result. The key
covers everything the result depends on:

- the code: ``code`` (nsightlab's fingerprint, plus a recipe's own files),
- the parameters (JSON, sorted keys),
- the identity (resolved path, size, mtime) of the report and of every other input file,
  such as an ``.ncu-rep`` given as a parameter: replacing one gives a new key.

A result is a set of DataFrames plus a JSON dict of scalars (``attrs``). An entry is a folder
``<root>/<name>-<key>/`` of Parquet files and a ``meta.json`` written last; it is built in a
temporary folder and renamed into place. meta.json records the SHA-256 of every Parquet file
and of the attributes; an entry whose bytes changed, or that cannot be read, is deleted and
recomputed; a store that cannot be written is not an error (the result is returned, not kept).
Old entries are pruned: entries of the same name made by other code, and the least recently
used beyond ``MAX_ENTRIES``.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import pandas as pd
import pyarrow as pa

from nsightlab.read.table_cache import build_dir, identity

META = "meta.json"
#: entries kept per store (one report); the least recently used beyond this are removed
MAX_ENTRIES = 64

Tables = dict[str, pd.DataFrame]


def result_key(name: str, code: str, params: dict, inputs: Iterable[Path]) -> str:
    """Hash of what a result depends on (see the module docstring)."""
    ids = [identity(Path(p)) for p in inputs]
    blob = json.dumps([name, code, params, ids], sort_keys=True, default=str)
    return hashlib.sha1(blob.encode()).hexdigest()[:20]


class ResultStore:
    """Derived results of one report, in ``root``."""

    def __init__(self, root: Path):
        self.root = Path(root)

    def get_or_compute(self, name: str, params: dict, inputs: Iterable[Path], code: str,
                       compute: Callable[[], tuple[Tables, dict]]) -> tuple[Tables, dict]:
        """``(tables, attrs)`` for ``name`` with ``params`` over ``inputs``: stored, or
        computed by ``compute()`` and stored."""
        key = result_key(name, code, params, inputs)
        folder = self.root / f"{name}-{key}"
        found = self._load(folder)
        if found is not None:
            return found
        tables, attrs = compute()
        self._save(folder, name, code, tables, attrs)
        return tables, attrs

    def has(self, name: str, params: dict, inputs: Iterable[Path], code: str) -> bool:
        """Whether ``get_or_compute`` with these arguments would find a stored result."""
        return (self.root / f"{name}-{result_key(name, code, params, inputs)}" / META).exists()

    def _load(self, folder: Path) -> tuple[Tables, dict] | None:
        try:
            meta = json.loads((folder / META).read_text())
            sums = meta["sha256"]
            if sums["attrs"] != _digest(json.dumps(meta["attrs"], sort_keys=True).encode()):
                raise ValueError("attributes changed since they were written")
            tables = {}
            for t in meta["tables"]:
                f = folder / f"{t}.parquet"
                if sums[t] != _digest(f.read_bytes()):
                    raise ValueError(f"{f.name} changed since it was written")
                tables[t] = pd.read_parquet(f)
            os.utime(folder / META)  # recently used: pruned last
            return tables, meta["attrs"]
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError, pa.ArrowException):
            shutil.rmtree(folder, ignore_errors=True)  # damaged: recompute, never trust it
            return None

    def _save(self, folder: Path, name: str, code: str, tables: Tables, attrs: dict) -> None:
        tmp = None
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            tmp = build_dir(self.root, folder.name)
            sums = {}
            for t, df in tables.items():
                df.to_parquet(tmp / f"{t}.parquet", index=False)
                sums[t] = _digest((tmp / f"{t}.parquet").read_bytes())
            attrs = json.loads(json.dumps(attrs, default=_json_default))  # as it will be read
            sums["attrs"] = _digest(json.dumps(attrs, sort_keys=True).encode())
            meta = {"name": name, "code": code, "tables": list(tables), "attrs": attrs,
                    "sha256": sums, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
            (tmp / META).write_text(json.dumps(meta, default=_json_default))
            shutil.rmtree(folder, ignore_errors=True)
            os.replace(tmp, folder)
            self.prune(keep=folder)
        except OSError:  # a read-only or full cache is not an error: the result is not kept
            if tmp is not None:
                shutil.rmtree(tmp, ignore_errors=True)

    def prune(self, keep: Path | None = None) -> None:
        """Remove entries of ``keep``'s name made by other code, then the least recently
        used entries beyond ``MAX_ENTRIES`` (and likewise the printed answers kept by
        ``nsightlab.read.answer_cache``)."""
        entries = []
        served = []
        current = _read_meta(keep) if keep is not None else None
        for d in self.root.iterdir():
            if d.name.startswith("served-") and d.is_file():
                served.append((d.stat().st_mtime, d))
            if not d.is_dir() or d.name.startswith(".") or d == keep:
                continue
            meta = _read_meta(d)
            if meta is None or (current is not None and meta.get("name") == current["name"]
                                and meta.get("code") != current["code"]):
                shutil.rmtree(d, ignore_errors=True)
                continue
            entries.append(((d / META).stat().st_mtime, d))
        for _, d in sorted(entries, reverse=True)[MAX_ENTRIES - 1:]:
            shutil.rmtree(d, ignore_errors=True)
        for _, f in sorted(served, reverse=True)[MAX_ENTRIES:]:
            f.unlink(missing_ok=True)


def _read_meta(folder: Path) -> dict | None:
    try:
        return json.loads((folder / META).read_text())
    except (OSError, ValueError):
        return None


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _json_default(v):
    """numpy scalars and the like, as plain numbers or text."""
    try:
        return v.item()
    except AttributeError:
        return str(v)
