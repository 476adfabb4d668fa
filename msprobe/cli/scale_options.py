"""The scale-out options shared by `compare`, `graph` and `multi_acc_check` (argparse only: -h stays fast)."""

from __future__ import annotations

import argparse

from msprobe.cli.arguments import int_at_least
from msprobe.version import DISTRIBUTION


def add_arguments(parser: argparse.ArgumentParser, workers: str) -> None:
    """--backend, --ray-address and --retries; `workers` names the command's option for local processes."""
    group = parser.add_argument_group("scale-out (docs/scaling.md)")
    group.add_argument("--backend", choices=("local", "ray"), default="local",
                       help=f"where the tasks run: local processes ({workers}, the default) or a Ray cluster "
                            f"(pip install \"{DISTRIBUTION}[ray]\"); every task reads its inputs from and writes its "
                            "results to the given paths, which must be shared storage on a cluster")
    group.add_argument("--ray-address", "--ray_address", dest="ray_address", default="auto", metavar="ADDRESS",
                       help="the Ray cluster to use with --backend ray: auto (default) is the running cluster "
                            "(RAY_ADDRESS or the local one), or a local Ray instance started for the run when "
                            "there is none; else host:port or ray://host:port")
    group.add_argument("--retries", type=int_at_least(0), default=2, metavar="N",
                       help="further attempts of a task whose failure may pass on a second try (its worker lost, "
                            "a storage error; an input error is reported at once) before it is reported as failed; "
                            "the other tasks go on (default: 2)")


def backend_of(args: argparse.Namespace, workers: int, start_method: str | None = None):
    """The Backend the options ask for, checked (with --backend ray, Ray must be importable)."""
    from msprobe.scale.executor import check_backend
    from msprobe.scale.task import Backend

    backend = Backend(args.backend, max(1, workers), args.ray_address, args.retries, start_method)
    check_backend(backend)
    return backend
