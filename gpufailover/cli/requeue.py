"""`gpufailover requeue`: run the requeue service."""

from __future__ import annotations

import argparse
from typing import Any

from consumers.requeue.config import add_arguments


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "requeue",
        help="run the requeue service (failover/retry decisions -> jobs.requeue)",
        description="Run the requeue service until SIGINT/SIGTERM.",
    )
    add_arguments(parser)
    parser.set_defaults(func=cmd_run)


def cmd_run(args: argparse.Namespace) -> int:
    from consumers.requeue.app import serve
    from consumers.requeue.config import RequeueSettings

    return serve(RequeueSettings.from_env_and_args(args))
