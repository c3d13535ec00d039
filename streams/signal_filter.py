"""The signal filter: the node side's high-volume inputs, reduced in batches before faust.

`gpu.health` and `gpu.xid` are nearly all of the classifier's input, and nearly all of it cannot
change a node's state: health samples the policy ignores (`ok`, `throttle`), ignored XIDs, and
repeats of a signal (one bad GPU prints tens of thousands). faust's per-record path costs
~75 us a record (BENCHMARKS.md), so these are read in batches with plain aiokafka
(`streams.signal_loop`) and only this goes on to the node agent, on `failover.node-signals`,
same partition number as the input:

- `{"signals": [...]}`: up to PACK_MAX items in input order, each `{"evidence": ...}`
  (classified, repeats within a batch folded: count, first and last time, exactly as the node
  side coalesces them, `streams.engine.evidence.add`) or `{"termination": ...}` (a
  `failover.term-by-node` record). Packed because faust's cost is per Kafka record: a wave of
  100,000 distinct XIDs is 200 records for the node agent, not 100,000;
- `{"watermark": ts_ms}`: the partition's event time (`streams.clock.InputClock`: the largest
  ts_ms seen on the three inputs, held back by an input with unread records), at most every
  WATERMARK_EVERY_MS. The node agent moves time only on these, so it never runs ahead of
  evidence this filter has not forwarded yet;
- `{"idle_ms": n}`: the partition's inputs are caught up and have been quiet for n ms (the
  node agent moves its watermark on by that much: the idle advance).

Malformed inputs go to their dead-letter topic from here, as the node agent sent them before.
Pure: no Kafka here, the loop feeds records in and sends what comes out.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import orjson

from deploy.topics import TopicNames
from schemas.codec import loads
from schemas.decisions import Evidence
from schemas.errors import SchemaError
from schemas.health import GpuHealth
from schemas.xid import GpuXid
from streams.clock import InputClock, Lagging, never_lagging
from streams.engine import evidence as ev
from streams.engine.messages import NodeTermination
from streams.engine.node_side import SignalClassifier
from streams.glue import Out, dead_letter
from streams.policy import Policy

WATERMARK_EVERY_MS = 100  # a non-hardware decision waits at most this much more than its grace
IDLE_EVERY_MS = 1_000  # idle markers, per partition, while it stays idle
PACK_MAX = 500  # items per forwarded record (~100 KB: well under Kafka's 1 MB default)


@dataclass(frozen=True, slots=True)
class InputRecord:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


@dataclass(slots=True)
class _Partition:
    """What one batch forwards for one partition, in order of first appearance."""

    folds: dict[str, list[Evidence]]
    order: list[str | dict[str, Any]]  # a node (its folded evidence) or a termination


class SignalFilter:
    def __init__(
        self,
        policy: Policy,
        names: TopicNames,
        idle_after_ms: int,
        lagging: Lagging = never_lagging,
    ) -> None:
        self.names = names
        self.classify = SignalClassifier(policy)
        self.coalesce_ms = policy.coalesce_ms
        self.sources = (names.gpu_xid, names.gpu_health, names.term_by_node)
        self.clock = InputClock(self.sources, idle_after_ms, lagging)
        self.idle_after_ms = idle_after_ms
        self.sent_watermark: dict[int, int] = {}
        self.sent_watermark_wall: dict[int, int] = {}
        self.last_input_wall: dict[int, int] = {}
        self.sent_idle_wall: dict[int, int] = {}
        # Counted here, reported by the loop in bulk (per-record metric calls cost ~6%).
        self.xids: Counter[int] = Counter()
        self.conditions: Counter[str] = Counter()
        self.forgotten: Counter[str] = Counter()  # DLQ-less bad records, by topic

    def reduce(self, records: Iterable[InputRecord], wall_ms: int) -> list[Out]:
        """The records to forward (and dead letters) for one batch of input records."""
        names = self.names
        parts: dict[int, _Partition] = {}
        dead: list[Out] = []
        for rec in records:
            topic, partition = rec.topic, rec.partition
            try:
                data = loads(rec.value or b"")
                if topic == names.gpu_health:
                    health = GpuHealth.from_dict(data)
                    self.conditions[health.condition] += 1
                    ts_ms, item = health.ts_ms, self.classify(health)
                elif topic == names.gpu_xid:
                    xid = GpuXid.from_dict(data)
                    self.xids[xid.xid] += 1
                    ts_ms, item = xid.ts_ms, self.classify(xid)
                elif topic == names.term_by_node:
                    ts_ms = NodeTermination.from_dict(data).terminated_ts_ms
                    item = None
                    termination: dict[str, Any] = data
                else:
                    raise SchemaError("topic", f"signal filter does not read {topic!r}")
            except (SchemaError, KeyError, TypeError) as exc:
                bad = dead_letter(
                    names, topic, partition, rec.offset, rec.key, rec.value, str(exc), "schema"
                )
                if bad is None:
                    self.forgotten[topic] += 1
                else:
                    dead.append(bad)
                continue
            self.clock.candidate(partition, topic, ts_ms)
            self.last_input_wall[partition] = wall_ms
            part = parts.get(partition)
            if part is None:
                part = parts[partition] = _Partition({}, [])
            if topic == names.term_by_node:
                part.order.append(termination)
            elif item is not None:
                assert item.node is not None
                folds = part.folds.get(item.node)
                if folds is None:
                    folds = part.folds[item.node] = []
                    part.order.append(item.node)
                # No cap here: the node side applies its own; a batch bounds the list.
                ev.add(folds, item, self.coalesce_ms, sys.maxsize)
        return dead + [out for p, part in parts.items() for out in self._forward(p, part)]

    def _forward(self, partition: int, part: _Partition) -> list[Out]:
        items: list[dict[str, Any]] = []
        for entry in part.order:
            if isinstance(entry, str):
                items.extend({"evidence": e.to_dict()} for e in part.folds[entry])
            else:
                items.append({"termination": entry})
        return [
            Out(
                self.names.node_signals,
                None,
                orjson.dumps({"signals": items[i : i + PACK_MAX]}),
                partition,
            )
            for i in range(0, len(items), PACK_MAX)
        ]

    def watermarks(self, wall_ms: int) -> list[Out]:
        """Each partition's watermark when it moved on (at most every WATERMARK_EVERY_MS)."""
        out: list[Out] = []
        for partition in self.clock.source_max:
            if wall_ms - self.sent_watermark_wall.get(partition, 0) < WATERMARK_EVERY_MS:
                continue
            watermark = self.clock.effective(partition)
            if watermark is None or watermark <= self.sent_watermark.get(partition, -sys.maxsize):
                continue
            self.sent_watermark[partition] = watermark
            self.sent_watermark_wall[partition] = wall_ms
            body = orjson.dumps({"watermark": watermark})
            out.append(Out(self.names.node_signals, None, body, partition))
        return out

    def idle_markers(self, wall_ms: int, partitions: Iterable[int]) -> list[Out]:
        """For each assigned partition whose inputs are caught up and quiet for `idle_after`."""
        out: list[Out] = []
        for partition in partitions:
            last = self.last_input_wall.setdefault(partition, wall_ms)
            idle = wall_ms - last
            if idle < self.idle_after_ms:
                continue
            if wall_ms - self.sent_idle_wall.get(partition, 0) < IDLE_EVERY_MS:
                continue
            if any(self.clock.lagging(source, partition) for source in self.sources):
                continue
            self.sent_idle_wall[partition] = wall_ms
            body = orjson.dumps({"idle_ms": idle})
            out.append(Out(self.names.node_signals, None, body, partition))
        return out

    def forget(self, partitions: Iterable[int]) -> None:
        """Partitions revoked: another worker owns their time now."""
        for partition in partitions:
            for table in (
                self.clock.source_max,
                self.sent_watermark,
                self.sent_watermark_wall,
                self.last_input_wall,
                self.sent_idle_wall,
            ):
                table.pop(partition, None)
