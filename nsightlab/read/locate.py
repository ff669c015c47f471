"""Where a report lives: from what the user typed to the SQLite export nsightlab reads.

A user names a report as a ``.sqlite`` export, a ``.sqlite.xz``, a ``.nsys-rep``/``.qdrep``,
a capture directory or the name of a capture in the store (``NSIGHTLAB_STORE`` or
``./captures``, or one level down in it: ``captures/examples/vit-fp16`` is ``vit-fp16``).
``locate`` turns any of these into a ``Location``: the SQLite file to open (decompressed or
exported first when needed, never beside the user's files) and the folder for its caches.
Nothing here reads the export itself; ``nsightlab.read.report`` does.
"""
from __future__ import annotations

import atexit
import errno
import functools
import json
import lzma
import os
import shutil
import stat
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from nsightlab.errors import CacheError, CorruptReportError, NotAReportError
from nsightlab.read import nsys_export as nsys_cli
from nsightlab.read.table_cache import default_root, keyed_dir, remove_stale

Progress = Callable[[str], None] | None
#: report files a folder of reports may hold (a capture holds one of them)
REPORT_PATTERNS = ("*.sqlite", "*.sqlite.xz", "*.nsys-rep", "*.qdrep")
#: first bytes of a .nsys-rep / .qdrep file
NSYS_REP_MAGIC = b"NVIDIA Tegra Profiler Report"


def default_store() -> Path:
    """Where captures live: ``NSIGHTLAB_STORE``, else ``./captures``."""
    return Path(os.environ.get("NSIGHTLAB_STORE", "captures"))


def capture_dirs(store: Path | None = None) -> list[Path]:
    """Every capture folder (one holding ``manifest.json``) in ``store`` (default: the
    store), and one level down in its other folders: a store may group its captures
    (the repository's ``captures/examples/vit-fp16``), and a user who types ``vit-fp16``
    means that one. Sorted by path."""
    root = Path(store) if store is not None else default_store()
    groups = [d for d in _subdirs(root) if not (d / "manifest.json").is_file()]
    return sorted(m.parent for m in [*root.glob("*/manifest.json"),
                                     *(m for g in groups for m in g.glob("*/manifest.json"))])


def _subdirs(folder: Path) -> list[Path]:
    """The folders in ``folder`` (none when it is missing or cannot be listed)."""
    try:
        return [d for d in folder.iterdir() if d.is_dir()]
    except OSError:
        return []


def stored_capture(name: str) -> Path | None:
    """The capture a bare ``name`` means: ``STORE/name``, else the one capture of that name
    one level down (``STORE/GROUP/name``); None when there is none.

    Raises:
        NotAReportError: several groups hold a capture of that name (naming them).
    """
    store = default_store()
    if (store / name).is_dir():
        return store / name
    found = [d for d in capture_dirs(store) if d.name == name and d.parent != store]
    if len(found) > 1:
        raise NotAReportError(f"{name}: {len(found)} captures of that name in {store} "
                              f"({', '.join(map(str, found))}); give the path of one of them")
    return found[0] if found else None


@dataclass(frozen=True)
class Location:
    """A resolved report: ``sqlite`` to read, ``cache_root`` for its caches (None: no cache),
    ``source`` as the user named it and ``capture`` when it is a capture folder."""

    sqlite: Path
    cache_root: Path | None
    source: Path
    capture: Path | None = None


