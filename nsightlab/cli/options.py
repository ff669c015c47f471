"""Option bundles shared by every command that opens reports."""
from __future__ import annotations

import functools
from collections.abc import Callable

import click

from ..render import FORMATS
from ..report import Report, open as open_report


def report_options(f: Callable) -> Callable:
    """--no-cache / --cache-dir / --nsys, passed on as an ``opener(path) -> Report``."""

    @click.option("--no-cache", is_flag=True, envvar="NSIGHTLAB_NO_CACHE",
                  help="Read from SQLite every time; do not write Parquet caches.")
    @click.option("--cache-dir", type=click.Path(file_okay=False), envvar="NSIGHTLAB_CACHE_DIR",
                  help="Cache folder for reports outside a capture [~/.cache/nsightlab].")
    @click.option("--nsys", "nsys_path", type=click.Path(dir_okay=True),
                  envvar="NSIGHTLAB_NSYS",
                  help="nsys executable used to export .nsys-rep files [PATH].")
    @functools.wraps(f)
    def wrapper(*args, no_cache: bool, cache_dir: str | None, nsys_path: str | None, **kw):
        def opener(path: str) -> Report:
            return open_report(path, progress=lambda msg: click.echo(f"nsightlab: {msg}", err=True),
                               **opener.open_kwargs)

        # the same options, as keyword arguments for nsightlab.open (worker processes)
        opener.open_kwargs = {"cache": not no_cache, "cache_dir": cache_dir, "nsys": nsys_path}
        return f(*args, opener=opener, **kw)

    return wrapper


def output_options(f: Callable) -> Callable:
    """--format / -o, handed to ``render``."""
    f = click.option("-o", "--output", type=click.Path(dir_okay=False),
                     help="Write to FILE instead of stdout (required for parquet).")(f)
    return click.option("--format", "fmt", type=click.Choice(FORMATS), default="table",
                        show_default=True, help="Output format.")(f)
