"""Run labels people can read: a capture's name or a report's file stem, made longer (parent
folders in front) only as far as the runs need to stay distinct. Full paths belong in JSON and
manifests, not in a terminal line or a chart legend."""
from __future__ import annotations

from pathlib import PurePath

#: report file suffixes a label leaves out (longest first)
REPORT_SUFFIXES = (".sqlite.xz", ".sqlite", ".nsys-rep", ".qdrep")


def run_labels(sources: list[str]) -> list[str]:
    """Short, distinct labels for ``sources`` (paths or capture names, as the user gave
    them): ``captures/examples/vit-fp16`` -> ``vit-fp16``, ``a/fp16.sqlite`` and
    ``b/fp16.sqlite`` -> ``a/fp16`` and ``b/fp16``. The same source twice keeps one label (the
    caller numbers repeats)."""
    parts = []
    for s in sources:
        p = list(PurePath(str(s).rstrip("/") or str(s)).parts) or [str(s)]
        p[-1] = next((p[-1][: -len(x)] for x in REPORT_SUFFIXES if p[-1].endswith(x)), p[-1])
        parts.append(p)
    depth = 1
    while True:
        labels = ["/".join(p[-depth:]) for p in parts]
        clash = {lab for lab, s in zip(labels, sources)
                 if len({str(t) for lab2, t in zip(labels, sources) if lab2 == lab}) > 1}
        if not clash or depth >= max(len(p) for p in parts):
            return labels
        depth += 1
