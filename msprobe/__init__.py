"""msprobe: precision debugging toolkit for deep-learning training dumps."""

__version__ = "0.1.0"
