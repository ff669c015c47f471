"""``python -m nsightlab.cli``: the same as the nsightlab command."""
from nsightlab.cli import main

main()
