"""Metrics every service's loop reports, named `gpufailover_<component>_...`.

Each service's own `metrics` module builds these with its component name next to its own
metrics, on the registry it is given. Labels are bounded: logical topic names and error kinds,
never job ids or node names.
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

COMMIT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


@dataclass(frozen=True)
class LoopMetrics:
    component: str  # also who the service's dead letters name (`schemas.dead_letter`)
    records: Counter  # labels: topic
    dlq: Counter  # labels: topic, error
    skipped_bad: Counter  # labels: topic
    commit_seconds: Histogram
    commit_failures: Counter
    table_errors: Counter  # labels: topic
    produced: Counter  # labels: topic
    lag: Gauge  # labels: topic, partition
    last_progress: Gauge

    @staticmethod
    def create(registry: CollectorRegistry, component: str) -> LoopMetrics:
        p = f"gpufailover_{component}"
        return LoopMetrics(
            component=component,
            records=Counter(
                f"{p}_records_consumed_total",
                "Input records processed (dead-lettered ones included), by topic",
                ["topic"],
                registry=registry,
            ),
            dlq=Counter(
                f"{p}_dead_lettered_total",
                "Input records sent to a dead-letter topic, by input topic and error kind",
                ["topic", "error"],
                registry=registry,
            ),
            skipped_bad=Counter(
                f"{p}_bad_records_skipped_total",
                "Malformed input records skipped here: the topic's owner dead-letters them",
                ["topic"],
                registry=registry,
            ),
            commit_seconds=Histogram(
                f"{p}_commit_seconds",
                "Time to publish a batch's output and commit its offsets in one transaction",
                buckets=COMMIT_BUCKETS,
                registry=registry,
            ),
            commit_failures=Counter(
                f"{p}_commit_failures_total",
                "Transactions that failed and were retried from the last committed offsets",
                registry=registry,
            ),
            table_errors=Counter(
                f"{p}_table_errors_total",
                "Unreadable records met while rebuilding state from a topic (logged, skipped)",
                ["topic"],
                registry=registry,
            ),
            produced=Counter(
                f"{p}_records_produced_total",
                "Records published in committed transactions, by topic",
                ["topic"],
                registry=registry,
            ),
            lag=Gauge(
                f"{p}_consumer_lag",
                "Records in an assigned input partition not consumed yet (end - position)",
                ["topic", "partition"],
                registry=registry,
            ),
            last_progress=Gauge(
                f"{p}_last_progress_timestamp_seconds",
                "Unix time the loop last committed a batch or found nothing to do",
                registry=registry,
            ),
        )