def locate(path: str | os.PathLike, *, cache: bool = True,
           cache_dir: str | os.PathLike | None = None,
           nsys: str | os.PathLike | None = None, progress: Progress = None) -> Location:
    """Resolve ``path`` (see the module docstring); exports and decompresses as needed.

    Raises:
        NotAReportError: nothing at ``path``, or a folder without exactly one report.
        CorruptReportError: a damaged ``.xz`` or capture manifest.
        NsysNotFoundError, NsysExportError: a ``.nsys-rep`` that cannot be exported here.
    """
    root = Path(cache_dir) if cache_dir else default_root()
    p = Path(path)
    if not p.exists() and not p.is_absolute() and len(p.parts) == 1:
        p = stored_capture(p.name) or p
    _check_input(p, path)
    capture = None
    if p.is_dir():
        capture, p = p, capture_report(p)
        _check_input(p, p)
    if p.name.endswith(".sqlite.xz"):  # (a capture keeps the export in its own cache folder)
        home = capture / "cache" if capture is not None else keyed_dir(root, p)
        # (without a cache: a folder of its own in the scratch space, keyed by the file: two
        # captures' report.sqlite.xz must not land on one report.sqlite)
        p = _decompressed(p, _writable(home, keyed_dir(root, p)) if cache else
                          keyed_dir(scratch(), p), progress)
    if p.suffix in nsys_cli.REPORT_SUFFIXES or _is_nsys_rep(p):
        p = _exported(p, capture if cache else None, root if cache else scratch(), nsys, progress)
    cache_root = (capture / "cache") if capture is not None else keyed_dir(root, p)
    if not _usable(cache_root):
        cache_root = keyed_dir(root, p)  # a read-only capture: its cache goes to the cache root
    return Location(p, cache_root if cache else None, Path(path), capture)


def _writable(first: Path, fallback: Path) -> Path:
    """``first`` if it can be written (or created), else ``fallback`` (the cache root), else a
    scratch folder removed at exit: a read-only checkout is never a failure."""
    for folder in (first, fallback):
        if _usable(folder):
            return folder
    return scratch()


def _usable(folder: Path) -> bool:
    """Whether files can be written in ``folder`` (it is writable, or could be created: its
    nearest existing parent is writable)."""
    existing = next((d for d in (folder, *folder.parents) if d.exists()), None)
    return existing is not None and os.access(existing, os.W_OK | os.X_OK)


@functools.cache
def scratch() -> Path:
    """A private temporary folder for this process, removed when it exits (``--no-cache``
    exports and decompressions: nothing is left behind)."""
    folder = Path(tempfile.mkdtemp(prefix="nsightlab-"))
    atexit.register(shutil.rmtree, folder, True)
    return folder


def _check_input(p: Path, given) -> None:
    """A report path that can be read without surprises: it exists (a symlink loop or a
    dangling link says so), it is a regular file or a folder (a FIFO or device would block a
    read forever), and an SQLite export has no pending write-ahead log beside it (nsightlab
    reads exports as immutable: the WAL's rows would be missed).

    Raises:
        NotAReportError: naming ``given`` (what the user typed) and the fix.
    """
    try:
        st = p.stat()
    except OSError as e:
        if p.is_symlink():
            why = "a symlink loop" if e.errno == errno.ELOOP else "a symlink to nothing"
            raise NotAReportError(f"{given}: {why}; point it at a report file") from None
        raise NotAReportError(  # the store as an absolute path: the default is relative
            f"{given}: no such file, directory or capture (captures are looked up by name in "
            f"{default_store().absolute()} and the folders in it; give a path, run from the "
            "folder that holds captures/, or set NSIGHTLAB_STORE)") from None
    if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
        raise NotAReportError(f"{given}: not a regular file (a FIFO, socket or device); give an "
                              "nsys report file (.sqlite, .nsys-rep) or a capture directory")
    wal = p.with_name(p.name + "-wal")
    if stat.S_ISREG(st.st_mode) and wal.is_file() and wal.stat().st_size > 0:
        raise NotAReportError(
            f"{given}: has a pending write-ahead log ({wal.name}) that nsightlab would not see; "
            f"finish the export, or fold it in with: sqlite3 {p.name} 'PRAGMA wal_checkpoint'")


def _is_nsys_rep(p: Path) -> bool:
    try:
        with p.open("rb") as f:
            return f.read(len(NSYS_REP_MAGIC)) == NSYS_REP_MAGIC
    except OSError:
        return False


