"""Exports with parts missing, generated from real fixtures (issue 62): what other tools and
other nsys options write, so that every command meets each shape before a user does.

    python tests/exports_gen.py OUTDIR [STEM ...]   # every case through every command

Four families, each case named ``<family>:<what>``:

- ``table``: each table nsightlab reads dropped alone (``faults.py``'s ``without-`` cases
  run a few commands on these; here every command, ``test_exports_gen`` says when).
- ``column``: each column nsightlab reads of the main tables (``MAIN``) dropped alone, the
  table written again without it (as a tool that never had the column writes it).
- ``null``: each nullable column nsightlab reads of the main tables set to NULL in every row.
- ``minimal``: the table sets other tools write (``MINIMAL``), made from each committed capture
  into a fresh file.

The first three come from one small real fixture that holds every main table (``SOURCE``);
the minimal sets from any fixture. Nothing is checked in: each case is written when it is run
(``write``) and is a few hundred KB.
"""
from __future__ import annotations

import re
import sqlite3
import sys
from dataclasses import dataclass
from pathlib import Path

K, MC, MS, SY, RT = (f"CUPTI_ACTIVITY_KIND_{t}" for t in
                     ("KERNEL", "MEMCPY", "MEMSET", "SYNCHRONIZATION", "RUNTIME"))
#: the tables whose columns are dropped and set to NULL one at a time
MAIN = (K, MC, MS, SY, RT, "NVTX_EVENTS", "TARGET_INFO_GPU")
#: the fixture the table, column and null families are made from: 0.9 MB, every main table
SOURCE = "pub-fuser-matmul-h100"


@dataclass(frozen=True)
class Minimal:
    """A table set another tool writes: the tables kept (``keep``; None: all but ``drop``),
    and the columns it never writes."""

    keep: tuple[str, ...] | None = None
    drop: tuple[str, ...] = ()
    columns_out: tuple[str, ...] = ()


#: what other tools write: a CUPTI-based tracer's export (the CUPTI columns, no globalPid, no
#: enum or sync tables; with or without the calls' threads), kernels alone (with or without
#: the version metadata nsightlab asks for), and nsys traces without NVTX, syncs and enums
MINIMAL = {
    "cupti": Minimal(keep=(K, MC, RT, "StringIds", "TARGET_INFO_GPU", "META_DATA_EXPORT"),
                     columns_out=("globalPid",)),
    "cupti-no-tids": Minimal(keep=(K, MC, RT, "StringIds", "TARGET_INFO_GPU", "META_DATA_EXPORT"),
                             columns_out=("globalPid", "globalTid")),
    "kernels-only": Minimal(keep=(K, "StringIds"), columns_out=("globalPid",)),
    "kernels-versioned": Minimal(keep=(K, "StringIds", "META_DATA_EXPORT"),
                                 columns_out=("globalPid",)),
    "kernels-runtime": Minimal(keep=(K, RT, "StringIds", "META_DATA_EXPORT")),
    "no-nvtx-sync-enums": Minimal(drop=("NVTX_EVENTS", SY, "ENUM_*")),
}


@dataclass(frozen=True)
class Case:
    """One generated export: ``family:what`` from fixture ``stem``, written by ``write``."""

    family: str
    what: str
    stem: str

    @property
    def name(self) -> str:
        return f"{self.family}:{self.what}@{self.stem}"

    def write(self, src: Path, out: Path) -> Path:
        """The case as a new SQLite file under ``out`` (made from ``src``, the fixture)."""
        path = out / (re.sub(r"[^A-Za-z0-9_.-]", "_", self.name) + ".sqlite")
        path.unlink(missing_ok=True)
        if self.family == "minimal":
            _minimal(src, path, MINIMAL[self.what])
            return path
        path.write_bytes(src.read_bytes())
        path.chmod(0o644)
        with sqlite3.connect(path) as con:
            if self.family == "table":
                con.execute(f'DROP TABLE "{self.what}"')
            elif self.family == "column":
                table, column = self.what.split(".")
                _rewrite(con, table, [c for c in _columns(con, table) if c != column])
            else:  # null
                table, column = self.what.split(".")
                con.execute(f'UPDATE "{table}" SET "{column}" = NULL')
        return path


def _columns(con: sqlite3.Connection, table: str, schema: str = "main") -> list[str]:
    return [r[1] for r in con.execute(f'PRAGMA {schema}.table_info("{table}")')]


def _tables(con: sqlite3.Connection, schema: str = "main") -> list[str]:
    return [r[0] for r in con.execute(
        f"SELECT name FROM {schema}.sqlite_master WHERE type = 'table' ORDER BY name")]


def _rewrite(con: sqlite3.Connection, table: str, columns: list[str], src: str = "main") -> None:
    """``table`` written again (into main) with ``columns`` only, from schema ``src``."""
    cols = ", ".join(f'"{c}"' for c in columns)
    con.execute(f'CREATE TABLE "_new" AS SELECT {cols} FROM {src}."{table}"')
    con.execute(f'DROP TABLE IF EXISTS main."{table}"')
    con.execute(f'ALTER TABLE "_new" RENAME TO "{table}"')


def _minimal(src: Path, path: Path, m: Minimal) -> None:
    """A fresh file holding the tables of ``m`` copied from ``src``, without ``m.columns_out``."""
    con = sqlite3.connect(path, uri=True)  # ATTACH by a read-only URI
    try:
        con.execute("ATTACH DATABASE ? AS src", (f"file:{src}?mode=ro",))
        for t in _tables(con, "src"):
            kept = t in m.keep if m.keep is not None else not any(
                t == d or d.endswith("*") and t.startswith(d[:-1]) for d in m.drop)
            if kept:
                _rewrite(con, t, [c for c in _columns(con, t, "src") if c not in m.columns_out],
                         src="src")
        con.commit()
    finally:
        con.close()


def read_names() -> set[str]:
    """Every table and column name nsightlab's code writes as a word: what it may read."""
    import nsightlab

    names: set[str] = set()
    for f in Path(nsightlab.__file__).parent.rglob("*.py"):
        names |= set(re.findall(r"\b[A-Za-z_][A-Za-z0-9_]*\b", f.read_text()))
    return names


def cases(src: Path, stems: list[str]) -> list[Case]:
    """Every case: the table, column and null families from ``src`` (the ``SOURCE``
    fixture), and each minimal set from each of ``stems``."""
    con = sqlite3.connect(f"file:{src}?mode=ro", uri=True)
    read = read_names()
    have = _tables(con)
    found = [Case("table", t, SOURCE) for t in have if t in read]
    for t in (t for t in MAIN if t in have):
        info = [(r[1], r[3]) for r in con.execute(f'PRAGMA table_info("{t}")') if r[1] in read]
        found += [Case("column", f"{t}.{c}", SOURCE) for c, _ in info]
        found += [Case("null", f"{t}.{c}", SOURCE) for c, notnull in info if not notnull]
    con.close()
    return found + [Case("minimal", m, stem) for stem in stems for m in MINIMAL]


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    from test_exports_gen import main

    main(sys.argv[1:])
