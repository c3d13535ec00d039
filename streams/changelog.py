"""A batch's table changes into faust's stores and changelogs, sent as one burst.

A faust table write (`table[key] = value`) queues one changelog message in faust's producer
buffer, which a background task hands to the client one event-loop hop at a time, and faust's
conductor stops feeding the agents (and logs "producer buffer full") while more than 100 wait:
a wave of 100,000 nodes' evidence spent most of its time there (BENCHMARKS.md, issue 18). The
agents write a batch's changes here instead: each key into the table's store (what faust reads,
and what a recovery rebuilds from the changelog) and its changelog record straight to the
client, on the partition of the input record that wrote it, serialized as faust would.

Nothing is lost by skipping the buffer: faust's commit flushes the client before it commits
input offsets (`Consumer.commit` -> `producer.flush()`), so an input offset is never committed
ahead of the changelog records of its changes.
"""

from __future__ import annotations

from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any

from faust.serializers import codecs


@dataclass
class Changelog:
    """Changes queued by `put` (from `WriteBack.flush`), sent by `send`."""

    producer: Any  # returns faust's producer (created when the app starts)
    queued: list[tuple[str, bytes, bytes | None, int]] = field(default_factory=list)

    def writer(self, table: Any) -> TableWriter:
        return TableWriter(self, table)

    async def send(self) -> list[Awaitable[Any]]:
        """Hand every queued changelog record to the client; their deliveries."""
        queued, self.queued = self.queued, []
        producer = self.producer()
        return [
            await producer.send(topic, key, value, partition, None, None)
            for topic, key, value, partition in queued
        ]


@dataclass
class TableWriter:
    """`WriteBack`'s writer for one faust table (JSON keys and values, as the app declares)."""

    changelog: Changelog
    table: Any

    def __call__(self, key: str, value: dict[str, Any] | None, record: Any) -> None:
        """Write `key` (None: delete) as `record` (a faust event) changed it."""
        table = self.table
        store = table.data
        if value is None:
            if key in store:
                del store[key]
            body = None
        else:
            store[key] = value
            body = codecs.dumps("json", value)
        self.changelog.queued.append(
            (
                table.changelog_topic.get_topic_name(),
                codecs.dumps("json", key),
                body,
                record.message.partition,
            )
        )
