"""The quarantine and job status services across crashes, on the real broker.

- quarantine: a release published while the service is down is actuated when it starts; an old
  decision or request redelivered after the release does not quarantine the node again; a
  failing actuator is retried until it succeeds, also across a restart, and actuates once.
- job status: the decision deadline fires when no classifier runs, not when the decision came
  in time, and fires once per (job, attempt) across restarts.
Services run as `gpufailover` child processes where the test kills them with SIGKILL, and
in-process where it needs its own actuator. Every wait polls a topic, a file or the group's
offsets with a deadline.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from consumers.jobstatus.app import run_job_status
from consumers.jobstatus.config import JobStatusSettings
from consumers.quarantine.actuator import LogActuator
from consumers.quarantine.app import run_quarantine
from consumers.quarantine.breaker import BreakerConfig
from consumers.quarantine.config import QuarantineSettings
from deploy.topics import TopicNames
from gpufailover.backoff import Backoff
from schemas.quarantine import QuarantineRecord
from tests.integration.kafka_io import Service, service
from tests.integration.test_consumers import (
    DEADLINE_S,
    cli,
    common,
    decision,
    for_key,
    job_event,
    now_ms,
    produce,
    quarantined_record,
    read,
    running,
    until,
    wait_consumed,
    wait_for,
)

DRAIN = "scontrol update nodename={} state=drain"
RESUME = "scontrol update nodename={} state=resume"


def kill(proc: Service) -> None:
    """SIGKILL: no clean shutdown, no last commit."""
    assert proc.proc is not None and proc.proc.poll() is None, proc.log_tail()
    proc.proc.kill()
    proc.proc.wait()


def actuated(path: Path) -> list[str]:
    """The log actuator's file: `<wall ms> <action> <command>` per line -> commands."""
    text = path.read_text() if path.exists() else ""
    return [line.split(" ", 2)[2] for line in text.splitlines()]


async def file_until(path: Path, done: Any, proc: Service) -> list[str]:
    try:
        await until(lambda: done(actuated(path)))
    except AssertionError:
        raise AssertionError(f"actuator log {actuated(path)}\n{proc.log_tail()}") from None
    return actuated(path)


# -- quarantine ------------------------------------------------------------------------------
async def test_a_release_published_while_down_is_actuated_and_old_inputs_do_not_requarantine(
    kafka_bootstrap: str, topic_names: TopicNames, tmp_path: Path
) -> None:
    b, n = kafka_bootstrap, topic_names
    log = tmp_path / "actuator.log"
    args = ("--actuator-log", str(log), "--instance-id", "test")
    group = f"{n.prefix}gpufailover-quarantine"
    old_decision = decision("job-1", suspects=("gpu-1",))
    old_request = quarantined_record("gpu-1", old_decision["decided_ts_ms"])

    first = service("quarantine", b, n.prefix, tmp_path, *args).start()
    try:
        await produce(b, [(n.failover_decisions, "job-1", old_decision)])
        await file_until(log, lambda cmds: len(cmds) == 1, first)
        await wait_consumed(b, f"{group}-actuator", n.nodes_quarantine)
    finally:
        kill(first)
    # While it is down: the operator releases the node, and the old decision and an old
    # request for the node are delivered again (e.g. by a classifier that restarted).
    target = ("--bootstrap", b, "--prefix", n.prefix)
    assert await cli("quarantine", "release", "gpu-1", "--reason", "GPU replaced", *target) == 0
    await produce(
        b,
        [
            (n.failover_decisions, "job-1", old_decision),
            (n.quarantine_requests, "gpu-1", old_request),
        ],
    )
    second = service("quarantine", b, n.prefix, tmp_path, *args).start()
    try:
        commands = await file_until(log, lambda cmds: len(cmds) >= 2, second)
        await wait_consumed(b, group, n.failover_decisions)
        await wait_consumed(b, group, n.quarantine_requests)
        await wait_consumed(b, f"{group}-actuator", n.nodes_quarantine)
        # Something new for the node, stamped after the release, does quarantine it.
        fresh = quarantined_record("gpu-1", now_ms() + 60_000)
        await produce(b, [(n.quarantine_requests, "gpu-1", fresh)])
        await file_until(log, lambda cmds: len(cmds) >= 3, second)
    finally:
        second.stop()

    assert commands[0].startswith(DRAIN.format("gpu-1"))
    assert commands[1] == RESUME.format("gpu-1")
    states = [v["state"] for v in for_key(await read(b, n.nodes_quarantine), "gpu-1")]
    assert states == ["quarantined", "released", "quarantined"]
    final = actuated(log)
    assert len(final) == 3 and final[2].startswith(DRAIN.format("gpu-1"))
    assert "ignored: the node was released" in second.log_path.read_text()


