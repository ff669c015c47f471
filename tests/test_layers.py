"""The package's imports point one way: no cycles, and no layer imports one above it
(``nsightlab._layers``). Every import counts, those inside functions included; only
``if TYPE_CHECKING:`` imports are left out, and only the root's lazy ``__getattr__`` (which
``importlib`` calls, not an import statement) reaches up."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

import nsightlab
from nsightlab._layers import LAYERS, layer_of
from nsightlab.recipe_runner import builtin_dir

PACKAGE = Path(nsightlab.__file__).parent


def modules() -> dict[str, Path]:
    """Dotted name -> file, for the package and the built-in recipes (``nsightlab._recipes``)."""
    out = {}
    for root, prefix in ((PACKAGE, ["nsightlab"]), (builtin_dir(), ["nsightlab", "_recipes"])):
        for p in root.rglob("*.py"):
            parts = prefix + list(p.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = p
    return out


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    skip = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return skip


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The nsightlab modules ``name`` imports. ``from pkg import sub`` imports the submodule
    ``pkg.sub``; ``from pkg import thing`` imports ``pkg``."""
    tree = ast.parse(path.read_text(), str(path))
    skip = _type_checking_nodes(tree)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            for a in node.names:
                sub = f"{module}.{a.name}"
                found.add(sub if sub in known else module)
    out = set()
    for target in found:
        if not target.startswith("nsightlab"):
            continue
        while target not in known and "." in target:
            target = target.rpartition(".")[0]
        if target != name:
            out.add(target)
    return out


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports(name, path, known) for name, path in known.items()}


def test_every_module_has_a_layer(graph):
    for name in graph:
        layer_of(name)  # KeyError names the module


def test_no_layer_imports_a_higher_one(graph):
    upward = [f"{a} ({LAYERS[layer_of(a)][0]}) imports {b} ({LAYERS[layer_of(b)][0]})"
              for a, targets in sorted(graph.items()) for b in sorted(targets)
              if layer_of(b) > layer_of(a)]
    assert not upward, "\n".join(upward)


def test_no_import_cycles(graph):
    """Tarjan's strongly connected components: any with two or more modules is a cycle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    assert not cycles, "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles)


def test_the_checker_sees_imports_inside_functions(tmp_path):
    """A guard that cannot fail guards nothing: a function-level import upward is found, a
    TYPE_CHECKING one is not."""
    f = tmp_path / "m.py"
    f.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                 "    from nsightlab.cli import cli\n"
                 "def f():\n    from nsightlab.comparison import diff\n")
    known = {"nsightlab.read.m": f, "nsightlab.comparison.diff": f, "nsightlab.cli": f}
    assert imports("nsightlab.read.m", f, known) == {"nsightlab.comparison.diff"}


def test_the_root_stays_small():
    """Only entry points, the version, the layer order and the recipe modules sit in
    ``nsightlab/`` itself: everything else lives in the layer's subpackage."""
    root = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(root) <= 15, root


def test_recipes_import_only_the_recipe_api(graph):
    """Built-in recipes are written as user recipes are: against ``nsightlab.recipe_api``."""
    other = {name: sorted(t for t in targets if t != "nsightlab.recipe_api")
             for name, targets in graph.items() if name.startswith("nsightlab._recipes.")}
    assert not any(other.values()), other


def test_the_code_fingerprint_covers_every_layer():
    """Derived results are cached under a fingerprint of the code: an edit in any layer (the
    analysis above all) must change it, not only an edit beside the cache module."""
    from nsightlab.read.table_cache import code_files

    files = {p.relative_to(PACKAGE).as_posix() for p in code_files()}
    for layer in ("analysis/budget.py", "comparison/diff.py", "read/tables.py", "__init__.py"):
        assert layer in files, layer
