"""The quarantine service runs the node lifecycle: operator validate commands, agents' results
and repair signals, the lemon rule, their alerts and metrics; without a broker."""

from __future__ import annotations

import logging
from dataclasses import replace

import pytest
from consumer_fakes import NAMES, acks, decision, rec, request, value
from prometheus_client import CollectorRegistry

from consumers.quarantine.actions import QUARANTINE, RELEASE
from consumers.quarantine.actuation import ActuationQueue
from consumers.quarantine.actuator import LogActuator
from consumers.quarantine.breaker import BreakerConfig
from consumers.quarantine.lifecycle import LifecyclePolicy
from consumers.quarantine.logic import QuarantineProcessor
from consumers.quarantine.metrics import QuarantineMetrics
from consumers.quarantine.table import QuarantineTable
from consumers.runtime.records import InRecord, Output
from gpufailover.backoff import Backoff
from schemas.audit import VALIDATE, OperatorCommand
from schemas.errors import SchemaError
from schemas.event_time import EventTimeBounds
from schemas.quarantine import QuarantineRecord, Validation, ValidationRequest, ValidationResult

DAY = 86_400_000
T0 = 1_800_000_000_000
WALL = T0 + 999  # the service's clock in these tests
LOGGER = "consumers.quarantine.logic"
LP = LifecyclePolicy()


def make(
    lp: LifecyclePolicy = LP, dry_run: bool = False, bounds: EventTimeBounds | None = None
) -> tuple[QuarantineProcessor, CollectorRegistry]:
    registry = CollectorRegistry()
    p = QuarantineProcessor(
        NAMES,
        BreakerConfig(),
        QuarantineTable(),
        LogActuator(),
        QuarantineMetrics.create(registry),
        dry_run=dry_run,
        lifecycle_policy=lp,
        bounds=bounds,
        clock=lambda: WALL,
    )
    return p, registry


async def batch(p: QuarantineProcessor, *records: InRecord) -> list[Output]:
    p.begin()
    outputs = [out for r in records for out in p.handle(r)]
    await p.committed(acks(outputs))
    return outputs


def on(outputs: list[Output], topic: str) -> list[dict[str, object]]:
    return [value(o) for o in outputs if o.topic == topic]


def validate_cmd(node: str = "n1", ts: int = T0 + 100) -> InRecord:
    cmd = OperatorCommand(VALIDATE, node, "unauthenticated:ops", False, "swapped GPU 3", ts)
    return rec(NAMES.operators_audit, node, cmd.to_dict())


def agent_result(request_id: str, ok: bool, ts: int = T0 + 200) -> InRecord:
    r = ValidationResult(
        "n1",
        "result",
        ts,
        request_id=request_id,
        result="pass" if ok else "fail",
        exit_code=0 if ok else 1,
        output="GPU 0: ok" if ok else "GPU 3: uncorrectable ECC errors",
        command="nvml-self-check",
    )
    return rec(NAMES.validation_results, "n1", r.to_dict())


def metric(registry: CollectorRegistry, name: str, **labels: str) -> float:
    sample = registry.get_sample_value(f"gpufailover_quarantine_{name}", labels)
    return 0.0 if sample is None else sample


async def quarantined_then_validating(p: QuarantineProcessor) -> str:
    await batch(p, rec(NAMES.quarantine_requests, "n1", request("n1", T0)))
    out = await batch(p, validate_cmd())
    [ask] = on(out, NAMES.nodes_validate)
    return str(ask["request_id"])


async def test_an_operator_validate_command_starts_a_validation_on_the_node() -> None:
    p, registry = make()
    await batch(p, rec(NAMES.quarantine_requests, "n1", request("n1", T0)))
    audit = validate_cmd()
    out = await batch(p, audit)
    [state] = on(out, NAMES.nodes_quarantine)
    [ask] = on(out, NAMES.nodes_validate)
    assert state["state"] == "validating"
    request_id = f"operator-{audit.partition}-{audit.offset}"
    assert ValidationRequest.from_dict(ask) == ValidationRequest(
        "n1", request_id, "operator", "swapped GPU 3", True, T0 + 100
    )
    assert [o.key for o in out] == [b"n1", b"n1"]
    assert p.table.is_quarantined("n1")  # validating is still out of service
    assert metric(registry, "validation_steps_total", source="operator", outcome="started") == 1


