"""The one place that turns a result into output, whatever the format.

Results (a DataFrame, a recipe run, a diff, a run report, report infos) never format
themselves, and commands never branch on the format: they call ``emit``.

- ``table``: terminal text (``renderers.text``);
- ``csv`` / ``json``: machine-readable text (every table in full);
- ``parquet``: files only;
- ``html``: one self-contained page (``renderers.html``), to a file.

A single table goes to stdout or to ``out`` (a file). A result with several tables goes to
stdout, or with ``out`` (a folder) is saved there: Parquet per table, CSV/JSON beside it for
those formats, and manifest.json (``Result.save``). CSV on stdout is plain CSV when the result
has one table, and each table after a ``# NAME`` line when it has several.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pandas as pd

from nsightlab.core.result import atomic_file
from nsightlab.errors import OutputError

#: formats of ``emit``
FORMATS = ("table", "csv", "json", "parquet", "html")


def data_warnings(result) -> list[tuple[str, str]]:
    """(report, message) of every data-quality warning a result carries (the completeness
    checks' warnings and partial findings, not their notes; a run report's partial findings
    are in its own first lines), each once: what every command says on stderr, whatever the
    format (``cli.options.say_warnings``), and no renderer prints again."""
    found: list[tuple[str, str]] = []
    infos = getattr(result, "infos", None)  # ReportInfos
    if infos is not None:
        found += [(i["path"], w["message"]) for i in infos for w in i.get("warnings", [])
                  if w["severity"] != "note"]
    info = getattr(result, "info", None)  # a recipe run's manifest
    if isinstance(info, dict):
        found += [(e["input"], w) for e in info.get("inputs", []) for w in e.get("warnings", [])]
    for d in [result] + list(getattr(result, "diffs", [])):  # a diff, or a lineup's
        h = getattr(d, "headline", None)
        if isinstance(h, dict):
            found += [(str(h[side]), w) for side in ("a", "b") for w in h.get(f"{side}_warnings", [])]
    if hasattr(result, "findings") and isinstance(getattr(result, "warnings", None), list):
        found += [(str(result.label), w["message"]) for w in result.warnings  # a run report
                  if w["severity"] == "warning"]  # (its partial findings are its first lines)
    return list(dict.fromkeys(found))


def emit(result, fmt: str = "table", out: str | os.PathLike | None = None, *,
         limit: int | None = None) -> list[Path]:
    """Write ``result`` as ``fmt`` to stdout or ``out``; returns the files written.

    Raises:
        OutputError: parquet without ``out``, or a format that does not fit the result.
    """
    if fmt not in FORMATS:
        raise OutputError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
    if isinstance(result, pd.DataFrame):
        return _emit_frame(result, fmt, out, limit)
    if fmt == "html":
        from nsightlab.renderers import html

        return _write(html.render(result), out)
    if out is not None and fmt != "table":
        return result.save(out, (fmt,) if fmt in ("csv", "json") else ())
    if fmt == "parquet":
        raise OutputError("--format parquet writes files: give -o DIR")
    if fmt == "json":
        return _write(json.dumps(result.to_json(), indent=1) + "\n", None)
    if fmt == "csv":
        _csv_to_stdout(result.tables())
        return []
    from nsightlab.renderers import text

    files = result.save(out) if out is not None else []
    _write(text.render(result, limit) if limit is not None else text.render(result), None)
    return files


def _csv_to_stdout(tables: dict[str, pd.DataFrame]) -> None:
    """Tables as CSV on stdout. One table is plain CSV, its header first, so that
    ``pandas.read_csv`` and spreadsheets read it as is; several each follow a ``# NAME`` line
    (to read them apart, write them to a folder instead: ``-o DIR``, one file each)."""
    several = len(tables) > 1
    for name, df in tables.items():
        if several:
            sys.stdout.write(f"# {name}\n")
        df.to_csv(sys.stdout, index=False)
    sys.stdout.flush()


def _emit_frame(df: pd.DataFrame, fmt: str, out, limit: int | None) -> list[Path]:
    if limit is not None:
        df = df.head(limit)
    if fmt == "parquet":
        if out is None:
            raise OutputError("--format parquet writes a file: give -o FILE")
        with atomic_file(out, "wb") as f:
            df.to_parquet(f, index=False)
        return [Path(out)]
    if fmt == "csv":  # written in chunks: no single multi-GB string
        if out is None:
            df.to_csv(sys.stdout, index=False, chunksize=CSV_CHUNK_ROWS)
            sys.stdout.flush()
            return []
        with atomic_file(out, "w", newline="") as f:
            df.to_csv(f, index=False, chunksize=CSV_CHUNK_ROWS)
        return [Path(out)]
    if fmt == "json":
        from nsightlab.core.result import json_records

        return _write(json.dumps(json_records(df), indent=1) + "\n", out)
    if fmt == "html":
        from nsightlab.renderers.html import page, table_html

        return _write(page("nsightlab table", [("rows", table_html(df, len(df)))], []), out)
    from nsightlab.renderers.text import table_text

    return _write(table_text(df), out)


def _write(text: str, out) -> list[Path]:
    if out is None:
        sys.stdout.write(text)
        sys.stdout.flush()
        return []
    with atomic_file(out, "w") as f:
        f.write(text)
    return [Path(out)]


#: rows per chunk when CSV is streamed (bounded text in memory; a failed write stops early)
CSV_CHUNK_ROWS = 100_000
