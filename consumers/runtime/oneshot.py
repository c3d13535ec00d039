"""Short-lived reads and writes for the operator commands (status, release, reset-breaker)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from consumers.runtime.records import InRecord
from gpufailover.kafka import make_consumer, make_producer, partitions_of
from gpufailover.offsets import behind
from gpufailover.security import PLAINTEXT, KafkaSecurity

_POLL_MS = 200

__all__ = ["partitions_of", "publish", "publish_atomically", "read_key", "read_to_end"]


async def read_to_end(
    bootstrap: str,
    topic: str,
    partitions: Sequence[int] | None = None,
    *,
    security: KafkaSecurity = PLAINTEXT,
) -> list[InRecord]:
    """Every committed record of `topic` (or of some of its partitions), read to its end now."""
    from aiokafka import TopicPartition

    if partitions is None:
        partitions = (await partitions_of(bootstrap, [topic], security=security))[topic]
    consumer = make_consumer(bootstrap, None, security=security, client_id="gpufailover-cli")
    try:
        await consumer.start()
        tps = [TopicPartition(topic, p) for p in sorted(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends: dict[Any, int] = await consumer.end_offsets(tps)
        out: list[InRecord] = []
        while await behind(consumer, ends):
            batch = await consumer.getmany(*tps, timeout_ms=_POLL_MS)
            for tp, records in batch.items():
                out.extend(InRecord.from_consumer(r) for r in records if r.offset < ends[tp])
        return out
    finally:
        await consumer.stop()


async def partition_for_key(
    bootstrap: str, topic: str, key: bytes, *, security: KafkaSecurity = PLAINTEXT
) -> int:
    """The partition the default partitioner gives `key` (murmur2, as our producers use)."""
    from aiokafka.partitioner import DefaultPartitioner

    parts = (await partitions_of(bootstrap, [topic], security=security))[topic]
    partition: int = DefaultPartitioner()(key, parts, parts)
    return partition


async def read_key(
    bootstrap: str, topic: str, key: str, *, security: KafkaSecurity = PLAINTEXT
) -> list[InRecord]:
    """Every record with `key` still on the topic, oldest first."""
    raw = key.encode("utf-8")
    partition = await partition_for_key(bootstrap, topic, raw, security=security)
    records = await read_to_end(bootstrap, topic, [partition], security=security)
    return [r for r in records if r.key == raw]


async def publish(
    bootstrap: str,
    topic: str,
    key: str,
    value: bytes,
    *,
    security: KafkaSecurity = PLAINTEXT,
    headers: Sequence[tuple[str, bytes]] = (),
) -> tuple[int, int]:
    """Publish one record and wait for acks=all; (partition, offset). TopicsMissing at once
    if the topic does not exist (a send would wait out its timeout instead)."""
    await partitions_of(bootstrap, [topic], security=security)
    producer = make_producer(bootstrap, "gpufailover-cli", security=security)
    try:
        await producer.start()
        md = await producer.send_and_wait(
            topic, value, key=key.encode("utf-8"), headers=list(headers) or None
        )
    finally:
        await producer.stop()
    return md.partition, md.offset


async def publish_atomically(
    bootstrap: str,
    records: Sequence[tuple[str, str, bytes]],
    *,
    transactional_id: str,
    security: KafkaSecurity = PLAINTEXT,
) -> list[tuple[int, int]]:
    """Publish (topic, key, value) records in one Kafka transaction: all or none are read by
    read_committed consumers. (partition, offset) of each. TopicsMissing first, as `publish`."""
    await partitions_of(bootstrap, sorted({topic for topic, _, _ in records}), security=security)
    producer = make_producer(
        bootstrap, "gpufailover-cli", security=security, transactional_id=transactional_id
    )
    try:
        await producer.start()
        async with producer.transaction():
            futures = [
                await producer.send(topic, value, key=key.encode("utf-8"))
                for topic, key, value in records
            ]
        sent = [await fut for fut in futures]
    finally:
        await producer.stop()
    return [(md.partition, md.offset) for md in sent]
