"""Classifier settings: one frozen object per process, each option declared once with its env
var (flags first, then `GPUFAILOVER_*` env vars, then defaults)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, replace

from gpufailover import settings as declare
from gpufailover.security import PLAINTEXT, KafkaSecurity, add_security_arguments
from gpufailover.settings import (
    DEFAULT_METRICS_HOST,
    bootstrap_setting,
    default_bootstrap,
    resolve,
    setting,
    topic_prefix_setting,
)


@dataclass(frozen=True)
class ClassifierSettings:
    bootstrap: str = bootstrap_setting()
    topic_prefix: str = topic_prefix_setting()
    partitions: int = setting(
        4,
        env="GPUFAILOVER_PARTITIONS",
        flag="--partitions",
        help="partitions of every topic (co-partitioned)",
    )
    policy: str = setting(
        "",
        env="GPUFAILOVER_POLICY",
        flag="--policy",
        help="policy JSON file",
        shown_default="the shipped policy",
    )
    app_id: str = setting(
        "gpufailover-classifier",
        env="GPUFAILOVER_CLASSIFIER_APP_ID",
        flag="--app-id",
        help="faust app id: consumer group and changelog topic names",
    )
    web_port: int = setting(
        6066,
        env="GPUFAILOVER_CLASSIFIER_PORT",
        flag="--web-port",
        help="faust web server port (/metrics)",
    )
    idle_after_s: float = setting(
        5.0,
        env="GPUFAILOVER_IDLE_AFTER_S",
        flag="--idle-after",
        help="seconds without records before a partition's watermark follows the wall clock",
    )
    tick_interval_s: float = setting(
        1.0,
        env="GPUFAILOVER_TICK_INTERVAL_S",
        flag="--tick-interval",
        help="seconds between clock ticks",
    )
    rebalance_timeout_s: float = setting(
        180.0,
        env="GPUFAILOVER_REBALANCE_TIMEOUT_S",
        flag="--rebalance-timeout",
        help="seconds a rebalance or table recovery may take before the worker stops itself "
        "to be restarted (0: never)",
    )
    metrics_host: str = setting(
        DEFAULT_METRICS_HOST,
        env="GPUFAILOVER_METRICS_HOST",
        flag="--metrics-host",
        help="address the web server (/metrics) binds; 0.0.0.0 opens it to the network",
    )
    filter_in_worker: bool = setting(
        False,
        env="GPUFAILOVER_FILTER_IN_WORKER",
        flag="--filter-in-worker",
        help="run the signal filter in the worker's process, not in a child process of its own "
        "(one core for the whole worker)",
    )
    security: KafkaSecurity = PLAINTEXT

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        declare.add_arguments(parser, ClassifierSettings)
        add_security_arguments(parser)

    @staticmethod
    def from_args(args: argparse.Namespace) -> ClassifierSettings:
        given = resolve(ClassifierSettings, args, security=KafkaSecurity.from_env_and_args(args))
        return replace(
            given,
            bootstrap=given.bootstrap or default_bootstrap(),
            metrics_host=given.metrics_host or DEFAULT_METRICS_HOST,
        )
