"""The quarantine, requeue and job status services on the real broker.

Services run in-process as tasks (their `run_*` coroutines); the operator commands run through
the real CLI in a thread. Every wait polls a topic or the group's committed offsets with a
deadline; nothing sleeps to wait.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import orjson
import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from prometheus_client import CollectorRegistry

from consumers.jobstatus.app import run_job_status
from consumers.jobstatus.config import JobStatusSettings
from consumers.quarantine.actuator import LogActuator
from consumers.quarantine.app import run_quarantine
from consumers.quarantine.breaker import BreakerConfig
from consumers.quarantine.config import QuarantineSettings
from consumers.requeue.app import run_requeue
from consumers.requeue.config import RequeueSettings
from consumers.runtime.config import CommonSettings
from consumers.runtime.oneshot import partitions_of, read_to_end
from consumers.runtime.records import dead_letter_topic
from deploy.topics import TopicNames
from gpufailover.cli import main as cli_main
from gpufailover.errors import EXIT_WRONG_STATE
from gpufailover.kafka import make_consumer
from schemas.bounds import TS_FLOOR_MS
from schemas.dead_letter import DeadLetter
from schemas.decisions import Decision, Evidence

DEADLINE_S = 30.0
Got = list[tuple[str | None, Any]]


# -- helpers ---------------------------------------------------------------------------------
def now_ms() -> int:
    return time.time_ns() // 1_000_000


def common(bootstrap: str, names: TopicNames, service: str, group: str = "") -> CommonSettings:
    return CommonSettings(
        bootstrap=bootstrap,
        prefix=names.prefix,
        group_id=f"{names.prefix}{group or service}",
        instance_id="test",
        metrics_port=0,
    )


@asynccontextmanager
async def running(coro_fn: Callable[[asyncio.Event], Awaitable[None]]) -> AsyncIterator[None]:
    """Run a service task; on exit stop it cleanly and surface any error it died with."""
    stop = asyncio.Event()
    task = asyncio.create_task(coro_fn(stop))
    try:
        yield
        assert not task.done(), f"service died: {task.exception()!r}"
    finally:
        stop.set()
        await asyncio.wait_for(task, DEADLINE_S)


def quarantine(
    bootstrap: str,
    names: TopicNames,
    actuator: LogActuator,
    breaker: BreakerConfig | None = None,
    registry: CollectorRegistry | None = None,
    dry_run: bool = False,
) -> Callable[[asyncio.Event], Awaitable[None]]:
    settings = QuarantineSettings(
        common(bootstrap, names, "quarantine"), breaker or BreakerConfig(), dry_run=dry_run
    )
    return lambda stop: run_quarantine(settings, stop, registry=registry, actuator=actuator)


def requeue(
    bootstrap: str, names: TopicNames, group: str = ""
) -> Callable[[asyncio.Event], Awaitable[None]]:
    settings = RequeueSettings(common(bootstrap, names, "requeue", group))
    return lambda stop: run_requeue(settings, stop)


def job_status(bootstrap: str, names: TopicNames) -> Callable[[asyncio.Event], Awaitable[None]]:
    settings = JobStatusSettings(common(bootstrap, names, "job-status"))
    return lambda stop: run_job_status(settings, stop)


async def produce(bootstrap: str, records: list[tuple[str, str | None, Any]]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True)
    await producer.start()
    try:
        for topic, key, value in records:
            raw = value if isinstance(value, bytes) else orjson.dumps(value)
            await producer.send_and_wait(topic, raw, key=None if key is None else key.encode())
    finally:
        await producer.stop()


async def read(bootstrap: str, topic: str) -> Got:
    return [
        (r.key_str(), None if r.value is None else orjson.loads(r.value))
        for r in await read_to_end(bootstrap, topic)
    ]


async def wait_for(bootstrap: str, topic: str, done: Callable[[Got], bool]) -> Got:
    """Poll `topic` (read_committed, from the start) until `done(records)`, or fail."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        got = await read(bootstrap, topic)
        if done(got):
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting on {topic}; saw {got}")
        await asyncio.sleep(0.2)  # poll interval, not a wait for an event


