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
  100,000 distinct XIDs is 2,000 records for the node agent, not 100,000;
- `{"watermark": ts_ms}`: the partition's event time (`streams.clock.InputClock`: the largest
  ts_ms seen on the three inputs, held back by an input with unread records), counting only
  records read at least DISORDER_MS ago (see there); sent at most every WATERMARK_EVERY_MS,
  and at once when it passes a time the node agent waits for (a termination's time, its end
  of grace, a requested `until_ms`: the node side's wake-ups) unless a backlog drains, so a
  live decision does not wait for the cadence. The node agent moves time only on
  these, so it never runs ahead of evidence this filter has not forwarded yet;
- `{"idle_ms": n}`: the partition's inputs are caught up and have been quiet for n ms (the
  node agent moves its watermark on by that much: the idle advance).

Malformed inputs go to their dead-letter topic from here, as the node agent sent them before.
Pure: no Kafka here, the loop feeds records in and sends what comes out.
"""

from __future__ import annotations

import heapq
import sys
from collections import Counter, deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

import orjson

from schemas.bounds import TS_CEIL_MS, saturating_add
from schemas.codec import loads
from schemas.decisions import Evidence, EvidenceClass, EvidenceKind
from schemas.engine import IdleMarker, NodeTermination, SignalPack, Watermark
from schemas.errors import SchemaError
from schemas.event_time import EventTimeBounds
from schemas.health import CONDITIONS, GpuHealth
from schemas.topics import TopicNames
from schemas.xid import GpuXid
from streams.clock import InputClock, Lagging, never_lagging
from streams.engine.evidence import coalesces
from streams.engine.node_side import SignalClassifier
from streams.glue import Out, dead_letter
from streams.policy import Policy

WATERMARK_EVERY_MS = 100  # a non-hardware decision waits at most this much more than its grace
# Kafka orders records within a partition only: an XID can be appended a little after a
# later-stamped health sample of its partition (producer batches leave in any order), and
# a watermark sent as soon as that sample is read would pass the XID. A record counts for
# the watermark once it was read DISORDER_MS ago, and only if every input still shows no
# unread records then: the disorder tolerated is this much wall time, not luck of timing.
DISORDER_MS = 50
# A partition this many input records behind is draining a backlog: its watermark keeps the
# cadence (an early one per batch would only add records for the node agent).
DRAINING_RECORDS = 2_000
IDLE_EVERY_MS = 1_000  # idle markers, per partition, while it stays idle
PACK_MAX = 50  # items per forwarded record (500 held 10 KB a node of faust memory: BENCHMARKS.md)


def no_backlog(topic: str, partition: int) -> int:
    return 0


class Record(Protocol):
    """What the filter reads of an input record: aiokafka's decoded records, its
    ConsumerRecords (`streams.raw_fetch`) and InputRecord all have it."""

    @property
    def offset(self) -> int: ...
    @property
    def key(self) -> bytes | None: ...
    @property
    def value(self) -> bytes | None: ...


@dataclass(frozen=True, slots=True)
class InputRecord:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


@dataclass(slots=True)
class _Fold:
    """Repeats of one signal within coalesce_ms, folded in a batch (becomes one Evidence)."""

    signal: tuple[str, int | None, EvidenceKind, int | str]  # node, gpu_index, kind, code
    cls: EvidenceClass
    ts: int
    last_ts: int
    count: int

    def evidence(self) -> Evidence:
        node, gpu, kind, code = self.signal
        last = None if self.last_ts == self.ts else self.last_ts
        return Evidence(node, gpu, kind, code, self.ts, self.cls, self.count, last)


@dataclass(slots=True)
class _Partition:
    """What one batch forwards for one partition, in order of first appearance."""

    folds: dict[str, list[_Fold]]  # per node, in order of creation
    by_signal: dict[tuple[str, int | None, EvidenceKind, int | str], list[_Fold]]
    order: list[str | NodeTermination]  # a node (its folded evidence) or a termination


class SignalFilter:
    def __init__(
        self,
        policy: Policy,
        names: TopicNames,
        idle_after_ms: int,
        lagging: Lagging = never_lagging,
        bounds: EventTimeBounds | None = None,
        backlog: Callable[[str, int], int] = no_backlog,
    ) -> None:
        self.names = names
        self.backlog = backlog  # input records not read yet, by (topic, partition)
        self.classify = SignalClassifier(policy)
        # Every condition's class, looked up by subscript in the hot loop (no call).
        self.condition_cls = {c: self.classify.condition_class(c) for c in CONDITIONS}
        self.coalesce_ms = policy.coalesce_ms
        self.grace_ms = policy.grace_ms
        # None: no clock-relative bounds (unit tests at fixed dates); the worker passes
        # the settings' (schemas.event_time).
        self.bounds = EventTimeBounds(TS_CEIL_MS) if bounds is None else bounds
        self.sources = (names.gpu_xid, names.gpu_health, names.term_by_node)
        # The watermark is the time of the evidence only: a termination's time says nothing
        # about which signals have been read (they come on other topics, at another pace).
        self.clock = InputClock((names.gpu_xid, names.gpu_health), idle_after_ms, lagging)
        self.idle_after_ms = idle_after_ms
        self.sent_watermark: dict[int, int] = {}
        self.sent_watermark_wall: dict[int, int] = {}
        self.last_input_wall: dict[int, int] = {}
        self.sent_idle_wall: dict[int, int] = {}
        # Per partition, the times the node side waits for (a min-heap; passed ones dropped).
        self.wake_ms: dict[int, list[int]] = {}
        # Per partition, (wall ms read, largest ts_ms seen then) not yet DISORDER_MS old, and
        # the largest ts_ms read at least DISORDER_MS ago.
        self.reads: dict[int, deque[tuple[int, int]]] = {}
        self.settled: dict[int, int] = {}
        # Counted here, reported by the loop in bulk (per-record metric calls cost ~6%).
        self.xids: Counter[int] = Counter()
        self.conditions: Counter[str] = Counter()
        self.forgotten: Counter[str] = Counter()  # DLQ-less bad records, by topic

    def reduce(self, records: Iterable[InputRecord], wall_ms: int) -> list[Out]:
        """The records to forward (and dead letters) for records in input order: `reduce_runs`
        on each run of consecutive records of one topic and partition."""
        runs: list[tuple[tuple[str, int], list[InputRecord]]] = []
        for rec in records:
            where = (rec.topic, rec.partition)
            if runs and runs[-1][0] == where:
                runs[-1][1].append(rec)
            else:
                runs.append((where, [rec]))
        return self.reduce_runs(runs, wall_ms)

    def reduce_runs(
        self, runs: Iterable[tuple[tuple[str, int], Sequence[Record]]], wall_ms: int
    ) -> list[Out]:
        """The records to forward (and dead letters) for one batch of input records, given as
        ((topic, partition), its records in order) pairs: aiokafka's `getmany(...).items()`.

        This is the classifier's hottest code (every input record): one loop per input topic,
        names are locals.
        """
        xid_t, health_t, term_t = self.sources
        xid_class, condition_cls = self.classify.xid_class, self.condition_cls
        xids, conditions = self.xids, self.conditions
        # Event-time bounds (schemas.event_time) as one range for this batch: a record outside
        # it is dead-lettered before it can move a watermark.
        bounds = self.bounds
        lo, hi = bounds.range_at(wall_ms)
        parts: dict[int, _Partition] = {}
        # The largest ts_ms of each partition's accepted records, per topic (int keys: cheap).
        latest_health: dict[int, int] = {}
        latest_xid: dict[int, int] = {}
        dead: list[Out] = []
        # A storm repeats one XID record byte for byte (the agent stamps in ms): the last
        # XID value parsed and its fields, so a repeat is compared, not parsed again.
        last_xid: bytes | None = None
        last_fields: tuple[str, int, int, int | None, int] = ("", 0, 0, None, 0)
        fold = self._fold
        for (topic, partition), recs in runs:
            part = parts.get(partition)
            if topic == health_t:
                latest = latest_health.get(partition, 0)
                for rec in recs:
                    try:
                        data = loads(rec.value or b"")
                        # Checked in full but not built: most samples are ones the policy
                        # ignores.
                        peek = GpuHealth.peek(data)
                        if peek is None:
                            health = GpuHealth.from_dict(data)  # raises, or an unusual valid one
                            node, ts_ms, condition = health.node, health.ts_ms, health.condition
                        else:
                            node, ts_ms, condition = peek
                        conditions[condition] += 1
                        if not lo <= ts_ms <= hi:
                            bounds.check("ts_ms", ts_ms, wall_ms)
                    except Exception as exc:  # noqa: BLE001 - one bad record never stops it
                        self._dead_letter(dead, topic, partition, rec, exc)
                        continue
                    if ts_ms > latest:  # only if accepted
                        latest = ts_ms
                    cls = condition_cls[condition]
                    if cls is not None:
                        gpu = health.gpu_index if peek is None else data.get("gpu_index")
                        if part is None:
                            part = parts[partition] = _Partition({}, {}, [])
                        fold(part, (node, gpu, "health", condition), cls, ts_ms, 1)
                if latest:
                    latest_health[partition] = latest
            elif topic == xid_t:
                latest = latest_xid.get(partition, 0)
                for rec in recs:
                    try:
                        value = rec.value
                        if value is not None and value == last_xid:
                            fields = last_fields
                        else:
                            data = loads(value or b"")
                            peeked = GpuXid.peek(data)  # checked in full, not built
                            if peeked is None:
                                xid = GpuXid.from_dict(data)  # raises, or an unusual valid one
                                peeked = xid.node, xid.xid, xid.ts_ms, xid.gpu_index, xid.count
                            last_xid, last_fields = value, peeked
                            fields = peeked
                        node, code, ts_ms, gpu, count = fields
                        xids[code] += 1
                        if not lo <= ts_ms <= hi:
                            bounds.check("ts_ms", ts_ms, wall_ms)
                    except Exception as exc:  # noqa: BLE001 - one bad record never stops it
                        self._dead_letter(dead, topic, partition, rec, exc)
                        continue
                    if ts_ms > latest:
                        latest = ts_ms
                    cls = xid_class(code)
                    if cls is not None:
                        if part is None:
                            part = parts[partition] = _Partition({}, {}, [])
                        fold(part, (node, gpu, "xid", code), cls, ts_ms, count)
                if latest:
                    latest_xid[partition] = latest
            else:
                for rec in recs:
                    try:
                        if topic != term_t:
                            raise SchemaError("topic", f"signal filter does not read {topic!r}")
                        termination = NodeTermination.from_dict(loads(rec.value or b""))
                    except Exception as exc:  # noqa: BLE001 - one bad record never stops it
                        self._dead_letter(dead, topic, partition, rec, exc)
                        continue
                    if part is None:
                        part = parts[partition] = _Partition({}, {}, [])
                    part.order.append(termination)
                    self._wake_at(partition, termination)
        for topic, latest_of in ((health_t, latest_health), (xid_t, latest_xid)):
            for partition, ts_ms in latest_of.items():
                seen = self.clock.candidate(partition, topic, ts_ms)
                self.last_input_wall[partition] = wall_ms
                reads = self.reads.get(partition)
                if reads is None:
                    reads = self.reads[partition] = deque()
                if not reads or reads[-1][1] < seen:
                    reads.append((wall_ms, seen))
        return dead + [out for p, part in parts.items() for out in self._forward(p, part)]

    def _dead_letter(
        self, dead: list[Out], topic: str, partition: int, rec: Record, exc: Exception
    ) -> None:
        """A record the filter cannot use: to its dead-letter topic, or counted when it has
        none."""
        decode = isinstance(exc, SchemaError | KeyError | TypeError)
        bad = dead_letter(
            self.names,
            topic,
            partition,
            rec.offset,
            rec.key,
            rec.value,
            str(exc) if decode else f"{type(exc).__name__}: {exc}",
            "decode" if decode else "process",
            "signal-filter",
        )
        if bad is None:
            self.forgotten[topic] += 1
        else:
            dead.append(bad)

    def _fold(
        self,
        part: _Partition,
        signal: tuple[str, int | None, EvidenceKind, int | str],
        cls: EvidenceClass,
        ts: int,
        count: int,
    ) -> None:
        """Coalesce like `evidence.add` (the first fold of the same signal within coalesce_ms
        takes it), on mutable folds: a flood's repeats allocate nothing."""
        folds = part.by_signal.get(signal)
        if folds is None:
            folds = part.by_signal[signal] = []
            if signal[0] not in part.folds:
                part.folds[signal[0]] = []
                part.order.append(signal[0])
        else:
            coalesce = self.coalesce_ms
            for fold in folds:
                if coalesces(fold.ts, fold.last_ts, ts, coalesce):
                    fold.ts = min(fold.ts, ts)
                    fold.last_ts = max(fold.last_ts, ts)
                    fold.count = saturating_add(fold.count, count)
                    return
        fold = _Fold(signal, cls, ts, ts, count)
        folds.append(fold)
        part.folds[signal[0]].append(fold)

    def _wake_at(self, partition: int, termination: NodeTermination) -> None:
        """The times the node side will report this termination at (`NodeSide._wake_at`)."""
        heap = self.wake_ms.setdefault(partition, [])
        if termination.until_ms is not None:
            heapq.heappush(heap, termination.until_ms)
        else:
            heapq.heappush(heap, termination.terminated_ts_ms)
            heapq.heappush(heap, saturating_add(termination.terminated_ts_ms, self.grace_ms))

    def _forward(self, partition: int, part: _Partition) -> list[Out]:
        items: list[Evidence | NodeTermination] = []
        for entry in part.order:
            if isinstance(entry, str):
                items.extend(f.evidence() for f in part.folds[entry])
            else:
                items.append(entry)
        return [
            Out(
                self.names.node_signals,
                None,
                orjson.dumps(SignalPack(tuple(items[i : i + PACK_MAX])).to_dict()),
                partition,
            )
            for i in range(0, len(items), PACK_MAX)
        ]

    def watermarks(self, wall_ms: int) -> list[Out]:
        """Each partition's watermark when it moved on: at most every WATERMARK_EVERY_MS, or
        sooner when it passes a time the node side waits for (unless a backlog drains)."""
        out: list[Out] = []
        for partition in self.clock.source_max:
            sent = self.sent_watermark.get(partition, -sys.maxsize)
            wake = self.wake_ms.get(partition)
            while wake and wake[0] < sent:  # the node side has been told already
                heapq.heappop(wake)
            due = wall_ms - self.sent_watermark_wall.get(partition, 0) >= WATERMARK_EVERY_MS
            if not due and (not wake or self._draining(partition)):
                continue
            watermark = self._settled(partition, wall_ms)
            if watermark is None or watermark <= sent:
                continue
            if not due and not (wake and wake[0] < watermark):
                continue
            self.sent_watermark[partition] = watermark
            self.sent_watermark_wall[partition] = wall_ms
            body = orjson.dumps(Watermark(watermark).to_dict())
            out.append(Out(self.names.node_signals, None, body, partition))
        return out

    def _settled(self, partition: int, wall_ms: int) -> int | None:
        """The watermark from records read at least DISORDER_MS ago, held back by inputs
        that show unread records now."""
        reads = self.reads.get(partition)
        while reads and reads[0][0] <= wall_ms - DISORDER_MS:
            self.settled[partition] = reads.popleft()[1]
        settled = self.settled.get(partition)
        effective = self.clock.effective(partition)
        if settled is None or effective is None:
            return None
        return min(settled, effective)

    def _draining(self, partition: int) -> bool:
        return any(self.backlog(s, partition) > DRAINING_RECORDS for s in self.sources)

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
            body = orjson.dumps(IdleMarker(idle).to_dict())
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
                self.wake_ms,
                self.reads,
                self.settled,
            ):
                table.pop(partition, None)