class Flaky(LogActuator):
    """Fails its first `failures` calls (a scheduler API that is down), then works."""

    def __init__(self, failures: int) -> None:
        super().__init__("slurm")
        self.failures = failures
        self.calls = 0

    async def apply(self, action: str, record: QuarantineRecord) -> None:
        self.calls += 1
        if self.calls <= self.failures:
            raise OSError(f"slurmctld unreachable (call {self.calls})")
        await super().apply(action, record)


def quarantine_with(
    b: str, n: TopicNames, actuator: LogActuator, registry: CollectorRegistry
) -> Any:
    settings = QuarantineSettings(
        common(b, n, "quarantine"),
        BreakerConfig(),
        actuator_backoff=Backoff(first_ms=100, max_ms=400),
    )
    return lambda stop: run_quarantine(settings, stop, registry=registry, actuator=actuator)


async def test_a_failing_actuator_is_retried_until_it_works_and_across_a_restart(
    kafka_bootstrap: str, topic_names: TopicNames
) -> None:
    b, n = kafka_bootstrap, topic_names
    registry = CollectorRegistry()
    flaky = Flaky(failures=3)
    async with running(quarantine_with(b, n, flaky, registry)):
        await produce(b, [(n.quarantine_requests, "gpu-1", quarantined_record("gpu-1", 10))])
        await until(lambda: flaky.commands != [])
        await wait_consumed(b, f"{n.prefix}quarantine-actuator", n.nodes_quarantine)
    assert flaky.calls == 4 and len(flaky.commands) == 1
    assert flaky.commands[0].startswith(DRAIN.format("gpu-1"))
    errors = registry.get_sample_value(
        "gpufailover_quarantine_actuator_errors_total", {"action": "quarantine"}
    )
    assert errors == 3

    # The scheduler is down when the next quarantine comes, and the service dies meanwhile.
    down = Flaky(failures=10**9)
    stop = asyncio.Event()
    task = asyncio.create_task(quarantine_with(b, n, down, CollectorRegistry())(stop))
    try:
        await produce(b, [(n.quarantine_requests, "gpu-2", quarantined_record("gpu-2", 20))])
        await until(lambda: down.calls >= 2)
    finally:
        task.cancel()  # abrupt: not the stop event
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, DEADLINE_S)
    assert down.commands == []
    # Restarted with a working scheduler: the owed quarantine is carried out, gpu-1 is not
    # actuated again (its offset was committed once it was done).
    works = Flaky(failures=0)
    async with running(quarantine_with(b, n, works, CollectorRegistry())):
        await until(lambda: works.commands != [])
        await wait_consumed(b, f"{n.prefix}quarantine-actuator", n.nodes_quarantine)
    assert len(works.commands) == 1 and works.commands[0].startswith(DRAIN.format("gpu-2"))


# -- job status: the decision deadline -------------------------------------------------------
def job_status_with_deadline(b: str, n: TopicNames, deadline_s: float) -> Any:
    settings = JobStatusSettings(common(b, n, "job-status"), decision_deadline_s=deadline_s)
    return lambda stop: run_job_status(settings, stop)


