"""The job status processor around the flow: its table of latest statuses (newest offset wins),
what a commit or a rollback does to it, its metrics, and what it refuses."""

from __future__ import annotations

import orjson
import pytest
from consumer_fakes import NAMES, decision, rec
from prometheus_client import CollectorRegistry

from consumers.jobstatus.logic import JobStatusProcessor, StatusTable
from consumers.jobstatus.metrics import JobStatusMetrics
from consumers.runtime.loop import Ack
from consumers.runtime.records import InRecord, Output
from schemas.codec import dumps
from schemas.errors import SchemaError
from schemas.jobs import JobEvent
from schemas.status import JobStatus, Step

REGISTRIES: dict[int, CollectorRegistry] = {}


def make(**kwargs: object) -> JobStatusProcessor:
    registry = CollectorRegistry()
    kwargs.setdefault("deadline_ms", 300_000)
    p = JobStatusProcessor(NAMES, StatusTable(), JobStatusMetrics.create(registry), **kwargs)  # type: ignore[arg-type]
    REGISTRIES[id(p)] = registry
    return p


def metric(p: JobStatusProcessor, name: str, **labels: str) -> float:
    sample = REGISTRIES[id(p)].get_sample_value(f"gpufailover_jobstatus_{name}", labels)
    return 0.0 if sample is None else sample


T0 = 1_700_000_000_000  # job events are stamped in epoch ms (schemas.bounds.TS_FLOOR_MS)


def event(job: str, kind: str, attempt: int = 0, ts: int = T0) -> InRecord:
    nodes = ("n1",) if kind in ("started", "terminated") else ()
    return rec(NAMES.jobs_events, job, JobEvent(job, attempt, kind, ts, nodes=nodes).to_dict())


def status(job: str, *statuses: str) -> JobStatus:
    return JobStatus(job, tuple(Step(s, 0, i, "started") for i, s in enumerate(statuses)))


def status_record(s: JobStatus, offset: int, partition: int = 0) -> InRecord:
    return InRecord(NAMES.jobs_status, partition, offset, s.job_id.encode(), dumps(s.to_dict()))


def out_value(out: Output) -> object:
    return orjson.loads(out.value)


def ack(out: Output, offset: int, partition: int = 0) -> Ack:
    return Ack(out, partition, offset)


def test_table_keeps_the_newest_offset_of_a_partition() -> None:
    table = StatusTable()
    new, old = status("job-1", "Running"), status("job-1", "Submitted")
    table.apply_record(status_record(new, 10))
    table.apply_record(status_record(old, 5))
    assert table.get("job-1") == new
    table.apply(old, 0, 11)
    assert table.get("job-1") == old


def test_a_tail_record_older_than_the_services_own_write_does_not_overwrite_it() -> None:
    table = StatusTable()
    own, older = status("job-1", "Running"), status("job-1", "Submitted")
    table.apply(own, 0, 10)  # the service's acknowledged write
    table.apply_record(status_record(older, 5))  # the tail catching up on partition 0
    assert table.get("job-1") == own


def test_a_record_from_another_partition_replaces_the_status() -> None:
    # A job's key moves partition only when the topic is repartitioned: the later read wins.
    table = StatusTable()
    table.apply_record(status_record(status("job-1", "Running"), 10, partition=0))
    table.apply_record(status_record(status("job-1", "Submitted"), 3, partition=1))
    assert table.get("job-1") == status("job-1", "Submitted")
    assert len(table) == 1


async def test_acknowledged_statuses_enter_the_table_at_their_offsets() -> None:
    p = make()
    p.begin()
    [out] = p.handle(event("job-1", "submitted"))
    await p.committed([ack(out, 10)])
    # the tail re-reads an older record of the same partition: the acknowledged one stays
    p.table.apply_record(status_record(status("job-1", "Cancelled"), 4))
    current = p.table.get("job-1")
    assert current is not None and current.current.status == "Submitted"


async def test_a_later_batch_builds_on_the_committed_status() -> None:
    p = make()
    p.begin()
    [out] = p.handle(event("job-1", "submitted"))
    await p.committed([ack(out, 0)])
    p.begin()
    [out] = p.handle(event("job-1", "started", ts=T0 + 2))
    assert [s["status"] for s in JobStatus.from_dict(out_value(out)).to_dict()["history"]] == [
        "Submitted",
        "Running",
    ]
    assert out.key == b"job-1"


async def test_dead_letters_among_the_acks_leave_the_table_alone() -> None:
    p = make()
    p.begin()
    [out] = p.handle(event("job-1", "submitted"))
    dead = Output(NAMES.dlq(NAMES.jobs_events), b"job-2", b"{}")
    await p.committed([ack(dead, 3), ack(out, 7)])
    assert p.table.get("job-2") is None
    assert p.table.get("job-1") is not None


async def test_a_rolled_back_batch_changes_neither_table_nor_metrics() -> None:
    p = make()
    p.begin()
    assert p.handle(event("job-1", "submitted"))
    p.rollback()
    await p.committed([])
    assert p.table.get("job-1") is None
    assert metric(p, "updates_total", status="Submitted") == 0


async def test_metrics_count_updates_by_status_and_unchanged_inputs_by_event() -> None:
    p = make()
    p.begin()
    p.handle(event("job-1", "submitted"))
    p.handle(event("job-1", "submitted"))  # redelivered: no change
    p.handle(rec(NAMES.failover_decisions, "job-1", decision("job-1")))
    p.handle(rec(NAMES.failover_decisions, "job-1", decision("job-1")))
    await p.committed([])
    assert metric(p, "updates_total", status="Submitted") == 1
    assert metric(p, "updates_total", status="Pending-failoverinprogress") == 1
    assert metric(p, "unchanged_total", event="submitted") == 1
    assert metric(p, "unchanged_total", event="decision") == 1


async def test_idle_reports_how_many_jobs_have_a_status() -> None:
    p = make()
    p.table.apply(status("job-1", "Running"), 0, 1)
    p.table.apply(status("job-2", "Running"), 0, 2)
    await p.idle()
    assert metric(p, "jobs") == 2


async def test_history_is_bounded_at_fifty_steps_by_default() -> None:
    p = make()
    p.begin()
    outputs = [
        out
        for attempt in range(30)
        for kind in ("started", "succeeded")
        for out in p.handle(event("job-1", kind, attempt=attempt, ts=T0 + attempt * 10))
    ]
    assert len(JobStatus.from_dict(out_value(outputs[-1])).history) == 50


async def test_an_assignment_waits_for_the_status_tail() -> None:
    calls: list[str] = []

    async def sync() -> None:
        calls.append("sync")

    await make(sync=sync).on_assigned()
    await make().on_assigned()  # no tail to wait for
    assert calls == ["sync"]


def test_a_record_from_another_topic_is_refused_naming_the_topic() -> None:
    p = make()
    p.begin()
    with pytest.raises(SchemaError) as err:
        p.handle(rec(NAMES.jobs_requeue, "job-1", {"job_id": "job-1"}))
    assert err.value.field == "topic"
    assert err.value.reason == (f"not an input of the job status service: {NAMES.jobs_requeue!r}")


async def test_a_fresh_processor_commits_an_empty_batch() -> None:
    p = make()
    await p.committed([])
    assert len(p.table) == 0
