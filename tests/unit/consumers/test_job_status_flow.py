"""The mission's status flows, whatever order the two input topics deliver in."""

from __future__ import annotations

import itertools

from consumer_fakes import NAMES, acks, decision, rec, value

from consumers.jobstatus.flow import advance, step_for_decision, step_for_event
from consumers.jobstatus.logic import JobStatusProcessor, StatusTable
from consumers.jobstatus.metrics import JobStatusMetrics
from schemas.decisions import Decision
from schemas.jobs import JobEvent
from schemas.status import JobStatus, Step


def ev(kind: str, attempt: int = 0, ts: int = 0, **kw: object) -> Step | None:
    nodes = ("n1",) if kind in ("started", "terminated") else ()
    return step_for_event(JobEvent("j", attempt, kind, ts, nodes=nodes, **kw))  # type: ignore[arg-type]


def dec(status: str, rule: str, attempt: int = 0, ts: int = 0) -> Step:
    d = Decision("j", attempt, "hardware", "failover", status, (), None, (), rule, ts, ts)
    return step_for_decision(d)


def run(steps: list[Step | None], history_max: int = 50) -> JobStatus | None:
    status: JobStatus | None = None
    for step in steps:
        if step is not None:
            status = advance(status, "j", step, history_max) or status
    return status


def flow(status: JobStatus | None) -> list[tuple[str, int]]:
    assert status is not None
    return [(s.status, s.attempt) for s in status.history]


FAILOVER = [
    ev("started", 0, 10),
    ev("terminated", 0, 20),
    dec("Pending-failoverinprogress", "hardware.failover", 0, 25),
    ev("started", 1, 30),
]


def test_failover_succeeded_running_pending_running() -> None:
    status = run(FAILOVER)
    assert flow(status) == [("Running", 0), ("Pending-failoverinprogress", 0), ("Running", 1)]
    assert status is not None
    pending = status.history[1]
    assert (pending.ts_ms, pending.rule) == (20, "hardware.failover")  # since terminated


def test_failover_refused_running_pending_internalerror() -> None:
    steps = [*FAILOVER[:2], dec("Pending-internalerror", "software.reject", 0, 25)]
    assert flow(run(steps)) == [
        ("Running", 0),
        ("Pending-failoverinprogress", 0),
        ("Pending-internalerror", 0),
    ]


def test_failover_off_running_failed() -> None:
    steps = [
        ev("started"),
        ev("terminated", failover=False),
        dec("Failed", "hardware.failover_disabled"),
    ]
    assert flow(run(steps)) == [("Running", 0), ("Failed", 0)]
    assert ev("terminated", training_type="spot") is None


def test_retry_cap_and_terminal_events() -> None:
    assert flow(
        run([ev("started", 3), ev("terminated", 3), dec("Pending-maxretriesexceeded", "r", 3)])
    )[-1] == ("Pending-maxretriesexceeded", 3)
    assert flow(run([*FAILOVER, ev("succeeded", 1)]))[-1] == ("Succeeded", 1)
    assert flow(run([ev("submitted"), ev("cancelled")])) == [("Submitted", 0), ("Cancelled", 0)]


def test_any_arrival_order_gives_the_same_status() -> None:
    expected = run(FAILOVER)
    for order in itertools.permutations(FAILOVER):
        assert run(list(order)) == expected, order


def test_redelivered_and_stale_steps_change_nothing() -> None:
    status = run(FAILOVER)
    assert status is not None
    for step in FAILOVER:
        assert step is not None and advance(status, "j", step, 50) is None


def test_history_is_bounded() -> None:
    steps = [ev("started", a, a) for a in range(10)]
    status = run(steps, history_max=3)
    assert flow(status) == [("Running", 7), ("Running", 8), ("Running", 9)]


def test_records_round_trip() -> None:
    status = run(FAILOVER)
    assert status is not None and JobStatus.from_dict(status.to_dict()) == status


async def test_processor_publishes_only_changes() -> None:
    p = JobStatusProcessor(NAMES, StatusTable(), JobStatusMetrics.create(), deadline_ms=300_000)
    started = {"job_id": "j", "attempt": 0, "type": "started", "ts_ms": 10**12, "nodes": ["n1"]}
    p.begin()
    outputs = [
        *p.handle(rec(NAMES.jobs_events, "j", started)),
        *p.handle(rec(NAMES.jobs_events, "j", started)),
        *p.handle(rec(NAMES.failover_decisions, "j", decision("j"))),
    ]
    await p.committed(acks(outputs))
    assert [value(o)["status"] for o in outputs] == ["Running", "Pending-failoverinprogress"]
    current = p.table.get("j")
    assert current is not None and current.current.status == "Pending-failoverinprogress"


def test_a_relocated_job_that_cannot_pull_its_image_shows_imagepullbackoff_then_runs() -> None:
    pulling = ev("pending", 1, 28, reason="ImagePullBackOff")
    stuck = run([*FAILOVER[:3], pulling])
    assert flow(stuck)[-1] == ("Pending-imagepullbackoff", 1)
    for order in itertools.permutations([*FAILOVER, pulling]):
        assert flow(run(list(order))) == [
            ("Running", 0),
            ("Pending-failoverinprogress", 0),
            ("Pending-imagepullbackoff", 1),
            ("Running", 1),
        ]


def test_a_pending_event_for_another_reason_changes_no_status() -> None:
    assert ev("pending", 1, 28, reason="Unschedulable") is None
