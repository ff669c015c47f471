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
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from nsightlab.errors import NsysExportError, NsysNotFoundError

REPORT_SUFFIXES = (".nsys-rep", ".qdrep")
#: an export that runs longer than this is stopped
EXPORT_TIMEOUT_S = 3600
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


def export_sqlite(report: Path, out: Path, nsys: Path | None,
                  progress: Callable[[str], None] | None = None) -> Path:
    """Export ``report`` (.nsys-rep/.qdrep) to ``out`` (.sqlite) with ``nsys export``;
    ``progress`` gets a meter (``"\r..."``: megabytes written, seconds) every second."""
    if nsys is None:
        raise NsysNotFoundError(
            f"{report}: a .nsys-rep must be exported to SQLite with Nsight Systems and no nsys "
            f"was found; {INSTALL_HINT}, or export it yourself: "
            f"nsys export --type sqlite -o {report.with_suffix('.sqlite').name} {report.name}")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.stem}.{os.getpid()}.tmp.sqlite")
    try:
        returncode, msg = _run_watched(export_argv(nsys, report, tmp), tmp, report, progress)
    except OSError as e:
        raise NsysNotFoundError(f"{nsys}: cannot run it ({e}); {INSTALL_HINT}") from None
    if returncode != 0 or not tmp.exists():
        tmp.unlink(missing_ok=True)
        if any(t in msg for t in ("Version not supported", "Version number is invalid")):
            raise NsysExportError(
                f"{report}: written by a newer Nsight Systems than the local nsys "
                f"{nsys_version(nsys)} ({nsys}) can read; export it with an nsys at least as new "
                "as the one that recorded it (pass --nsys PATH or set NSIGHTLAB_NSYS), or open "
                "a .sqlite exported where it was recorded")
        last = msg.splitlines()[-1] if msg else f"exit code {returncode}"
        raise NsysExportError(f"{report}: nsys export failed ({last}); check that the file is a "
                              "complete Nsight Systems report")
    os.replace(tmp, out)
    return out


def _run_watched(cmd: list[str], out: Path, report: Path,
                 progress: Callable[[str], None] | None) -> tuple[int, str]:
    """Run ``cmd`` (an export writing ``out``) to completion, its output kept in a temporary
    file; while it runs, ``progress`` gets the size ``out`` has reached. Returns (exit code,
    output)."""
    t0 = time.monotonic()
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        try:
            while True:
                try:
                    returncode = proc.wait(timeout=1.0)
                    break
                except subprocess.TimeoutExpired:
                    if time.monotonic() - t0 > EXPORT_TIMEOUT_S:
                        proc.kill()
                        proc.wait()
                        return -9, f"nsys export ran over {EXPORT_TIMEOUT_S} s and was stopped"
                    if progress is not None:
                        mb = out.stat().st_size / 1e6 if out.exists() else 0.0
                        progress(f"\rexporting {report.name}: {mb:,.0f} MB written, "
                                 f"{time.monotonic() - t0:.0f} s")
        except BaseException:
            proc.kill()
            proc.wait()
            raise
        log.seek(0)
        return returncode, log.read().decode(errors="replace").strip()
