"""What the consumers persist on their topics, and rebuild from them when they start, survives the
trip: records decode to what was written, and the tables rebuilt by reading a topic from its
beginning hold the latest record per key."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from consumers.jobstatus.logic import StatusTable
from consumers.quarantine.alerts import (
    breaker_alert,
    breaker_state_from_alert,
)
from consumers.quarantine.breaker import CAUSE_MAX_NODES, CAUSE_SHARE, BreakerConfig, BreakerState
from consumers.quarantine.table import QuarantineTable
from consumers.requeue.state import JobSpecs, Requeued
from consumers.runtime.records import InRecord
from schemas.audit import ResetCommand
from schemas.codec import dumps
from schemas.jobs import JobEvent
from schemas.quarantine import REASONS, RESULTS, STATES, TRIGGERS, QuarantineRecord, Validation
from schemas.requeue import RequeueCommand
from schemas.status import EVENTS, Awaiting, JobStatus, Step
from tests.roundtrip import RoundTrip, assert_round_trip, canonical, named_text, records

steps = records(Step, event=st.sampled_from(sorted(EVENTS)))
statuses = records(JobStatus, history=st.lists(steps, min_size=1, max_size=4).map(tuple))
breaker_states = records(
    BreakerState, cause=st.none() | st.sampled_from([CAUSE_MAX_NODES, CAUSE_SHARE])
)
BREAKER_CONFIG = BreakerConfig()


def _breaker_alert(state: BreakerState) -> dict[str, Any]:
    return breaker_alert(
        state, BREAKER_CONFIG, group="gpufailover-quarantine", dry_run=False, ts_ms=1
    )


# type -> how it is persisted (see test_every_persisted_type_has_a_case in tests/unit/schemas).
ROUNDTRIP_CASES: dict[type[Any], RoundTrip] = {
    RequeueCommand: RoundTrip(
        records(RequeueCommand), RequeueCommand.to_dict, RequeueCommand.from_dict
    ),
    Step: RoundTrip(steps, Step.to_dict, Step.from_dict),
    Awaiting: RoundTrip(records(Awaiting), Awaiting.to_dict, Awaiting.from_dict),
    JobStatus: RoundTrip(statuses, JobStatus.to_dict, JobStatus.from_dict),
    ResetCommand: RoundTrip(records(ResetCommand), ResetCommand.to_dict, ResetCommand.from_dict),
    # the quarantine service's breaker, rebuilt from its last `breaker` alert on failover.alerts
    BreakerState: RoundTrip(breaker_states, _breaker_alert, breaker_state_from_alert),
}


@pytest.mark.parametrize("cls", list(ROUNDTRIP_CASES), ids=lambda c: c.__name__)
@given(data=st.data())
def test_consumer_record_round_trips(cls: type[Any], data: st.DataObject) -> None:
    case = ROUNDTRIP_CASES[cls]
    assert_round_trip(case, data.draw(case.strategy, label=cls.__name__))


def _on_topic(values: list[tuple[str, Any]], topic: str) -> list[InRecord]:
    """(key, record) pairs as consumed from one partition of `topic`, offsets in order."""
    return [
        InRecord(topic, 0, offset, key.encode(), dumps(value.to_dict()))
        for offset, (key, value) in enumerate(values)
    ]


quarantine_records = records(
    QuarantineRecord,
    node=st.sampled_from(["node-a", "node-b", "node-c"]),
    state=st.sampled_from(sorted(STATES)),
    reason=st.sampled_from(sorted(REASONS)),
    validation=st.none()
    | records(
        Validation,
        trigger=st.sampled_from(sorted(TRIGGERS)),
        result=st.none() | st.sampled_from(sorted(RESULTS)),
    ),
)


@given(st.lists(quarantine_records, max_size=8))
def test_quarantine_table_rebuilt_from_topic_holds_latest_record_per_node(
    written: list[QuarantineRecord],
) -> None:
    table = QuarantineTable()
    for rec in _on_topic([(r.node, r) for r in written], "nodes.quarantine"):
        table.apply_record(rec)
    latest = {r.node: canonical(r) for r in written}
    assert {node: table.get(node) for node in table.nodes()} == latest
    # validating nodes are still out of service
    assert table.quarantined() == {n for n, r in latest.items() if r.state != "released"}


@given(st.lists(records(RequeueCommand, job_id=st.sampled_from(["job-a", "job-b"])), max_size=8))
def test_requeued_rebuilt_from_topic_remembers_highest_attempt_per_job(
    written: list[RequeueCommand],
) -> None:
    requeued = Requeued()
    for rec in _on_topic([(c.job_id, c) for c in written], "jobs.requeue"):
        requeued.apply_record(rec)
    highest: dict[str, int] = {}
    for c in written:
        highest[c.job_id] = max(c.attempt, highest.get(c.job_id, -1))
    assert requeued.attempts == highest
    assert all(requeued.done(c.job_id, c.attempt) for c in written)


@given(
    records(
        JobEvent,
        job_id=named_text("job"),
        type=st.sampled_from(["submitted", "started"]),
        training_type=st.just("on_demand"),
    )
)
def test_job_specs_rebuilt_from_topic_keep_spec_and_priority(event: JobEvent) -> None:
    specs = JobSpecs()
    for rec in _on_topic([(event.job_id, event)], "jobs.events"):
        specs.apply_record(rec)
    info = specs.get(event.job_id)
    assert info is not None
    assert (info.spec, info.priority) == (event.spec, event.priority)


@given(st.lists(statuses.map(lambda s: JobStatus("job-a", s.history)), min_size=1, max_size=5))
def test_status_table_rebuilt_from_topic_holds_latest_status(written: list[JobStatus]) -> None:
    table = StatusTable()
    for rec in _on_topic([(s.job_id, s) for s in written], "jobs.status"):
        table.apply_record(rec)
    assert table.get("job-a") == written[-1]
