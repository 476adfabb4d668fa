"""The package version and distribution name, importable from any layer without loading the Python API
(msprobe/__init__.py).

The distribution is `msprobe-toolkit` (`pip install msprobe-toolkit`): the name `msprobe` on PyPI belongs to an
unrelated project. The command stays `msprobe` and the package `import msprobe`, as in the reference msprobe
(PyPI `mindstudio-probe`), so its users keep their habits."""

__version__ = "0.1.0"
DISTRIBUTION = "msprobe-toolkit"