async def test_a_redelivered_validate_command_writes_nothing() -> None:
    p, _ = make()
    await batch(p, rec(NAMES.quarantine_requests, "n1", request("n1", T0)))
    audit = validate_cmd()
    await batch(p, audit)
    again = InRecord(audit.topic, audit.partition, audit.offset, audit.key, audit.value)
    assert await batch(p, again) == []


async def test_a_validate_command_for_a_node_not_quarantined_raises_an_alert_only() -> None:
    p, registry = make()
    out = await batch(p, validate_cmd("n9"))
    [alert] = on(out, NAMES.failover_alerts)
    assert len(out) == 1
    assert (alert["kind"], alert["node"], alert["outcome"]) == (
        "validation",
        "n9",
        "not_quarantined",
    )
    assert metric(registry, "validation_steps_total", source="operator", outcome="not_quarantined")


async def test_a_failed_validation_keeps_the_node_quarantined_with_the_output() -> None:
    p, registry = make()
    request_id = await quarantined_then_validating(p)
    out = await batch(p, agent_result(request_id, ok=False))
    [state] = on(out, NAMES.nodes_quarantine)
    [closed] = on(out, NAMES.nodes_validate)
    [alert] = on(out, NAMES.failover_alerts)
    record = QuarantineRecord.from_dict(state)
    assert record.state == "quarantined"
    assert record.validation is not None
    assert record.validation.output == "GPU 3: uncorrectable ECC errors"
    assert closed["open"] is False
    assert (alert["kind"], alert["outcome"]) == ("validation", "failed")
    assert p.table.is_quarantined("n1")
    assert metric(registry, "validation_steps_total", source="result", outcome="failed") == 1


async def test_a_passed_validation_awaits_an_operator_by_default() -> None:
    p, _ = make()
    request_id = await quarantined_then_validating(p)
    out = await batch(p, agent_result(request_id, ok=True))
    [state] = on(out, NAMES.nodes_quarantine)
    assert (state["state"], state["validated"]) == ("quarantined", True)
    assert on(out, NAMES.failover_alerts) == []


async def test_a_passed_validation_releases_the_node_with_auto_release() -> None:
    p, _ = make(replace(LP, auto_release=True))
    request_id = await quarantined_then_validating(p)
    out = await batch(p, agent_result(request_id, ok=True))
    [state] = on(out, NAMES.nodes_quarantine)
    assert (state["state"], state["reason"]) == ("released", "validation")
    assert not p.table.is_quarantined("n1")
    # and the node may be quarantined again by a newer request, counting towards the lemon rule
    again = await batch(p, rec(NAMES.quarantine_requests, "n1", request("n1", T0 + 300)))
    [state] = on(again, NAMES.nodes_quarantine)
    assert state["history"] == [T0, T0 + 300]


async def test_a_redelivered_result_flips_nothing_twice() -> None:
    p, _ = make(replace(LP, auto_release=True))
    request_id = await quarantined_then_validating(p)
    first = await batch(p, agent_result(request_id, ok=False))
    assert on(first, NAMES.nodes_quarantine)
    assert await batch(p, agent_result(request_id, ok=True)) == []
    assert p.table.is_quarantined("n1")


async def test_a_node_quarantined_three_times_in_the_window_is_a_lemon() -> None:
    p, registry = make(replace(LP, auto_release=True))
    alerts: list[dict[str, object]] = []
    for i in range(3):
        out = await batch(p, rec(NAMES.quarantine_requests, "n1", request("n1", T0 + i * DAY)))
        alerts += on(out, NAMES.failover_alerts)
        if i < 2:
            request_id = str(
                on(await batch(p, validate_cmd(ts=T0 + i * DAY + 10)), NAMES.nodes_validate)[0][
                    "request_id"
                ]
            )
            released = await batch(p, agent_result(request_id, ok=True, ts=T0 + i * DAY + 20))
            assert on(released, NAMES.nodes_quarantine)[0]["state"] == "released"
    record = p.table.get("n1")
    assert record is not None and record.lemon
    [alert] = alerts
    assert (alert["kind"], alert["quarantines_in_window"]) == ("lemon", 3)
    assert metric(registry, "lemons_total") == 1
    assert metric(registry, "lemon_nodes") == 1
    # validated, it stays quarantined: auto-release refuses a lemon
    request_id = str(
        on(await batch(p, validate_cmd(ts=T0 + 2 * DAY + 10)), NAMES.nodes_validate)[0][
            "request_id"
        ]
    )
    out = await batch(p, agent_result(request_id, ok=True, ts=T0 + 2 * DAY + 20))
    [state] = on(out, NAMES.nodes_quarantine)
    [alert] = on(out, NAMES.failover_alerts)
    assert (state["state"], state["lemon"], state["validated"]) == ("quarantined", True, True)
    assert alert["outcome"] == "lemon_held"


