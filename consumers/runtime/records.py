"""Records in and out of a service, and the dead letters of records it could not process."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from schemas.codec import dumps, loads
from schemas.dead_letter import DeadLetter, kafka_dead_letter_topic, routed
from schemas.dead_letter import owner as dead_letter_owner
from schemas.errors import SchemaError
from schemas.topics import TopicNames


@dataclass(frozen=True, slots=True)
class InRecord:
    """One consumed record, independent of aiokafka (unit tests build these directly)."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp_ms: int = 0

    @staticmethod
    def from_consumer(rec: Any) -> InRecord:
        return InRecord(
            topic=rec.topic,
            partition=rec.partition,
            offset=rec.offset,
            key=rec.key,
            value=rec.value,
            timestamp_ms=rec.timestamp or 0,
        )

    @property
    def where(self) -> str:
        """`topic[partition]@offset`, as every log line about a record names it."""
        return f"{self.topic}[{self.partition}]@{self.offset}"

    def key_str(self) -> str | None:
        return None if self.key is None else self.key.decode("utf-8", "replace")

    def json(self) -> Any:
        """The parsed value; SchemaError if it is not JSON or is a tombstone (null value)."""
        if self.value is None:
            raise SchemaError("value", "a null value (tombstone) is not a valid record here")
        return loads(self.value)


@dataclass(frozen=True, slots=True)
class Output:
    """One record to publish: real topic name, key, JSON-encoded value."""

    topic: str
    key: bytes | None
    value: bytes

    @staticmethod
    def json(topic: str, key: str | None, value: Any) -> Output:
        return Output(topic, None if key is None else key.encode("utf-8"), dumps(value))


def dead_letter_topic(names: TopicNames, real: str) -> str:
    """`<topic>.dlq` when the topic declares one, else `failover.alerts`."""
    return kafka_dead_letter_topic(names, real, fallback=names.failover_alerts)


def dead_letter(
    names: TopicNames,
    rec: InRecord,
    error_kind: str,
    error: BaseException,
    component: str,
    group: str,
) -> Output:
    """The dead letter of `rec` (`schemas.dead_letter`), keyed by its coordinates."""
    letter = DeadLetter.of(
        error=f"{type(error).__name__}: {error}",
        error_kind=error_kind,
        component=component,
        topic=rec.topic,
        partition=rec.partition,
        offset=rec.offset,
        key=rec.key,
        value=rec.value,
        group=group,
        record_ts_ms=rec.timestamp_ms or None,
        now_ms=now_ms(),
    )
    return Output(*routed(letter, dead_letter_topic(names, rec.topic)))


def owned_elsewhere(names: TopicNames, real: str, component: str) -> str | None:
    """The component that dead-letters malformed records of `real` when it is not `component`
    (this one then counts and skips them: one dead letter per bad record)."""
    try:
        logical = names.logical(real)
    except KeyError:
        return None
    owner = dead_letter_owner(logical)
    return owner if owner not in (None, component) else None


def now_ms() -> int:
    return time.time_ns() // 1_000_000
