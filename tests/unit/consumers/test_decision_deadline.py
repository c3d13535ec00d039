"""The decision deadline in the job status service, on an injected wall clock, no broker."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import pytest
from consumer_fakes import NAMES, acks, decision, rec, value
from prometheus_client import CollectorRegistry

from consumers.jobstatus import deadline
from consumers.jobstatus.logic import JobStatusProcessor, StatusTable
from consumers.jobstatus.metrics import JobStatusMetrics
from consumers.jobstatus.timeline import render
from consumers.runtime.records import InRecord, Output
from schemas.alerts import JobAlert
from schemas.status import Awaiting, JobStatus, Step

DEADLINE_MS = 300_000
T0 = 1_700_000_000_000  # job events are stamped in epoch ms (schemas.bounds.TS_FLOOR_MS)
READY = frozenset({(NAMES.failover_decisions, 0)})  # the fakes put every record on partition 0


class Service:
    """A processor on a wall clock the test moves, driven the way the loop drives it."""

    def __init__(self, table: StatusTable | None = None, start_ms: int = 10_000_000) -> None:
        self.now = start_ms
        self.registry = CollectorRegistry()
        self.p = JobStatusProcessor(
            NAMES,
            table or StatusTable(),
            JobStatusMetrics.create(self.registry),
            deadline_ms=DEADLINE_MS,
            clock=lambda: self.now,
        )

    async def batch(self, *records: InRecord) -> list[Output]:
        self.p.begin()
        outputs = [out for r in records for out in self.p.handle(r)]
        await self.p.committed(acks(outputs))
        return outputs

    async def tick(self, ready: frozenset[tuple[str, int]] = READY) -> list[Output]:
        self.p.begin()
        outputs = self.p.due(ready)
        await self.p.committed(acks(outputs))
        await self.p.idle()
        return outputs

    def metric(self, name: str) -> float | None:
        return self.registry.get_sample_value(name)


def event(job: str, kind: str, attempt: int = 0, ts: int = T0 + 5_000) -> InRecord:
    body = {"job_id": job, "attempt": attempt, "type": kind, "ts_ms": ts, "nodes": ["n1"]}
    return rec(NAMES.jobs_events, job, body)


def alerts(outputs: Sequence[Output]) -> list[dict[str, object]]:
    return [value(o) for o in outputs if o.topic == NAMES.failover_alerts]


async def test_no_decision_by_the_deadline_raises_one_alert_and_marks_the_attempt() -> None:
    s = Service()
    await s.batch(event("j", "started"), event("j", "terminated", ts=T0 + 6_000))
    read_ms = s.now
    s.now += DEADLINE_MS - 1
    assert await s.tick() == []
    assert s.metric("gpufailover_jobstatus_awaited_decisions") == 1
    s.now += 1
    outputs = await s.tick()
    [alert] = alerts(outputs)
    assert (
        alert
        == JobAlert(
            "decision_overdue",
            "j",
            0,
            s.now,
            {
                "terminated_ts_ms": T0 + 6_000,
                "read_ms": read_ms,
                "deadline_s": 300.0,
                "waited_s": 300.0,
                "message": "no failover decision yet: is the classifier down or lagging?",
            },
        ).to_dict()
    )
    [status] = [value(o) for o in outputs if o.topic == NAMES.jobs_status]
    assert status["status"] == "Pending-failoverinprogress"  # no verdict is made up
    assert status["awaiting_decision"] == [
        {"attempt": 0, "terminated_ts_ms": T0 + 6_000, "read_ms": read_ms, "overdue_ms": s.now}
    ]
    assert s.metric("gpufailover_jobstatus_decisions_overdue_total") == 1
    assert s.metric("gpufailover_jobstatus_overdue_decisions") == 1
    s.now += DEADLINE_MS * 3
    assert await s.tick() == []  # once per (job, attempt)


async def test_a_decision_in_time_means_no_alert() -> None:
    s = Service()
    await s.batch(event("j", "terminated"))
    s.now += 1_000
    await s.batch(rec(NAMES.failover_decisions, "j", decision("j", ts=T0 + 7_000)))
    s.now += DEADLINE_MS * 2
    assert await s.tick() == []
    assert s.metric("gpufailover_jobstatus_awaited_decisions") == 0
    assert s.metric("gpufailover_jobstatus_decisions_overdue_total") == 0


async def test_a_decision_read_before_its_termination_leaves_nothing_to_wait_for() -> None:
    s = Service()
    await s.batch(rec(NAMES.failover_decisions, "j", decision("j")))
    await s.batch(event("j", "terminated"))
    s.now += DEADLINE_MS
    assert await s.tick() == []


async def test_a_late_decision_clears_the_overdue_state() -> None:
    s = Service()
    await s.batch(event("j", "terminated"))
    s.now += DEADLINE_MS
    assert alerts(await s.tick())
    [out] = await s.batch(rec(NAMES.failover_decisions, "j", decision("j")))
    assert value(out)["awaiting_decision"] == []
    assert value(out)["status"] == "Pending-failoverinprogress"
    await s.p.idle()
    assert s.metric("gpufailover_jobstatus_overdue_decisions") == 0


async def test_no_alert_while_the_decisions_partition_is_not_read_to_its_end() -> None:
    s = Service()
    await s.batch(event("j", "terminated"))
    s.now += DEADLINE_MS
    # Not caught up (e.g. just restarted): the decision may be waiting, unread.
    assert await s.tick(ready=frozenset()) == []
    # Another partition read to its end says nothing about this job's.
    assert await s.tick(ready=frozenset({(NAMES.failover_decisions, 1)})) == []
    assert alerts(await s.tick())


async def test_the_wait_survives_a_restart_and_still_fires_once() -> None:
    s = Service()
    written = await s.batch(event("j", "terminated"), event("k", "terminated"))
    s.now += DEADLINE_MS
    fired = await s.tick()
    assert {a["job_id"] for a in alerts(fired)} == {"j", "k"}
    late = await s.batch(event("m", "terminated"))  # read, then the service dies
    # The restarted service rebuilds its table from jobs.status (its own committed output).
    table = StatusTable()
    for offset, out in enumerate([*written, *fired, *late]):
        if out.topic == NAMES.jobs_status:
            table.apply_record(InRecord(out.topic, 0, offset, out.key, out.value))
    restarted = Service(table, start_ms=s.now + 1)
    assert await restarted.tick() == []  # j and k already alerted; m not due yet
    restarted.now = s.now + DEADLINE_MS
    [alert] = alerts(await restarted.tick())
    assert alert["job_id"] == "m"


async def test_a_failed_transaction_fires_again_on_the_next_turn() -> None:
    s = Service()
    await s.batch(event("j", "terminated"))
    s.now += DEADLINE_MS
    s.p.begin()
    assert alerts(s.p.due(READY))
    s.p.rollback()
    assert alerts(await s.tick())


def test_pure_rules() -> None:
    status = JobStatus("j", (), (Awaiting(0, 1, 100), Awaiting(1, 2, 200, overdue_ms=500)))
    assert deadline.next_due_ms(status.awaiting, 10) == 110
    assert deadline.newly_overdue(status.awaiting, 109, 10) == []
    assert deadline.newly_overdue(status.awaiting, 110, 10) == [Awaiting(0, 1, 100)]
    assert deadline.on_decision(status.awaiting, 0) == (Awaiting(1, 2, 200, 500),)
    assert deadline.on_decision(status.awaiting, 1) == ()
    assert deadline.on_termination(status, 0, 9, 999) == status.awaiting  # already waiting
    assert deadline.overdue_count(status) == 1


async def test_status_shows_the_overdue_attempt() -> None:
    s = Service()
    [out] = await s.batch(event("j", "terminated"))
    waiting = JobStatus.from_dict(value(out))
    assert "awaiting decision since" in render(waiting)
    s.now += DEADLINE_MS
    [status_out] = [o for o in await s.tick() if o.topic == NAMES.jobs_status]
    text = render(JobStatus.from_dict(value(status_out)))
    assert text.splitlines()[0].endswith("DECISION OVERDUE")
    assert "attempt 0: decision OVERDUE" in text and "300 s after it was read" in text


def test_the_wait_round_trips_through_the_status_record_and_old_records_still_read() -> None:
    status = JobStatus(
        "j",
        (Step("Pending-failoverinprogress", 0, 5, "terminated"),),
        (Awaiting(0, 5, 10), Awaiting(1, 6, 11, overdue_ms=12)),
    )
    assert JobStatus.from_dict(status.to_dict()) == status
    before = status.to_dict()
    del before["awaiting_decision"]  # written before the deadline existed
    assert JobStatus.from_dict(before).awaiting == ()


async def test_each_wait_is_judged_on_its_own_whatever_comes_first_in_the_index() -> None:
    s = Service()
    t0 = s.now
    await s.batch(event("a", "terminated"))  # a first in the index of waits
    s.now = t0 + 1
    await s.batch(event("b", "terminated"))
    s.now = t0 + 2
    await s.batch(event("a", "terminated", attempt=1))
    s.now = t0 + 3
    await s.batch(rec(NAMES.failover_decisions, "a", decision("a")))  # a now waits from t0+2
    s.now = t0 + 1 + DEADLINE_MS  # b is due, a is not yet
    [alert] = alerts(await s.tick())
    assert (alert["job_id"], alert["attempt"]) == ("b", 0)
    s.now = t0 + 2 + DEADLINE_MS
    [alert] = alerts(await s.tick())
    assert (alert["job_id"], alert["attempt"]) == ("a", 1)


async def test_a_decision_read_in_the_same_turn_is_not_reported_overdue() -> None:
    s = Service()
    await s.batch(event("a", "terminated"))
    await s.batch(event("b", "terminated"))
    s.now += DEADLINE_MS
    s.p.begin()
    s.p.handle(rec(NAMES.failover_decisions, "a", decision("a")))  # staged, not yet committed
    outputs = s.p.due(READY)
    await s.p.committed(acks(outputs))
    [alert] = alerts(outputs)
    assert alert["job_id"] == "b"
    [out] = [o for o in outputs if o.topic == NAMES.failover_alerts]
    assert out.key == b"b"  # keyed by job, like every job record


async def test_a_termination_with_no_failover_still_waits_for_its_decision() -> None:
    s = Service()
    spot = {"job_id": "j", "attempt": 0, "type": "terminated", "ts_ms": T0, "nodes": ["n1"]}
    await s.batch(event("j", "started"))
    [out] = await s.batch(rec(NAMES.jobs_events, "j", {**spot, "training_type": "spot"}))
    assert [a["attempt"] for a in value(out)["awaiting_decision"]] == [0]
    s.now += DEADLINE_MS
    assert [a["job_id"] for a in alerts(await s.tick())] == ["j"]


async def test_an_event_that_changes_nothing_is_counted_under_its_type() -> None:
    s = Service()
    await s.batch(event("j", "started"), event("j", "terminated"))
    assert await s.batch(event("j", "started"), event("j", "terminated")) == []
    for kind in ("started", "terminated"):
        unchanged = s.registry.get_sample_value(
            "gpufailover_jobstatus_unchanged_total", {"event": kind}
        )
        assert unchanged == 1, kind


async def test_an_overdue_decision_is_logged_with_the_job_and_the_wait(
    caplog: pytest.LogCaptureFixture,
) -> None:
    s = Service()
    s.p.deadline_ms = 600_000
    await s.batch(event("j", "terminated", ts=T0 + 6_000))
    s.now += 600_000 + 1_500
    with caplog.at_level(logging.WARNING, logger="consumers.jobstatus.logic"):
        await s.tick()
    assert caplog.messages == [
        f"decision overdue: job j attempt 0 terminated at {T0 + 6_000}, read 602 s ago, "
        "no decision (deadline 600 s)"
    ]


async def test_a_wait_on_a_partition_not_read_to_its_end_holds_back_only_its_own_job() -> None:
    table = StatusTable()
    read_ms = 10_000_000
    for job, partition in (("a", 1), ("b", 0)):  # a first in the index, on a partition not ready
        step = Step("Pending-failoverinprogress", 0, T0, "terminated")
        table.apply(JobStatus(job, (step,), (Awaiting(0, T0, read_ms),)), partition, 0)
    s = Service(table, start_ms=read_ms + DEADLINE_MS)
    assert [a["job_id"] for a in alerts(await s.tick())] == ["b"]
