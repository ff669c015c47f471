"""Option bundles shared by the commands, so every command spells the same thing the same way.

- ``report_options``: ``--no-cache``, ``--cache-dir``, ``--nsys``, handed to the command as
  ``open_options`` (the keyword arguments of ``nsightlab.open``, progress notes included);
- ``output_options(dest)``: ``--format`` (``--json`` is ``--format json``) and ``-o`` (a FILE
  for commands that print one table, a DIR with ``--force`` for those that print several),
  handed on as ``fmt`` and ``output``.
"""
from __future__ import annotations

import contextlib
import functools
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import click

from nsightlab.formats.ncu_file import is_ncu as ncu_input  # noqa: F401 (the commands' check)

FORMATS = ("table", "csv", "json", "parquet")


def progress(msg: str) -> None:
    """Progress notes go to stderr, prefixed, so stdout stays clean for data.

    A note starting with ``"\r"`` is a meter (rows read, reports done): on a terminal it
    replaces the previous meter in place (``"\r"`` alone clears it); elsewhere (a log, CI) it
    is left out, so logs hold only the notes that matter."""
    import sys

    err = sys.stderr
    tty = err.isatty()
    if msg == "\r":
        if _METER[0] and tty:
            err.write("\r\033[K")
            err.flush()
        _METER[0] = False
        return
    if msg.startswith("\r"):
        if tty:
            width = max(20, shutil.get_terminal_size().columns - 1)
            err.write(f"\r\033[K{('nsightlab: ' + msg[1:])[:width]}")
            err.flush()
            _METER[0] = True
        return
    if _METER[0] and tty:
        err.write("\r\033[K")
        _METER[0] = False
    click.echo(f"nsightlab: {msg}", err=True)


#: whether a meter line is showing on the terminal (the next note overwrites it)
_METER = [False]


def say_warnings(result, found: list[tuple[str, str]] | None = None) -> None:
    """Each data-quality warning ``result`` carries (``renderers.data_warnings``), or the
    (report, message) pairs ``found``, once per command on stderr, whatever the format:
    stdout holds the answer, stderr what to doubt in it. A served answer
    (``read.answer_cache``) says them again when it is replayed."""
    from nsightlab.read import answer_cache

    if found is None:
        from nsightlab.renderers import data_warnings

        found = data_warnings(result)
    for source, message in found:
        answer_cache.said(f"nsightlab: WARNING: {source}: {message}")


def has_ncu(path: str) -> bool:
    """Whether ``path`` is an ncu report or a capture folder holding one or more."""
    from nsightlab.formats.ncu_file import reports_in

    p = Path(path)
    if not p.exists() and len(p.parts) == 1:  # a capture's name
        from nsightlab.read.locate import stored_capture

        p = stored_capture(p.name) or p
    return ncu_input(path) or (p.is_dir() and bool(reports_in(p)))


def ncu_reader(what: str) -> bool:
    """Whether NVIDIA's ncu-report wheel is installed; when not, a one-line note that ``what``
    (the Nsight Compute part a capture could add) needs it: an optional extra, not a fault."""
    import importlib.util

    if importlib.util.find_spec("ncu_report") is not None:
        return True
    click.echo(f"nsightlab: note: {what} needs NVIDIA's ncu-report: pip install "
               "'nsightlab[ncu]'", err=True)
    return False


@contextlib.contextmanager
def served_answer(command: str, options: list, sources: list[str], open_options: dict):
    """Yields True when the same command on the same Nsight Compute report files printed its
    answer before (printed again at once: ``read.answer_cache``); else runs the block and
    keeps what it prints."""
    from nsightlab.read import answer_cache as served

    spot = served.file_spot(command, options, sources, open_options)
    if spot is not None and spot.replay():
        yield True
        return
    with spot.recording() if spot is not None else contextlib.nullcontext():
        yield False


def warn(line: str) -> None:
    """A warning on stderr, once, kept with a served answer."""
    from nsightlab.read import answer_cache as served

    served.said(f"WARNING: {line}")


