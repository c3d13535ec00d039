"""Settings every service has, read from flags first, then `GPUFAILOVER_*` env vars.

Service settings embed a `CommonSettings`; their `from_env_and_args(args)` accept the parsed
flags of `add_common_arguments` (or None: env and defaults only, as `gpufailover run` uses).
"""

from __future__ import annotations

import argparse
import socket
from dataclasses import dataclass, replace

from gpufailover import settings as env
from gpufailover.security import PLAINTEXT, KafkaSecurity, add_security_arguments
from gpufailover.settings import (
    add_arguments,
    bootstrap_setting,
    resolve,
    setting,
    topic_prefix_setting,
)
from schemas.topics import TopicNames, validate_prefix


@dataclass(frozen=True)
class CommonSettings:
    bootstrap: str = bootstrap_setting()
    prefix: str = topic_prefix_setting(short_flag=True)
    group_id: str = setting(
        "",
        env="GPUFAILOVER_{SERVICE}_GROUP",
        flag="--group-id",
        help="consumer group",
        shown_default="<prefix>gpufailover-{service}",
    )
    instance_id: str = setting(
        "",
        env="GPUFAILOVER_INSTANCE_ID",
        flag="--instance-id",
        help="this instance's name, part of its transactional id",
        shown_default="the host name",
    )
    metrics_port: int = setting(
        0,
        env="GPUFAILOVER_{SERVICE}_METRICS_PORT",
        flag="--metrics-port",
        help="serve Prometheus /metrics on this port, 0 = off",
    )
    security: KafkaSecurity = PLAINTEXT
    metrics_host: str = setting(
        env.DEFAULT_METRICS_HOST,
        env="GPUFAILOVER_METRICS_HOST",
        flag="--metrics-host",
        help="address the metrics server binds: this host only unless opened on purpose "
        "(0.0.0.0 opens it to the network)",
    )

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
        given = resolve(
            CommonSettings, args, service=service, security=KafkaSecurity.from_env_and_args(args)
        )
        prefix = validate_prefix(given.prefix)
        return replace(
            given,
            bootstrap=given.bootstrap or env.default_bootstrap(),
            prefix=prefix,
            group_id=given.group_id or f"{prefix}gpufailover-{service}",
            instance_id=given.instance_id or socket.gethostname(),
            metrics_host=given.metrics_host or env.DEFAULT_METRICS_HOST,
        )


def add_common_arguments(parser: argparse.ArgumentParser, service: str) -> None:
    add_arguments(parser, CommonSettings, service=service)
    add_security_arguments(parser)
