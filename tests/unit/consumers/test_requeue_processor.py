"""The requeue rule without a broker: exclude_nodes, priority, spec, and exactly one command."""

from __future__ import annotations

import pytest
from consumer_fakes import NAMES, acks, decision, rec, value

from consumers.quarantine.table import QuarantineTable
from consumers.requeue.logic import RequeueProcessor, boosted_priority, exclude_nodes
from consumers.requeue.metrics import RequeueMetrics
from consumers.requeue.state import JobSpecs, Requeued
from consumers.runtime.records import InRecord, Output
from schemas.errors import SchemaError
from schemas.jobs import JobEvent
from schemas.quarantine import QuarantineRecord
from schemas.requeue import RequeueCommand


def make(**kwargs: int) -> RequeueProcessor:
    return RequeueProcessor(
        NAMES, QuarantineTable(), JobSpecs(), Requeued(), RequeueMetrics.create(), **kwargs
    )


async def batch(p: RequeueProcessor, *records: InRecord) -> list[Output]:
    p.begin()
    outputs = [out for r in records for out in p.handle(r)]
    await p.committed(acks(outputs))
    return outputs


def quarantine(p: RequeueProcessor, node: str, state: str = "quarantined", offset: int = 0) -> None:
    reason = "hardware" if state == "quarantined" else "operator"
    p.quarantine.apply(QuarantineRecord(node, state, reason, (), None, 1), 0, offset)


def test_exclude_nodes_is_the_suspects_and_every_quarantined_node() -> None:
    assert exclude_nodes(("n2", "n1"), frozenset({"n1", "n9"})) == ("n1", "n2", "n9")
    assert exclude_nodes((), frozenset()) == ()


@pytest.mark.parametrize(
    ("base", "action", "expected"), [(5, "failover", 105), (None, "failover", 100), (5, "retry", 6)]
)
def test_priority_boost(base: int | None, action: str, expected: int) -> None:
    assert boosted_priority(base, action, failover_boost=100, retry_boost=1) == expected


async def test_a_failover_decision_becomes_one_command() -> None:
    p = make()
    spec = {"image": "trainer:2"}
    p.specs.apply(JobEvent("job-1", 0, "submitted", 1, spec=spec, priority=7))
    p.specs.apply(JobEvent("job-1", 0, "started", 2, nodes=("n1", "n2")))
    quarantine(p, "n9")
    quarantine(p, "n8", "released")
    [out] = await batch(p, rec(NAMES.failover_decisions, "job-1", decision("job-1")))
    assert (out.topic, out.key) == (NAMES.jobs_requeue, b"job-1")
    command = RequeueCommand.from_dict(value(out))
    assert command.exclude_nodes == ("n1", "n9")
    assert (command.attempt, command.next_attempt, command.priority) == (0, 1, 107)
    assert command.spec == spec and command.reason == "hardware.failover"
    assert value(out)["checkpoint"] is None


async def test_a_retry_is_requeued_too_and_other_actions_are_not() -> None:
    p = make()
    retry = decision("job-1", verdict="transient", action="retry", suspects=())
    reject = decision("job-2", verdict="software", action="reject", suspects=())
    give_up = decision("job-3", action="give_up")
    outputs = await batch(
        p,
        rec(NAMES.failover_decisions, "job-1", retry),
        rec(NAMES.failover_decisions, "job-2", reject),
        rec(NAMES.failover_decisions, "job-3", give_up),
    )
    assert [o.key for o in outputs] == [b"job-1"]
    assert value(outputs[0])["exclude_nodes"] == [] and value(outputs[0])["priority"] == 0


async def test_one_command_per_job_attempt_within_and_across_batches() -> None:
    p = make()
    d = decision("job-1")
    first = await batch(p, *(rec(NAMES.failover_decisions, "job-1", d) for _ in range(2)))
    again = await batch(p, rec(NAMES.failover_decisions, "job-1", d))
    later = await batch(p, rec(NAMES.failover_decisions, "job-1", decision("job-1", 1)))
    assert (len(first), again, len(later)) == (1, [], 1)
    # An older attempt redelivered after a newer one was requeued publishes nothing either.
    assert await batch(p, rec(NAMES.failover_decisions, "job-1", d)) == []


async def test_the_done_set_rebuilt_from_jobs_requeue_guards_a_fresh_instance() -> None:
    p = make()
    [out] = await batch(p, rec(NAMES.failover_decisions, "job-1", decision("job-1")))
    fresh = make()
    fresh.requeued.apply_record(rec(NAMES.jobs_requeue, "job-1", value(out)))
    assert await batch(fresh, rec(NAMES.failover_decisions, "job-1", decision("job-1"))) == []


async def test_a_rolled_back_batch_is_decided_again() -> None:
    p = make()
    p.begin()
    assert p.handle(rec(NAMES.failover_decisions, "job-1", decision("job-1")))
    p.rollback()
    assert len(await batch(p, rec(NAMES.failover_decisions, "job-1", decision("job-1")))) == 1


async def test_a_job_never_seen_is_requeued_without_a_spec() -> None:
    p = make()
    [out] = await batch(p, rec(NAMES.failover_decisions, "job-1", decision("job-1")))
    assert value(out)["spec"] is None and value(out)["priority"] == 100


def test_finished_jobs_are_forgotten_and_later_events_keep_the_spec() -> None:
    specs = JobSpecs()
    specs.apply(JobEvent("a", 0, "submitted", 1, spec={"x": 1}, priority=3))
    specs.apply(JobEvent("a", 1, "started", 2, nodes=("n",)))
    info = specs.get("a")
    assert info is not None and (info.spec, info.priority) == ({"x": 1}, 3)
    specs.apply(JobEvent("a", 1, "succeeded", 3))
    assert specs.get("a") is None


def test_malformed_decisions_raise_schema_error() -> None:
    p = make()
    p.begin()
    for payload in (b"[", {"job_id": "x"}, None):
        with pytest.raises(SchemaError):
            p.handle(rec(NAMES.failover_decisions, "x", payload))
