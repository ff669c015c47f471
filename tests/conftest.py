"""Shared test fixtures: real nsys exports from tests/data (and ../shared/fixtures when present).

Reports stored as ``*.sqlite.xz`` are decompressed once per session into a temporary folder.
Tests never write to these files; ``test_report.py`` checks that nsightlab does not either.
"""
from __future__ import annotations

import lzma
import shutil
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
DATA = HERE / "data"
SHARED = HERE.parent.parent / "shared" / "fixtures"


def _sources() -> dict[str, tuple[Path, Path]]:
    """stem -> (report file, expected folder); tests/data first, then ../shared/fixtures
    (where held-back reports may be added: every SQLite there is tested the same way)."""
    found: dict[str, tuple[Path, Path]] = {}
    for root in (DATA, SHARED):
        for f in sorted((root / "nsys").glob("*.sqlite*")):
            stem = f.name.split(".sqlite")[0]
            found.setdefault(stem, (f, root / "expected" / stem))
    return found


SOURCES = _sources()
STEMS = sorted(SOURCES)


@pytest.fixture(scope="session")
def fixture_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fixtures")


@pytest.fixture(scope="session")
def sqlite_of(fixture_dir):
    """Function: stem -> path of a plain (decompressed) SQLite copy of that fixture."""
    done: dict[str, Path] = {}

    def get(stem: str) -> Path:
        if stem not in done:
            src, _ = SOURCES[stem]
            out = fixture_dir / f"{stem}.sqlite"
            if src.suffix == ".xz":
                with lzma.open(src) as fin, open(out, "wb") as fout:
                    shutil.copyfileobj(fin, fout)
            else:
                shutil.copyfile(src, out)
            out.chmod(0o444)
            done[stem] = out
        return done[stem]

    return get


@pytest.fixture(scope="module")
def module_cache(tmp_path_factory):
    """One private cache root for a module's tests (never the user's ~/.cache): for modules
    whose fixtures open reports once for many tests."""
    with pytest.MonkeyPatch.context() as m:
        m.setenv("NSIGHTLAB_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
        yield


@pytest.fixture
def cache_dir(tmp_path, monkeypatch) -> Path:
    """A private cache root for each test (never the user's ~/.cache)."""
    d = tmp_path / "cache"
    monkeypatch.setenv("NSIGHTLAB_CACHE_DIR", str(d))
    monkeypatch.delenv("NSIGHTLAB_NO_CACHE", raising=False)
    return d


def xz_fixtures(tmp_path_factory, folder: Path, prefix: str = ""):
    """Function: name -> path of ``folder/nsys/<prefix><name>.sqlite.xz`` decompressed once into
    a session folder (the captured fixtures of tests/data/scenarios and tests/data/models)."""
    out_dir = tmp_path_factory.mktemp(folder.name)

    def get(name: str) -> Path:
        out = out_dir / f"{prefix}{name}.sqlite"
        if not out.exists():
            with lzma.open(folder / "nsys" / f"{prefix}{name}.sqlite.xz") as a, open(out, "wb") as b:
                shutil.copyfileobj(a, b)
        return out

    return get


def make_tiny_onnx(path: Path) -> Path:
    """A two-node ONNX model (MatMul 64x64 + Relu, symbolic batch) saved at ``path``."""
    onnx = pytest.importorskip("onnx")
    import numpy as np
    from onnx import TensorProto, helper

    w = helper.make_tensor("W", TensorProto.FLOAT, [64, 64],
                           np.random.default_rng(0).random(64 * 64).astype("float32").tolist())
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["y"]), helper.make_node("Relu", ["y"], ["z"])],
        "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 64])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, ["batch", 64])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def expected_dir(stem: str) -> Path:
    return SOURCES[stem][1]


#: SQL that puts a table's rows out of time order (as nsys 2025.6 and later write them)
SHUFFLE = ("CREATE TABLE s AS SELECT * FROM {t} ORDER BY (rowid * 7919) % 10007",
           "DROP TABLE {t}", "ALTER TABLE s RENAME TO {t}")
#: SQL that turns a table into a view of itself (no rowid)
AS_VIEW = ("ALTER TABLE {t} RENAME TO t2_", "CREATE VIEW {t} AS SELECT * FROM t2_")


def edited_copy(src: Path, out: Path, table: str, sql: tuple[str, ...]) -> Path:
    """A copy of the export ``src`` at ``out`` with each of ``sql`` ({t}: ``table``) run on
    it: a real report changed in one way (``SHUFFLE``, ``AS_VIEW``)."""
    import sqlite3

    shutil.copyfile(src, out)
    out.chmod(0o644)
    with sqlite3.connect(out) as c:
        for s in sql:
            c.execute(s.format(t=table))
    return out


@pytest.fixture
def by_processes(monkeypatch):
    """Every split table of a small fixture is read by 2 worker processes, from a fresh pool
    (the early start is a fresh process's first step: it starts no reads beside a pool)."""
    from nsightlab.read import parallel, reader, workers

    monkeypatch.setattr(workers, "PROCESS_MIN_ROWS", 1)
    monkeypatch.setattr(workers, "PROCESS_MIN_WORKERS", 2)
    monkeypatch.setattr(parallel, "ROWS_PER_READER", 1000)
    for module in (workers, reader):
        monkeypatch.setattr(module, "readers", lambda rows=None: 2)
    workers.discard_pool()
    yield
    workers.discard_pool()
