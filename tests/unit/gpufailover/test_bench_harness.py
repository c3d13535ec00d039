"""The benchmark harness's pure parts: waiting out retriable broker errors, the CPU clock and
the fleet's input rate (no broker)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time

import pytest
from aiokafka.errors import (
    GroupCoordinatorNotAvailableError,
    NotLeaderForPartitionError,
    UnsupportedVersionError,
)

from gpufailover.bench.fleet import Fleet, FleetNoise
from gpufailover.bench.harness import CpuClock, cpu_s, family, retrying, rss_mb
from schemas.topics import TopicNames


class Flaky:
    """Fails with `errors` in turn, then answers 42."""

    def __init__(self, *errors: Exception) -> None:
        self.errors = list(errors)
        self.calls = 0

    async def __call__(self) -> int:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return 42


async def test_retriable_errors_are_waited_out_and_said() -> None:
    said: list[str] = []
    call = Flaky(GroupCoordinatorNotAvailableError(), NotLeaderForPartitionError())
    assert await retrying("offsets of group g", call, timeout_s=5, log=said.append) == 42
    assert call.calls == 3
    assert len(said) == 2
    assert "offsets of group g" in said[0] and "GroupCoordinatorNotAvailableError" in said[0]
    assert "ready" in said[1]


async def test_a_non_retriable_error_is_raised_at_once() -> None:
    call = Flaky(UnsupportedVersionError())
    with pytest.raises(UnsupportedVersionError):
        await retrying("x", call, timeout_s=5, log=lambda _: None)
    assert call.calls == 1


async def test_a_retriable_error_is_raised_after_the_deadline() -> None:
    call = Flaky(*(GroupCoordinatorNotAvailableError() for _ in range(1000)))
    async with asyncio.timeout(5):
        with pytest.raises(GroupCoordinatorNotAvailableError):
            await retrying("x", call, timeout_s=0.3, log=lambda _: None)
    assert 1 < call.calls < 1000


def test_cpu_seconds_of_this_process_grow_with_work() -> None:
    before = cpu_s(os.getpid())
    sum(i * i for i in range(2_000_000))
    assert cpu_s(os.getpid()) > before


def test_a_process_is_measured_with_its_children() -> None:
    # A shell whose child burns 0.3 CPU s and then sleeps (a worker and its filter process):
    # the shell alone uses next to nothing.
    child = "import time\nt = time.process_time() + 0.3\nwhile time.process_time() < t: pass\n"
    child += "time.sleep(30)"
    proc = subprocess.Popen(["sh", "-c", f'{sys.executable} -c "{child}" & wait'])
    try:
        clock, deadline = CpuClock([proc.pid]), time.monotonic() + 20
        while True:
            clock.sample()
            if clock.samples[-1][1] >= 0.3 - 0.02:  # clock ticks are 10 ms
                break
            assert time.monotonic() < deadline, "the child's CPU time was never counted"
            time.sleep(0.02)  # polling /proc with a deadline, not a fixed wait
        members = family(proc.pid)
        assert members[0] == proc.pid and len(members) == 2
        assert cpu_s(proc.pid) < 0.1  # the time counted was the child's
        assert rss_mb(proc.pid)[0] > 5  # a Python child; the shell alone is ~1 MB
    finally:
        for pid in family(proc.pid):
            os.kill(pid, signal.SIGKILL)
        proc.wait()


def test_the_cpu_clock_interpolates_between_samples() -> None:
    clock = CpuClock([])
    clock.samples = [(10.0, 1.0), (11.0, 3.0), (12.0, 3.5)]
    assert clock.at(10.5) == pytest.approx(2.0)
    assert clock.between(10.5, 11.5) == pytest.approx(1.25)
    assert clock.at(5.0) == 1.0 and clock.at(20.0) == 3.5  # clamped to the sampled span


def test_a_10000_node_fleet_sends_health_heartbeats_and_xids_in_proportion() -> None:
    fleet = Fleet()
    assert fleet.health_rate == pytest.approx(10_000 * 8 / 10.0)  # the agent's --interval 10 s
    assert fleet.heartbeat_rate == pytest.approx(10_000 / 30.0)
    assert 1.5 < fleet.xid_rate < 2.5  # 0.74 XIDs a node-hour (NCSA Delta)
    noise = FleetNoise(TopicNames("p."), fleet)
    n = 100_000
    topics = [t for t, _, _ in noise.records(n)]
    assert topics.count("p.gpu.xid") == pytest.approx(n * fleet.xid_rate / fleet.rate, abs=1)
    assert noise.sent[1] == pytest.approx(n * fleet.heartbeat_rate / fleet.rate, abs=1)
    assert len(set(topics)) == 2
