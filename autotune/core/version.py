"""The package's version, in a module of its own at the ground of the wings: what records it (kernel and database
caches, studies' provenance, sweeps, ``autotune --version``) reads it here without importing the package's top, and
the build reads it from this file (pyproject.toml, ``tool.hatch.version``), so that it is written once."""
__version__ = "0.2.0"