def capture_report(d: Path) -> Path:
    """The report inside a capture directory: manifest.json's ``sqlite`` (or ``nsys_rep``)
    artifact (or its ``.xz``), else the only ``*.sqlite`` (``.sqlite.xz``, ``.nsys-rep``) in it."""
    manifest = d / "manifest.json"
    if manifest.is_file():
        try:
            m = json.loads(manifest.read_text())
        except (ValueError, UnicodeDecodeError):
            raise CorruptReportError(f"{manifest}: not valid JSON; repair it or capture again") from None
        if not isinstance(m, dict):
            raise CorruptReportError(f"{manifest}: not a capture manifest (a JSON object); "
                                     "repair it or capture again")
        for key in ("sqlite", "nsys_rep"):
            if isinstance(m.get(key), str):
                for name in (m[key], m[key] + ".xz"):  # shared captures may compress the export
                    target = (d / name).resolve()
                    if not target.is_relative_to(d.resolve()):
                        raise CorruptReportError(
                            f"{manifest}: its {key!r} ({m[key]}) is outside the capture folder; "
                            "a capture's files live inside it: repair the manifest")
                    if (d / name).is_file():
                        return d / name
    for pattern in REPORT_PATTERNS:
        found = sorted(d.glob(pattern))
        if len(found) == 1:
            return found[0]
        if len(found) > 1:
            raise NotAReportError(
                f"{d}: holds {len(found)} {pattern} files; open one of them directly "
                f"(e.g. {found[0]})")
    raise NotAReportError(f"{d}: a directory without an nsys report (.sqlite or .nsys-rep); "
                          "give a report file or a capture directory")


def _exported(rep: Path, capture: Path | None, root: Path, nsys: str | os.PathLike | None,
              progress: Progress) -> Path:
    """SQLite for a .nsys-rep: an up-to-date sibling ``X.sqlite`` (as ``nsys stats`` uses),
    else an export into the capture (ours) or the cache folder (never next to user files)."""
    sibling = rep.with_suffix(".sqlite")
    if sibling.is_file() and sibling.stat().st_mtime >= rep.stat().st_mtime:
        return sibling
    out = (capture / sibling.name) if capture is not None else keyed_dir(root, rep) / sibling.name
    if capture is not None and not _usable(capture):
        out = _writable(keyed_dir(root, rep), keyed_dir(root, rep)) / sibling.name
    if out.is_file():
        return out
    exe = nsys_cli.find_nsys(nsys)
    if progress is not None and exe is not None:
        progress(f"exporting {rep.name} to SQLite with {exe} ...")
    return nsys_cli.export_sqlite(rep, out, exe, progress)


def _decompressed(xz: Path, folder: Path, progress: Progress) -> Path:
    """An xz-compressed export, decompressed once into ``folder`` (a cache, never beside it)."""
    out = folder / xz.name[: -len(".xz")]
    if not out.is_file():
        if progress is not None:
            progress(f"decompressing {xz.name} ...")
        out.parent.mkdir(parents=True, exist_ok=True)
        remove_stale(out.parent)
        tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
        try:
            with lzma.open(xz) as src, tmp.open("wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
            os.replace(tmp, out)
        except (lzma.LZMAError, EOFError) as e:
            raise CorruptReportError(f"{xz}: not a complete xz file ({e}); copy it again") from None
        except OSError as e:
            raise CacheError(f"{xz}: cannot decompress it into {out.parent} ({e.strerror}); free "
                             "space there or set NSIGHTLAB_CACHE_DIR to another folder") from None
        finally:
            tmp.unlink(missing_ok=True)
    return out


def expand_inputs(inputs: list[str]) -> list[str]:
    """Report files, capture names/directories, and directories of reports, flattened in
    order. A directory that is a capture (manifest.json, or exactly one report) counts as one
    report; any other directory contributes every report file in it (sorted)."""
    out: list[str] = []
    for item in inputs:
        p = Path(item)
        if p.is_dir() and not (p / "manifest.json").is_file():
            files = sorted({f for pat in REPORT_PATTERNS for f in p.glob(pat)})
            exports = {f.name.split(".sqlite")[0] for f in files if ".sqlite" in f.name}
            # an X.nsys-rep beside its X.sqlite(.xz) export is one report, not two
            files = [f for f in files if ".sqlite" in f.name or f.stem not in exports]
            if len(files) > 1:
                out += [str(f) for f in files]
                continue
        out.append(item)
    return out
