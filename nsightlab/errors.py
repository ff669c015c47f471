"""The one exception family nsightlab raises for bad input.

Every message names the file it is about and says how to fix the problem; the CLI prints
it on one line and exits 1. Programming errors are not wrapped: they stay tracebacks.
"""
from __future__ import annotations


class NsightlabError(Exception):
    """Base class: a problem with the user's input or environment, with a fix in the message."""


class NotAReportError(NsightlabError):
    """The file is not something nsightlab can read (not SQLite, not an nsys export...)."""


class CorruptReportError(NsightlabError):
    """The file looks like an nsys export but cannot be read (truncated, damaged)."""


class UnsupportedReportError(NsightlabError):
    """The export is real but lacks what nsightlab needs (e.g. a 2021-era export without metadata)."""


class NsysNotFoundError(NsightlabError):
    """A .nsys-rep must be exported to SQLite and no `nsys` executable was found."""


class NsysExportError(NsightlabError):
    """`nsys export` failed, e.g. because the report is newer than the local nsys."""


class UnknownTableError(NsightlabError):
    """A table name that nsightlab does not define."""


class UsageError(NsightlabError):
    """Options that cannot go together or are missing (the CLI exits 2, as for bad flags)."""


class OutputError(UsageError):
    """An output that cannot be written as asked (e.g. Parquet without a destination)."""


class CacheError(NsightlabError):
    """A cache or scratch folder that cannot hold what must be written there (full, read-only)."""


class NoDataError(NsightlabError):
    """The report lacks what the recipe needs (e.g. no kernels): "no data", not a failure."""


class RecipeError(NsightlabError):
    """A recipe that breaks its own metadata (bad ``requires``, undeclared output columns)."""