async def wait_consumed(bootstrap: str, group: str, topic: str) -> None:
    """Until `group` has committed offsets up to the end of `topic` as it is now."""
    from aiokafka import TopicPartition

    tps = [TopicPartition(topic, p) for p in (await partitions_of(bootstrap, [topic]))[topic]]
    consumer = make_consumer(bootstrap, None)
    await consumer.start()
    try:
        ends = await consumer.end_offsets(tps)
    finally:
        await consumer.stop()
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        deadline = time.monotonic() + DEADLINE_S
        while True:
            committed = await admin.list_consumer_group_offsets(group, partitions=tps)
            behind = {
                tp: end
                for tp, end in ends.items()
                if end and (tp not in committed or committed[tp].offset < end)
            }
            if not behind:
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"{group} did not consume {topic}: {behind} {committed}")
            await asyncio.sleep(0.2)
    finally:
        await admin.close()


async def cli(*argv: str) -> int:
    return await asyncio.to_thread(cli_main, list(argv))


T0 = 1_700_000_000_000  # 2023-11-14, epoch ms: what decisions and requests are stamped from


def decision(
    job: str,
    attempt: int = 0,
    *,
    verdict: str = "hardware",
    suspects: tuple[str, ...] = ("node-a",),
    ts: int = T0 + 1_000_000,
) -> dict[str, Any]:
    action, status, rule = {
        "hardware": ("failover", "Pending-failoverinprogress", "hardware.failover"),
        "software": ("reject", "Pending-internalerror", "software.reject"),
    }[verdict]
    evidence = tuple(Evidence(n, 0, "xid", 79, ts - 10, "hardware") for n in suspects)
    if verdict == "software":
        evidence = (Evidence(None, None, "reason", "oom_killed", ts, "software"),)
        suspects = ()
    return Decision(
        job_id=job,
        attempt=attempt,
        verdict=verdict,
        action=action,
        status=status,
        suspect_nodes=suspects,
        next_attempt=attempt + 1 if action == "failover" else None,
        evidence=evidence,
        rule=rule,
        terminated_ts_ms=ts - 5,
        decided_ts_ms=ts,
    ).to_dict()


def job_event(job: str, kind: str, attempt: int = 0, **extra: Any) -> dict[str, Any]:
    nodes = {"nodes": ["node-a", "node-b"]} if kind in ("started", "terminated") else {}
    return {"job_id": job, "attempt": attempt, "type": kind, "ts_ms": now_ms(), **nodes, **extra}


def quarantined_record(node: str, ts: int, reason: str = "hardware") -> dict[str, Any]:
    """`ts` below the event-time floor is an offset from T0 (the service refuses times of
    zero or in seconds: schemas.event_time)."""
    if ts < TS_FLOOR_MS:
        ts += T0
    return {
        "schema_version": 1,
        "node": node,
        "state": "quarantined",
        "reason": reason,
        "evidence": [],
        "job_id": None,
        "ts_ms": ts,
    }


async def until(predicate: Callable[[], bool]) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.1)


def for_key(got: Got, key: str) -> list[Any]:
    return [v for k, v in got if k == key]


# -- tests -----------------------------------------------------------------------------------
async def test_hardware_decision_quarantines_the_suspect_and_requeues_away_from_it(
    kafka_bootstrap: str, topic_names: TopicNames
) -> None:
    b, n = kafka_bootstrap, topic_names
    spec = {"image": "trainer:1", "gpus": 16}
    await produce(
        b,
        [
            (n.nodes_quarantine, "node-z", quarantined_record("node-z", 5)),
            (n.jobs_events, "job-1", job_event("job-1", "submitted", spec=spec, priority=5)),
            (n.jobs_events, "job-1", job_event("job-1", "started")),
        ],
    )
    actuator = LogActuator("slurm")
    async with running(quarantine(b, n, actuator)), running(requeue(b, n)):
        await produce(b, [(n.failover_decisions, "job-1", decision("job-1"))])
        requeued = await wait_for(b, n.jobs_requeue, lambda got: len(got) >= 1)
        table = await wait_for(b, n.nodes_quarantine, lambda got: len(got) >= 2)
        await until(lambda: len(actuator.commands) >= 2)

    assert sorted(k or "" for k, _ in table) == ["node-a", "node-z"]  # the suspect only, once
    [record] = for_key(table, "node-a")
    assert record["state"] == "quarantined" and record["job_id"] == "job-1"
    # Everything on nodes.quarantine is desired state: node-z's record is carried out too.
    assert sorted(actuator.commands) == [
        "scontrol update nodename=node-a state=drain reason='gpufailover: hardware job job-1'",
        "scontrol update nodename=node-z state=drain reason='gpufailover: hardware'",
    ]
    [(key, command)] = requeued
    assert key == "job-1"
    assert command["next_attempt"] == 1 and command["attempt"] == 0
    assert command["exclude_nodes"] == ["node-a", "node-z"]  # suspect + already quarantined
    assert command["spec"] == spec and command["priority"] == 105
    assert command["reason"] == "hardware.failover" and command["checkpoint"] is None


