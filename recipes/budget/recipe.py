"""budget: where each iteration's wall-clock time goes, and the verdict that follows: a view
of the run's loop (``nsightlab.analysis.loop``), which keeps it in the result store."""
from nsightlab.recipe_api import loop


def run(report, params):
    return loop.of(report, params).tables()
