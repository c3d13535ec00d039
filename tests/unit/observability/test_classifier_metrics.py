"""Classifier metrics: bounded labels, decision timing, scrape-time lag, the glue hooks."""

from __future__ import annotations

import orjson
import pytest
from prometheus_client import CollectorRegistry, generate_latest

from deploy.topics import TopicNames
from gpufailover.metric_labels import MAX_XID_LABEL, xid_label
from schemas.decisions import Decision
from streams.metrics import ClassifierMetrics
from streams.policy import load_policy
from streams.signal_filter import InputRecord, SignalFilter

NAMES = TopicNames("")


def value(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    return registry.get_sample_value(name, labels)


@pytest.mark.parametrize(
    ("code", "label"),
    [(0, "0"), (79, "79"), (172, "172"), (MAX_XID_LABEL, "255"), (256, "other"), (-1, "other"),
     (2**40, "other")],
)  # fmt: skip
def test_xid_codes_are_bounded(code: int, label: str) -> None:
    assert xid_label(code) == label


def test_xid_and_condition_labels_stay_bounded() -> None:
    m = ClassifierMetrics()
    for code in (79, 79, 10**9, 31337):
        m.xid(code)
    m.health("gpu_lost")
    m.health("made-up-by-a-bad-producer")
    r = m.registry
    assert value(r, "gpufailover_classifier_xids_total", code="79") == 2
    assert value(r, "gpufailover_classifier_xids_total", code="other") == 2
    assert value(r, "gpufailover_classifier_health_conditions_total", condition="gpu_lost") == 1
    assert value(r, "gpufailover_classifier_health_conditions_total", condition="other") == 1


def _decision(verdict: str, action: str, terminated: int, decided: int) -> Decision:
    return Decision(
        job_id="job-1",
        attempt=0,
        verdict=verdict,
        action=action,
        status="Pending-failoverinprogress",
        suspect_nodes=("gpu-b",),
        next_attempt=1,
        evidence=(),
        rule="hardware.failover",
        terminated_ts_ms=terminated,
        decided_ts_ms=decided,
    )


def test_decisions_count_by_verdict_and_action_and_time_latency_and_evidence_wait() -> None:
    m = ClassifierMetrics()
    m.decision(_decision("hardware", "failover", 1_000_000, 1_000_000), now_ms=1_000_400)
    m.decision(_decision("transient", "retry", 1_000_000, 1_120_000), now_ms=1_121_000)
    m.decision(_decision("weird", "dance", 1_000_000, 1_000_000), now_ms=1_000_000)
    r = m.registry
    name = "gpufailover_classifier_decisions_total"
    assert value(r, name, verdict="hardware", action="failover") == 1
    assert value(r, name, verdict="transient", action="retry") == 1
    assert value(r, name, verdict="other", action="other") == 1
    latency = "gpufailover_classifier_decision_latency_seconds"
    assert value(r, f"{latency}_count") == 3
    assert value(r, f"{latency}_sum") == pytest.approx(0.4 + 121.0)
    assert value(r, f"{latency}_bucket", le="0.5") == 2  # 0.4 s and 0 s
    assert value(r, f"{latency}_bucket", le="180.0") == 3
    wait = "gpufailover_classifier_evidence_wait_seconds"
    assert value(r, f"{wait}_sum") == pytest.approx(120.0)
    assert value(r, f"{wait}_bucket", le="60.0") == 2


def test_a_decision_published_before_its_termination_time_counts_zero_latency() -> None:
    m = ClassifierMetrics()  # clock skew between the scheduler's host and ours
    m.decision(_decision("hardware", "failover", 2_000, 2_000), now_ms=1_000)
    assert value(m.registry, "gpufailover_classifier_decision_latency_seconds_sum") == 0


def test_alerts_count_by_kind() -> None:
    m = ClassifierMetrics()
    m.alert("hang")
    m.alert("straggler")
    m.alert("straggler")
    m.alert("job-4242")  # never a free-form label value
    name = "gpufailover_classifier_alerts_total"
    assert value(m.registry, name, kind="hang") == 1
    assert value(m.registry, name, kind="straggler") == 2
    assert value(m.registry, name, kind="other") == 1


def test_lag_is_read_at_scrape_time() -> None:
    rows: list[tuple[str, int, int]] = [("gpu.xid", 0, 5)]
    m = ClassifierMetrics()
    m.lag_from(lambda: rows)
    assert (
        value(m.registry, "gpufailover_classifier_consumer_lag", topic="gpu.xid", partition="0")
        == 5
    )
    rows[:] = [("gpu.xid", 0, 0), ("jobs.events", 1, 7)]
    text = generate_latest(m.registry).decode()
    assert 'gpufailover_classifier_consumer_lag{partition="0",topic="gpu.xid"} 0.0' in text
    assert 'gpufailover_classifier_consumer_lag{partition="1",topic="jobs.events"} 7.0' in text


def test_progress_and_watermark_gauges() -> None:
    m = ClassifierMetrics()
    m.record("gpu.xid", "node")
    m.watermark_at(3, 1_700_000_000_500)
    m.watermark_at(4, None)  # no watermark yet: no series
    r = m.registry
    assert value(r, "gpufailover_classifier_records_consumed_total", topic="gpu.xid") == 1
    assert (
        value(r, "gpufailover_classifier_last_progress_timestamp_seconds", agent="node") or 0
    ) > 0
    assert (
        value(r, "gpufailover_classifier_watermark_timestamp_seconds", partition="3") == 1.7e9 + 0.5
    )
    assert value(r, "gpufailover_classifier_watermark_timestamp_seconds", partition="4") is None


def test_signal_filter_counts_xids_and_conditions_it_decodes_and_not_malformed_ones() -> None:
    f = SignalFilter(load_policy(), NAMES, idle_after_ms=5_000)
    xid = {"node": "gpu-b", "xid": 79, "ts_ms": 1_700_000_000_000, "gpu_index": 2}
    health = {"node": "gpu-b", "condition": "ecc_uncorrectable", "ts_ms": 1_700_000_000_001}
    out = f.reduce(
        [
            InputRecord(NAMES.gpu_xid, 0, 0, b"gpu-b", orjson.dumps(xid)),
            InputRecord(NAMES.gpu_health, 0, 1, b"gpu-b", orjson.dumps(health)),
            InputRecord(NAMES.gpu_xid, 0, 2, b"gpu-b", b"{not json"),
        ],
        wall_ms=0,
    )
    assert [o.topic for o in out if o.topic != NAMES.node_signals] == [NAMES.dlq(NAMES.gpu_xid)]
    assert f.xids == {79: 1}
    assert f.conditions == {"ecc_uncorrectable": 1}


def test_dead_letter_kind_is_read_from_the_dead_letter_record() -> None:
    from streams.agent_driver import error_kind

    assert error_kind(orjson.dumps({"error_kind": "schema"})) == "schema"
    assert error_kind(b"[]") == "unknown"
    assert error_kind(b"{") == "unknown"
