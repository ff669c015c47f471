"""The package version: a leaf module, so that any layer can stamp what it writes with it."""
__version__ = "0.1.0"
