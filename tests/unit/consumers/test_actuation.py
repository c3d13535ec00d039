"""The actuation stage without a broker: what is owed, retries with back-off, safe offsets."""

from __future__ import annotations

import orjson
import pytest
from prometheus_client import CollectorRegistry

from consumers.quarantine.actuation import ActuationQueue
from consumers.quarantine.actuation_loop import ActuationLoop
from consumers.quarantine.actuator import LogActuator
from consumers.quarantine.metrics import QuarantineMetrics
from consumers.runtime.records import InRecord
from gpufailover.backoff import Backoff
from schemas.quarantine import QuarantineRecord

DRAIN = "scontrol update nodename={} state=drain reason='gpufailover: hardware'"
RESUME = "scontrol update nodename={} state=resume"


def quarantined(node: str, ts: int = 1_000) -> QuarantineRecord:
    return QuarantineRecord(node, "quarantined", "hardware", (), None, ts)


def released(node: str, ts: int = 2_000) -> QuarantineRecord:
    return QuarantineRecord(node, "released", "operator", (), None, ts)


def test_backoff_doubles_up_to_its_cap() -> None:
    b = Backoff(first_ms=100, max_ms=1_000)
    assert [b.delay_ms(n) for n in range(1, 7)] == [100, 200, 400, 800, 1_000, 1_000]
    assert b.delay_ms(10_000) == 1_000
    with pytest.raises(ValueError, match="back-off"):
        Backoff(first_ms=0)
    with pytest.raises(ValueError, match="back-off"):
        Backoff(first_ms=10, max_ms=5)


def test_offsets_commit_only_up_to_the_first_record_not_actuated() -> None:
    q = ActuationQueue(Backoff())
    q.read(0, 10, quarantined("a"))
    q.read(0, 11, quarantined("b"))
    q.read(1, 5, None)  # a tombstone: nothing owed, the offset moves on
    assert q.committable() == {0: 10, 1: 6}
    [a, b] = q.due(0)
    q.succeeded(b)
    assert q.committable() == {0: 10, 1: 6}  # a is still owed
    q.succeeded(a)
    assert q.committable() == {0: 12, 1: 6} and len(q) == 0
    q.read_to(0, 13)  # past a transaction marker
    assert q.committable() == {0: 13, 1: 6}


def test_a_failed_actuation_is_retried_after_its_back_off_and_blocks_its_offset() -> None:
    q = ActuationQueue(Backoff(first_ms=100, max_ms=10_000))
    q.read(0, 3, quarantined("a"))
    [owed] = q.due(0)
    assert q.failed(owed, now_ms=1_000) == 100
    assert q.due(1_099) == [] and q.next_try_ms() == 1_100
    [again] = q.due(1_100)
    assert again is owed
    assert q.failed(owed, now_ms=1_100) == 200
    assert q.committable() == {0: 3}
    q.succeeded(owed)
    assert q.committable() == {0: 4} and q.next_try_ms() is None


def test_a_newer_desired_state_replaces_the_owed_one() -> None:
    q = ActuationQueue(Backoff())
    q.read(0, 1, quarantined("a"))
    q.read(0, 2, released("a"))
    [owed] = q.due(0)
    assert (owed.action, owed.offset) == ("release", 2)
    assert q.committable() == {0: 2}


def test_a_state_already_actuated_is_not_owed_again() -> None:
    q = ActuationQueue(Backoff())
    q.read(0, 1, quarantined("a"))
    [owed] = q.due(0)
    q.succeeded(owed)
    q.read(0, 2, quarantined("a"))  # e.g. a record written twice
    assert q.due(0) == []
    # A failing release, superseded by a quarantine: the node is still drained, nothing to do.
    q.read(0, 3, released("a"))
    [release] = q.due(0)
    q.failed(release, 0)
    q.read(0, 4, quarantined("a"))
    assert len(q) == 0 and q.committable() == {0: 5}


def test_revoked_partitions_are_forgotten() -> None:
    q = ActuationQueue(Backoff())
    q.read(0, 1, quarantined("a"))
    q.read(1, 1, quarantined("b"))
    q.forget([1])
    assert [o.record.node for o in q.due(0)] == ["a"] and q.committable() == {0: 1}


class Flaky(LogActuator):
    """Fails its first `failures` calls, then records commands like the log actuator."""

    def __init__(self, failures: int) -> None:
        super().__init__("slurm")
        self.failures = failures
        self.calls = 0

    async def apply(self, action: str, record: QuarantineRecord) -> None:
        self.calls += 1
        if self.calls <= self.failures:
            raise OSError(f"scontrol: connection refused (call {self.calls})")
        await super().apply(action, record)


def stage(actuator: LogActuator, clock: list[int], dry_run: bool = False) -> ActuationLoop:
    return ActuationLoop(
        "unused:9092",
        "g-actuator",
        "t.nodes.quarantine",
        actuator,
        QuarantineMetrics.create(CollectorRegistry()),
        backoff=Backoff(first_ms=1_000, max_ms=4_000),
        dry_run=dry_run,
        clock=lambda: clock[0],
    )


def read(loop: ActuationLoop, offset: int, record: QuarantineRecord | bytes) -> None:
    raw = record if isinstance(record, bytes) else orjson.dumps(record.to_dict())
    loop._read(InRecord("t.nodes.quarantine", 0, offset, b"k", raw))


async def test_an_actuator_failing_three_times_actuates_exactly_once_after_its_retries() -> None:
    clock = [0]
    actuator = Flaky(failures=3)
    loop = stage(actuator, clock)
    read(loop, 0, quarantined("gpu-1"))
    tries = []
    for now in range(0, 20_000, 250):  # the stage's turns, on a simulated clock
        clock[0] = now
        calls = actuator.calls
        await loop._actuate_due()
        if actuator.calls > calls:
            tries.append(now)
    assert tries == [0, 1_000, 3_000, 7_000]  # back-off 1 s, 2 s, 4 s
    assert actuator.commands == [DRAIN.format("gpu-1")]
    assert loop.queue.committable() == {0: 1}
    errors = loop._metrics.actuator_errors.labels(action="quarantine")._value.get()
    assert errors == 3


async def test_releases_are_actuated_and_counted_and_bad_records_owe_nothing() -> None:
    clock = [0]
    actuator = LogActuator("slurm")
    loop = stage(actuator, clock)
    read(loop, 0, b"{not json")
    read(loop, 1, released("gpu-2"))
    await loop._actuate_due()
    assert actuator.commands == [RESUME.format("gpu-2")]
    assert loop._metrics.releases._value.get() == 1
    assert loop.queue.committable() == {0: 2}


async def test_dry_run_runs_nothing_but_moves_on() -> None:
    actuator = LogActuator("slurm")
    loop = stage(actuator, [0], dry_run=True)
    read(loop, 0, released("gpu-2"))
    await loop._actuate_due()
    assert actuator.commands == [] and loop.queue.committable() == {0: 1}
