"""Settings every service has, read from flags first, then `GPUFAILOVER_*` env vars.

Service settings embed a `CommonSettings`; their `from_env_and_args(args)` accept the parsed
flags of `add_common_arguments` (or None: env and defaults only, as `gpufailover run` uses).
"""

from __future__ import annotations

import argparse
import socket
from dataclasses import dataclass
from typing import TypeVar, cast

from gpufailover import settings as env
from gpufailover.security import PLAINTEXT, KafkaSecurity, add_security_arguments
from schemas.topics import TopicNames, validate_prefix

T = TypeVar("T")


def flag(args: argparse.Namespace | None, name: str, fallback: T) -> T:
    """The flag's value when given, else `fallback` (the env var's or the default)."""
    value = getattr(args, name, None) if args is not None else None
    return fallback if value is None else cast(T, value)


@dataclass(frozen=True)
class CommonSettings:
    bootstrap: str
    prefix: str
    group_id: str
    instance_id: str
    metrics_port: int
    security: KafkaSecurity = PLAINTEXT
    metrics_host: str = env.DEFAULT_METRICS_HOST

    @property
    def names(self) -> TopicNames:
        return TopicNames(self.prefix)

    @property
    def transactional_id(self) -> str:
        """Stable per (group, instance): a restarted instance fences its previous incarnation."""
        return f"{self.group_id}-{self.instance_id}"

    @staticmethod
    def from_env_and_args(service: str, args: argparse.Namespace | None) -> CommonSettings:
        """`service` names the env vars: GPUFAILOVER_<SERVICE>_GROUP, ..._METRICS_PORT."""
        upper = service.upper().replace("-", "_")
        prefix = validate_prefix(flag(args, "prefix", env.env_str("GPUFAILOVER_TOPIC_PREFIX", "")))
        default_group = f"{prefix}gpufailover-{service}"
        return CommonSettings(
            bootstrap=flag(args, "bootstrap", None) or env.default_bootstrap(),
            prefix=prefix,
            group_id=flag(args, "group_id", env.env_str(f"GPUFAILOVER_{upper}_GROUP", ""))
            or default_group,
            instance_id=flag(args, "instance_id", env.env_str("GPUFAILOVER_INSTANCE_ID", ""))
            or socket.gethostname(),
            metrics_port=flag(
                args, "metrics_port", env.env_int(f"GPUFAILOVER_{upper}_METRICS_PORT", 0)
            ),
            security=KafkaSecurity.from_env_and_args(args),
            metrics_host=flag(args, "metrics_host", None) or env.metrics_host(),
        )


def add_common_arguments(parser: argparse.ArgumentParser, service: str) -> None:
    upper = service.upper().replace("-", "_")
    parser.add_argument(
        "--bootstrap",
        help=env.BOOTSTRAP_HELP,
    )
    parser.add_argument(
        "--prefix",
        "--topic-prefix",
        dest="prefix",
        help="topic name prefix (env GPUFAILOVER_TOPIC_PREFIX)",
    )
    parser.add_argument(
        "--group-id",
        help=f"consumer group (env GPUFAILOVER_{upper}_GROUP, default "
        f"<prefix>gpufailover-{service})",
    )
    parser.add_argument(
        "--instance-id",
        help="this instance's name, part of its transactional id (env GPUFAILOVER_INSTANCE_ID, "
        "default the host name)",
    )
    parser.add_argument(
        "--metrics-port",
        type=int,
        help=f"serve Prometheus /metrics on this port, 0 = off "
        f"(env GPUFAILOVER_{upper}_METRICS_PORT, default 0)",
    )
    add_metrics_host_argument(parser)
    add_security_arguments(parser)


def add_metrics_host_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--metrics-host",
        help="address the metrics server binds (env GPUFAILOVER_METRICS_HOST, default "
        f"{env.DEFAULT_METRICS_HOST}: this host only; 0.0.0.0 opens it to the network)",
    )
