"""A batch's table changes into faust's stores and changelogs, sent as one burst.

A faust table write (`table[key] = value`) queues one changelog message in faust's producer
buffer, which a background task hands to the client one event-loop hop at a time, and faust's
conductor stops feeding the agents (and logs "producer buffer full") while more than 100 wait:
a wave of 100,000 nodes' evidence spent most of its time there (BENCHMARKS.md, issue 18). The
agents write a batch's changes here instead: each key into the table's store (what faust reads,
and what a recovery rebuilds from the changelog) and its changelog record straight to the
client, on the partition of the input record that wrote it, serialized as faust would.

The records go out on a Kafka producer of their own (`ChangelogClient`): aiokafka keeps one
produce request in flight per broker connection, and a turn of held evidence writing thousands
of state records waited for batch space behind the decisions' requests, and they behind it
(BENCHMARKS.md, issue 18, fifth pass). Its own connection and large batches let neither wait.

Nothing is lost by skipping faust's buffer and producer: faust's commit flushes its producer
before it commits input offsets (`Consumer.commit` -> `producer.flush()`), and
`ChangelogClient.bind` chains this client's flush onto that one, so an input offset is never
committed ahead of the changelog records of its changes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from faust.serializers import codecs

log = logging.getLogger("gpufailover.classifier")
# Per partition per request. aiokafka's default, 16 KB, holds ~100 state records: a turn of
# held evidence then waited for a produce round trip every ~100 nodes.
CHANGELOG_BATCH_BYTES = 512 * 1024
STOP_TIMEOUT_S = 8.0


class ChangelogClient:
    """The changelogs' own aiokafka producer, started on first use and bound to faust's
    producer: faust's flush (its commit's barrier) also flushes this one, faust's stop then
    stops it."""

    def __init__(self, make: Callable[[], Any]) -> None:
        self._make = make
        self._client: Any = None
        self._lock = asyncio.Lock()

    async def started(self, faust_producer: Any) -> Any:
        if self._client is None:
            async with self._lock:
                if self._client is None:
                    client = self._make()
                    await client.start()
                    self.bind(faust_producer)
                    self._client = client
        return self._client

    def bind(self, faust_producer: Any) -> None:
        """Chain onto `faust_producer`'s flush and stop (instance attributes: mode's stop and
        faust's commit look them up on the instance)."""
        flush, on_stop = faust_producer.flush, faust_producer.on_stop

        async def flush_both() -> None:
            await flush()
            await self.flush()

        async def stop_both() -> None:
            await on_stop()  # flushes both first
            await self.stop()

        faust_producer.flush = flush_both
        faust_producer.on_stop = stop_both

    async def flush(self) -> None:
        if self._client is not None:
            await self._client.flush()

    async def stop(self) -> None:
        client, self._client = self._client, None
        if client is None:
            return
        try:
            await asyncio.wait_for(client.stop(), STOP_TIMEOUT_S)
        except TimeoutError:
            # Flushed above; what a hung stop leaves is re-derived from inputs not committed.
            log.warning("changelog producer: stop took over %g s: skipped", STOP_TIMEOUT_S)


@dataclass
class Changelog:
    """Changes queued by `put` (from `WriteBack.flush`), sent by `send`."""

    producer: Callable[[], Awaitable[Any]]  # an aiokafka producer, started
    queued: list[tuple[str, bytes, bytes | None, int]] = field(default_factory=list)

    def writer(self, table: Any) -> TableWriter:
        return TableWriter(self, table)

    async def send(self) -> list[Awaitable[Any]]:
        """Hand every queued changelog record to the client; their deliveries."""
        queued, self.queued = self.queued, []
        if not queued:
            return []
        producer = await self.producer()
        return [
            await producer.send(topic, value, key, partition)
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