async def test_a_repair_signal_starts_a_validation_only_when_the_policy_says_so() -> None:
    repair = ValidationResult("n1", "repair", T0 + 50).to_dict()
    off, _ = make()
    await batch(off, rec(NAMES.quarantine_requests, "n1", request("n1", T0)))
    assert await batch(off, rec(NAMES.validation_results, "n1", repair)) == []
    on_, registry = make(replace(LP, validate_on_repair=True))
    await batch(on_, rec(NAMES.quarantine_requests, "n1", request("n1", T0)))
    out = await batch(on_, rec(NAMES.validation_results, "n1", repair))
    [ask] = on(out, NAMES.nodes_validate)
    assert (ask["request_id"], ask["trigger"]) == (f"repair-{T0 + 50}", "repair")
    assert metric(registry, "validation_steps_total", source="repair", outcome="started") == 1


async def test_dry_run_validates_nothing() -> None:
    p, _ = make(dry_run=True)
    p.table.apply(QuarantineRecord("n1", "quarantined", "hardware", (), None, T0), 0, 0)
    assert await batch(p, validate_cmd()) == []


async def test_a_release_audit_record_is_not_a_validate_command() -> None:
    p, _ = make()
    await batch(p, rec(NAMES.quarantine_requests, "n1", request("n1", T0)))
    cmd = OperatorCommand("release", "n1", "unauthenticated:ops", False, "fixed", T0 + 1)
    assert await batch(p, rec(NAMES.operators_audit, "n1", cmd.to_dict())) == []
    assert await batch(p, rec(NAMES.operators_audit, "n1", b"not json")) == []
    bad = cmd.to_dict() | {"kind": "validate", "reason": ""}
    assert await batch(p, rec(NAMES.operators_audit, "n1", bad)) == []


# -- what "out of service" means to the table and the actuator ------------------------------
def test_a_validating_node_stays_drained_and_is_not_actuated_again() -> None:
    queue = ActuationQueue(Backoff())
    base = QuarantineRecord("n1", "quarantined", "hardware", (), None, T0)
    queue.read(0, 0, base)
    [owed] = queue.due(0)
    assert owed.action == QUARANTINE
    queue.succeeded(owed)
    queue.read(0, 1, replace(base, state="validating"))
    assert queue.due(0) == []  # already drained: nothing to do while it validates
    queue.read(0, 2, replace(base, state="released", reason="validation"))
    [owed] = queue.due(0)
    assert owed.action == RELEASE


def test_only_a_new_episode_moves_the_breakers_arrival_time() -> None:
    table = QuarantineTable()
    base = QuarantineRecord("n1", "quarantined", "hardware", (), None, T0)
    table.apply(base, 0, 0, arrived_ms=1_000)
    ran = Validation("operator-0-1", "operator", T0 + 1, result="fail")
    table.apply(replace(base, ts_ms=T0 + 2, validation=ran), 0, 1, arrived_ms=9_000)
    assert (table.arrived_at["n1"], table.quarantined_at["n1"]) == (1_000, T0)
    assert table.quarantined() == {"n1"}
    table.apply(replace(base, state="validating", lemon=True), 0, 2, arrived_ms=9_500)
    assert table.lemons() == {"n1"} and table.is_quarantined("n1")
    table.apply(replace(base, state="released", lemon=True), 0, 3)
    assert table.lemons() == frozenset() and table.quarantined() == frozenset()


# -- what the service says: log lines, alert keys and times ----------------------------------------
def logged(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER]


async def test_each_validation_step_is_logged_with_node_source_outcome_and_why(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, LOGGER)
    p, _ = make()
    await batch(p, rec(NAMES.quarantine_requests, "n1", request("n1", T0)))
    audit = validate_cmd()
    await batch(p, audit)
    rid = f"operator-{audit.partition}-{audit.offset}"
    await batch(p, validate_cmd("n9"))
    assert logged(caplog)[-2:] == [
        f"validation of n1 (operator): started -> validating: validation {rid} requested "
        "(operator)",
        "validation of n9 (operator): not_quarantined, the node is not quarantined",
    ]


