"""`gpufailover requeue`: run the requeue service."""

from __future__ import annotations

import argparse
import asyncio
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
    from consumers.requeue.app import run_requeue
    from consumers.requeue.config import RequeueSettings
    from consumers.runtime.service import run_standalone

    settings = RequeueSettings.from_env_and_args(args)

    async def main(stop: asyncio.Event, registry: Any) -> None:
        await run_requeue(settings, stop, registry=registry)

    common = settings.common
    return run_standalone("requeue", main, common.metrics_port, common.metrics_host)
