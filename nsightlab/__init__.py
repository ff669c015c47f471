"""nsightlab: NVIDIA Nsight profiles of GPU inference, turned into answers.

    >>> import nsightlab
    >>> r = nsightlab.open("report.sqlite")        # or a .nsys-rep, or a capture name
    >>> r.kernels()[["name", "duration_ns"]]      # every table is a DataFrame
"""
from .errors import NsightlabError
from .report import Report, open
from .tables import TABLES

__version__ = "0.1.0"
__all__ = ["NsightlabError", "Report", "TABLES", "open", "__version__"]
