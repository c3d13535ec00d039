"""The partition a keyed record goes to, as the Kafka clients compute it (murmur2 of the key,
positive, modulo the partitions: aiokafka's and the Java client's default), for records sent
with an explicit partition that must land where their key would (co-partitioning)."""

from __future__ import annotations

from aiokafka.partitioner import murmur2


def key_partition(key: bytes, partitions: int) -> int:
    hashed: int = murmur2(key)
    return (hashed & 0x7FFFFFFF) % partitions
