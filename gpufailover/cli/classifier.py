"""`gpufailover classifier`: run the faust classifier worker."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from streams.config import ClassifierSettings
from streams.policy import PolicyError


def register(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "classifier",
        help="run the stream processor that classifies job failures (a faust worker)",
        description="Join GPU evidence with job terminations on Kafka and publish decisions.",
    )
    ClassifierSettings.add_arguments(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    settings = ClassifierSettings.from_args(args)
    from streams.app import build_app  # faust is heavy: import only to run

    try:
        app = build_app(settings)
    except PolicyError as exc:
        print(f"gpufailover classifier: bad policy: {exc}", file=sys.stderr)
        return 2
    import asyncio

    import faust

    from deploy.topics import create_compacted_topics
    from streams import watchdog

    changelogs = sorted(t.changelog_topic.get_topic_name() for t in app.tables.values())
    loop = asyncio.new_event_loop()  # its own loop: faust's worker sets up the current one
    try:
        loop.run_until_complete(
            create_compacted_topics(
                settings.bootstrap, changelogs, settings.partitions, security=settings.security
            )
        )
    finally:
        loop.close()

    watchdog.start(
        lambda: bool(app.rebalancing or getattr(app, "in_recovery", False)),
        settings.rebalance_timeout_s,
    )
    worker = faust.Worker(app, loglevel=args.log_level.lower(), quiet=True)
    worker.execute_from_commandline()
    return 0