async def test_software_decision_neither_quarantines_nor_requeues(
    kafka_bootstrap: str, topic_names: TopicNames
) -> None:
    b, n = kafka_bootstrap, topic_names
    actuator = LogActuator()
    async with running(quarantine(b, n, actuator)), running(requeue(b, n)):
        await produce(
            b, [(n.failover_decisions, "job-oom", decision("job-oom", verdict="software"))]
        )
        await wait_consumed(b, f"{n.prefix}quarantine", n.failover_decisions)
        await wait_consumed(b, f"{n.prefix}requeue", n.failover_decisions)
    assert await read(b, n.jobs_requeue) == []
    assert await read(b, n.nodes_quarantine) == []
    assert actuator.commands == []


async def test_redelivered_decisions_quarantine_and_requeue_once(
    kafka_bootstrap: str, topic_names: TopicNames
) -> None:
    b, n = kafka_bootstrap, topic_names
    actuator = LogActuator()
    twice = [(n.failover_decisions, "job-1", decision("job-1"))] * 2
    async with running(quarantine(b, n, actuator)), running(requeue(b, n)):
        await produce(b, twice)
        await wait_consumed(b, f"{n.prefix}quarantine", n.failover_decisions)
        await wait_consumed(b, f"{n.prefix}requeue", n.failover_decisions)
    # Stopped mid-stream: more decisions arrive, one of them a third copy, then a restart.
    await produce(
        b,
        [
            (n.failover_decisions, "job-1", decision("job-1")),
            (n.failover_decisions, "job-2", decision("job-2", suspects=("node-b",))),
        ],
    )
    async with running(quarantine(b, n, actuator)), running(requeue(b, n)):
        await wait_for(b, n.jobs_requeue, lambda got: bool(for_key(got, "job-2")))
        await until(lambda: len(actuator.commands) >= 2)
    # A new consumer group re-reads every decision from the start: a full redelivery.
    async with running(requeue(b, n, group="requeue-again")):
        await wait_consumed(b, f"{n.prefix}requeue-again", n.failover_decisions)

    requeued = await read(b, n.jobs_requeue)
    assert sorted(k or "" for k, _ in requeued) == ["job-1", "job-2"]
    table = await read(b, n.nodes_quarantine)
    assert sorted(k or "" for k, _ in table) == ["node-a", "node-b"]
    assert len(actuator.commands) == 2


