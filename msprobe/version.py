"""The package version, importable from any layer without loading the Python API (msprobe/__init__.py)."""

__version__ = "0.1.0"
