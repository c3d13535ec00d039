"""What the requeue processor shows besides its commands: metrics counted only when the batch
commits, log lines that name the job, the tail catch-up before a batch, and the command's
carried fields."""

from __future__ import annotations

import logging

import pytest
from consumer_fakes import NAMES, acks, decision, rec
from prometheus_client import CollectorRegistry

from consumers.quarantine.table import QuarantineTable
from consumers.requeue.logic import RequeueProcessor, command_for
from consumers.requeue.metrics import RequeueMetrics
from consumers.requeue.state import JobSpecs, Requeued
from consumers.runtime.records import InRecord, Output
from schemas.decisions import Decision
from schemas.errors import SchemaError
from schemas.jobs import JobEvent

LOGGER = "consumers.requeue.logic"


class SyncSpy:
    """The `sync` hook: records each wait it is asked for; optionally times out."""

    def __init__(self, *, times_out: bool = False) -> None:
        self.waits: list[float] = []
        self.times_out = times_out

    async def __call__(self, timeout_s: float) -> None:
        self.waits.append(timeout_s)
        if self.times_out:
            raise TimeoutError


REGISTRIES: dict[int, CollectorRegistry] = {}


def make(sync: SyncSpy | None = None) -> RequeueProcessor:
    registry = CollectorRegistry()
    metrics = RequeueMetrics.create(registry)
    p = RequeueProcessor(NAMES, QuarantineTable(), JobSpecs(), Requeued(), metrics, sync=sync)
    REGISTRIES[id(p)] = registry
    return p


def metric(p: RequeueProcessor, name: str, **labels: str) -> float:
    sample = REGISTRIES[id(p)].get_sample_value(f"gpufailover_requeue_{name}", labels)
    return 0.0 if sample is None else sample


async def batch(p: RequeueProcessor, *records: InRecord) -> list[Output]:
    p.begin()
    outputs = [out for r in records for out in p.handle(r)]
    await p.committed(acks(outputs))
    return outputs


def messages(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    return [(r.levelno, r.getMessage()) for r in caplog.records if r.name == LOGGER]


def test_command_carries_the_checkpoint_and_the_decisions_next_attempt() -> None:
    checkpoint = {"step": 1200, "uri": "s3://ckpt/1200", "ts_ms": 5, "attempt": 1}
    d = Decision.from_dict(decision("job-1", 1) | {"checkpoint": checkpoint, "next_attempt": 7})
    command = command_for(d, JobSpecs(), frozenset(), failover_boost=0, retry_boost=0, now=9)
    assert (command.checkpoint, command.next_attempt, command.ts_ms) == (checkpoint, 7, 9)


def test_command_without_next_attempt_resumes_at_the_following_attempt() -> None:
    d = Decision.from_dict(decision("job-1", 4) | {"next_attempt": None})
    command = command_for(d, JobSpecs(), frozenset(), failover_boost=0, retry_boost=0, now=9)
    assert command.next_attempt == 5


async def test_metrics_count_commands_skips_and_duplicates_once_committed() -> None:
    p = make()
    p.specs.apply(JobEvent("job-1", 0, "submitted", 1, spec={"image": "x"}))
    p.begin()
    p.handle(rec(NAMES.failover_decisions, "job-1", decision("job-1", suspects=("n1", "n2"))))
    p.handle(rec(NAMES.failover_decisions, "job-1", decision("job-1", suspects=("n1", "n2"))))
    p.handle(rec(NAMES.failover_decisions, "job-2", decision("job-2", action="give_up")))
    assert metric(p, "commands_total", reason="hardware.failover") == 0  # not before the commit
    await p.committed([])
    assert metric(p, "commands_total", reason="hardware.failover") == 1
    assert metric(p, "duplicates_total") == 1
    assert metric(p, "skipped_total", action="give_up") == 1
    assert metric(p, "exclude_nodes_count") == 1
    assert metric(p, "exclude_nodes_sum") == 2
    assert metric(p, "spec_missing_total") == 0
    await batch(p, rec(NAMES.failover_decisions, "job-3", decision("job-3")))
    assert metric(p, "spec_missing_total") == 1


async def test_a_rolled_back_batch_counts_nothing() -> None:
    p = make()
    p.begin()
    p.handle(rec(NAMES.failover_decisions, "job-1", decision("job-1")))
    p.rollback()
    await p.committed([])
    assert metric(p, "commands_total", reason="hardware.failover") == 0
    assert metric(p, "spec_missing_total") == 0


async def test_logs_name_the_job_attempt_and_excluded_nodes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    p = make()
    d = decision("job-1", 2, suspects=("n2", "n1"))
    await batch(p, rec(NAMES.failover_decisions, "job-1", d))
    await batch(p, rec(NAMES.failover_decisions, "job-1", d))
    assert messages(caplog) == [
        (logging.WARNING, "requeue of job-1 without a spec: no jobs.events record of it"),
        (logging.INFO, "requeue job-1 attempt 2 -> 3 excluding ['n1', 'n2']"),
        (logging.INFO, "decision for job-1 attempt 2 already requeued: skipped"),
    ]


def test_a_record_from_another_topic_is_refused_naming_the_topic() -> None:
    p = make()
    p.begin()
    with pytest.raises(SchemaError) as err:
        p.handle(rec(NAMES.jobs_events, "job-1", decision("job-1")))
    assert err.value.field == "topic"
    assert err.value.reason == f"not an input of the requeue service: {NAMES.jobs_events!r}"


async def test_prepare_waits_for_the_tails_only_when_a_job_is_unknown() -> None:
    sync = SyncSpy()
    p = make(sync)
    p.specs.apply(JobEvent("known", 0, "submitted", 1))
    await p.prepare([rec(NAMES.failover_decisions, "known", decision("known"))])
    assert sync.waits == []
    await p.prepare(
        [
            rec(NAMES.failover_decisions, "known", decision("known")),
            rec(NAMES.failover_decisions, "new", decision("new")),
        ]
    )
    assert sync.waits == [5.0]


async def test_prepare_goes_on_with_a_warning_when_the_tails_do_not_catch_up(
    caplog: pytest.LogCaptureFixture,
) -> None:
    p = make(SyncSpy(times_out=True))
    await p.prepare([rec(NAMES.failover_decisions, "new", decision("new"))])
    assert messages(caplog) == [(logging.WARNING, "tails not caught up after 5.0 s; going on")]


async def test_without_a_sync_hook_prepare_and_assignment_wait_for_nothing() -> None:
    p = make()
    await p.prepare([rec(NAMES.failover_decisions, "new", decision("new"))])
    await p.on_assigned()


async def test_an_assignment_waits_for_the_tails_to_catch_up() -> None:
    sync = SyncSpy()
    await make(sync).on_assigned()
    assert sync.waits == [60.0]


async def test_a_fresh_processor_commits_an_empty_batch() -> None:
    p = make()
    await p.committed([])
    assert p.requeued.attempts == {}
