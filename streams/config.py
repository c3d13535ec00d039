"""Classifier settings: one frozen object per process, each option with its env var."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from gpufailover.security import PLAINTEXT, KafkaSecurity, add_security_arguments
from gpufailover.settings import (
    BOOTSTRAP_HELP,
    DEFAULT_METRICS_HOST,
    default_bootstrap,
    env_float,
    env_int,
    env_str,
    metrics_host,
)

# (flag, env var, default, help) — the one place the classifier's options are documented.
OPTIONS: tuple[tuple[str, str, object, str], ...] = (
    ("--bootstrap", "GPUFAILOVER_BOOTSTRAP", None, "Kafka bootstrap servers"),
    ("--topic-prefix", "GPUFAILOVER_TOPIC_PREFIX", "", "prefix of every topic name"),
    ("--partitions", "GPUFAILOVER_PARTITIONS", 4, "partitions of every topic (co-partitioned)"),
    ("--policy", "GPUFAILOVER_POLICY", "", "policy JSON file (default: the shipped policy)"),
    (
        "--app-id",
        "GPUFAILOVER_CLASSIFIER_APP_ID",
        "gpufailover-classifier",
        "faust app id: consumer group and changelog topic names",
    ),
    ("--web-port", "GPUFAILOVER_CLASSIFIER_PORT", 6066, "faust web server port (/metrics)"),
    (
        "--metrics-host",
        "GPUFAILOVER_METRICS_HOST",
        DEFAULT_METRICS_HOST,
        "address the web server (/metrics) binds; 0.0.0.0 opens it to the network",
    ),
    (
        "--idle-after",
        "GPUFAILOVER_IDLE_AFTER_S",
        5.0,
        "seconds without records before a partition's watermark follows the wall clock",
    ),
    ("--tick-interval", "GPUFAILOVER_TICK_INTERVAL_S", 1.0, "seconds between clock ticks"),
    (
        "--rebalance-timeout",
        "GPUFAILOVER_REBALANCE_TIMEOUT_S",
        180.0,
        "seconds a rebalance or table recovery may take before the worker stops itself "
        "to be restarted (0: never)",
    ),
)


@dataclass(frozen=True)
class ClassifierSettings:
    bootstrap: str
    topic_prefix: str = ""
    partitions: int = 4
    policy: str = ""
    app_id: str = "gpufailover-classifier"
    web_port: int = 6066
    idle_after_s: float = 5.0
    tick_interval_s: float = 1.0
    rebalance_timeout_s: float = 180.0
    metrics_host: str = DEFAULT_METRICS_HOST
    security: KafkaSecurity = PLAINTEXT

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        for flag, env, default, text in OPTIONS:
            if flag == "--bootstrap":  # its default is a lookup, not one value
                parser.add_argument(flag, default=None, help=BOOTSTRAP_HELP)
                continue
            parser.add_argument(flag, default=None, help=f"{text} (env {env}, default {default!r})")
        add_security_arguments(parser)

    @staticmethod
    def from_args(args: argparse.Namespace) -> ClassifierSettings:
        def pick(flag: str) -> object:
            return getattr(args, flag.lstrip("-").replace("-", "_"), None)

        prefix = pick("--topic-prefix")
        return ClassifierSettings(
            bootstrap=str(pick("--bootstrap") or default_bootstrap()),
            topic_prefix=str(prefix)
            if prefix is not None
            else env_str("GPUFAILOVER_TOPIC_PREFIX", ""),
            partitions=int(str(pick("--partitions") or env_int("GPUFAILOVER_PARTITIONS", 4))),
            policy=str(pick("--policy") or env_str("GPUFAILOVER_POLICY", "")),
            app_id=str(
                pick("--app-id")
                or env_str("GPUFAILOVER_CLASSIFIER_APP_ID", "gpufailover-classifier")
            ),
            web_port=int(str(pick("--web-port") or env_int("GPUFAILOVER_CLASSIFIER_PORT", 6066))),
            idle_after_s=float(
                str(pick("--idle-after") or env_float("GPUFAILOVER_IDLE_AFTER_S", 5.0))
            ),
            tick_interval_s=float(
                str(pick("--tick-interval") or env_float("GPUFAILOVER_TICK_INTERVAL_S", 1.0))
            ),
            rebalance_timeout_s=float(
                str(
                    pick("--rebalance-timeout")
                    or env_float("GPUFAILOVER_REBALANCE_TIMEOUT_S", 180.0)
                )
            ),
            metrics_host=str(pick("--metrics-host") or metrics_host()),
            security=KafkaSecurity.from_env_and_args(args),
        )
