"""Thin glue between Kafka records and the engine: decode, call, encode, dead-letter.

Nothing here imports faust: the handlers take (topic, partition, offset, key, value) and return
the records to send, so the agents in `streams.app` stay a few lines each.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import orjson

from deploy.topics import TopicNames
from schemas.codec import loads
from schemas.decisions import Decision
from schemas.errors import SchemaError
from schemas.health import GpuHealth
from schemas.jobs import JobEvent
from schemas.quarantine import QuarantineRecord
from schemas.xid import GpuXid
from streams.engine.job_side import JobSide, JobState
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


def now_ms() -> int:
    return time.time_ns() // 1_000_000


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
        lagging: Callable[[str, int], bool] = lambda topic, partition: False,
        metrics: ClassifierMetrics | None = None,
    ) -> None:
        self.policy = policy
        self.metrics = metrics
        self.names = names
        # The watermark waits for input topics that still have records to deliver: faust reads
        # topics at uneven speeds, and a backfill must not close windows on gpu.health's time
        # while gpu.xid is still behind (the min-over-inputs rule of stream processors).
        self.lagging = lagging
        self.sources = (names.gpu_xid, names.gpu_health, names.term_by_node)
        self.source_max: dict[int, dict[str, int]] = {}
        self.nodes = nodes
        self.clocks = clocks
        self.idle_after_ms = idle_after_ms
        self.sides: dict[int, NodeSide] = {}
        # Wall-clock bookkeeping for the idle advance (memory only: after a restart the first
        # tick restarts the idle timer, which only delays closing a little).
        self.last_record_wall: dict[int, int] = {}
        self.watermark_at_record: dict[int, int | None] = {}
        self.persisted: dict[int, int | None] = {}

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
            return self._encode(self._idle_advance(side, partition), partition, side)
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
                outputs = side.on_termination(term)
                outputs += self._advance(side, partition, topic, term.terminated_ts_ms)
            elif topic == names.nodes_quarantine:
                q = QuarantineRecord.from_dict(data)
                if q.state == "released":
                    side.on_release(q.node)
                outputs = []
            else:
                raise SchemaError("topic", f"node agent does not read {topic!r}")
        except (SchemaError, KeyError, TypeError) as exc:
            bad = dead_letter(names, topic, partition, offset, key, value, str(exc), "schema")
            return [bad] if bad else []
        self.last_record_wall[partition] = now_ms()
        self.watermark_at_record[partition] = side.clock.watermark
        return self._encode(outputs, partition, side)

    def _advance(
        self, side: NodeSide, partition: int, topic: str, ts_ms: int
    ) -> list[NodeReport | QuarantineRequest]:
        seen = self.source_max.setdefault(partition, {})
        if ts_ms > seen.get(topic, ts_ms - 1):
            seen[topic] = ts_ms
        watermark: int | None = max(seen.values())
        for source in self.sources:
            if self.lagging(source, partition):
                behind = seen.get(source)
                watermark = None if behind is None or watermark is None else min(watermark, behind)
        return [] if watermark is None else side.advance(watermark)

    def _idle_advance(self, side: NodeSide, partition: int) -> list[NodeReport | QuarantineRequest]:
        wall = now_ms()
        last = self.last_record_wall.setdefault(partition, wall)
        base = self.watermark_at_record.get(partition, side.clock.watermark)
        idle = wall - last
        if base is None or idle < self.idle_after_ms:
            return []
        return side.advance(base + idle)

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
        last = self.persisted.get(partition)
        if out or (wm is not None and (last is None or wm - last >= CLOCK_PERSIST_EVERY_MS)):
            self.clocks[f"p{partition}"] = side.clock
            self.persisted[partition] = wm
        return out


class JobGlue:
    """Job-keyed half: jobs.events and the node side's reports."""

    def __init__(
        self, policy: Policy, names: TopicNames, jobs: MutableMapping[str, JobState]
    ) -> None:
        self.names = names
        self.side = JobSide(policy, jobs)

    def handle(
        self, topic: str, partition: int, offset: int, key: bytes | None, value: bytes | None
    ) -> list[Out]:
        names = self.names
        try:
            data = loads(value or b"")
            if topic == names.jobs_events:
                outputs = self.side.on_job_event(JobEvent.from_dict(data))
            elif topic == names.node_evidence:
                outputs = self.side.on_node_report(NodeReport.from_dict(data))
            else:
                raise SchemaError("topic", f"job agent does not read {topic!r}")
        except (SchemaError, KeyError, TypeError) as exc:
            bad = dead_letter(names, topic, partition, offset, key, value, str(exc), "schema")
            return [bad] if bad else []
        out: list[Out] = []
        for o in outputs:
            if isinstance(o, NodeTermination):
                out.append(Out(names.term_by_node, o.node.encode(), orjson.dumps(o.to_dict())))
            else:
                log.info(
                    "decision %s attempt %d: %s -> %s (%s) suspects=%s rule=%s",
                    o.job_id,
                    o.attempt,
                    o.verdict,
                    o.action,
                    o.status,
                    ",".join(o.suspect_nodes) or "-",
                    o.rule,
                )
                out.append(
                    Out(
                        names.failover_decisions,
                        o.job_id.encode(),
                        orjson.dumps(o.to_dict()),
                        decision=o,
                    )
                )
        return out
