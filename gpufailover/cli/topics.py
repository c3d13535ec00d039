"""`gpufailover topics create|list`: the declared topic set on a broker."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from deploy.kafka_admin import run_sync
from deploy.topics import TopicMismatchError, create_topics, default_partitions, describe_topics
from gpufailover.cli.errors import quiet_kafka_client_logs
from gpufailover.cli.target import KafkaTarget
from gpufailover.errors import TopicsMissing
from gpufailover.security import KafkaSecurity, add_security_arguments
from gpufailover.settings import add_arguments, default_bootstrap, resolve
from schemas.topics import TOPICS, TopicNames


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "topics",
        help="create or list the pipeline's Kafka topics",
        description="Topics are declared once in schemas/topics.py (docs/topics.md).",
    )
    actions = parser.add_subparsers(dest="topics_command", metavar="ACTION", required=True)
    create = actions.add_parser("create", help="create missing topics (idempotent)")
    _common(create)
    create.add_argument(
        "--partitions",
        type=int,
        default=None,
        help="partitions per topic, the same for all (env GPUFAILOVER_PARTITIONS, default 4)",
    )
    create.add_argument("--replication-factor", type=int, default=1, help="default 1")
    create.set_defaults(func=cmd_create)
    listing = actions.add_parser("list", help="declared topics and whether they exist")
    _common(listing)
    listing.set_defaults(func=cmd_list)


def _common(parser: argparse.ArgumentParser) -> None:
    add_arguments(parser, KafkaTarget)
    add_security_arguments(parser)


def _err(message: str) -> None:
    print(f"gpufailover topics: {message}", file=sys.stderr)


def cmd_create(args: argparse.Namespace) -> int:
    quiet_kafka_client_logs()
    where = resolve(KafkaTarget, args)
    bootstrap = where.bootstrap or default_bootstrap()
    try:
        names = TopicNames(where.prefix)
        partitions = default_partitions() if args.partitions is None else args.partitions
        created = run_sync(
            create_topics(
                bootstrap,
                partitions=partitions,
                prefix=where.prefix,
                replication_factor=args.replication_factor,
                security=KafkaSecurity.from_env_and_args(args),
            )
        )
    except (ValueError, TopicMismatchError) as exc:  # broker trouble: gpufailover.cli.main
        _err(f"{bootstrap}: {exc}")
        return 1
    for real in names.all():
        print(f"{'created' if real in created else 'exists '}  {real}")
    _err(f"{len(created)} created, {len(names.all()) - len(created)} already existed")
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    quiet_kafka_client_logs()
    where = resolve(KafkaTarget, args)
    bootstrap = where.bootstrap or default_bootstrap()
    try:
        names = TopicNames(where.prefix)
        present = run_sync(
            describe_topics(
                bootstrap, prefix=names.prefix, security=KafkaSecurity.from_env_and_args(args)
            )
        )
    except ValueError as exc:  # broker trouble: gpufailover.cli.main
        _err(f"{bootstrap}: {exc}")
        return 1
    width = max(len(n) for n in names.all())
    print(f"{'TOPIC':<{width}}  PARTS    KEY     CLEANUP  RETENTION")
    for spec in TOPICS:
        real = names.name(spec.logical)
        parts = str(present[real]) if real in present else "missing"
        retention = "forever" if spec.retention_ms is None else f"{spec.retention_ms // 3_600_000}h"
        cleanup = "compact" if spec.compacted else "delete"
        print(f"{real:<{width}}  {parts:<7}  {spec.key:<6}  {cleanup:<7}  {retention}")
    missing = [n for n in names.all() if n not in present]
    if missing:
        raise TopicsMissing(bootstrap, missing)
    return 0
