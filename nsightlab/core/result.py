"""What every analysis returns, and how any of them is saved.

A ``Result`` (a recipe run, a diff, a run report) is a set of named DataFrames plus a manifest
(what ran, on what, with which parameters). All of them answer the same three calls:

- ``tables()``: the DataFrames by name, columns with units in their names;
- ``to_json()``: plain JSON data (NaN as null, numpy scalars as numbers);
- ``save(dir)``: ``<dir>/<table>.parquet`` (+ ``.csv``/``.json`` on request) and
  ``manifest.json`` listing the outputs, written to a temporary folder and renamed into place.

Rendering them for a terminal or a browser is ``nsightlab.renderers``' job, not theirs; in a
notebook each shows itself from its own data: a short ``repr`` (its ``brief()`` and table
names) and ``_repr_html_`` (the summary, then each table's first rows, folded).
"""
from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported where used: cached answers are served without pandas
    import pandas as pd


def json_value(v):
    """One value as plain JSON data (NaN/NA -> None, numpy -> Python, timestamps -> text)."""
    import numpy as np
    import pandas as pd

    if isinstance(v, dict):
        return {str(k): json_value(x) for k, x in v.items()}
    if isinstance(v, (list, tuple, np.ndarray)):
        return [json_value(x) for x in v]
    if v is None or v is pd.NA or v is pd.NaT:
        return None
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    if isinstance(v, (int, np.integer)):
        return int(v)
    if isinstance(v, (float, np.floating)):
        return None if math.isnan(v) else float(v)
    if isinstance(v, (str, Path)):
        return str(v)
    return str(v)


def json_records(df: pd.DataFrame) -> list[dict]:
    """A DataFrame as a list of JSON-safe row dicts (full float precision)."""
    return [json_value(r) for r in df.to_dict("records")]


#: rows of each table a notebook shows (``Result._repr_html_``); the rest is in ``tables()``
HTML_ROWS = 10


class Result:
    """Base of every analysis result: subclasses provide ``tables()`` and ``manifest()``, and
    ``brief()`` where they have a verdict to say first. Subclasses that are dataclasses are
    declared with ``repr=False`` so that this short ``repr`` is theirs."""

    def brief(self) -> str:
        """One line: the verdict or what the result holds (empty where there is none)."""
        return ""

    def __repr__(self) -> str:
        text = self.brief()
        if len(text) > 160:
            text = text[:157] + "..."
        names = ", ".join(self.tables())
        return f"<{type(self).__name__}{': ' + text if text else ''} | tables: {names}>"

    def _repr_html_(self) -> str:
        """The summary, then every non-empty table's first ``HTML_ROWS`` rows, each folded
        under its name and size (Jupyter and VS Code call this)."""
        import html

        out = [f"<div><b>{html.escape(type(self).__name__)}</b>"]
        if self.brief():
            out.append(f"<p>{html.escape(self.brief())}</p>")
        for name, df in self.tables().items():
            if df is None or not len(df):
                continue
            out.append(f"<details><summary>{html.escape(name)} ({len(df):,} rows)</summary>"
                       f"{df.head(HTML_ROWS).to_html(index=False, na_rep='')}</details>")
        return "".join(out) + "</div>"

    def tables(self) -> dict[str, pd.DataFrame]:
        """Every output table by name."""
        raise NotImplementedError

    def manifest(self) -> dict:
        """What produced this result (inputs, parameters, versions) as JSON data."""
        raise NotImplementedError

    def to_json(self) -> dict:
        """Every table as a list of records, by name."""
        return {name: json_records(df) for name, df in self.tables().items()}

    def save(self, outdir: str | os.PathLike, formats: tuple[str, ...] = ()) -> list[Path]:
        """Write every table as ``<outdir>/<table>.parquet`` (plus ``.csv``/``.json`` for
        ``formats``) and ``manifest.json``; built in a temporary folder beside ``outdir`` and
        renamed into place (an existing ``outdir`` is replaced). Returns the files written."""
        return write_tables(self.tables(), self.manifest(), outdir, formats)


def write_tables(tables: dict[str, pd.DataFrame], manifest: dict, outdir: str | os.PathLike,
                 formats: tuple[str, ...] = ()) -> list[Path]:
    """The writer behind ``Result.save`` (see there)."""
    from nsightlab._version import __version__

    outdir = Path(outdir)
    outdir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{outdir.name}-", dir=outdir.parent))
    files = []
    try:
        for t, df in tables.items():
            df.to_parquet(tmp / f"{t}.parquet", index=False)
            files.append(f"{t}.parquet")
            if "csv" in formats:
                df.to_csv(tmp / f"{t}.csv", index=False)
                files.append(f"{t}.csv")
            if "json" in formats:
                (tmp / f"{t}.json").write_text(json.dumps(json_records(df), indent=1))
                files.append(f"{t}.json")
        full = {"nsightlab_version": __version__, **json_value(manifest),
                "written": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                "tables": {t: len(df) for t, df in tables.items()}, "outputs": files}
        (tmp / "manifest.json").write_text(json.dumps(full, indent=1))
        if outdir.exists():
            shutil.rmtree(outdir)
        os.replace(tmp, outdir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return [outdir / f for f in files] + [outdir / "manifest.json"]


@contextmanager
def atomic_file(out, mode: str, **kw):
    """A file opened for writing that appears at ``out`` complete or not at all: written beside
    it under a temporary name and renamed into place when the block ends without error (a full
    disk or an interrupt leaves neither a partial ``out`` nor the temporary file)."""
    out = Path(out)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, mode, **kw) as f:
            yield f
        os.replace(tmp, out)
    except OSError as e:  # name the user's file, not the temporary one
        raise OSError(e.errno, e.strerror, str(out)) from None
    finally:
        tmp.unlink(missing_ok=True)
