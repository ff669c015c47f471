"""nsightlab: NVIDIA Nsight profiles of GPU inference, turned into answers.

    >>> import nsightlab
    >>> r = nsightlab.open("report.sqlite")        # or a .nsys-rep, or a capture name
    >>> r.kernels()[["name", "duration_ns"]]      # every table is a DataFrame
"""
import os as _os

import pyarrow as _pa

if "ARROW_DEFAULT_MEMORY_POOL" not in _os.environ:
    # Big reads allocate and free hundreds of MB of transient Arrow buffers (SQLite batches,
    # Parquet row groups). Arrow's default allocator keeps freed memory mapped, so peak RSS
    # grew to ~2.5x the final DataFrame; jemalloc with immediate decay returns it to the OS.
    # Set ARROW_DEFAULT_MEMORY_POOL to choose another allocator.
    try:
        _pa.set_memory_pool(_pa.jemalloc_memory_pool())
        _pa.jemalloc_set_decay_ms(0)
    except (NotImplementedError, AttributeError):  # a pyarrow built without jemalloc
        pass

from .diff import diff
from .errors import NsightlabError
from .ncu import open_ncu
from .report import Report, open
from .tables import TABLES

__version__ = "0.1.0"
__all__ = ["NsightlabError", "Report", "TABLES", "diff", "open", "open_ncu", "__version__"]
