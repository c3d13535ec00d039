"""Thin glue between Kafka records and the engine: decode, call, encode, dead-letter.

Nothing here imports faust: the handlers take (topic, partition, offset, key, value) and return
the records to send, so the agents in `streams.app` stay a few lines each.
"""

from __future__ import annotations

import logging
from collections.abc import MutableMapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import orjson

from deploy.topics import TopicNames
from schemas.codec import loads
from schemas.decisions import Decision
from schemas.errors import SchemaError
from schemas.health import GpuHealth
from schemas.quarantine import QuarantineRecord
from schemas.xid import GpuXid
from streams.clock import InputClock, Lagging, never_lagging, now_ms
from streams.engine.messages import NodeReport, NodeTermination, QuarantineRequest
from streams.engine.node_side import NodeSide, NodeState, PartitionClock
from streams.policy import Policy

if TYPE_CHECKING:
    from streams.metrics import ClassifierMetrics

log = logging.getLogger("gpufailover.classifier")
CLOCK_PERSIST_EVERY_MS = 1000


@dataclass(frozen=True, slots=True)
class Out:
    """A record to send: topic, key (None: partition given), value bytes, optional partition."""

    topic: str
    key: bytes | None
    value: bytes
    partition: int | None = None
    decision: Decision | None = None  # for metrics
    alert: str | None = None  # the kind of a job alert, for metrics


def dead_letter(
    names: TopicNames,
    topic: str,
    partition: int,
    offset: int,
    key: bytes | None,
    value: bytes | None,
    error: str,
    kind: str,
) -> Out | None:
    """The DLQ record for a bad input; None (logged) for topics without a DLQ (internal)."""
    log.warning("dead-lettering %s[%d]@%d: %s (%s)", topic, partition, offset, error, kind)
    try:
        dlq = names.dlq(topic)
    except KeyError:
        log.error(  # noqa: TRY400 - the KeyError is expected, its traceback is noise
            "no DLQ for %s[%d]@%d: record dropped after error: %s", topic, partition, offset, error
        )
        return None
    body = {
        "error": error,
        "error_kind": kind,
        "topic": topic,
        "partition": partition,
        "offset": offset,
        "key": key.decode("utf-8", "replace") if key is not None else None,
        "raw": value.decode("utf-8", "replace") if value is not None else None,
        "dead_lettered_ts_ms": now_ms(),
    }
    return Out(dlq, key, orjson.dumps(body))


class NodeGlue:
    """Node-keyed half: gpu.xid, gpu.health, term-by-node, nodes.quarantine, ticks."""

    def __init__(
        self,
        policy: Policy,
        names: TopicNames,
        nodes: MutableMapping[str, NodeState],
        clocks: MutableMapping[str, PartitionClock],
        idle_after_ms: int,
        lagging: Lagging = never_lagging,
        metrics: ClassifierMetrics | None = None,
    ) -> None:
        self.policy = policy
        self.metrics = metrics
        self.names = names
        self.time = InputClock(
            (names.gpu_xid, names.gpu_health, names.term_by_node), idle_after_ms, lagging
        )
        self.nodes = nodes
        self.clocks = clocks
        self.sides: dict[int, NodeSide] = {}
        self.persisted: dict[int, int | None] = {}
        self.persisted_wall: dict[int, int] = {}

    def side(self, partition: int) -> NodeSide:
        side = self.sides.get(partition)
        if side is None:
            clock = self.clocks.get(f"p{partition}") or PartitionClock()
            side = NodeSide(self.policy, self.nodes, clock, follow_records=False)
            self.sides[partition] = side
            self.persisted[partition] = clock.watermark
        return side

    def handle(
        self, topic: str, partition: int, offset: int, key: bytes | None, value: bytes | None
    ) -> list[Out]:
        side = self.side(partition)
        names = self.names
        if topic == names.ticks:
            target = self.time.idle_target(partition, side.clock.watermark)
            idle = side.advance(target) if target is not None else []
            return self._encode(idle, partition, side)
        try:
            data = loads(value or b"")
            if topic in (names.gpu_xid, names.gpu_health):
                rec = (
                    GpuXid.from_dict(data) if topic == names.gpu_xid else GpuHealth.from_dict(data)
                )
                if self.metrics is not None:
                    if isinstance(rec, GpuXid):
                        self.metrics.xid(rec.xid)
                    else:
                        self.metrics.health(rec.condition)
                outputs = side.on_signal(rec)
                outputs += self._advance(side, partition, topic, rec.ts_ms)
            elif topic == names.term_by_node:
                term = NodeTermination.from_dict(data)
                # Bring the lazily kept watermark up to date: `closed` depends on it.
                current = self.time.effective(partition)
                outputs = side.advance(current) if current is not None else []
                outputs += side.on_termination(term)
                outputs += self._advance(side, partition, topic, term.terminated_ts_ms)
            elif topic == names.nodes_quarantine:
                q = QuarantineRecord.from_dict(data)
                if q.state == "released":
                    side.on_release(q.node, q.ts_ms)
                outputs = []
            else:
                raise SchemaError("topic", f"node agent does not read {topic!r}")
        except (SchemaError, KeyError, TypeError) as exc:
            bad = dead_letter(names, topic, partition, offset, key, value, str(exc), "schema")
            return [bad] if bad else []
        self.time.record_done(partition, side.clock.watermark)
        return self._encode(outputs, partition, side)

    def _advance(
        self, side: NodeSide, partition: int, topic: str, ts_ms: int
    ) -> list[NodeReport | QuarantineRequest]:
        candidate = self.time.candidate(partition, topic, ts_ms)
        closing = side.clock.closing
        if topic != self.names.term_by_node and not (closing and closing[0][0] < candidate):
            # Nothing can close: skip the (costly) lag check on the hot path. The watermark
            # catches up at the next termination or due window; evidence pruning only lags.
            return []
        watermark = self.time.effective(partition)
        return [] if watermark is None else side.advance(watermark)

    def _encode(
        self, outputs: list[NodeReport | QuarantineRequest], partition: int, side: NodeSide
    ) -> list[Out]:
        out: list[Out] = []
        for o in outputs:
            if isinstance(o, NodeReport):
                out.append(
                    Out(self.names.node_evidence, o.job_id.encode(), orjson.dumps(o.to_dict()))
                )
            else:
                out.append(
                    Out(self.names.quarantine_requests, o.node.encode(), orjson.dumps(o.to_dict()))
                )
        wm = side.clock.watermark
        wall = now_ms()
        # The clock (watermark and waiting windows) goes to the changelog with every output,
        # else at most once a wall-clock second: a restart only re-waits that much.
        if out or (
            wm != self.persisted.get(partition)
            and wall - self.persisted_wall.get(partition, 0) >= CLOCK_PERSIST_EVERY_MS
        ):
            self.clocks[f"p{partition}"] = side.clock
            self.persisted[partition] = wm
            self.persisted_wall[partition] = wall
        return out
