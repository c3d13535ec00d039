"""One dead letter per bad input record, in one format, through the whole pipeline.

Bad records go to every input topic that has a dead-letter topic, including the ones several
components read (jobs.events: the classifier and the job status service; failover.decisions:
the quarantine, requeue and job status services). Every wait is on a condition: the consumer
groups' committed offsets, then the dead-letter topics read to their end.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from consumers.runtime.oneshot import partitions_of, read_to_end
from gpufailover.kafka import make_consumer
from schemas.dead_letter import DeadLetter, owner
from schemas.topics import SPECS, TopicNames
from tests.integration.kafka_io import (
    Service,
    classifier,
    free_port,
    short_grace_policy,
    wait_for,
)

DEADLINE_S = 90.0
Coordinates = tuple[str, int, int]


def _now() -> int:
    return time.time_ns() // 1_000_000


async def produce_each(
    bootstrap: str, records: Sequence[tuple[str, str | None, Any]]
) -> list[Coordinates]:
    """Publish in order; the (topic, partition, offset) of each record."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True)
    await producer.start()
    try:
        out = []
        for topic, key, value in records:
            raw = value if isinstance(value, bytes) else orjson.dumps(value)
            md = await producer.send_and_wait(topic, raw, key=None if key is None else key.encode())
            out.append((topic, md.partition, md.offset))
        return out
    finally:
        await producer.stop()


async def wait_committed(bootstrap: str, readers: dict[str, Sequence[str]]) -> None:
    """Until each consumer group has committed offsets up to the end (as of now) of each of
    its topics: every record there has been processed, its dead letter (if any) published."""
    topics = sorted({t for ts in readers.values() for t in ts})
    found = await partitions_of(bootstrap, topics)
    consumer = make_consumer(bootstrap, None)
    await consumer.start()
    try:
        ends = await consumer.end_offsets([TopicPartition(t, p) for t in topics for p in found[t]])
    finally:
        await consumer.stop()
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        deadline = time.monotonic() + DEADLINE_S
        while True:
            behind = {}
            for group, group_topics in readers.items():
                tps = [tp for tp in ends if tp.topic in group_topics and ends[tp]]
                committed = await admin.list_consumer_group_offsets(group, partitions=tps)
                for tp in tps:
                    if tp not in committed or committed[tp].offset < ends[tp]:
                        behind[group, tp.topic, tp.partition] = ends[tp]
            if not behind:
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"consumer groups behind: {behind}")
            await asyncio.sleep(0.2)  # polling the broker with a deadline, not a fixed wait
    finally:
        await admin.close()


async def dead_letters(bootstrap: str, names: TopicNames) -> list[tuple[bytes | None, Any]]:
    """(key, value) of every record on every dead-letter topic, and of any dead letter on
    failover.alerts (where a topic without a .dlq would send them)."""
    dlqs = [names.name(logical) for logical in SPECS if logical.endswith(".dlq")]
    out = []
    for topic in [*dlqs, names.failover_alerts]:
        for r in await read_to_end(bootstrap, topic):
            value = orjson.loads(r.value) if r.value else None
            if topic != names.failover_alerts or (value or {}).get("kind") == "dead-letter":
                out.append((r.key, value))
    return out


def readers(names: TopicNames) -> dict[str, Sequence[str]]:
    """Which consumer group reads which input topic under `gpufailover run`."""
    p = names.prefix
    return {
        f"{p}gpufailover-classifier-signals": [names.gpu_xid, names.gpu_health],
        f"{p}gpufailover-classifier": [
            names.jobs_events,
            names.training_telemetry,
            names.nodes_quarantine,
        ],
        f"{p}gpufailover-job-status": [names.jobs_events, names.failover_decisions],
        f"{p}gpufailover-quarantine": [names.failover_decisions, names.quarantine_requests],
        f"{p}gpufailover-requeue": [names.failover_decisions],
    }


@pytest.fixture
def pipeline(
    kafka_bootstrap: str, topic_names: TopicNames, topic_partitions: int, tmp_path: Path
) -> Iterator[Service]:
    env = {
        "GPUFAILOVER_POLICY": str(short_grace_policy(tmp_path, grace_s=2)),
        "GPUFAILOVER_CLASSIFIER_PORT": str(free_port()),
        "GPUFAILOVER_IDLE_AFTER_S": "0.5",
        "GPUFAILOVER_TICK_INTERVAL_S": "0.2",
    }
    args = ["run", "--bootstrap", kafka_bootstrap, "--topic-prefix", topic_names.prefix]
    args += ["--partitions", str(topic_partitions)]
    with Service(args, tmp_path / "run.log", env) as svc:
        yield svc
    assert svc.proc is not None and svc.proc.returncode == 0, svc.log_tail()


