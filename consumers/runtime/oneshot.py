"""Short-lived reads and writes for the operator commands (status, release, reset-breaker)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from consumers.runtime.records import InRecord
from gpufailover.kafka import make_admin, make_consumer, make_producer
from gpufailover.security import PLAINTEXT, KafkaSecurity

_POLL_MS = 200


async def partitions_of(
    bootstrap: str, topics: Sequence[str], *, security: KafkaSecurity = PLAINTEXT
) -> dict[str, list[int]]:
    """Each topic's partition ids (LookupError naming the topics that do not exist)."""
    admin = make_admin(bootstrap, "gpufailover-metadata", security=security)
    await admin.start()
    try:
        described: list[dict[str, Any]] = await admin.describe_topics(list(topics))
    finally:
        await admin.close()
    found = {
        t["topic"]: sorted(p["partition"] for p in t["partitions"])
        for t in described
        if t["error_code"] == 0 and t["partitions"]
    }
    missing = sorted(set(topics) - set(found))
    if missing:
        raise LookupError(f"topics missing (or not readable) on {bootstrap}: {', '.join(missing)}")
    return found


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
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in sorted(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends: dict[Any, int] = await consumer.end_offsets(tps)
        out: list[InRecord] = []
        while [tp for tp in tps if await consumer.position(tp) < ends[tp]]:
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
    """Publish one record and wait for acks=all; (partition, offset)."""
    producer = make_producer(bootstrap, "gpufailover-cli", security=security)
    await producer.start()
    try:
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
    read_committed consumers. (partition, offset) of each."""
    producer = make_producer(
        bootstrap, "gpufailover-cli", security=security, transactional_id=transactional_id
    )
    await producer.start()
    try:
        async with producer.transaction():
            futures = [
                await producer.send(topic, value, key=key.encode("utf-8"))
                for topic, key, value in records
            ]
        sent = [await fut for fut in futures]
    finally:
        await producer.stop()
    return [(md.partition, md.offset) for md in sent]
