"""Allows `python -m msprobe`."""

from msprobe.cli.main import console_main

console_main()