def bad_records(n: TopicNames, t: int) -> list[tuple[str, str | None, Any]]:
    job = {"job_id": "job-bad", "attempt": 0, "type": "terminated", "ts_ms": t}
    return [
        (n.gpu_xid, "gpu-x", b"not json at all"),
        (n.gpu_xid, "gpu-x", {"node": "gpu-x", "xid": "seventy-nine", "ts_ms": t}),
        (n.gpu_health, "gpu-x", {"node": "gpu-x", "condition": "melted", "ts_ms": t}),
        (n.jobs_events, "job-bad", b"{cut off mid-wri"),
        (n.jobs_events, "job-bad", job),  # a termination without nodes
        (n.jobs_events, "job-big", b"\xff" * 600_000),  # binary and large: cut, base64
        (n.training_telemetry, "job-bad", {"job_id": "job-bad", "kind": "heartbeat"}),
        (n.nodes_quarantine, "gpu-q", {"node": "gpu-q", "state": "drained", "ts_ms": t}),
        (n.failover_decisions, "job-bad", b"{not json"),
        (n.failover_decisions, "job-bad", {"job_id": "job-bad", "verdict": "cosmic-rays"}),
        (n.quarantine_requests, "gpu-r", {"node": "gpu-r"}),
    ]


def good_records(n: TopicNames, t: int) -> list[tuple[str, str | None, Any]]:
    nodes = ["gpu-a", "gpu-b"]
    return [
        (n.jobs_events, "job-1", {"job_id": "job-1", "attempt": 0, "type": "started",
                                  "ts_ms": t - 60_000, "nodes": nodes}),
        (n.gpu_xid, "gpu-b", {"node": "gpu-b", "xid": 79, "ts_ms": t - 2_000}),
        (n.jobs_events, "job-1", {"job_id": "job-1", "attempt": 0, "type": "terminated",
                                  "ts_ms": t, "nodes": nodes, "reason": "WorkerLost"}),
    ]  # fmt: skip


def check_letters(
    names: TopicNames, letters: list[tuple[bytes | None, Any]], bad: list[Coordinates]
) -> dict[bytes, list[DeadLetter]]:
    """Every dead letter is a valid DeadLetter keyed by its coordinates, written by its topic's
    owner, for one of the bad records; one distinct letter (up to the time) per bad record."""
    by_key: dict[bytes, list[DeadLetter]] = {}
    for key, value in letters:
        letter = DeadLetter.from_dict(value)
        assert key == letter.kafka_key()
        assert letter.component == owner(names.logical(letter.topic or "")), letter
        by_key.setdefault(key, []).append(letter)
    got = {(x[0].topic, x[0].partition, x[0].offset) for x in by_key.values()}
    assert got == set(bad)
    for copies in by_key.values():  # re-deliveries: the same letter but for its time
        assert len({_timeless(c) for c in copies}) == 1, copies
    return by_key


def _timeless(letter: DeadLetter) -> bytes:
    return orjson.dumps(letter.to_dict() | {"dead_lettered_ts_ms": None})


async def test_each_bad_record_gets_exactly_one_dead_letter_from_its_topics_owner(
    pipeline: Service, kafka_bootstrap: str, topic_names: TopicNames
) -> None:
    n, t = topic_names, _now()
    coordinates = await produce_each(kafka_bootstrap, [*bad_records(n, t), *good_records(n, t)])
    bad = coordinates[: len(bad_records(n, t))]
    # The good job is still decided (hardware: failing over) among the bad records.
    await wait_for(
        kafka_bootstrap,
        [n.jobs_status],
        lambda rs: any(r.value["status"] == "Pending-failoverinprogress" for r in rs),
    )
    await wait_committed(kafka_bootstrap, readers(n))
    letters = await dead_letters(kafka_bootstrap, n)
    by_key = check_letters(n, letters, bad)
    assert len(letters) == len(bad) == len(by_key)  # no re-delivery in a normal run
    big = next(c[0] for c in by_key.values() if c[0].key == "job-big")
    assert (big.raw_size, big.raw_truncated, big.raw_encoding) == (600_000, True, "base64")
    # The other readers of jobs.events and failover.decisions said why they wrote none.
    log = pipeline.log_path.read_text(errors="replace")
    assert "skipped (job-agent dead-letters it)" in log
    assert "skipped (jobstatus dead-letters it)" in log


async def test_a_classifier_killed_after_dead_lettering_writes_no_second_distinct_letter(
    kafka_bootstrap: str, topic_names: TopicNames, topic_partitions: int, tmp_path: Path
) -> None:
    n, t = topic_names, _now()
    policy = short_grace_policy(tmp_path)
    classifier_parts = {"signal-filter", "job-agent", "node-agent"}
    records = [r for r in bad_records(n, t) if owner(n.logical(r[0])) in classifier_parts]
    first = classifier(kafka_bootstrap, n.prefix, topic_partitions, tmp_path, policy).start()
    try:
        await first.wait_for_log("Worker ready")
        bad = await produce_each(kafka_bootstrap, records)
        dlqs = sorted({n.dlq(c[0]) for c in bad})
        await wait_for(kafka_bootstrap, dlqs, lambda rs: len(rs) >= len(bad))
    finally:
        assert first.proc is not None
        first.proc.kill()  # before its next offset commit, most likely: the records come again
        first.proc.wait()
    with classifier(kafka_bootstrap, n.prefix, topic_partitions, tmp_path, policy):
        groups = readers(n)
        mine = [f"{n.prefix}gpufailover-classifier", f"{n.prefix}gpufailover-classifier-signals"]
        await wait_committed(kafka_bootstrap, {g: groups[g] for g in mine})
        letters = await dead_letters(kafka_bootstrap, n)
    by_key = check_letters(n, letters, bad)
    # Compacted by key, the dead-letter topics hold exactly one letter per bad record.
    assert len(by_key) == len(bad)