def overdue(got: list[tuple[str | None, Any]], job: str) -> list[Any]:
    return [v for v in for_key(got, job) if v.get("kind") == "decision_overdue"]


async def test_decision_overdue_fires_with_no_classifier_and_not_when_decided_in_time(
    kafka_bootstrap: str, topic_names: TopicNames, capsys: pytest.CaptureFixture[str]
) -> None:
    b, n = kafka_bootstrap, topic_names
    # No classifier runs in this test: decisions are published by hand, or not at all.
    group = f"{n.prefix}job-status"
    async with running(job_status_with_deadline(b, n, 2.0)):
        # The decision follows once the termination is read (in one batch with it, the wait
        # would never be written, and the test checks that it was written and never overdue).
        await produce(b, [(n.jobs_events, "job-ok", job_event("job-ok", "terminated"))])
        await wait_consumed(b, group, n.jobs_events)
        await produce(b, [(n.failover_decisions, "job-ok", decision("job-ok"))])
        await wait_consumed(b, group, n.failover_decisions)
        # job-late is read after job-ok, so its deadline runs out later: waiting for its
        # alert waits long enough to see any alert for job-ok.
        await produce(b, [(n.jobs_events, "job-late", job_event("job-late", "terminated"))])
        alerts = await wait_for(b, n.failover_alerts, lambda got: bool(overdue(got, "job-late")))
        assert await cli("status", "job-late", "--bootstrap", b, "--prefix", n.prefix) == 0
        shown = capsys.readouterr().out
        # The decision finally comes: the overdue state is cleared.
        await produce(b, [(n.failover_decisions, "job-late", decision("job-late"))])
        statuses = await wait_for(
            b,
            n.jobs_status,
            lambda got: any(not v["awaiting_decision"] for v in for_key(got, "job-late")[1:]),
        )

    [alert] = overdue(alerts, "job-late")
    assert (alert["attempt"], alert["deadline_s"]) == (0, 2.0)
    assert alert["waited_s"] >= 2.0
    assert overdue(alerts, "job-ok") == []
    assert shown.splitlines()[0] == (
        "job job-late: Pending-failoverinprogress (attempt 0)  DECISION OVERDUE"
    )
    assert "attempt 0: decision OVERDUE" in shown
    late = for_key(statuses, "job-late")
    assert late[-1]["awaiting_decision"] == [] and late[-1]["rule"] == "hardware.failover"
    ok_waits = [w for v in for_key(statuses, "job-ok") for w in v["awaiting_decision"]]
    assert ok_waits and all(w["overdue_ms"] is None for w in ok_waits)


async def test_decision_deadline_survives_job_status_restarts_and_fires_once(
    kafka_bootstrap: str, topic_names: TopicNames, tmp_path: Path
) -> None:
    b, n = kafka_bootstrap, topic_names
    args = ("--decision-deadline-s", "3", "--instance-id", "test")
    await produce(b, [(n.jobs_events, "job-1", job_event("job-1", "terminated"))])
    first = service("job-status", b, n.prefix, tmp_path, *args).start()
    try:
        await wait_for(b, n.jobs_status, lambda got: bool(for_key(got, "job-1")))
    finally:
        kill(first)  # read and recorded as awaited, then the service dies before the deadline
    second = service("job-status", b, n.prefix, tmp_path, *args).start()
    try:
        await wait_for(b, n.failover_alerts, lambda got: bool(overdue(got, "job-1")))
    finally:
        kill(second)
    # A third start must not alert again for job-1: a new termination's alert bounds the wait.
    await produce(b, [(n.jobs_events, "job-2", job_event("job-2", "terminated"))])
    with service("job-status", b, n.prefix, tmp_path, *args):
        alerts = await wait_for(b, n.failover_alerts, lambda got: bool(overdue(got, "job-2")))
    assert len(overdue(alerts, "job-1")) == 1 and len(overdue(alerts, "job-2")) == 1
