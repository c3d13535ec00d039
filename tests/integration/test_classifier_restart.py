"""Restarting the classifier loses no input record (faust's recovery race, streams.faust_patches).

Each round stops the worker, publishes jobs while it is down (they wait at the head of the input
partitions, where faust's race struck), starts it again, publishes more as soon as it logs that
it restores its tables (recovery takes 30-150 ms here, so that batch lands inside it in about
5 rounds of 8, else just after) and more once it is ready. Then every decision must equal
`Replayer`'s on the same input, once; no worker may report a lost record (the guard in
streams.faust_patches counts, per partition, every fetched record a later one overtook unacked);
and the input offsets must be committed to the end.

`GPUFAILOVER_RESTART_ROUNDS` sets the number of restarts (default 4). To see the race, run it
with `GPUFAILOVER_FAUST_PATCHES=none` (faust as released: decisions go missing) or `guard-only`
(faust's order; the guard logs each lost record and holds the commit at it, so it fails on
the count of lost records).
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from schemas.topics import TopicNames
from streams.config import ClassifierSettings
from streams.policy import load_policy
from streams.replay import Replayer
from tests.integration.kafka_io import Rec, Service, classifier, wait_for

ROUNDS = int(os.environ.get("GPUFAILOVER_RESTART_ROUNDS", "4"))
JOBS_PER_BATCH = 6
KINDS = ("hardware", "software", "transient")
LOST = re.compile(r"faust lost (\d+) record")
# The faust input topics of the classifier whose every record comes from this test or the
# worker itself (no transactional producer): their committed offsets must reach the end.
COMMITTED_TO_END = ("jobs_events", "node_signals", "node_evidence")


def _batch(tag: str, ts: int) -> list[tuple[str, str | None, dict[str, Any]]]:
    """Jobs on their own node each: hardware (XID 79), software (OOM) and transient (NCCL)."""
    out: list[tuple[str, str | None, dict[str, Any]]] = []
    for i in range(JOBS_PER_BATCH):
        job, node, kind = f"{tag}-{i}", f"node-{tag}-{i}", KINDS[i % len(KINDS)]
        term: dict[str, Any] = {
            "job_id": job,
            "attempt": 0,
            "type": "terminated",
            "ts_ms": ts + i,
            "nodes": [node],
        }
        if kind == "hardware":
            out.append(("gpu.xid", node, {"node": node, "xid": 79, "ts_ms": ts + i - 500}))
        else:
            term["reason"] = "OOMKilled" if kind == "software" else "NCCLTimeout"
        out.append(("jobs.events", job, term))
    for i in range(JOBS_PER_BATCH):  # the nodes report in after their jobs ended: event time
        node = f"node-{tag}-{i}"  # passes the terminations (hardware decides when it has)
        out.append(("gpu.health", node, {"node": node, "ts_ms": ts + 1_000, "condition": "ok"}))
    return out


class Publisher:
    """One producer for the whole test, so a batch lands at once while the worker recovers."""

    def __init__(self, bootstrap: str, names: TopicNames) -> None:
        self.names = names
        self.sent: list[tuple[str, str | None, dict[str, Any]]] = []  # logical topics, in order
        self.producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True)

    async def send(
        self, records: list[tuple[str, str | None, dict[str, Any]]], partition: int | None = None
    ) -> None:
        for topic, key, value in records:
            await self.producer.send(
                self.names.name(topic),
                orjson.dumps(value),
                key=key.encode() if key is not None else None,
                partition=partition,
            )
        await self.producer.flush()
        self.sent.extend(records)


def _fields(decision: dict[str, Any]) -> tuple[Any, ...]:
    keys = ("verdict", "action", "suspect_nodes", "next_attempt", "rule")
    return tuple(decision[k] for k in keys)


def _lost(workers: list[Service]) -> int:
    return sum(
        int(n) for w in workers for n in LOST.findall(w.log_path.read_text(errors="replace"))
    )


async def _committed_and_end(
    bootstrap: str, group: str, tps: list[TopicPartition]
) -> tuple[dict[TopicPartition, int], dict[TopicPartition, int]]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        offsets = await admin.list_consumer_group_offsets(group)
    finally:
        await admin.close()
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap)
    await consumer.start()
    try:
        ends = await consumer.end_offsets(tps)
    finally:
        await consumer.stop()
    return {tp: offsets[tp].offset for tp in tps if tp in offsets}, dict(ends)


@pytest.mark.parametrize("stop", ["sigterm", "sigkill"])
async def test_records_published_while_the_worker_is_down_or_recovering_are_all_decided(
    stop: str,
    kafka_bootstrap: str,
    topic_names: TopicNames,
    topic_partitions: int,
    tmp_path: Path,
) -> None:
    n, t0 = topic_names, time.time_ns() // 1_000_000
    # After a SIGKILL the group waits out the dead member's session (faust: 60 s): one round.
    rounds = ROUNDS if stop == "sigterm" else 1
    policy = load_policy()
    publisher = Publisher(kafka_bootstrap, n)
    await publisher.producer.start()
    workers: list[Service] = []

    def start() -> Service:
        # Windows close on event time only (as in replay): a long idle threshold.
        worker = classifier(kafka_bootstrap, n.prefix, topic_partitions, tmp_path, idle_after_s=600)
        worker.env["DEVLOG"] = "1"  # faust's own "SEEK", "DROPPED MESSAGE ROFF", commit lines
        workers.append(worker.start())
        return worker

    try:
        worker = start()
        await worker.wait_for_log("Worker ready", timeout_s=90)
        await publisher.send(_batch("first", t0))
        for r in range(rounds):
            await wait_for(
                kafka_bootstrap,
                [n.failover_decisions],
                lambda rs, r=r: len(rs) >= (r + 1) * JOBS_PER_BATCH // len(KINDS),
                timeout_s=60,
            )
            if stop == "sigkill":  # no final commit: what it processed since is processed again
                assert worker.proc is not None
                worker.proc.kill()
                worker.proc.wait()
            else:
                worker.stop()
            ts = t0 + (r + 1) * 10_000
            await publisher.send(_batch(f"down{r}", ts))
            worker = start()
            # The worker has state from the first start on, so it replays its changelogs.
            await worker.wait_for_log("Restoring state from changelog topics", timeout_s=90)
            await publisher.send(_batch(f"recovering{r}", ts + 3_000))
            await worker.wait_for_log("Worker ready", timeout_s=90)
            await publisher.send(_batch(f"ready{r}", ts + 6_000))
        # One `ok` sample per partition far in the future closes every window (end of input).
        close_ts = t0 + (rounds + 2) * 10_000 + policy.lookback_ms + policy.grace_ms
        marker = {"node": "end-of-input", "ts_ms": close_ts, "condition": "ok"}
        for partition in range(topic_partitions):
            await publisher.send([("gpu.health", None, marker)], partition=partition)

        lines = [orjson.dumps({"topic": t, "key": k, "value": v}) for t, k, v in publisher.sent]
        replayed = [orjson.loads(x) for x in Replayer(policy).run(iter(lines))]
        expected = {
            (r["key"], r["value"]["attempt"]): _fields(r["value"])
            for r in replayed
            if r["topic"] == "failover.decisions"
        }
        jobs = {v["job_id"] for t, _, v in publisher.sent if t == "jobs.events"}
        assert {job for job, _ in expected} == jobs  # replay decides every job

        def complete(rs: list[Rec]) -> bool:
            return {(r.key, r.value["attempt"]) for r in rs} >= expected.keys()

        try:
            recs = await wait_for(
                kafka_bootstrap, [n.failover_decisions], complete, timeout_s=60, settle_s=2.0
            )
        except AssertionError:  # report which, below
            recs = await wait_for(kafka_bootstrap, [n.failover_decisions], bool, settle_s=2.0)
        worker.stop()
    finally:
        for w in workers:
            w.stop()
        await publisher.producer.stop()

    got: dict[tuple[str | None, int], list[tuple[Any, ...]]] = {}
    for rec in recs:
        got.setdefault((rec.key, rec.value["attempt"]), []).append(_fields(rec.value))
    missing = sorted(k for k in expected.keys() - got.keys())
    lost = _lost(workers)
    twice = sorted(k for k, v in got.items() if len(v) > 1)
    print(
        f"{rounds} restarts by {stop} ({n.prefix}): {len(missing)} decisions missing, "
        f"{lost} lost records, {len(twice)} decisions published more than once"
    )
    assert not missing, f"{rounds} restarts: no decision for {missing}; {lost} reported lost"
    assert {k: v[0] for k, v in got.items()} == expected
    assert all(x == v[0] for v in got.values() for x in v), "a decision was published differently"
    if stop == "sigterm":  # a SIGKILL redoes what was processed since the last commit
        assert not twice, f"decisions published twice: {twice}"
    assert lost == 0, f"the workers lost {lost} input record(s): see 'faust lost' in their logs"

    group = f"{n.prefix}{ClassifierSettings.app_id}"
    tps = [
        TopicPartition(getattr(n, name), p)
        for name in COMMITTED_TO_END
        for p in range(topic_partitions)
    ]
    committed, ends = await _committed_and_end(kafka_bootstrap, group, tps)
    assert committed == {tp: ends[tp] for tp in tps if ends[tp] > 0}