def report_options(f: Callable) -> Callable:
    """--no-cache / --cache-dir / --nsys, passed on as ``open_options`` (a dict)."""

    @click.option("--no-cache", is_flag=True, envvar="NSIGHTLAB_NO_CACHE",
                  help="Read from SQLite every time; do not write Parquet caches.")
    @click.option("--cache-dir", type=click.Path(file_okay=False), envvar="NSIGHTLAB_CACHE_DIR",
                  help="Cache folder for reports outside a capture [~/.cache/nsightlab].")
    @click.option("--nsys", "nsys_path", type=click.Path(dir_okay=True), envvar="NSIGHTLAB_NSYS",
                  help="nsys executable used to export .nsys-rep files [PATH].")
    @functools.wraps(f)
    def wrapper(*args, no_cache: bool, cache_dir: str | None, nsys_path: str | None, **kw):
        from nsightlab.read.parallel import ONE_BLAS_THREAD, eager_unmap

        for name, value in ONE_BLAS_THREAD.items():  # before NumPy loads (the user's own win)
            os.environ.setdefault(name, value)
        eager_unmap()
        kw["open_options"] = {"cache": not no_cache, "cache_dir": cache_dir, "nsys": nsys_path,
                              "progress": progress}
        return f(*args, **kw)

    return wrapper


def output_options(dest: str, formats: tuple[str, ...] = FORMATS) -> Callable:
    """--format / --json / -o (a ``dest`` of "file" or "dir"; "dir" adds --force)."""

    def decorate(f: Callable) -> Callable:
        @click.option("--format", "fmt", type=click.Choice(formats), default="table",
                      show_default=True, help=_format_help(formats, dest))
        @click.option("--json", "as_json", is_flag=True, help="Same as --format json.")
        @click.option("-o", "--output", type=click.Path(dir_okay=dest == "dir",
                                                        file_okay=dest == "file"),
                      metavar=dest.upper(),
                      help=("Write to FILE instead of stdout (needed for parquet)." if dest == "file"
                            else "Write every table to DIR as Parquet (plus CSV/JSON with "
                                 "--format csv/json) with manifest.json."))
        @functools.wraps(f)
        def wrapper(*args, fmt: str, as_json: bool, output: str | None, **kw):
            if as_json:
                fmt = "json"
            if fmt == "parquet" and not output:
                raise click.UsageError(f"--format parquet writes files: give -o {dest.upper()}")
            force = kw.pop("force", False)
            if dest == "dir" and output and not force and Path(output).is_dir() and \
                    any(Path(output).iterdir()):
                raise click.UsageError(f"{output} exists and is not empty; use --force to "
                                       "replace it")
            return f(*args, fmt=fmt, output=output, **kw)

        if dest == "dir":
            wrapper = click.option("--force", is_flag=True,
                                   help="Replace an existing, non-empty DIR.")(wrapper)
        return wrapper

    return decorate


def _format_help(formats: tuple[str, ...], dest: str) -> str:
    where = "the file" if dest == "file" else "DIR"
    csv = ("csv: every row (with -o, into the file)" if dest == "file" else
           "csv: every row; one table as plain CSV, several each after a '# NAME' line (to "
           "read them apart, -o DIR writes one NAME.csv each)")
    parts = {"table": "table: aligned text for the terminal",
             "csv": csv,
             "json": f"json: every row (with -o, into {where})",
             "parquet": f"parquet: {where} only (needs -o)"}
    return "; ".join(parts[f] for f in formats) + "."


def wrote(files: list, where: str | None) -> None:
    """One stderr note for files a command wrote."""
    if files and where:
        click.echo(f"nsightlab: wrote {len(files)} file(s) to {where}", err=True)


def import_beside(module: str) -> None:
    """Import ``module`` on a thread while the reader processes read the tables (a command
    that will need it then does not wait for it after the read)."""
    import importlib
    import threading

    threading.Thread(target=importlib.import_module, args=(module,), daemon=True,
                     name=f"import {module}").start()


def chart_options(f):
    """--html FILE / --png DIR, for commands whose result has charts."""
    f = click.option("--png", "png_dir", type=click.Path(file_okay=False),
                     help="Save the charts as PNG here.")(f)
    return click.option("--html", "html_file", type=click.Path(dir_okay=False),
                        help="Write a self-contained HTML report with charts (opens offline).")(f)


def charts_out(result, html_file: str | None, png_dir: str | None) -> None:
    """--html FILE and --png DIR, for any result with charts."""
    from nsightlab.renderers import emit

    if html_file:
        wrote(emit(result, "html", html_file), html_file)
    if png_dir:
        from nsightlab.renderers import charts

        wrote(charts.save_pngs(charts.charts_for(result), png_dir), png_dir)
