"""The quarantine service beyond its main rules: what each output says (keys, alert fields),
its metrics and log lines, the fleet and de-duplication state across batches, releases and
actuator failures, and the processor's life cycle (fresh, rolled back, restarted)."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from consumer_fakes import NAMES, acks, decision, rec, request, value
from prometheus_client import CollectorRegistry

from consumers.quarantine import logic
from consumers.quarantine.actuator import LogActuator
from consumers.quarantine.breaker import BreakerConfig, BreakerState
from consumers.quarantine.logic import QuarantineProcessor
from consumers.quarantine.metrics import QuarantineMetrics
from consumers.quarantine.table import QuarantineTable
from consumers.runtime.loop import Ack
from consumers.runtime.records import InRecord, Output, now_ms
from schemas.audit import RESET_KEY, ResetCommand
from schemas.codec import dumps
from schemas.decisions import Decision, Evidence
from schemas.errors import SchemaError
from schemas.quarantine import QuarantineRecord

LOGGER = "consumers.quarantine.logic"
WAVE_CFG = BreakerConfig(window_ms=600_000, max_share=0.2, max_nodes=50, fleet_size=10)
REGISTRIES: dict[int, CollectorRegistry] = {}


class FailingActuator(LogActuator):
    name = "failing"

    async def apply(self, action: str, record: QuarantineRecord) -> None:
        raise RuntimeError("scontrol: connection refused")


def make(
    cfg: BreakerConfig | None = None,
    *,
    dry_run: bool = False,
    live: bool = True,
    actuator: LogActuator | None = None,
    **kwargs: Any,
) -> QuarantineProcessor:
    registry = CollectorRegistry()
    p = QuarantineProcessor(
        NAMES,
        cfg or BreakerConfig(),
        QuarantineTable(),
        actuator or LogActuator(),
        QuarantineMetrics.create(registry),
        dry_run=dry_run,
        **kwargs,
    )
    p.live = live
    REGISTRIES[id(p)] = registry
    return p


def metric(p: QuarantineProcessor, name: str, **labels: str) -> float:
    sample = REGISTRIES[id(p)].get_sample_value(f"gpufailover_quarantine_{name}", labels)
    return 0.0 if sample is None else sample


async def batch(p: QuarantineProcessor, *records: InRecord) -> list[Output]:
    p.begin()
    outputs = [out for r in records for out in p.handle(r)]
    await p.committed(acks(outputs))
    return outputs


def req(node: str, ts: int = 1_000) -> InRecord:
    return rec(NAMES.quarantine_requests, node, request(node, ts))


def dec(d: dict[str, Any] | Decision) -> InRecord:
    body = d.to_dict() if isinstance(d, Decision) else d
    return rec(NAMES.failover_decisions, body["job_id"], body)


def messages(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    return [(r.levelno, r.getMessage()) for r in caplog.records if r.name == LOGGER]


def is_wall_clock_now(ts_ms: Any) -> bool:
    """An epoch-ms int within a minute of now (a margin, not a bracket: the clock may step)."""
    return isinstance(ts_ms, int) and abs(ts_ms - now_ms()) < 60_000


def commands(p: QuarantineProcessor) -> list[str]:
    assert isinstance(p.actuator, LogActuator)
    return p.actuator.commands


# -- what it refuses -------------------------------------------------------------------------


def test_a_request_that_is_not_a_quarantine_is_refused_naming_the_field() -> None:
    p = make()
    p.begin()
    with pytest.raises(SchemaError) as err:
        p.handle(rec(NAMES.quarantine_requests, "n1", request("n1", 1) | {"state": "released"}))
    assert (err.value.field, err.value.reason) == (
        "state",
        "a quarantine request must be 'quarantined'",
    )


def test_a_record_from_another_topic_is_refused_naming_the_topic() -> None:
    p = make()
    p.begin()
    with pytest.raises(SchemaError) as err:
        p.handle(rec(NAMES.jobs_events, "j", {"job_id": "j"}))
    assert (err.value.field, err.value.reason) == (
        "topic",
        f"not an input of the quarantine service: {NAMES.jobs_events!r}",
    )


# -- quarantines, duplicates, metrics, logs --------------------------------------------------


async def test_a_quarantine_is_counted_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    p = make()
    [out] = await batch(p, req("n1"))
    assert out.key == b"n1"
    assert metric(p, "quarantines_total", reason="hardware", mode="applied") == 1
    assert metric(p, "actuator_calls_total", action="quarantine") == 0  # the actuation stage's
    assert metric(p, "nodes_quarantined") == 1
    assert metric(p, "breaker_tripped") == 0
    assert messages(caplog) == [(logging.INFO, "quarantining n1 (hardware, job job-x)")]


async def test_the_same_node_twice_in_one_batch_is_written_once() -> None:
    p = make()
    outputs = await batch(p, req("n1"), req("n1", 1_001))
    assert [o.key for o in outputs] == [b"n1"]
    assert metric(p, "duplicates_total", source="request") == 1


async def test_duplicates_are_counted_by_the_input_that_repeated() -> None:
    p = make()
    await batch(p, req("n1"))
    await batch(p, dec(decision("job-1", suspects=("n1",))))  # n1 already quarantined
    await batch(p, dec(decision("job-1", suspects=("n1",))))  # the same decision again
    assert metric(p, "duplicates_total", source="decision") == 2
    assert metric(p, "duplicates_total", source="request") == 0


async def test_hardware_decisions_of_different_jobs_each_quarantine_their_suspects() -> None:
    p = make()
    outputs = await batch(
        p, dec(decision("job-1", suspects=("n1",))), dec(decision("job-2", suspects=("n2",)))
    )
    assert [o.key for o in outputs] == [b"n1", b"n2"]


async def test_a_software_decision_naming_nodes_quarantines_nothing() -> None:
    p = make()
    d = decision("job-1", verdict="software", action="reject", suspects=("n1",))
    assert await batch(p, dec(d)) == []
    assert p.seen == {}


async def test_decided_jobs_are_remembered_up_to_a_bound_oldest_forgotten_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(logic, "SEEN_DECISIONS_MAX", 3)
    p = make()
    for i in range(5):
        await batch(p, dec(decision(f"job-{i}", suspects=(f"n{i}",))))
    assert list(p.seen) == [("job-2", 0), ("job-3", 0), ("job-4", 0)]


async def test_the_fleet_is_the_inventory_never_the_nodes_named_in_inputs() -> None:
    p = make(BreakerConfig(fleet_size=40))
    p.table.apply(QuarantineRecord("t1", "released", "operator", (), None, 1), 0, 0)
    await batch(p, req("n1"))
    ev = Evidence("n5", 0, "xid", 13, 900, "software")
    software = Decision(
        "job-9",
        0,
        "software",
        "reject",
        "Pending-internalerror",
        ("n6",),
        None,
        (ev,),
        "software.reject",
        1_000,
        1_000,
    )
    await batch(p, dec(software))
    assert metric(p, "fleet_nodes") == 40
    named = make(BreakerConfig(inventory=frozenset({"a", "b", "c"})))
    await named.idle()
    assert metric(named, "fleet_nodes") == 3


async def test_an_empty_batch_on_a_fresh_processor_changes_nothing() -> None:
    p = make()
    await p.idle()
    await batch(p)
    assert (p.table.arrived_at, p.dry, p.seen) == ({}, {}, {})
    assert metric(p, "breaker_tripped") == 0


async def test_a_rolled_back_batch_leaves_idle_and_the_next_batch_working() -> None:
    p = make()
    p.begin()
    p.handle(req("n1"))
    p.rollback()
    await p.idle()
    assert metric(p, "quarantines_total", reason="hardware", mode="applied") == 0
    assert [o.key for o in await batch(p, req("n1"))] == [b"n1"]


async def test_an_acknowledged_write_is_not_undone_by_an_older_record_of_the_tail() -> None:
    p = make()
    p.begin()
    [out] = p.handle(req("n1"))
    await p.committed([Ack(out, 0, 10)])
    older = QuarantineRecord("n1", "released", "operator", (), None, 1)
    p.table.apply_record(InRecord(NAMES.nodes_quarantine, 0, 5, b"n1", dumps(older.to_dict())))
    assert p.table.is_quarantined("n1")


# -- dry run -----------------------------------------------------------------------------------


async def test_dry_run_alert_is_keyed_by_node_and_counted_as_dry_run() -> None:
    p = make(dry_run=True)
    [alert] = await batch(p, req("n1"))
    body = value(alert)
    assert (alert.topic, alert.key, body["action"]) == (NAMES.failover_alerts, b"n1", "quarantine")
    assert is_wall_clock_now(body["ts_ms"])
    assert metric(p, "quarantines_total", reason="hardware", mode="dry_run") == 1


# -- releases ----------------------------------------------------------------------------------


async def test_releases_read_while_rebuilding_the_table_are_not_actuated() -> None:
    p = make(live=False)
    p.table.apply(QuarantineRecord("n1", "quarantined", "hardware", (), None, 1), 0, 0)
    p.table.apply(QuarantineRecord("n1", "released", "operator", (), None, 2), 0, 1)
    await p.idle()
    assert commands(p) == []


async def test_a_release_of_a_node_never_quarantined_actuates_nothing() -> None:
    p = make()
    p.table.apply(QuarantineRecord("n9", "released", "operator", (), None, 2), 0, 0)
    await p.idle()
    assert commands(p) == []


# -- the breaker -------------------------------------------------------------------------------


async def test_a_trip_is_logged_alerted_and_refusals_name_node_cause_and_time(
    caplog: pytest.LogCaptureFixture,
) -> None:
    p = make(WAVE_CFG)
    outputs = await batch(p, *(req(f"n{i}", 1_000 + i) for i in range(4)))
    trip_alert, refused_at_trip, refused_after = outputs[2:]
    body = value(trip_alert)
    assert trip_alert.key == b"breaker"
    assert (body["group"], body["dry_run"]) == ("gpufailover-quarantine", False)
    assert body["tripped_ts_ms"] == body["tripped_wall_ms"]  # both the wall clock now
    assert is_wall_clock_now(body["tripped_wall_ms"]) and is_wall_clock_now(body["ts_ms"])
    for out, node in ((refused_at_trip, "n2"), (refused_after, "n3")):
        refused = value(out)
        assert (out.key, refused["node"], refused["breaker_cause"]) == (
            node.encode(),
            node,
            "share",
        )
        assert is_wall_clock_now(refused["ts_ms"])
    assert messages(caplog) == [
        (logging.ERROR, "breaker TRIPPED (share): 3 nodes in the window, fleet 10"),
        (logging.WARNING, "breaker tripped: quarantine of n3 refused"),
    ]
    assert metric(p, "breaker_tripped") == 1


async def test_a_reset_is_logged_with_operator_and_reason(
    caplog: pytest.LogCaptureFixture,
) -> None:
    p = make(WAVE_CFG)
    await batch(p, *(req(f"n{i}", 1_000 + i) for i in range(4)))
    caplog.clear()
    command = ResetCommand(ts_ms=now_ms(), operator="alice", reason="driver rollback")
    [closed] = await batch(p, rec(NAMES.operators_audit, RESET_KEY, command.to_dict()))
    assert is_wall_clock_now(value(closed)["ts_ms"])
    assert messages(caplog) == [(logging.WARNING, "breaker RESET by alice: driver rollback")]
    assert metric(p, "breaker_resets_total") == 1


async def test_a_reset_without_operator_is_logged_as_unknown(
    caplog: pytest.LogCaptureFixture,
) -> None:
    p = make(WAVE_CFG)
    p.breaker = BreakerState(tripped=True, cause="share", tripped_wall_ms=1)
    command = ResetCommand(ts_ms=now_ms(), operator="", reason="ok")
    await batch(p, rec(NAMES.operators_audit, RESET_KEY, command.to_dict()))
    assert messages(caplog) == [(logging.WARNING, "breaker RESET by ?: ok")]


async def test_a_reset_right_after_a_restart_floors_the_count_at_the_wall_clock() -> None:
    # The breaker state comes back from failover.alerts; no request was read yet.
    p = make(WAVE_CFG)
    p.breaker = BreakerState(tripped=True, cause="share", tripped_wall_ms=1)
    command = ResetCommand(ts_ms=now_ms(), operator="op", reason="ok")
    [closed] = await batch(p, rec(NAMES.operators_audit, RESET_KEY, command.to_dict()))
    assert is_wall_clock_now(value(closed)["floor_ts_ms"])


async def test_a_reset_of_a_closed_breaker_is_logged_and_ignored(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    p = make()
    r = rec(NAMES.operators_audit, RESET_KEY, ResetCommand(now_ms(), "op", "x").to_dict())
    assert await batch(p, r) == []
    assert messages(caplog) == [
        (logging.INFO, f"breaker reset at {r.where} ignored: breaker not tripped since")
    ]


# -- life cycle --------------------------------------------------------------------------------


async def test_an_assignment_waits_for_the_table_tail() -> None:
    calls: list[str] = []

    async def sync() -> None:
        calls.append("sync")

    await make(sync=sync).on_assigned()
    await make().on_assigned()
    assert calls == ["sync"]