async def test_breaker_trips_on_a_wave_and_resets_by_command(
    kafka_bootstrap: str, topic_names: TopicNames
) -> None:
    b, n = kafka_bootstrap, topic_names
    registry = CollectorRegistry()
    cfg = BreakerConfig(window_ms=600_000, max_share=0.2, max_nodes=50, fleet_size=10)
    wave = [
        (n.quarantine_requests, f"gpu-{i}", quarantined_record(f"gpu-{i}", 1_000_000 + i))
        for i in range(5)
    ]
    gauge = "gpufailover_quarantine_breaker_tripped"
    async with running(quarantine(b, n, LogActuator(), cfg, registry)):
        await produce(b, wave)
        alerts = await wait_for(b, n.failover_alerts, lambda got: len(for_key(got, "breaker")) >= 1)
        await wait_consumed(b, f"{n.prefix}quarantine", n.quarantine_requests)
        await until(lambda: registry.get_sample_value(gauge) == 1)
        reset = ("quarantine", "reset-breaker", "--reason", "wave understood")
        assert await cli(*reset, "--bootstrap", b, "--prefix", n.prefix) == 0
        alerts = await wait_for(b, n.failover_alerts, lambda got: len(for_key(got, "breaker")) >= 2)
        later = [(n.quarantine_requests, "gpu-9", quarantined_record("gpu-9", 1_000_100))]
        await produce(b, later)
        table = await wait_for(b, n.nodes_quarantine, lambda got: bool(for_key(got, "gpu-9")))
        await until(lambda: registry.get_sample_value(gauge) == 0)

    tripped, closed = for_key(alerts, "breaker")
    assert tripped["state"] == "tripped" and tripped["cause"] == "share"
    assert tripped["in_window"] == 3 and tripped["fleet"] == 10
    assert closed["state"] == "closed"
    refused = [v for _, v in alerts if v["kind"] == "quarantine-refused"]
    assert len(refused) == 3  # the one that tripped it and the two after
    assert len(table) == 3  # two before the trip, one after the reset


async def test_malformed_records_are_dead_lettered_and_good_ones_still_processed(
    kafka_bootstrap: str, topic_names: TopicNames
) -> None:
    b, n = kafka_bootstrap, topic_names
    bad_decision = decision("job-bad") | {"verdict": "cosmic-rays"}
    async with (
        running(quarantine(b, n, LogActuator())),
        running(requeue(b, n)),
        running(job_status(b, n)),
    ):
        await produce(
            b,
            [
                (n.failover_decisions, "job-bad", b"{not json"),
                (n.failover_decisions, "job-bad", bad_decision),
                (n.quarantine_requests, "gpu-1", {"node": "gpu-1"}),
                (n.failover_decisions, "job-good", decision("job-good")),
            ],
        )
        await wait_for(b, n.jobs_requeue, lambda got: bool(for_key(got, "job-good")))
        await wait_consumed(b, f"{n.prefix}quarantine", n.quarantine_requests)
        await wait_consumed(b, f"{n.prefix}quarantine", n.failover_decisions)
        await wait_consumed(b, f"{n.prefix}requeue", n.failover_decisions)
        await wait_consumed(b, f"{n.prefix}job-status", n.failover_decisions)
    topics = {dead_letter_topic(n, t) for t in (n.failover_decisions, n.quarantine_requests)}
    letters = [v for t in sorted(topics) for _, v in await read(b, t)]
    dead = [DeadLetter.from_dict(v) for v in letters]
    # Three services read the decisions; only their owner (job status) dead-letters a bad one.
    by_record = {(d.component, d.topic, d.offset) for d in dead}
    assert len(dead) == len(by_record) == 3
    assert {(d.component, d.topic) for d in dead} == {
        ("jobstatus", n.failover_decisions),
        ("quarantine", n.quarantine_requests),
    }
    assert {d.error_kind for d in dead} == {"decode"}
    assert any("verdict" in d.error for d in dead)
    assert all(d.partition is not None and d.raw is not None for d in dead)


async def test_release_command_publishes_a_released_record_the_service_actuates(
    kafka_bootstrap: str, topic_names: TopicNames
) -> None:
    b, n = kafka_bootstrap, topic_names
    target = ("--bootstrap", b, "--prefix", n.prefix)
    actuator = LogActuator("kubernetes")
    async with running(quarantine(b, n, actuator)):
        await produce(b, [(n.quarantine_requests, "gpu-7", quarantined_record("gpu-7", 10))])
        await wait_for(b, n.nodes_quarantine, lambda got: len(got) == 1)
        assert await cli("quarantine", "release", "gpu-7", "--reason", "RMA done", *target) == 0
        got = await wait_for(b, n.nodes_quarantine, lambda got: len(got) == 2)
        await until(lambda: "kubectl uncordon gpu-7" in actuator.commands)
    released = got[1][1]
    assert (released["state"], released["reason"], released["detail"]) == (
        "released",
        "operator",
        "RMA done",
    )
    assert actuator.commands == ["kubectl cordon gpu-7", "kubectl uncordon gpu-7"]
    # Not quarantined any more: refused without --force.
    assert (
        await cli("quarantine", "release", "gpu-7", "--reason", "again", *target)
        == EXIT_WRONG_STATE
    )


