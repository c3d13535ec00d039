"""The quarantine service's rules, without a broker: one batch at a time, as the loop drives it."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from consumer_fakes import NAMES, acks, decision, rec, request, value
from prometheus_client import CollectorRegistry

from consumers.quarantine.actuator import LogActuator
from consumers.quarantine.breaker import BreakerConfig
from consumers.quarantine.logic import QuarantineProcessor
from consumers.quarantine.metrics import QuarantineMetrics
from consumers.quarantine.table import QuarantineTable
from consumers.runtime.records import InRecord, Output
from schemas.audit import RESET_KEY, ResetCommand
from schemas.errors import SchemaError
from schemas.quarantine import QuarantineRecord

WAVE_CFG = BreakerConfig(window_ms=600_000, max_share=0.2, max_nodes=50, fleet_size=10)


def make(
    cfg: BreakerConfig | None = None,
    dry_run: bool = False,
    registry: CollectorRegistry | None = None,
    **kwargs: Any,
) -> QuarantineProcessor:
    processor = QuarantineProcessor(
        NAMES,
        cfg or BreakerConfig(),
        QuarantineTable(),
        LogActuator(),
        QuarantineMetrics.create(registry),
        dry_run=dry_run,
        **kwargs,
    )
    return processor


async def batch(p: QuarantineProcessor, *records: InRecord) -> list[Output]:
    p.begin()
    outputs = [out for r in records for out in p.handle(r)]
    await p.committed(acks(outputs))
    return outputs


def commands(p: QuarantineProcessor) -> list[str]:
    actuator = p.actuator
    assert isinstance(actuator, LogActuator)
    return actuator.commands


async def test_a_request_quarantines_its_node_once() -> None:
    p = make()
    first = await batch(p, rec(NAMES.quarantine_requests, "n1", request("n1", 1_000)))
    again = await batch(p, rec(NAMES.quarantine_requests, "n1", request("n1", 1_001)))
    [out] = first
    assert (out.topic, out.key) == (NAMES.nodes_quarantine, b"n1")
    assert value(out)["state"] == "quarantined"
    assert again == []
    assert p.table.is_quarantined("n1")
    assert commands(p) == []  # the actuation stage carries it out once committed


async def test_a_hardware_decision_quarantines_each_suspect_with_its_own_evidence() -> None:
    p = make()
    d = decision("job-1", suspects=("n1", "n2"))
    outputs = await batch(p, rec(NAMES.failover_decisions, "job-1", d))
    records = [QuarantineRecord.from_dict(value(o)) for o in outputs]
    assert [(r.node, r.reason, r.job_id) for r in records] == [
        ("n1", "hardware", "job-1"),
        ("n2", "hardware", "job-1"),
    ]
    assert all(e.node == r.node for r in records for e in r.evidence)
    assert records[0].ts_ms == d["decided_ts_ms"]  # event time, not wall clock


@pytest.mark.parametrize(
    ("verdict", "action", "suspects"),
    [("software", "reject", ()), ("transient", "retry", ()), ("unknown", "reject", ())],
)
async def test_other_verdicts_quarantine_nothing(
    verdict: str, action: str, suspects: tuple[str, ...]
) -> None:
    p = make()
    d = decision("job-1", verdict=verdict, action=action, suspects=suspects)
    assert await batch(p, rec(NAMES.failover_decisions, "job-1", d)) == []


async def test_a_redelivered_decision_after_a_release_does_not_requarantine() -> None:
    registry = CollectorRegistry()
    p = make(registry=registry)
    d = decision("job-1", ts=1_000)
    await batch(p, rec(NAMES.failover_decisions, "job-1", d))
    release = QuarantineRecord("n1", "released", "operator", (), None, 2_000)
    p.table.apply(release, 0, 99)
    assert await batch(p, rec(NAMES.failover_decisions, "job-1", d)) == []
    # A restarted service knows only the table: the release still wins over the old decision
    # and over an old request for the same node.
    restarted = make(registry=CollectorRegistry())
    restarted.table.apply(release, 0, 99)
    assert await batch(restarted, rec(NAMES.failover_decisions, "job-1", d)) == []
    old_request = rec(NAMES.quarantine_requests, "n1", request("n1", 2_000))
    assert await batch(restarted, old_request) == []
    stale = restarted.metrics.stale
    assert stale.labels(source="decision")._value.get() == 1
    assert stale.labels(source="request")._value.get() == 1


async def test_evidence_newer_than_the_release_quarantines_again() -> None:
    p = make()
    p.table.apply(QuarantineRecord("n1", "released", "operator", (), None, 2_000), 0, 99)
    [out] = await batch(p, rec(NAMES.quarantine_requests, "n1", request("n1", 2_001)))
    assert value(out)["state"] == "quarantined" and value(out)["ts_ms"] == 2_001


async def test_the_breaker_trips_on_a_wave_within_the_event_time_window() -> None:
    registry = CollectorRegistry()
    p = make(WAVE_CFG, registry=registry)
    wave = [rec(NAMES.quarantine_requests, f"n{i}", request(f"n{i}", 1_000 + i)) for i in range(5)]
    outputs = await batch(p, *wave)
    kinds = [(o.topic, value(o).get("kind", "quarantine")) for o in outputs]
    assert kinds == [
        (NAMES.nodes_quarantine, "quarantine"),
        (NAMES.nodes_quarantine, "quarantine"),
        (NAMES.failover_alerts, "breaker"),
        (NAMES.failover_alerts, "quarantine-refused"),
        (NAMES.failover_alerts, "quarantine-refused"),
        (NAMES.failover_alerts, "quarantine-refused"),
    ]
    alert = value(outputs[2])
    assert (alert["state"], alert["cause"], alert["in_window"], alert["fleet"]) == (
        "tripped",
        "share",
        3,
        10,
    )
    assert p.breaker.tripped
    assert registry.get_sample_value("gpufailover_quarantine_breaker_tripped") == 1
    trips = {"cause": "share"}
    assert registry.get_sample_value("gpufailover_quarantine_breaker_trips_total", trips) == 1
    assert registry.get_sample_value("gpufailover_quarantine_refused_total") == 3
    assert registry.get_sample_value("gpufailover_quarantine_window_nodes") == 2


async def test_quarantines_spread_over_arrival_time_do_not_trip() -> None:
    wall = [1_700_000_000_000]
    p = make(WAVE_CFG, clock=lambda: wall[0])
    # Stamped at the same event time, but arriving 11 minutes apart (wall clock).
    for i in range(6):
        outputs = await batch(p, rec(NAMES.quarantine_requests, f"n{i}", request(f"n{i}", 1_000)))
        assert [o.topic for o in outputs] == [NAMES.nodes_quarantine]
        wall[0] += 660_000
    assert not p.breaker.tripped


async def test_quarantines_arriving_together_trip_whatever_their_event_times() -> None:
    p = make(WAVE_CFG, clock=lambda: 1_700_000_000_000)
    spread = [
        rec(NAMES.quarantine_requests, f"n{i}", request(f"n{i}", i * 660_000)) for i in range(4)
    ]
    await batch(p, *spread)
    assert p.breaker.tripped and p.breaker.cause == "share"


async def test_an_operator_reset_closes_the_breaker_and_restarts_the_count() -> None:
    p = make(WAVE_CFG)
    wave = [rec(NAMES.quarantine_requests, f"n{i}", request(f"n{i}", 1_000 + i)) for i in range(4)]
    await batch(p, *wave)
    assert p.breaker.tripped
    stale = ResetCommand(ts_ms=(p.breaker.tripped_wall_ms or 0) - 1, operator="op", reason="old")
    assert await batch(p, rec(NAMES.operators_audit, RESET_KEY, stale.to_dict())) == []
    assert p.breaker.tripped
    command = ResetCommand(ts_ms=p.breaker.tripped_wall_ms or 0, operator="op", reason="checked")
    [closed] = await batch(p, rec(NAMES.operators_audit, RESET_KEY, command.to_dict()))
    assert value(closed)["state"] == "closed" and not p.breaker.tripped
    # Refused nodes are not quarantined retroactively; new requests count from the reset.
    outputs = await batch(p, rec(NAMES.quarantine_requests, "n7", request("n7", 1_010)))
    assert [o.topic for o in outputs] == [NAMES.nodes_quarantine]


async def test_other_alerts_are_not_commands() -> None:
    p = make()
    letter = {"kind": "dead-letter", "topic": "x"}
    assert await batch(p, rec(NAMES.operators_audit, RESET_KEY, letter)) == []
    assert await batch(p, rec(NAMES.operators_audit, "job-1", b"not even json")) == []


async def test_dry_run_alerts_instead_of_quarantining() -> None:
    p = make(dry_run=True)
    d = decision("job-1")
    outputs = await batch(p, rec(NAMES.failover_decisions, "job-1", d))
    again = await batch(p, rec(NAMES.quarantine_requests, "n1", request("n1", 2_000_000)))
    [alert] = outputs
    assert alert.topic == NAMES.failover_alerts
    assert value(alert)["kind"] == "dry-run" and value(alert)["dry_run"] is True
    assert value(alert)["command"].startswith("scontrol update nodename=n1 state=drain")
    assert again == []  # it would already be quarantined
    assert commands(p) == [] and not p.table.is_quarantined("n1")


async def test_a_failed_transaction_leaves_no_trace() -> None:
    p = make(WAVE_CFG)
    p.begin()
    for i in range(4):
        p.handle(rec(NAMES.quarantine_requests, f"n{i}", request(f"n{i}", 1_000 + i)))
    p.rollback()
    assert not p.breaker.tripped and p.table.arrived_at == {} and p.dry == {}
    # The retried batch decides exactly as the first attempt would have.
    outputs = await batch(p, rec(NAMES.quarantine_requests, "n0", request("n0", 1_000)))
    assert [o.topic for o in outputs] == [NAMES.nodes_quarantine]


@pytest.mark.parametrize(
    ("topic", "payload"),
    [
        (NAMES.quarantine_requests, b"{"),
        (NAMES.quarantine_requests, {"node": "n1"}),
        (NAMES.quarantine_requests, request("n1", 1) | {"state": "released"}),
        (NAMES.quarantine_requests, None),
        (NAMES.failover_decisions, decision("j") | {"verdict": "cosmic"}),
        (NAMES.operators_audit, ResetCommand(1, "op", "x").to_dict() | {"ts_ms": "soon"}),
    ],
)
def test_malformed_inputs_raise_schema_error_for_the_dead_letter_queue(
    topic: str, payload: Any
) -> None:
    p = make()
    p.begin()
    key = RESET_KEY if topic == NAMES.operators_audit else "k"
    with pytest.raises(SchemaError):
        p.handle(rec(topic, key, payload))


async def test_a_decision_seen_before_a_release_counts_as_a_duplicate_not_as_stale() -> None:
    p = make(registry=CollectorRegistry())
    d = decision("job-1", ts=1_000)
    await batch(p, rec(NAMES.failover_decisions, "job-1", d))
    p.table.apply(QuarantineRecord("n1", "released", "operator", (), None, 2_000), 0, 99)
    assert await batch(p, rec(NAMES.failover_decisions, "job-1", d)) == []
    assert p.metrics.duplicates.labels(source="decision")._value.get() == 1
    assert p.metrics.stale.labels(source="decision")._value.get() == 0


async def test_dry_run_forgets_a_node_once_it_is_released() -> None:
    p = make(dry_run=True)
    await batch(p, rec(NAMES.failover_decisions, "job-1", decision("job-1", ts=1_000)))
    p.table.apply(QuarantineRecord("n1", "released", "operator", (), None, 2_000), 0, 99)
    [alert] = await batch(p, rec(NAMES.quarantine_requests, "n1", request("n1", 3_000)))
    assert value(alert)["kind"] == "dry-run" and value(alert)["node"] == "n1"


async def test_a_request_older_than_the_release_is_logged_as_ignored(
    caplog: pytest.LogCaptureFixture,
) -> None:
    p = make()
    p.table.apply(QuarantineRecord("n1", "released", "operator", (), None, 2_000), 0, 99)
    with caplog.at_level(logging.INFO, logger="consumers.quarantine.logic"):
        await batch(p, rec(NAMES.quarantine_requests, "n1", request("n1", 1_500)))
    assert "request for n1 at ts 1500 ignored: the node was released at 2000, after it" in (
        caplog.messages
    )
