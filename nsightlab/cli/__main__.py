"""``python -m nsightlab.cli``: the same as the nsightlab command."""
from . import main

main()
