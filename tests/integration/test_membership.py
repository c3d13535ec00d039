"""Decisions do not depend on how many classifier workers run or when one dies.

A seeded incident mix (tests/integration/incident_mix.py) is published in parts while workers
join, leave or are killed; every decision must equal `gpufailover replay`'s for the same records
(verdict, action, suspects, next attempt, rule, decision time), none may be missing or decided
twice differently, and each malformed record gets exactly one dead letter (by its coordinates).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from deploy.broker import running_broker
from deploy.topics import create_topics
from schemas.topics import TopicNames
from streams.policy import load_policy
from tests.integration.incident_mix import Mix, compared, end_marker, incident_mix
from tests.integration.kafka_io import Rec, Service, classifier, produce, wait_for

PARTITIONS = 4
BAD = [  # malformed records: each must be dead-lettered once, by its coordinates
    ("gpu.xid", "bad-node", {"node": "bad-node", "xid": "seventy-nine"}),
    ("jobs.events", "bad-job", {"job_id": "bad-job", "attempt": -1, "type": "terminated"}),
]


async def _topics(bootstrap: str, label: str) -> TopicNames:
    prefix = f"t-{label}-{uuid.uuid4().hex[:8]}."
    await create_topics(bootstrap, partitions=PARTITIONS, prefix=prefix)
    return TopicNames(prefix)


def _mix(seed: int) -> Mix:
    start = time.time_ns() // 1_000_000 - 3_600_000  # an hour ago: nothing idles forward
    return incident_mix(seed, jobs=24, start_ts=start, policy=load_policy())


def _worker(bootstrap: str, n: TopicNames, tmp: Path) -> Service:
    # A long idle threshold: windows close on event time only, exactly as in replay.
    worker = classifier(bootstrap, n.prefix, PARTITIONS, tmp, idle_after_s=600)
    # A worker stuck in faust's table recovery after a rebalance (faust #176/#597: seen here
    # under CI load) stops itself after this long, to be started again by its supervisor.
    worker.args += ["--rebalance-timeout", "45"]
    return worker


class _Supervisor:
    """Starts a worker again when it exits on its own (its watchdog's stop), as `gpufailover run`
    or a Kubernetes Deployment would; a stop through the supervisor is final."""

    def __init__(self) -> None:
        self.workers: list[Service] = []
        self.restarts = 0
        self._task = asyncio.create_task(self._watch())

    def start(self, worker: Service) -> Service:
        self.workers.append(worker.start())
        return worker

    def stop(self, worker: Service) -> None:
        if worker in self.workers:
            self.workers.remove(worker)
        worker.stop()

    async def close(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        for worker in list(self.workers):
            self.stop(worker)

    async def _watch(self) -> None:
        while True:
            for worker in self.workers:
                if worker.proc is not None and worker.proc.poll() is not None:
                    self.restarts += 1
                    worker.start()
            await asyncio.sleep(0.5)  # polling child processes for an exit, not a fixed wait


async def _end_of_input(bootstrap: str, n: TopicNames, mix: Mix) -> None:
    for partition in range(PARTITIONS):
        marker = [(n.gpu_health, None, end_marker(mix.end_ts))]
        await produce(bootstrap, marker, partition=partition)


async def _decisions(
    bootstrap: str, n: TopicNames, at_least: int, worker: Service, timeout_s: float = 240
) -> list[Rec]:
    try:
        return await wait_for(
            bootstrap,
            [n.failover_decisions],
            lambda rs: len({(r.key, r.value["attempt"]) for r in rs}) >= at_least,
            timeout_s=timeout_s,
        )
    except AssertionError as exc:
        raise AssertionError(f"{exc}\nworker log:\n{worker.log_tail()}") from None


async def _check(bootstrap: str, n: TopicNames, mix: Mix) -> None:
    expected = {k: compared(v) for k, v in mix.expected.items()}
    recs = await wait_for(
        bootstrap,
        [n.failover_decisions, n.quarantine_requests, n.dlq(n.gpu_xid), n.dlq(n.jobs_events)],
        lambda rs: (
            {(r.key, r.value["attempt"]) for r in rs if r.topic == n.failover_decisions}
            >= expected.keys()
        ),
        timeout_s=240,
        settle_s=3.0,
    )
    got: dict[tuple[str, int], set[Any]] = {}
    for r in recs:
        if r.topic == n.failover_decisions:
            got.setdefault((r.key or "", r.value["attempt"]), set()).add(compared(r.value))
    twice = {k: v for k, v in got.items() if len(v) > 1}
    assert twice == {}, f"decided differently more than once: {twice}"
    different = {k: (got[k], v) for k, v in expected.items() if got.get(k) != {v}}
    assert different == {}, f"(got, replay) where they differ: {different}"
    assert got.keys() == expected.keys()
    quarantined = {r.key for r in recs if r.topic == n.quarantine_requests}
    assert quarantined == mix.expected_quarantined
    dead = {
        (r.value["topic"], r.value["partition"], r.value["offset"])
        for r in recs
        if r.topic in (n.dlq(n.gpu_xid), n.dlq(n.jobs_events))
    }
    assert len(dead) == len(BAD), dead


@pytest.mark.timeout(600)
async def test_a_worker_joining_and_one_leaving_mid_stream_decides_like_replay(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    n, mix = await _topics(kafka_bootstrap, "join-leave"), _mix(seed=7)
    records = mix.published(n)
    third = len(records) // 3
    bad = [(n.name(topic), key, value) for topic, key, value in BAD]
    workers = _Supervisor()
    first = workers.start(_worker(kafka_bootstrap, n, tmp_path))
    try:
        await produce(kafka_bootstrap, records[:third] + bad[:1])
        await _decisions(kafka_bootstrap, n, 3, first)
        second = workers.start(_worker(kafka_bootstrap, n, tmp_path))  # joins mid-stream
        await produce(kafka_bootstrap, records[third : 2 * third] + bad[1:])
        await second.wait_for_log("Worker ready", timeout_s=120)
        workers.stop(first)  # leaves mid-stream
        await produce(kafka_bootstrap, records[2 * third :])
        await _end_of_input(kafka_bootstrap, n, mix)
        await _check(kafka_bootstrap, n, mix)
    finally:
        await workers.close()


@pytest.mark.timeout(600)
async def test_a_worker_killed_between_halves_decides_like_replay_after_restart(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    n, mix = await _topics(kafka_bootstrap, "kill-halves"), _mix(seed=11)
    records = mix.published(n)
    half = len(records) // 2
    bad = [(n.name(topic), key, value) for topic, key, value in BAD]
    worker = _worker(kafka_bootstrap, n, tmp_path).start()
    try:
        await produce(kafka_bootstrap, records[:half] + bad)
        await _decisions(kafka_bootstrap, n, 3, worker)
        assert worker.proc is not None
        worker.proc.kill()  # SIGKILL: no clean shutdown, no last commit
        worker.proc.wait()
        await produce(kafka_bootstrap, records[half:])  # published while it is down
        await _end_of_input(kafka_bootstrap, n, mix)
        restarted = _Supervisor()  # restarts it again if it stalls in recovery (see _worker)
        try:
            restarted.start(_worker(kafka_bootstrap, n, tmp_path))
            await _check(kafka_bootstrap, n, mix)
        finally:
            await restarted.close()
    finally:
        worker.stop()


@pytest.mark.timeout(600)
async def test_the_broker_restarted_mid_stream_decides_like_replay(tmp_path: Path) -> None:
    # Its own broker: the session's is shared by the other tests.
    with running_broker() as broker:
        bootstrap = broker.bootstrap
        n, mix = await _topics(bootstrap, "broker-restart"), _mix(seed=13)
        records = mix.published(n)
        half = len(records) // 2
        bad = [(n.name(topic), key, value) for topic, key, value in BAD]
        with _worker(bootstrap, n, tmp_path) as worker:
            await produce(bootstrap, records[:half] + bad)
            await _decisions(bootstrap, n, 3, worker)
            await asyncio.to_thread(broker.restart, hard=True)  # SIGKILL, same address
            await produce(bootstrap, records[half:])
            await _end_of_input(bootstrap, n, mix)
            await _check(bootstrap, n, mix)
