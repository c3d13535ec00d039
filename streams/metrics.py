"""Classifier metrics, `gpufailover_classifier_*`, on an injected registry.

Served by the faust worker's own web server at `/metrics` (see `streams.app.build_app`). Labels
are bounded: logical topic names, partitions, closed enums (verdicts, actions, conditions, error
and alert kinds) and XID codes clamped to 0..255. Never job ids or node names: per-node and
per-job detail lives in the topics.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from gpufailover.metric_labels import OTHER, bounded, xid_label
from schemas.dead_letter import ERROR_KINDS as DEAD_LETTER_ERROR_KINDS
from schemas.decisions import ACTIONS, VERDICTS, Decision
from schemas.health import CONDITIONS

_P = "gpufailover_classifier"
# Termination -> decision: hardware verdicts are immediate (sub-second), the others wait out the
# grace (120 s in the shipped policy); the tail shows a stalled or lagging pipeline.
DECISION_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 180, 300, 600, 1800)
ALERT_KINDS = frozenset({"hang", "straggler"})
ERROR_KINDS = DEAD_LETTER_ERROR_KINDS  # decode, process: the dead letters' own kinds
AGENTS = frozenset({"node", "job"})

# (logical topic, partition, lag in records) for every partition assigned to this worker.
LagSource = Callable[[], Iterable[tuple[str, int, int]]]


class PartitionLag(Collector):
    """`gpufailover_classifier_consumer_lag`, computed at scrape time: a consumer that stopped
    making progress still shows its lag growing (a gauge set per record would freeze)."""

    def __init__(self, source: LagSource) -> None:
        self.source = source

    def describe(self) -> Iterable[GaugeMetricFamily]:
        # Declared up front so the registry checks the name for collisions.
        return [self._family()]

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = self._family()
        for topic, partition, lag in self.source():
            family.add_metric([topic, str(partition)], lag)
        yield family

    @staticmethod
    def _family() -> GaugeMetricFamily:
        return GaugeMetricFamily(
            f"{_P}_consumer_lag",
            "Records in an assigned input partition not processed yet (high water - position)",
            labels=["topic", "partition"],
        )


class ClassifierMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = CollectorRegistry() if registry is None else registry
        r = self.registry
        self.consumed = Counter(
            f"{_P}_records_consumed_total", "Input records handled, by topic", ["topic"], registry=r
        )
        self.produced = Counter(
            f"{_P}_records_produced_total", "Records sent, by topic", ["topic"], registry=r
        )
        self.dead_lettered = Counter(
            f"{_P}_dead_lettered_total",
            "Input records sent to a dead-letter topic, by input topic and error kind",
            ["topic", "error"],
            registry=r,
        )
        self.xids = Counter(
            f"{_P}_xids_total", "XID records seen, by code (0..255|other)", ["code"], registry=r
        )
        self.health_conditions = Counter(
            f"{_P}_health_conditions_total",
            "GPU health records seen, by condition",
            ["condition"],
            registry=r,
        )
        self.decisions = Counter(
            f"{_P}_decisions_total",
            "Decisions published, by verdict and action",
            ["verdict", "action"],
            registry=r,
        )
        self.decision_latency = Histogram(
            f"{_P}_decision_latency_seconds",
            "Wall clock at publication minus the termination's event time",
            buckets=DECISION_BUCKETS,
            registry=r,
        )
        self.evidence_wait = Histogram(
            f"{_P}_evidence_wait_seconds",
            "Event time the decision waited for evidence (decided_ts_ms - terminated_ts_ms)",
            buckets=DECISION_BUCKETS,
            registry=r,
        )
        self.alerts = Counter(
            f"{_P}_alerts_total", "Alerts published, by kind", ["kind"], registry=r
        )
        self.watermark = Gauge(
            f"{_P}_watermark_timestamp_seconds",
            "Event-time watermark of each node partition (Unix seconds)",
            ["partition"],
            registry=r,
        )
        self.held_evidence = Gauge(
            f"{_P}_held_evidence",
            "Evidence items the node agent holds while a node-signals partition is behind "
            "(applied later; streams/deferred.py)",
            ["partition"],
            registry=r,
        )
        self.last_progress = Gauge(
            f"{_P}_last_progress_timestamp_seconds",
            "Unix time each agent last handled a record: liveness tied to progress",
            ["agent"],
            registry=r,
        )
        self.started = Gauge(
            f"{_P}_start_timestamp_seconds", "Wall clock when this worker started", registry=r
        )
        self.started.set_to_current_time()
        self._children: dict[tuple[Any, ...], Any] = {}

    # -- hooks ----------------------------------------------------------------------------
    def _child(self, metric: Any, *labels: str) -> Any:
        # labels() costs more than the increment: the hot path keeps the children it made.
        key = (id(metric), *labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    def record(self, topic: str, agent: str, n: int = 1) -> None:
        """`n` input records of logical `topic` were handled by `agent` (node|job)."""
        self._child(self.consumed, topic).inc(n)
        self._child(self.last_progress, bounded(agent, AGENTS)).set(time.time())

    def sent(self, topic: str, n: int = 1) -> None:
        self._child(self.produced, topic).inc(n)

    def dead_letter(self, topic: str, kind: str, n: int = 1) -> None:
        self.dead_lettered.labels(topic=topic, error=bounded(kind, ERROR_KINDS)).inc(n)

    def xid(self, code: int, n: int = 1) -> None:
        self._child(self.xids, xid_label(code)).inc(n)

    def health(self, condition: str, n: int = 1) -> None:
        self._child(self.health_conditions, bounded(condition, CONDITIONS)).inc(n)

    def decision(self, d: Decision, now_ms: int | None = None) -> None:
        """`d` was published; `now_ms` is the publication's wall clock (default: now)."""
        now = time.time_ns() // 1_000_000 if now_ms is None else now_ms
        self.decisions.labels(
            verdict=bounded(d.verdict, VERDICTS), action=bounded(d.action, ACTIONS)
        ).inc()
        self.decision_latency.observe(max(0, now - d.terminated_ts_ms) / 1000)
        self.evidence_wait.observe(max(0, d.decided_ts_ms - d.terminated_ts_ms) / 1000)

    def alert(self, kind: str) -> None:
        self.alerts.labels(kind=bounded(kind, ALERT_KINDS)).inc()

    def watermark_at(self, partition: int, watermark_ms: int | None) -> None:
        if watermark_ms is not None:
            self.watermark.labels(partition=str(partition)).set(watermark_ms / 1000)

    def held_at(self, partition: int, items: int) -> None:
        self._child(self.held_evidence, str(partition)).set(items)

    def lag_from(self, source: LagSource) -> None:
        """Report consumer lag from `source`, called at every scrape."""
        self.registry.register(PartitionLag(source))


__all__ = ["OTHER", "ClassifierMetrics", "PartitionLag"]
