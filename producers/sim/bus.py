"""The simulator's Kafka side: publish what the fleet emits, read what the pipeline decides.

Everything goes through the broker, as with a real fleet: job events through
`JobEventPublisher` (validated, acknowledged one by one, in order), node records and telemetry
through one idempotent producer. The pipeline's outputs (`failover.decisions`, `jobs.requeue`,
`nodes.quarantine`, `failover.alerts`, `jobs.status`) are read from their beginning by a
group-less consumer (read_committed: the services write in transactions).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from types import TracebackType
from typing import Any

from gpufailover.kafka import make_consumer, make_producer
from producers.jobs import JobEventPublisher
from producers.sim.records import Out
from schemas.codec import dumps, loads
from schemas.errors import SchemaError
from schemas.topics import Topic, TopicNames

READ = (
    Topic.FAILOVER_DECISIONS,
    Topic.JOBS_REQUEUE,
    Topic.NODES_QUARANTINE,
    Topic.FAILOVER_ALERTS,
    Topic.JOBS_STATUS,
)


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


class Bus:
    def __init__(self, bootstrap: str, names: TopicNames) -> None:
        self.bootstrap, self.names = bootstrap, names
        self._producer: Any = make_producer(bootstrap, "gpufailover-sim", linger_ms=20)
        self._jobs = JobEventPublisher(bootstrap, topics=names, client_id="gpufailover-sim-jobs")
        self._consumer: Any = None
        self.published = 0
        self.unreadable = 0

    async def __aenter__(self) -> Bus:
        await self._producer.start()
        try:
            await self._jobs.__aenter__()
            topics = [self.names.name(t) for t in READ]
            # No group: every partition of these topics, from the beginning (the prefix is
            # this run's own, so the topics hold nothing else).
            self._consumer = make_consumer(
                self.bootstrap, None, *topics, client_id="gpufailover-sim"
            )
            await self._consumer.start()
        except BaseException:
            await self.close()
            raise
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def close(self) -> None:
        if self._consumer is not None:
            await self._consumer.stop()
            self._consumer = None
        await self._jobs.__aexit__(None, None, None)
        await self._producer.stop()

    async def publish(self, outs: Sequence[Out]) -> None:
        for out in outs:
            if out.job_event is not None:
                await self._producer.flush()  # the node records before it are out first
                if out.incident is not None:
                    out.incident.term_wall_ms = wall_ms()
                await self._jobs.publish(out.job_event)
            else:
                topic = self.names.name(out.topic)
                await self._producer.send(topic, dumps(out.value), key=out.key.encode())
            self.published += 1

    async def flush(self) -> None:
        await self._producer.flush()

    async def poll(self, timeout_ms: int = 0) -> list[tuple[str, str, dict[str, Any]]]:
        """(logical topic, key, value) of what arrived; tombstones and unreadable skipped
        (counted: they are not the sim's business, the services dead-letter their own)."""
        batch = await self._consumer.getmany(timeout_ms=timeout_ms, max_records=2000)
        out: list[tuple[str, str, dict[str, Any]]] = []
        for tp, messages in batch.items():
            logical = self.names.logical(tp.topic)
            for m in messages:
                if m.value is None:
                    continue
                try:
                    value = loads(m.value)
                except SchemaError:
                    self.unreadable += 1
                    continue
                if isinstance(value, dict):
                    out.append((logical, m.key.decode() if m.key else "", value))
        return out
