"""`gpufailover k8s-events`: job lifecycle events from the pods of labelled training jobs."""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from producers.k8s.config import add_arguments


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "k8s-events",
        help="watch the pods of labelled Kubernetes training jobs, publish jobs.events",
        description="Watch pods labelled gpufailover.io/job-id and publish started, pending "
        "(image pull back-off), terminated (exit code, reason), succeeded and cancelled per job "
        "attempt, each once, to jobs.events. Runs until SIGINT/SIGTERM. docs/kubernetes.md",
    )
    add_arguments(parser)
    parser.set_defaults(func=cmd_run)


def cmd_run(args: argparse.Namespace) -> int:
    from consumers.runtime.service import run_standalone
    from producers.k8s.config import K8sEventsSettings
    from producers.k8s.watch import run_k8s_events

    settings = K8sEventsSettings.from_env_and_args(args)

    async def main(stop: asyncio.Event, registry: Any) -> None:
        await run_k8s_events(settings, stop, registry=registry)

    return run_standalone("k8s-events", main, settings.metrics_port, settings.metrics_host)
