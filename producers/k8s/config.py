"""`gpufailover k8s-events` settings: flags, then `GPUFAILOVER_K8S_EVENTS_*` (and the shared
`GPUFAILOVER_*`) env vars, then defaults."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

from gpufailover import settings as env
from gpufailover.security import PLAINTEXT, KafkaSecurity, add_security_arguments
from gpufailover.settings import bootstrap_setting, resolve, setting, topic_prefix_setting
from schemas.topics import TopicNames, validate_prefix

_E = "GPUFAILOVER_K8S_EVENTS_"


@dataclass(frozen=True)
class K8sEventsOptions:
    """The options as declared; `K8sEventsSettings` is built from them."""

    bootstrap: str = bootstrap_setting()
    topic_prefix: str = topic_prefix_setting()
    kubeconfig: str = setting(
        "",
        env="GPUFAILOVER_KUBECONFIG",
        flag="--kubeconfig",
        help="kubeconfig",
        shown_default="KUBECONFIG, ~/.kube/config, then the in-cluster ServiceAccount",
    )
    namespace: str = setting(
        "",
        env=f"{_E}NAMESPACE",
        flag="--namespace",
        help="watch only this namespace",
        shown_default="all",
    )
    watch_timeout_s: int = setting(
        300,
        env=f"{_E}WATCH_TIMEOUT_S",
        flag="--watch-timeout-s",
        help="seconds the API server keeps one watch request open before it is renewed",
    )
    metrics_port: int = setting(
        0,
        env=f"{_E}METRICS_PORT",
        flag="--metrics-port",
        help="serve Prometheus metrics on this port, 0 for none",
    )
    metrics_host: str = setting(
        env.DEFAULT_METRICS_HOST,
        env="GPUFAILOVER_METRICS_HOST",
        flag="--metrics-host",
        help="address the metrics server binds: this host only unless opened on purpose "
        "(0.0.0.0 opens it to the network)",
    )


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
        options = resolve(K8sEventsOptions, args)
        if options.watch_timeout_s < 1:
            raise SystemExit(f"watch timeout must be at least 1 s, got {options.watch_timeout_s}")
        return K8sEventsSettings(
            bootstrap=options.bootstrap or env.default_bootstrap(),
            names=TopicNames(validate_prefix(options.topic_prefix)),
            kubeconfig=options.kubeconfig or None,
            namespace=options.namespace or None,
            watch_timeout_s=options.watch_timeout_s,
            metrics_port=options.metrics_port,
            metrics_host=options.metrics_host or env.DEFAULT_METRICS_HOST,
            security=KafkaSecurity.build(args),
        )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    env.add_arguments(parser, K8sEventsOptions)
    add_security_arguments(parser)
