"""Pieces the operator commands share."""

from __future__ import annotations

import argparse

from deploy.topics import TopicNames
from gpufailover import settings as env
from gpufailover.cli.errors import quiet_kafka_client_logs
from gpufailover.security import KafkaSecurity, add_security_arguments


def add_target_arguments(parser: argparse.ArgumentParser) -> None:
    """--bootstrap/--prefix on an action's parser, not clobbering the service parser's values."""
    parser.add_argument(
        "--bootstrap",
        default=argparse.SUPPRESS,
        help=env.BOOTSTRAP_HELP,
    )
    parser.add_argument(
        "--prefix",
        "--topic-prefix",
        dest="prefix",
        default=argparse.SUPPRESS,
        help="topic name prefix (env GPUFAILOVER_TOPIC_PREFIX)",
    )
    add_security_arguments(parser, suppress=True)


def target(args: argparse.Namespace) -> tuple[str, TopicNames]:
    """Where an operator command goes; also quiets aiokafka's logs for it (its failures are
    reported in one line by `gpufailover.cli.main`)."""
    quiet_kafka_client_logs()
    bootstrap = getattr(args, "bootstrap", None) or env.default_bootstrap()
    prefix = getattr(args, "prefix", None)
    if prefix is None:
        prefix = env.env_str("GPUFAILOVER_TOPIC_PREFIX", "")
    return bootstrap, TopicNames(prefix)


def target_security(args: argparse.Namespace) -> KafkaSecurity:
    """How an operator command authenticates (its flags, then GPUFAILOVER_* env)."""
    return KafkaSecurity.from_env_and_args(args)
