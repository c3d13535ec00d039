"""The Slurm requeue stage's handling of one record, with a stand-in scheduler (no broker, no
Slurm): what it calls for which record, retries, and what it gives up on."""

from __future__ import annotations

import asyncio

import orjson

from consumers.quarantine.actuator_scontrol import SlurmCommandError
from consumers.requeue.records import RequeueCommand
from consumers.requeue.slurm import NotActionable, Outcome, SlurmScheduler
from consumers.requeue.slurm_stage import SlurmStage, SlurmStageMetrics
from consumers.runtime.records import InRecord
from deploy.topics import TopicNames
from gpufailover.backoff import Backoff
from schemas.decisions import Decision

NAMES = TopicNames("")


class FakeScheduler(SlurmScheduler):
    def __init__(self, failures: int = 0, gone: bool = False) -> None:
        super().__init__()
        self.failures, self.gone = failures, gone
        self.calls: list[tuple[str, str]] = []

    async def requeue(self, cmd: RequeueCommand) -> Outcome:
        self.calls.append(("requeue", cmd.job_id))
        if self.gone:
            raise NotActionable("slurmctld no longer knows job 7")
        if self.failures:
            self.failures -= 1
            raise SlurmCommandError(["scontrol"], 1, "Unable to contact slurm controller")
        return Outcome("requeued", 1)

    async def leave_ended(self, d: Decision) -> Outcome:
        self.calls.append(("leave_ended", d.job_id))
        return Outcome("ended", 0)


def stage(scheduler: FakeScheduler) -> SlurmStage:
    backoff = Backoff(first_ms=1, max_ms=2)
    return SlurmStage(
        "unused:9092", "g-slurm", NAMES, scheduler, SlurmStageMetrics.create(), backoff
    )


def command_record() -> InRecord:
    cmd = RequeueCommand("7", 0, 1, None, ("gpu-2",), 100, "hardware.failover", "hardware",
                         "failover", 1, 1)  # fmt: skip
    return InRecord(NAMES.jobs_requeue, 0, 5, b"7", orjson.dumps(cmd.to_dict()))


def decision_record(action: str) -> InRecord:
    value = {
        "schema_version": 1, "job_id": "8", "attempt": 0, "verdict": "software", "action": action,
        "status": "Pending-internalerror", "suspect_nodes": [], "next_attempt": None,
        "evidence": [], "rule": f"software.{action}", "terminated_ts_ms": 1, "decided_ts_ms": 2,
    }  # fmt: skip
    return InRecord(NAMES.failover_decisions, 0, 9, b"8", orjson.dumps(value))


def count(metric: object) -> float:
    return float(metric._value.get())  # type: ignore[attr-defined]


async def test_a_command_is_retried_until_slurm_answers_then_counted_once() -> None:
    sched = FakeScheduler(failures=2)
    s = stage(sched)
    assert await s._until_done(command_record(), asyncio.Event())
    assert sched.calls == [("requeue", "7")] * 3
    assert count(s.metrics.errors) == 2
    assert count(s.metrics.actions.labels(outcome="requeued")) == 1


async def test_a_job_slurm_cannot_act_on_is_counted_and_not_retried() -> None:
    sched = FakeScheduler(gone=True)
    s = stage(sched)
    assert await s._until_done(command_record(), asyncio.Event())
    assert sched.calls == [("requeue", "7")] and count(s.metrics.not_actionable) == 1


async def test_rejects_leave_the_job_ended_and_failovers_wait_for_their_command() -> None:
    sched = FakeScheduler()
    s = stage(sched)
    assert (await s.handle(decision_record("reject"))) == Outcome("ended", 0)
    assert (await s.handle(decision_record("failover"))) is None
    assert sched.calls == [("leave_ended", "8")]


async def test_an_unreadable_record_is_counted_and_skipped() -> None:
    s = stage(FakeScheduler())
    bad = InRecord(NAMES.jobs_requeue, 0, 1, b"7", b"{not json")
    assert await s.handle(bad) is None
    assert count(s.metrics.unreadable) == 1


async def test_stopping_while_retrying_leaves_the_record_uncommitted() -> None:
    stop = asyncio.Event()
    stop.set()
    assert not await stage(FakeScheduler(failures=5))._until_done(command_record(), stop)
