"""nsightlab: NVIDIA Nsight profiles of GPU inference, turned into answers.

    >>> import nsightlab
    >>> r = nsightlab.open("report.sqlite")        # or a .nsys-rep, or a capture name
    >>> r.kernels()[["name", "duration_ns"]]      # every table is a DataFrame
    >>> nsightlab.diff("fp16", "nvfp4").headline["verdict"]
    >>> nsightlab.processes("ddp.sqlite")            # pid, name, GPUs, rank, runtime...

The names below are imported on first use, so ``import nsightlab`` (and the ``nsightlab``
command's ``--help``) stays fast: pandas and pyarrow load when a report is opened.
"""
from __future__ import annotations

import importlib

from nsightlab._version import __version__
from nsightlab.errors import NsightlabError

#: public name -> module that defines it (and the name there, where it differs)
_LAZY = {"open": "read.opener:open_any", "Report": "read.report", "TABLES": "read.tables",
         "diff": "comparison.diff", "compare": "comparison.lineup", "open_ncu": "formats.ncu",
         "processes": "analysis.processes", "report": "run.report:build"}
__all__ = ["NsightlabError", "Report", "TABLES", "compare", "diff", "open", "open_ncu",
           "processes", "report", "__version__"]


def __getattr__(name: str):
    if name in _LAZY:
        where, _, attr = _LAZY[name].partition(":")
        module = importlib.import_module(f".{where}", __name__)
        value = getattr(module, attr or name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'nsightlab' has no attribute {name!r}")


def __dir__() -> list[str]:
    """The public API with the lazy names in it, so ``help(nsightlab)`` and completion show
    ``open``, ``diff``, ``compare``... (they are imported when first looked up)."""
    return sorted(set(globals()) | set(__all__))
