"""Is it an Nsight Compute report, and which one does a capture hold: by name and first bytes,
without pandas or NVIDIA's wheel (the command line and ``nsightlab.open`` ask before any
import)."""
from __future__ import annotations

import json
from pathlib import Path

#: the first bytes of every .ncu-rep
MAGIC = b"NVR\x00"


def is_ncu(path) -> bool:
    """Whether ``path`` is an Nsight Compute report: named .ncu-rep(.xz), or an .ncu-rep by its
    first bytes whatever its name."""
    p = Path(path)
    if p.name.endswith((".ncu-rep", ".ncu-rep.xz")):
        return True
    if not p.is_file():  # a FIFO or device would block the read
        return False
    try:
        with p.open("rb") as f:
            return f.read(len(MAGIC)) == MAGIC
    except OSError:
        return False


def reports_in(folder: Path) -> list[Path]:
    """The Nsight Compute reports in a capture folder."""
    return sorted(folder.glob("*.ncu-rep")) + sorted(folder.glob("*.ncu-rep.xz"))


def ncu_in(path) -> Path | None:
    """The Nsight Compute report that ``path`` is or holds (a capture folder: its manifest's
    ``ncu_rep``, else its only one), else None."""
    p = Path(path)
    if p.is_file():
        return p if is_ncu(p) else None
    if not p.is_dir():
        return None
    manifest = p / "manifest.json"
    if manifest.is_file():
        try:
            name = json.loads(manifest.read_text()).get("ncu_rep")
        except (ValueError, AttributeError):
            name = None
        for n in ([name, name + ".xz"] if isinstance(name, str) else []):
            if (p / n).is_file() and (p / n).resolve().is_relative_to(p.resolve()):
                return p / n
    found = reports_in(p)
    return found[0] if len(found) == 1 else None
