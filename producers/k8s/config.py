"""`gpufailover k8s-events` settings: flags, then `GPUFAILOVER_K8S_EVENTS_*` (and the shared
`GPUFAILOVER_*`) env vars, then defaults."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

from consumers.runtime.config import add_metrics_host_argument, flag
from gpufailover import settings as env
from gpufailover.security import PLAINTEXT, KafkaSecurity, add_security_arguments
from schemas.topics import TopicNames, default_prefix

_E = "GPUFAILOVER_K8S_EVENTS_"


@dataclass(frozen=True)
class K8sEventsSettings:
    bootstrap: str
    names: TopicNames
    kubeconfig: str | None = None  # None: GPUFAILOVER_KUBECONFIG, KUBECONFIG, ~/.kube, in-cluster
    namespace: str | None = None  # None: every namespace
    watch_timeout_s: int = 300  # the API server ends each watch request after this long
    metrics_port: int = 0
    metrics_host: str = env.DEFAULT_METRICS_HOST
    security: KafkaSecurity = field(default=PLAINTEXT, repr=False)

    @staticmethod
    def from_env_and_args(args: argparse.Namespace | None = None) -> K8sEventsSettings:
        prefix = flag(args, "topic_prefix", default_prefix())
        timeout = flag(args, "watch_timeout_s", env.env_int(f"{_E}WATCH_TIMEOUT_S", 300))
        if timeout < 1:
            raise SystemExit(f"watch timeout must be at least 1 s, got {timeout}")
        return K8sEventsSettings(
            bootstrap=flag(args, "bootstrap", None) or env.default_bootstrap(),
            names=TopicNames(prefix),
            kubeconfig=flag(args, "kubeconfig", env.env_str("GPUFAILOVER_KUBECONFIG", "")) or None,
            namespace=flag(args, "namespace", env.env_str(f"{_E}NAMESPACE", "")) or None,
            watch_timeout_s=timeout,
            metrics_port=flag(args, "metrics_port", env.env_int(f"{_E}METRICS_PORT", 0)),
            metrics_host=flag(args, "metrics_host", None) or env.metrics_host(),
            security=KafkaSecurity.build(args),
        )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--bootstrap",
        help=env.BOOTSTRAP_HELP,
    )
    parser.add_argument("--topic-prefix", help="topic name prefix (env GPUFAILOVER_TOPIC_PREFIX)")
    parser.add_argument(
        "--kubeconfig",
        help="kubeconfig (env GPUFAILOVER_KUBECONFIG; default KUBECONFIG, ~/.kube/config, then "
        "the in-cluster ServiceAccount)",
    )
    parser.add_argument(
        "--namespace", help=f"watch only this namespace (env {_E}NAMESPACE, default: all)"
    )
    parser.add_argument(
        "--watch-timeout-s",
        type=int,
        help="seconds the API server keeps one watch request open before it is renewed "
        f"(env {_E}WATCH_TIMEOUT_S, default 300)",
    )
    parser.add_argument(
        "--metrics-port",
        type=int,
        help=f"serve Prometheus metrics on this port, 0 for none (env {_E}METRICS_PORT, default 0)",
    )
    add_metrics_host_argument(parser)
    add_security_arguments(parser)
