"""Answers served again: what a command printed, kept so that the same command prints it at once.

Recomputing nothing is not enough for an instant repeat: importing pandas and pyarrow alone
takes longer than the whole answer should. So when a command prints a result for one report
with the cache on, the text it wrote to stdout is kept beside the report's derived results
(``<cache>/results/served-<key>.json``, with its SHA-256), with the data-quality warnings
it said on stderr (``said``), and the same command next time prints both after importing
only the standard library. The key covers everything the
text depends on: the command and its options, nsightlab's code (and a recipe's own files),
and the identity (path, size, mtime) of the export and of every other input file, so an
edited report, an upgrade or other options give a new key, never a stale answer. A damaged
entry is removed and the command runs in full; a store that cannot be written only means the
next run is not instant.
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from nsightlab.errors import NsightlabError
from nsightlab.read.locate import locate
from nsightlab.read.table_cache import (build_dir, code_fingerprint, default_root, identity,
                                        keyed_dir)

#: printed answers longer than this are not kept (a CSV of millions of gaps: no gain)
MAX_CHARS = 8 << 20


#: stderr lines of data-quality warnings said by this command, each once (``said``); a kept
#: answer keeps them, and its replay says them again
_SAID: list[str] = []


def new_command() -> None:
    """Forget the warnings said so far: a new command starts (in one process, as tests run)."""
    _SAID.clear()


def said(line: str) -> None:
    """Print ``line`` (a warning) on stderr once per command, and remember it for the
    answer being recorded."""
    if line not in _SAID:
        _SAID.append(line)
        sys.stderr.write(line + "\n")
        sys.stderr.flush()


class Spot:
    """Where one command's printed answer is kept."""

    def __init__(self, path: Path):
        self.path = path
        #: set False inside ``recording`` when the answer must not be kept (a "no data" run
        #: whose explanation went to stderr)
        self.keep = True

    def replay(self) -> bool:
        """Print the kept answer; False (and the entry removed if damaged) when there is none."""
        try:
            entry = json.loads(self.path.read_text())
            text, warnings = entry["stdout"], entry.get("stderr", [])
            if entry["sha256"] != _digest(text + "".join(warnings)):
                raise ValueError("changed since it was written")
        except FileNotFoundError:
            return False
        except (OSError, ValueError, KeyError, TypeError):
            self.path.unlink(missing_ok=True)
            return False
        sys.stdout.write(text)
        sys.stdout.flush()
        for line in warnings:
            said(line)
        with suppress(OSError):
            os.utime(self.path)  # recently used: pruned last (ResultStore.prune)
        return True

    @contextmanager
    def recording(self) -> Iterator[None]:
        """Run the block with stdout copied; keep the copy when the block succeeds."""
        tee = _Tee(sys.stdout)
        sys.stdout = tee
        first = len(_SAID)
        try:
            yield
        finally:
            sys.stdout = tee.inner
        if self.keep and not tee.overflow:
            self._keep("".join(tee.parts), _SAID[first:])

    def _keep(self, text: str, warnings: list[str]) -> None:
        tmp = None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = build_dir(self.path.parent, self.path.name)
            staged = tmp / self.path.name
            staged.write_text(json.dumps({"stdout": text, "stderr": warnings,
                                          "sha256": _digest(text + "".join(warnings))}))
            os.replace(staged, self.path)
        except OSError:
            pass  # a read-only or full cache: the next run is just not instant
        finally:
            if tmp is not None:
                with suppress(OSError):
                    tmp.rmdir()


class _Tee:
    """A text stream that writes through to ``inner`` and keeps a copy (up to MAX_CHARS)."""

    def __init__(self, inner):
        self.inner = inner
        self.parts: list[str] = []
        self.size = 0
        self.overflow = False

    def write(self, s: str) -> int:
        if not self.overflow:
            self.size += len(s)
            if self.size > MAX_CHARS:
                self.overflow, self.parts = True, []
            else:
                self.parts.append(s)
        return self.inner.write(s)

    def __getattr__(self, name: str):  # flush, fileno, isatty, encoding... of the real stream
        return getattr(self.inner, name)


def spot(command: str, options: list, source: str, open_options: dict,
         files: list[str] = ()) -> Spot | None:
    """The Spot of ``command`` with ``options`` on report ``source`` (and other input
    ``files``), or None when its answer cannot be kept: no cache, or the report cannot be
    located (the full command then says why)."""
    if not open_options.get("cache", True):
        return None
    try:
        loc = locate(source, cache=True, cache_dir=open_options.get("cache_dir"),
                     nsys=open_options.get("nsys"), progress=open_options.get("progress"))
        if loc.cache_root is None:
            return None
        manifest = Path(loc.source) / "manifest.json"  # a capture's own facts (trtexec, ORT)
        extra = [manifest] if manifest.is_file() else []
        inputs = [identity(Path(f)) for f in (loc.sqlite, *extra, *files)]
    except (NsightlabError, OSError):
        return None
    # the input as typed too: the answer prints it
    blob = json.dumps([command, code_fingerprint(), options, source, inputs], sort_keys=True,
                      default=str)
    key = hashlib.sha1(blob.encode()).hexdigest()[:20]
    return Spot(Path(loc.cache_root) / "results" / f"served-{key}.json")


def file_spot(command: str, options: list, sources: list[str], open_options: dict) -> Spot | None:
    """The Spot of ``command`` on input files that are not nsys reports (Nsight Compute
    reports): kept in the cache folder of the first, keyed by every file's identity."""
    if not open_options.get("cache", True):
        return None
    try:
        if not all(Path(s).is_file() for s in sources):
            return None
        inputs = [identity(Path(s)) for s in sources]
        root = Path(open_options.get("cache_dir") or default_root())
        folder = keyed_dir(root, Path(sources[0]))
    except OSError:
        return None
    blob = json.dumps([command, code_fingerprint(), options, list(sources), inputs],
                      sort_keys=True, default=str)
    key = hashlib.sha1(blob.encode()).hexdigest()[:20]
    return Spot(folder / "results" / f"served-{key}.json")


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()
