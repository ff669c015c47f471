"""Finding the Nsight Systems CLI and exporting .nsys-rep reports to SQLite.

nsys is found, in order, from an explicit path (``--nsys``), ``NSIGHTLAB_NSYS``, then PATH.
Exports are written to a temporary file and renamed into place, so an interrupted export
never leaves a half-written SQLite behind.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from .errors import NsysExportError, NsysNotFoundError

REPORT_SUFFIXES = (".nsys-rep", ".qdrep")
INSTALL_HINT = ("install Nsight Systems (CUDA toolkit, or Debian's non-free 'nsight-systems' "
                "package) and put nsys on PATH, or pass --nsys PATH / set NSIGHTLAB_NSYS")


def find_nsys(explicit: str | os.PathLike | None = None) -> Path | None:
    """Path of the nsys executable to use, or None if there is none."""
    for cand in (explicit, os.environ.get("NSIGHTLAB_NSYS")):
        if cand:
            p = Path(cand)
            if p.is_dir():
                p = p / "nsys"
            found = shutil.which(str(p))
            if found is None:
                raise NsysNotFoundError(f"{cand}: not an executable nsys; {INSTALL_HINT}")
            return Path(found)
    found = shutil.which("nsys")
    return Path(found) if found else None


def nsys_version(nsys: Path) -> str:
    """Version string of an nsys executable, e.g. '2022.4.2.1'."""
    try:
        out = subprocess.run([str(nsys), "--version"], capture_output=True, text=True,
                             timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired) as e:
        raise NsysNotFoundError(f"{nsys}: cannot run it ({e}); {INSTALL_HINT}") from None
    m = re.search(r"(\d{4}\.\d+\.\d+(?:\.\d+)?)", out)
    return m.group(1) if m else out.strip() or "unknown"


def export_argv(nsys: str | os.PathLike, report: Path, out: Path) -> list[str]:
    """The ``nsys export`` command line that writes ``report`` as SQLite to ``out``."""
    return [str(nsys), "export", "--type", "sqlite", "--force-overwrite", "true",
            "--output", str(out), str(report)]


def export_sqlite(report: Path, out: Path, nsys: Path | None) -> Path:
    """Export ``report`` (.nsys-rep/.qdrep) to ``out`` (.sqlite) with ``nsys export``."""
    if nsys is None:
        raise NsysNotFoundError(
            f"{report}: a .nsys-rep must be exported to SQLite with Nsight Systems and no nsys "
            f"was found; {INSTALL_HINT}, or export it yourself: "
            f"nsys export --type sqlite -o {report.with_suffix('.sqlite').name} {report.name}")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.stem}.{os.getpid()}.tmp.sqlite")
    cmd = export_argv(nsys, report, tmp)
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    except OSError as e:
        raise NsysNotFoundError(f"{nsys}: cannot run it ({e}); {INSTALL_HINT}") from None
    msg = (proc.stdout + proc.stderr).strip()
    if proc.returncode != 0 or not tmp.exists():
        tmp.unlink(missing_ok=True)
        if any(t in msg for t in ("Version not supported", "Version number is invalid")):
            raise NsysExportError(
                f"{report}: written by a newer Nsight Systems than the local nsys "
                f"{nsys_version(nsys)} ({nsys}) can read; export it with an nsys at least as new "
                "as the one that recorded it (pass --nsys PATH or set NSIGHTLAB_NSYS), or open "
                "a .sqlite exported where it was recorded")
        last = msg.splitlines()[-1] if msg else f"exit code {proc.returncode}"
        raise NsysExportError(f"{report}: nsys export failed ({last}); check that the file is a "
                              "complete Nsight Systems report")
    os.replace(tmp, out)
    return out
