"""Workload runners nsightlab launches under the profilers (``python -m nsightlab.runners.ort``)."""
