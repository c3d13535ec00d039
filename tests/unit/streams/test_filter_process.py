"""The signal filter's child process reports its counts to the worker's metrics unchanged."""

from __future__ import annotations

import orjson
from prometheus_client import CollectorRegistry

from streams.filter_process import MetricsRelay, apply
from streams.metrics import ClassifierMetrics


def _samples(metrics: ClassifierMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in metrics.registry.collect()
        for s in family.samples
        # Times of day (when counted, when started) differ by construction.
        if not s.name.endswith(("_created", "_timestamp_seconds"))
    }


def _count(m: ClassifierMetrics | MetricsRelay) -> None:
    m.record("gpu.health", "node", 500)
    m.record("gpu.xid", "node", 7)
    m.record("gpu.health", "node", 20)
    m.xid(79, 3)
    m.xid(13, 4)
    m.health("ok", 499)
    m.health("thermal", 1)
    m.sent("failover.node-signals")
    m.sent("failover.node-signals")
    m.sent("gpu.xid.dlq")
    m.dead_letter("gpu.xid", "decode")


def test_counts_relayed_through_a_report_equal_counts_made_in_the_worker() -> None:
    direct = ClassifierMetrics(CollectorRegistry())
    _count(direct)
    relay = MetricsRelay()
    _count(relay)
    report = orjson.loads(orjson.dumps({"counts": relay.take()}))  # as on the pipe
    relayed = ClassifierMetrics(CollectorRegistry())
    apply(relayed, report["counts"])
    assert _samples(relayed) == _samples(direct)
    assert _samples(direct)  # the comparison is not of two empty sets


def test_a_report_carries_each_count_once() -> None:
    relay = MetricsRelay()
    relay.xid(79, 2)
    assert relay.take() == [("xid", "79", "", 2)]
    assert relay.take() == []