async def test_dry_run_publishes_what_it_would_do_and_does_nothing(
    kafka_bootstrap: str, topic_names: TopicNames
) -> None:
    b, n = kafka_bootstrap, topic_names
    actuator = LogActuator()
    async with running(quarantine(b, n, actuator, dry_run=True)):
        await produce(b, [(n.failover_decisions, "job-1", decision("job-1"))] * 2)
        alerts = await wait_for(b, n.failover_alerts, lambda got: len(got) >= 1)
        await wait_consumed(b, f"{n.prefix}quarantine", n.failover_decisions)
    assert [v["kind"] for _, v in await read(b, n.failover_alerts)] == ["dry-run"]
    assert alerts[0][1]["command"].startswith("scontrol update nodename=node-a state=drain")
    assert await read(b, n.nodes_quarantine) == []
    assert actuator.commands == []


async def test_job_status_follows_the_failover_flow_and_status_prints_it(
    kafka_bootstrap: str, topic_names: TopicNames, capsys: pytest.CaptureFixture[str]
) -> None:
    b, n = kafka_bootstrap, topic_names
    flow = [
        (n.jobs_events, "job-1", job_event("job-1", "started")),
        (n.jobs_events, "job-1", job_event("job-1", "terminated")),
        (n.failover_decisions, "job-1", decision("job-1")),
        (n.jobs_events, "job-1", job_event("job-1", "started", attempt=1)),
        (n.jobs_events, "job-1", job_event("job-1", "started", attempt=1)),  # redelivered
        (n.jobs_events, "job-2", job_event("job-2", "started", failover=False)),
        (n.jobs_events, "job-2", job_event("job-2", "terminated", failover=False)),
    ]
    off = Decision.from_dict(decision("job-2", verdict="software"))
    failed = off.to_dict() | {"action": "fail", "status": "Failed", "rule": "software.fail"}
    async with running(job_status(b, n)):
        await produce(b, [*flow, (n.failover_decisions, "job-2", failed)])
        await wait_consumed(b, f"{n.prefix}job-status", n.jobs_events)
        await wait_consumed(b, f"{n.prefix}job-status", n.failover_decisions)

    latest = {k: v for k, v in await read(b, n.jobs_status)}
    steps = [(s["status"], s["attempt"]) for s in latest["job-1"]["history"]]
    assert steps == [("Running", 0), ("Pending-failoverinprogress", 0), ("Running", 1)]
    assert latest["job-1"]["history"][1]["rule"] == "hardware.failover"
    assert [s["status"] for s in latest["job-2"]["history"]] == ["Running", "Failed"]

    assert await cli("status", "job-1", "--bootstrap", b, "--prefix", n.prefix) == 0
    out = capsys.readouterr().out
    assert out.startswith("job job-1: Running (attempt 1)") and "[hardware.failover]" in out
    assert await cli("status", "nope", "--bootstrap", b, "--prefix", n.prefix) == 6
    assert "unknown job 'nope'" in capsys.readouterr().err


async def test_services_shut_down_cleanly_when_cancelled(
    kafka_bootstrap: str, topic_names: TopicNames
) -> None:
    b, n = kafka_bootstrap, topic_names
    stop = asyncio.Event()
    tasks = [
        asyncio.create_task(quarantine(b, n, LogActuator())(stop)),
        asyncio.create_task(requeue(b, n)(stop)),
        asyncio.create_task(job_status(b, n)(stop)),
    ]
    await produce(b, [(n.failover_decisions, "job-1", decision("job-1"))])
    await wait_for(b, n.jobs_requeue, lambda got: len(got) == 1)
    await wait_consumed(b, f"{n.prefix}job-status", n.failover_decisions)
    for task in tasks:
        task.cancel()
    results = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), DEADLINE_S)
    assert all(isinstance(r, asyncio.CancelledError) for r in results), results
