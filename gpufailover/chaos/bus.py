"""The harness's own Kafka clients: publish the workload, read what the pipeline published,
and measure the pipeline's consumer lag."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from deploy.kafka_admin import admin_client
from deploy.topics import SPECS, TopicNames
from gpufailover import offsets
from gpufailover.chaos.check import WALL_MS, BadRecord, Observed
from gpufailover.chaos.workload import Record

log = logging.getLogger("gpufailover.chaos")

# Output topics the invariants read (logical names); every <input>.dlq is read too.
OUTPUTS = (
    "failover.decisions",
    "failover.quarantine-requests",
    "nodes.quarantine",
    "jobs.requeue",
)
# Topics whose consumer lag says whether the pipeline is done: written without transactions,
# so a group that read everything has committed exactly the end offset.
LAG_TOPICS = (
    "gpu.xid",
    "gpu.health",
    "jobs.events",
    "training.telemetry",
    "failover.term-by-node",
    "failover.node-signals",
    "failover.node-evidence",
    "failover.decisions",
    "failover.quarantine-requests",
)


class Publisher:
    """One idempotent producer for the whole run; it rides out a broker restart."""

    def __init__(self, bootstrap: str, names: TopicNames) -> None:
        self.names = names
        self.producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap,
            client_id="gpufailover-chaos",
            enable_idempotence=True,
            linger_ms=5,
            request_timeout_ms=120_000,
        )

    async def start(self) -> None:
        await self.producer.start()

    async def stop(self) -> None:
        await self.producer.stop()

    async def publish(self, records: Sequence[Record]) -> list[BadRecord]:
        """Send every record and wait for all acks; return where the malformed ones landed."""
        pending = []
        for rec in records:
            fut = await self.producer.send(
                self.names.name(rec.topic),
                rec.value,
                key=None if rec.key is None else rec.key.encode(),
                partition=rec.partition,
            )
            pending.append((rec, fut))
        bad: list[BadRecord] = []
        for rec, fut in pending:
            meta = await fut
            if rec.bad is not None:
                raw = rec.value.decode("utf-8", "replace")
                bad.append(
                    BadRecord(meta.topic, meta.partition, meta.offset, raw, rec.round, rec.bad)
                )
        return bad


@dataclass
class Outputs:
    """Everything read so far from the output and dead-letter topics."""

    by_topic: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    unreadable: list[str] = field(default_factory=list)

    def observed(self, names: TopicNames) -> Observed:
        def values(logical: str) -> list[dict[str, Any]]:
            return self.by_topic.get(names.name(logical), [])

        dlqs = [names.name(s.logical) for s in SPECS.values() if s.logical.endswith(".dlq")]
        return Observed(
            decisions=values("failover.decisions"),
            quarantine_requests=values("failover.quarantine-requests"),
            quarantines=[q for q in values("nodes.quarantine") if q.get("state") == "quarantined"],
            requeues=values("jobs.requeue"),
            dead_letters=[d for t in dlqs for d in self.by_topic.get(t, [])],
        )


class Reader:
    """Reads the output topics from the start (committed transactions only)."""

    def __init__(self, bootstrap: str, names: TopicNames) -> None:
        self.names = names
        self.topics = [names.name(t) for t in OUTPUTS] + [
            names.name(s.logical) for s in SPECS.values() if s.logical.endswith(".dlq")
        ]
        self.consumer = AIOKafkaConsumer(
            *self.topics,
            bootstrap_servers=bootstrap,
            client_id="gpufailover-chaos-reader",
            group_id=None,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            isolation_level="read_committed",
        )
        self.outputs = Outputs()

    async def start(self) -> None:
        await self.consumer.start()

    async def stop(self) -> None:
        await self.consumer.stop()

    async def poll(self, timeout_ms: int = 500) -> int:
        batch = await self.consumer.getmany(timeout_ms=timeout_ms)
        n = 0
        for tp, messages in batch.items():
            into = self.outputs.by_topic.setdefault(tp.topic, [])
            for m in messages:
                n += 1
                try:
                    value = orjson.loads(m.value) if m.value else None
                except orjson.JSONDecodeError:
                    self.outputs.unreadable.append(f"{tp.topic}[{tp.partition}]@{m.offset}")
                    continue
                if isinstance(value, dict):
                    value[WALL_MS] = m.timestamp
                    into.append(value)
                else:
                    self.outputs.unreadable.append(f"{tp.topic}[{tp.partition}]@{m.offset}")
        return n


async def pipeline_lag(
    bootstrap: str, names: TopicNames, partitions: int
) -> dict[str, dict[str, int]]:
    """Per consumer group of this topic set, per `topic[partition]` of LAG_TOPICS: records
    not yet committed (only the ones behind)."""
    tps = [TopicPartition(names.name(t), p) for t in LAG_TOPICS for p in range(partitions)]
    probe = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await probe.start()
    try:
        ends: dict[TopicPartition, int] = await probe.end_offsets(tps)
    finally:
        await probe.stop()
    lag: dict[str, dict[str, int]] = {}
    async with admin_client(bootstrap) as admin:
        groups = [g[0] for g in await admin.list_consumer_groups() if g[0].startswith(names.prefix)]
        for group in groups:
            committed = await admin.list_consumer_group_offsets(group)
            read = {tp.topic for tp in committed}
            behind = {
                f"{names.logical(tp.topic)}[{tp.partition}]": offsets.lag(
                    end, committed[tp].offset if tp in committed else 0
                )
                for tp, end in ends.items()
                if tp.topic in read
            }
            lag[group.removeprefix(names.prefix)] = {k: n for k, n in behind.items() if n > 0}
    return lag
