"""Every real report we have, through `info`, `report` and `diff`: the warnings each gets.

    python benchmarks/warnings_sweep.py [DIR_OR_FILE...]   (default: tests/data, ../shared
                                                           fixtures, captures/examples)

A warning on a healthy real capture is a bug (issue 46): this lists, per report and command,
every line a command says on stderr with WARNING in it, every PARTIAL line of its answer, and
any NaN or inf in its output (text and JSON), so the next change can be checked against the
last sweep. Each command is the CLI in this process (click's runner), with a fresh cache
folder per report; `diff` runs the report against itself. Prints one block per report and a
count at the end; exits 0 whatever it finds (it lists, it does not judge).
"""
from __future__ import annotations

import lzma
import re
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DEFAULT = [ROOT / "tests" / "data", ROOT.parent / "shared" / "fixtures" / "nsys",
           ROOT / "captures" / "examples"]
NAN = re.compile(r"\b(nan|inf|-inf|NaN|Infinity)\b")


def reports(paths: list[Path]) -> list[Path]:
    """SQLite exports (.sqlite, .sqlite.xz) and capture folders under ``paths``."""
    out: list[Path] = []
    for p in paths:
        if p.is_dir() and (p / "manifest.json").exists():
            out.append(p)
        elif p.is_dir():
            out += sorted(q for q in p.rglob("*") if q.name.endswith((".sqlite", ".sqlite.xz")))
            out += sorted(q.parent for q in p.rglob("manifest.json") if q.parent != p)
        elif p.exists():
            out.append(p)
    return list(dict.fromkeys(out))


def plain(path: Path, tmp: Path) -> Path:
    """A path this sweep may read: .xz decompressed, capture folders copied (a capture keeps
    its cache inside it: the sweep must not write into the checkout)."""
    if path.is_dir():
        import shutil

        out = tmp / f"capture-{abs(hash(str(path)))}" / path.name
        if not out.exists():
            shutil.copytree(path, out, ignore=shutil.ignore_patterns("cache"))
        return out
    if path.name.endswith(".xz"):
        out = tmp / path.name.removesuffix(".xz")
        if not out.exists():
            out.write_bytes(lzma.decompress(path.read_bytes()))
        return out
    return path


def main(args: list[str]) -> int:
    from click.testing import CliRunner

    from nsightlab.cli import cli

    runner = CliRunner()
    found = 0
    with tempfile.TemporaryDirectory() as tmp:
        for i, path in enumerate(reports([Path(a) for a in args] or DEFAULT)):
            p = plain(path, Path(tmp))
            cache = Path(tmp) / f"cache{i}"
            lines = []
            for cmd in (["info", str(p)], ["report", str(p)], ["report", str(p), "--json"],
                        ["diff", str(p), str(p)]):
                res = runner.invoke(cli, [*cmd, "--cache-dir", str(cache)])
                said = [x for x in res.stderr.splitlines() if "WARNING" in x]
                said += [x.strip() for x in res.stdout.splitlines() if "PARTIAL:" in x]
                if NAN.search(res.stdout):
                    said.append(f"NaN/inf in the output: {NAN.search(res.stdout).group(0)!r}")
                if res.exit_code not in (0, 1):
                    said.append(f"exit {res.exit_code}")
                lines += [f"  {' '.join(cmd[:1] + cmd[2:])}: {x[:240]}" for x in said]
            found += len(lines)
            print(f"== {path}" + ("" if lines else ": nothing said"), flush=True)
            for x in lines:
                print(x, flush=True)
    print(f"{found} lines said")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