async def test_dry_run_logs_what_the_validation_would_be(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, LOGGER)
    p, _ = make(dry_run=True)
    p.table.apply(QuarantineRecord("n1", "quarantined", "hardware", (), None, T0), 0, 0)
    audit = validate_cmd()
    await batch(p, audit)
    rid = f"operator-{audit.partition}-{audit.offset}"
    assert logged(caplog)[-1] == (
        f"dry run: validation of n1 would be started: validation {rid} requested (operator)"
    )


async def test_alerts_are_keyed_by_node_and_stamped_by_the_service_clock() -> None:
    p, _ = make(replace(LP, lemon_count=1))
    out = await batch(p, rec(NAMES.quarantine_requests, "n1", request("n1", T0)))
    [lemon] = [o for o in out if o.topic == NAMES.failover_alerts]
    assert (lemon.key, value(lemon)["ts_ms"]) == (b"n1", WALL)
    refused = await batch(p, validate_cmd("n9"))
    [alert] = refused
    assert (alert.key, value(alert)["ts_ms"], value(alert)["node"]) == (b"n9", WALL, "n9")
    await batch(p, validate_cmd())
    rid = str(p.table.get("n1").validation.request_id)  # type: ignore[union-attr]
    failed = await batch(p, agent_result(rid, ok=False))
    [alert] = [o for o in failed if o.topic == NAMES.failover_alerts]
    assert (alert.key, value(alert)["ts_ms"], value(alert)["node"]) == (b"n1", WALL, "n1")


async def test_a_lemon_is_logged_with_its_count_and_window(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, LOGGER)
    p, _ = make(replace(LP, lemon_count=1, lemon_window_ms=3_601_000))
    await batch(p, rec(NAMES.quarantine_requests, "n1", request("n1", T0)))
    assert (
        "n1 is a LEMON: quarantined 1 times within 3601 s; only an operator may release it"
        in logged(caplog)
    )


async def test_unreadable_operator_commands_are_logged_where_and_why(
    caplog: pytest.LogCaptureFixture,
) -> None:
    p, _ = make()
    bad_json = rec(NAMES.operators_audit, "n1", b"not json")
    await batch(p, bad_json)
    cmd = OperatorCommand(VALIDATE, "n1", "unauthenticated:ops", False, "x", T0)
    bad_cmd = rec(NAMES.operators_audit, "n1", cmd.to_dict() | {"reason": ""})
    await batch(p, bad_cmd)
    first, second = logged(caplog)[-2:]
    assert first.startswith(
        f"unreadable operator command at {bad_json.where} skipped: value: not valid JSON"
    )
    assert second == (
        f"unreadable validate command at {bad_cmd.where} skipped: reason: must not be empty"
    )


async def test_a_validate_command_in_the_batch_of_the_quarantine_sees_it() -> None:
    p, _ = make()
    out = await batch(p, rec(NAMES.quarantine_requests, "n1", request("n1", T0)), validate_cmd())
    assert [value(o)["state"] for o in out if o.topic == NAMES.nodes_quarantine] == [
        "quarantined",
        "validating",
    ]


async def test_a_repair_signal_says_why_in_its_request() -> None:
    p, _ = make(replace(LP, validate_on_repair=True))
    await batch(p, rec(NAMES.quarantine_requests, "n1", request("n1", T0)))
    repair = ValidationResult("n1", "repair", T0 + 50).to_dict()
    out = await batch(p, rec(NAMES.validation_results, "n1", repair))
    [ask] = on(out, NAMES.nodes_validate)
    assert ask["reason"] == "the node's agent restarted"


async def test_a_result_stamped_out_of_the_event_time_bounds_is_refused() -> None:
    bounds = EventTimeBounds(max_future_skew_ms=1_000)
    p, _ = make(bounds=bounds)
    late = ValidationResult("n1", "repair", WALL + 60_000).to_dict()
    p.begin()
    with pytest.raises(SchemaError) as err:
        p.handle(rec(NAMES.validation_results, "n1", late))
    assert err.value.field == "ts_ms"


async def test_a_decision_redelivered_after_a_release_is_a_duplicate_not_a_stale_request() -> None:
    p, registry = make()
    d = decision("job-1", suspects=("n1",), ts=T0)
    await batch(p, rec(NAMES.failover_decisions, "job-1", d))
    released = QuarantineRecord("n1", "released", "operator", (), None, T0 + 10)
    p.table.apply(released, 0, 99)
    assert await batch(p, rec(NAMES.failover_decisions, "job-1", d)) == []
    assert metric(registry, "duplicates_total", source="decision") == 1
    assert metric(registry, "stale_total", source="decision") == 0
