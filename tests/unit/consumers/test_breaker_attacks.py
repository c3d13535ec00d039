"""The breaker attacks of issue 12: forged input must not steer the quarantine breaker.

Each test feeds the quarantine service's processor what an attacker (or a broken agent) could
write and checks the breaker still protects the fleet and still lets real quarantines through.
"""

from __future__ import annotations

import logging

import pytest
from consumer_fakes import NAMES, acks, decision, rec, request, value
from prometheus_client import CollectorRegistry

from consumers.quarantine.actuator import LogActuator
from consumers.quarantine.breaker import BreakerConfig
from consumers.quarantine.logic import QuarantineProcessor
from consumers.quarantine.metrics import QuarantineMetrics
from consumers.quarantine.table import QuarantineTable
from consumers.runtime.records import InRecord, Output
from schemas.errors import SchemaError
from schemas.event_time import EventTimeBounds

NOW = 1_800_000_000_000  # the wall clock of these tests (2027-01-15)
YEAR_2100 = 4_102_444_800_000
FLEET = [f"gpu-{i:03d}" for i in range(10)]


def make(cfg: BreakerConfig, registry: CollectorRegistry | None = None) -> QuarantineProcessor:
    return QuarantineProcessor(
        NAMES,
        cfg,
        QuarantineTable(),
        LogActuator(),
        QuarantineMetrics.create(registry),
        bounds=EventTimeBounds(),
        clock=lambda: NOW,
    )


async def batch(p: QuarantineProcessor, *records: InRecord) -> list[Output]:
    p.begin()
    outputs = [out for r in records for out in p.handle(r)]
    await p.committed(acks(outputs))
    return outputs


def req(node: str, ts: int = NOW - 1_000) -> InRecord:
    return rec(NAMES.quarantine_requests, node, request(node, ts))


def quarantined(outputs: list[Output]) -> list[str]:
    return [value(o)["node"] for o in outputs if o.topic == NAMES.nodes_quarantine]


async def test_51_forged_requests_for_ghost_nodes_neither_trip_it_nor_block_real_ones() -> None:
    p = make(BreakerConfig(max_nodes=50, inventory=frozenset(FLEET)))
    forged = await batch(p, *(req(f"ghost-{i}") for i in range(51)))
    assert quarantined(forged) == []
    assert {value(o)["breaker_cause"] for o in forged} == {"unknown_node"}
    assert not p.breaker.tripped
    real = await batch(p, req("gpu-007"))
    assert quarantined(real) == ["gpu-007"]


async def test_a_request_stamped_2100_is_refused_and_later_ones_still_count() -> None:
    p = make(BreakerConfig(max_share=0.2, min_nodes=2, fleet_size=10))
    p.begin()
    with pytest.raises(SchemaError, match="ahead of the clock") as refused:
        p.handle(req(FLEET[9], YEAR_2100))
    assert refused.value.field == "ts_ms"  # the dead letter names the field
    p.rollback()
    # Real quarantines arriving now still fill the window: the 3rd of 10 nodes trips it.
    outputs = await batch(p, *(req(node) for node in FLEET[:3]))
    assert quarantined(outputs) == FLEET[:2]
    assert p.breaker.tripped and p.breaker.cause == "share"


async def test_event_times_do_not_move_the_window_even_without_the_time_bound() -> None:
    p = make(BreakerConfig(max_share=0.2, min_nodes=2, fleet_size=10))
    p.bounds = None  # a request stamped 2100 gets through: the window is on arrival anyway
    first = await batch(p, req(FLEET[0], YEAR_2100))
    later = await batch(p, *(req(node) for node in FLEET[1:3]))
    assert quarantined(first + later) == FLEET[:2]
    assert p.breaker.tripped


async def test_a_forged_decision_naming_thousands_of_ghosts_does_not_inflate_the_fleet() -> None:
    registry = CollectorRegistry()
    p = make(BreakerConfig(max_share=0.2, min_nodes=2, fleet_size=10), registry)
    ghosts = tuple(f"ghost-{i}" for i in range(4_000))
    forged = decision("job-x", verdict="software", action="reject", suspects=ghosts, ts=NOW)
    assert await batch(p, rec(NAMES.failover_decisions, "job-x", forged)) == []
    assert registry.get_sample_value("gpufailover_quarantine_fleet_nodes") == 10
    outputs = await batch(p, *(req(node) for node in FLEET[:3]))
    assert quarantined(outputs) == FLEET[:2] and p.breaker.cause == "share"


async def test_a_decision_naming_10000_nodes_is_refused_at_decode() -> None:
    p = make(BreakerConfig(fleet_size=10))
    ghosts = tuple(f"g{i}" for i in range(10_000))
    forged = decision("job-x", suspects=ghosts, ts=NOW) | {"evidence": []}
    p.begin()
    with pytest.raises(SchemaError, match="more than the cap"):
        p.handle(rec(NAMES.failover_decisions, "job-x", forged))


async def test_the_default_does_not_trip_on_the_3rd_real_quarantine_of_a_small_fleet() -> None:
    p = make(BreakerConfig())
    outputs = await batch(p, *(req(node) for node in FLEET[:3]))
    assert quarantined(outputs) == FLEET[:3]
    assert not p.breaker.tripped


async def test_requests_and_decisions_below_the_floor_are_refused() -> None:
    p = make(BreakerConfig())
    p.begin()
    with pytest.raises(SchemaError, match="below the floor"):
        p.handle(req(FLEET[0], 1_700_000_000))  # seconds, not milliseconds
    with pytest.raises(SchemaError, match="decided_ts_ms"):
        p.handle(rec(NAMES.failover_decisions, "j", decision("j", ts=0)))


async def test_a_far_future_decision_is_refused_by_every_consumer_alike() -> None:
    from consumers.jobstatus.logic import JobStatusProcessor, StatusTable
    from consumers.jobstatus.metrics import JobStatusMetrics
    from consumers.requeue.logic import RequeueProcessor
    from consumers.requeue.metrics import RequeueMetrics
    from consumers.requeue.state import JobSpecs, Requeued

    far = rec(NAMES.failover_decisions, "j", decision("j", ts=YEAR_2100))
    ok = rec(NAMES.failover_decisions, "j", decision("j", ts=NOW - 1_000))
    status = JobStatusProcessor(
        NAMES,
        StatusTable(),
        JobStatusMetrics.create(),
        deadline_ms=300_000,
        clock=lambda: NOW,
        bounds=EventTimeBounds(),
    )
    requeue = RequeueProcessor(
        NAMES,
        QuarantineTable(),
        JobSpecs(),
        Requeued(),
        RequeueMetrics.create(),
        bounds=EventTimeBounds(),
        clock=lambda: NOW,
    )
    for p in (status, requeue, make(BreakerConfig())):
        p.begin()
        with pytest.raises(SchemaError, match=r"decided_ts_ms: .* ahead of the clock"):
            p.handle(far)
        assert p.handle(ok) != []  # the same decision in bounds is acted on


async def test_a_request_for_a_node_outside_the_inventory_is_refused_keyed_by_it_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    p = make(BreakerConfig(max_nodes=50, inventory=frozenset(FLEET)))
    with caplog.at_level(logging.WARNING, logger="consumers.quarantine.logic"):
        [alert] = await batch(p, req("ghost-1"))
    assert alert.topic == NAMES.failover_alerts and alert.key == b"ghost-1"
    assert value(alert)["ts_ms"] == NOW  # when it was refused (the service's clock)
    assert value(alert)["request_ts_ms"] == NOW - 1_000
    assert "request for ghost-1 refused: not in the fleet inventory" in caplog.messages
