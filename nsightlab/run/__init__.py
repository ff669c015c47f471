"""One run: its model and its report, in one place that every answer reads.

The model (``model.profile`` -> ``RunProfile``) is processes -> GPUs -> iterations (each with
its window, work signature, kind of work, pace and budget parts) -> kinds, read from the time
budget the recipes store (``analysis.budget``: one output from its in-memory and out-of-core
engines) and from the launch table; ``report.build`` says what one run did and why (``nsightlab
report``, ``nsightlab.report``), with the remedies in its runtime's terms (``remedies``) and a
report of several processes built apart (``apart``). ``comparison`` only compares models.

The layer sits above the recipes because the model and the report read the recipes' stored
answers (``recipe_runner``): a budget computed once per report, whichever command asks.
"""
