"""Allows `python -m msprobe`."""

from msprobe.cli.main import main

raise SystemExit(main())
