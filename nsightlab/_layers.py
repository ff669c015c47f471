"""The layer order of the package, lowest first: the one place it is declared.

Data flows up: a path is located and exported (``read``), its tables are read into Arrow and
pandas through the Parquet cache (``read``), analysed (``analysis``, the recipes), made into
one run's model and report (``run``), compared (``comparison``) and shown (``renderers``);
``capture`` makes new reports and the command line drives it all. A module may import from its own layer and the layers below, never from a
layer above, and no two modules import each other, directly or round a loop
(``tests/test_layers.py`` checks both on every import, those inside functions included).
Only the package root's lazy ``__getattr__`` reaches up, to hand out ``nsightlab.open`` and
the other entry points.

Where new code goes: a new input format in ``formats``; a new table or reader in ``read``; a
new analysis, verdict rule or iteration finder in ``analysis``; a new recipe in ``recipes/``
(it imports only ``nsightlab.recipe_api``); a new fact of one run, or a line of its report, in
``run``; a new comparison in ``comparison``; a new output in ``renderers``.
"""
from __future__ import annotations

#: (layer, module prefixes), lowest first; a module belongs to the layer of its longest prefix
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("leaves", ("nsightlab._version", "nsightlab._layers", "nsightlab.errors",
                "nsightlab.runners")),
    ("core: results, units, statistics and the vocabulary",
     ("nsightlab.core", "nsightlab.renderers.words")),
    ("formats: Nsight Compute, trtexec, ONNX Runtime", ("nsightlab.formats",)),
    ("read: locate, export, SQLite, tables, cache, workers, Report", ("nsightlab.read",)),
    ("analysis: timeline, stats, classes, launches, budget, iterations, completeness",
     ("nsightlab.analysis",)),
    ("recipe runner", ("nsightlab.recipe_runner",)),
    ("recipe API", ("nsightlab.recipe_api",)),
    ("built-in recipes", ("nsightlab._recipes",)),
    ("run: one run's model (processes, iterations, work, pace, budget) and its report",
     ("nsightlab.run",)),
    ("kernels: Nsight Compute kernels judged (limiter, roofline, NVIDIA's rules), joined to the "
     "trace's loop and paired across reports", ("nsightlab.kernels",)),
    ("comparison: diff, compare, gate, layers, ORT placement", ("nsightlab.comparison",)),
    ("presentation: renderers and charts", ("nsightlab.renderers",)),
    ("capture: record runs, export artifacts", ("nsightlab.capture",)),
    ("entry points: open, diff, compare, Report, TABLES, open_ncu", ("nsightlab",)),
    ("command line", ("nsightlab.cli", "nsightlab.__main__")),
)


def layer_of(module: str) -> int:
    """Index in ``LAYERS`` of ``module`` (a dotted name under ``nsightlab``)."""
    best, rank = -1, None
    for i, (_, prefixes) in enumerate(LAYERS):
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and len(p) > best:
                best, rank = len(p), i
    if rank is None:
        raise KeyError(f"{module} is in no layer of nsightlab._layers.LAYERS")
    return rank
