"""Pieces the operator commands share."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from gpufailover import settings as env
from gpufailover.cli.errors import quiet_kafka_client_logs
from gpufailover.security import KafkaSecurity, add_security_arguments
from gpufailover.settings import bootstrap_setting, topic_prefix_setting
from schemas.topics import TopicNames


@dataclass(frozen=True)
class KafkaTarget:
    """The cluster and topics an operator command reads or writes."""

    bootstrap: str = bootstrap_setting()
    prefix: str = topic_prefix_setting(short_flag=True)


def add_target_arguments(parser: argparse.ArgumentParser) -> None:
    """--bootstrap/--prefix on an action's parser, not clobbering the service parser's values."""
    env.add_arguments(parser, KafkaTarget, suppress=True)
    add_security_arguments(parser, suppress=True)


def target(args: argparse.Namespace) -> tuple[str, TopicNames]:
    """Where an operator command goes; also quiets aiokafka's logs for it (its failures are
    reported in one line by `gpufailover.cli.main`)."""
    quiet_kafka_client_logs()
    where = env.resolve(KafkaTarget, args)
    return where.bootstrap or env.default_bootstrap(), TopicNames(where.prefix)


def target_security(args: argparse.Namespace) -> KafkaSecurity:
    """How an operator command authenticates (its flags, then GPUFAILOVER_* env)."""
    return KafkaSecurity.from_env_and_args(args)
