"""One faust agent's loop: a batch of records through its glue, their outputs sent and
acknowledged by the broker, and only then their table changes written.

Outputs before state: a worker killed between the two restarts from the old state and sends
the same outputs again under the same keys (applied once downstream); the other order could
persist "decided" and lose the decision (RELIABILITY.md: the chaos run's lost decision).
Per batch, not per record: waiting for each record's acknowledgements (each at least the
producer's linger) halved the drain (BENCHMARKS.md). faust acks a batch's input records after
it, so the offsets committed never pass a record whose state is not written.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import faust.exceptions
import orjson
from aiokafka.errors import KafkaError

from gpufailover.offsets import AgentProgress
from schemas.topics import TopicNames
from streams.deferred import DRAIN_BUDGET_S
from streams.glue import NodeGlue, Out, dead_letter
from streams.job_glue import JobGlue
from streams.metrics import ClassifierMetrics
from streams.tables import WriteBack

log = logging.getLogger("gpufailover.classifier")
# Records per batch, and how long a batch waits to fill: the latency one agent adds when the
# input is quiet (a hardware decision passes three agent hops). A backlog fills it at once.
BATCH_MAX = 500
BATCH_WITHIN_S = 0.002


class TopicLabels:
    """Real topic name -> its logical name (the metrics' label); a topic outside the catalog
    keeps its real name. Cached: asked for every record."""

    def __init__(self, names: TopicNames) -> None:
        self._names = names
        self._logical: dict[str, str] = {}

    def __call__(self, real: str) -> str:
        name = self._logical.get(real)
        if name is None:
            try:
                name = self._names.logical(real)
            except KeyError:
                name = real
            self._logical[real] = name
        return name


class Outputs:
    """The worker's output topics, each declared once (`topic` declares one), and sends."""

    def __init__(
        self,
        topic: Callable[[str], Any],
        declared: Iterable[str],
        metrics: ClassifierMetrics,
        label: TopicLabels,
    ) -> None:
        self._topic = topic
        self._topics: dict[str, Any] = {real: topic(real) for real in declared}
        self._metrics = metrics
        self._label = label

    def __getitem__(self, real: str) -> Any:
        return self._topics[real]

    async def send(self, out: Out) -> Awaitable[Any]:
        """Queue `out` with the producer; the result resolves once the broker has it."""
        target = self._topics.get(out.topic)
        if target is None:
            target = self._topics[out.topic] = self._topic(out.topic)
        delivered = await target.send(key=out.key, value=out.value, partition=out.partition)
        self._metrics.sent(self._label(out.topic))
        return cast("Awaitable[Any]", delivered)


@dataclass
class AgentDriver:
    """Drives one agent's stream through `glue`, whose table changes `tables` hold until
    the outputs of the record are acknowledged."""

    agent: str  # "node" or "job": the metrics' label, the dead letters' component
    glue: NodeGlue | JobGlue
    tables: Sequence[WriteBack[Any]]
    inputs: Iterable[str]
    outputs: Outputs
    progress: AgentProgress
    metrics: ClassifierMetrics
    names: TopicNames
    label: TopicLabels
    # Told the first record of each partition of a batch the agent gives up on (it crashes):
    # faust acks a closed stream's records all the same, so the commit must be held there.
    hold: Callable[[Any, int], None] = lambda tp, offset: None
    # Sends what the tables' writers queued at `flush` (`streams.changelog`); None: the
    # tables write themselves.
    send_changelog: Callable[[], Awaitable[list[Awaitable[Any]]]] | None = None
    # Caps commits of a node-signals partition at its first record with held evidence
    # (None: nothing held; `streams.deferred`).
    cap: Callable[[int, int | None], None] = lambda partition, offset: None
    dlqs: frozenset[str] = field(init=False)
    _lock: asyncio.Lock = field(init=False, default_factory=asyncio.Lock)

    def __post_init__(self) -> None:
        names = self.names
        self.dlqs = frozenset(names.dlq(real) for real in self.inputs if names.spec(real).dlq)

    async def run(self, stream: Any) -> None:
        async for events in stream.take_events(BATCH_MAX, BATCH_WITHIN_S):
            await self.handle(events)

    async def drain_held(self) -> None:
        """A turn of held evidence (`streams.deferred`) between batches: the node agent's
        batches may be far apart when its inputs are quiet."""
        if isinstance(self.glue, NodeGlue) and self.glue.holding() and not self._lock.locked():
            await self.handle(())

    async def handle(self, batch: Sequence[Any]) -> None:
        """`batch`: faust events (`.message` the record); each record's table writes are
        written back as its own (`WriteBack.mark`)."""
        async with self._lock:  # a batch and a turn of held evidence share the tables
            await self._handle(batch)

    async def _handle(self, batch: Sequence[Any]) -> None:
        delivered: list[Awaitable[Any]] = []
        handled: list[tuple[Any, list[Out]]] = []
        try:
            for event in batch:
                msg = event.message
                self.progress.processed(msg.tp, msg.offset)
                for state in self.tables:
                    state.mark(event)
                results = self._results(msg)
                delivered += [await self.outputs.send(out) for out in results]
                handled.append((msg, results))
            glue = self.glue
            if isinstance(glue, NodeGlue):
                holding = glue.holding()
                for partition in holding:
                    for state in self.tables:
                        state.mark(PartitionMark(partition))
                    drained = glue.drain(partition, DRAIN_BUDGET_S / len(holding))
                    delivered += [await self.outputs.send(out) for out in drained]
            if delivered:
                await asyncio.gather(*delivered)
            for state in self.tables:
                state.flush()  # only now: outputs before state
            if self.send_changelog is not None:
                # Not awaited: faust's commit flushes the client before it commits inputs.
                await self.send_changelog()
            if isinstance(glue, NodeGlue):
                for partition, offset in glue.caps():  # after the state it covers is written
                    self.cap(partition, offset)
                    self.metrics.held_at(partition, glue.held_count(partition))
        except BaseException:
            # The whole batch: its state is not written (or, if the changelog failed, only
            # partly: a restart processes the batch again, which the engine absorbs).
            self._discard()
            first: dict[Any, int] = {}
            for event in batch:
                first.setdefault(event.message.tp, event.message.offset)
            for tp, offset in first.items():
                self.hold(tp, offset)
            raise
        for msg, results in handled:
            self._count(msg, results)

    def _results(self, msg: Any) -> list[Out]:
        """The glue's outputs for `msg`, or its dead letter when handling it failed."""
        try:
            return self.glue.handle(msg.topic, msg.partition, msg.offset, msg.key, msg.value)
        except (faust.exceptions.FaustError, KafkaError):
            # The framework or the broker failed (e.g. a changelog not ready yet): not the
            # record's fault. Crash the agent (CrashingSupervisor stops the worker) so the
            # record is processed again after a restart instead of being dead-lettered.
            log.exception("Kafka/faust error at %s[%d]@%d", msg.topic, msg.partition, msg.offset)
            raise
        except Exception as exc:
            for state in self.tables:
                state.rollback()  # this record's changes only
            log.exception("processing %s[%d]@%d failed", msg.topic, msg.partition, msg.offset)
            bad = dead_letter(
                self.names,
                msg.topic,
                msg.partition,
                msg.offset,
                msg.key,
                msg.value,
                f"{type(exc).__name__}: {exc}",
                "process",
                f"{self.agent}-agent",
            )
            return [bad] if bad else []

    def _discard(self) -> None:
        for state in self.tables:
            state.discard()

    def _count(self, msg: Any, results: list[Out]) -> None:
        metrics = self.metrics
        for out in results:
            if out.decision is not None:
                metrics.decision(out.decision)
            elif out.alert is not None:
                metrics.alert(out.alert)
            elif out.topic in self.dlqs:
                metrics.dead_letter(self.label(msg.topic), error_kind(out.value))
        glue = self.glue
        if isinstance(glue, NodeGlue) and msg.partition in glue.sides:
            metrics.watermark_at(msg.partition, glue.sides[msg.partition].clock.watermark)
        metrics.record(self.label(msg.topic), self.agent)


@dataclass(frozen=True, slots=True)
class PartitionMark:
    """What `WriteBack.mark` is given for held evidence applied after a batch: its writes go
    to the changelog partition of the node-signals partition it was read from."""

    partition: int

    @property
    def message(self) -> PartitionMark:
        return self


def error_kind(dlq_value: bytes) -> str:
    """The `error_kind` of a dead letter (our own record: see `streams.glue.dead_letter`)."""
    try:
        kind = orjson.loads(dlq_value).get("error_kind")
    except (orjson.JSONDecodeError, AttributeError):
        return "unknown"
    return str(kind)
