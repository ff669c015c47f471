"""Packaging by discovery (metadata is in pyproject.toml): every package under nsightlab/
ships, so a new subpackage cannot be left out of the wheel, plus the built-in recipes (the
top-level recipes/ folder) as nsightlab._recipes."""
from setuptools import find_packages, setup

setup(packages=[*find_packages(include=["nsightlab", "nsightlab.*"]), "nsightlab._recipes"],
      package_dir={"nsightlab._recipes": "recipes"})
