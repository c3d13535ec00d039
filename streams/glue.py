"""Thin glue between Kafka records and the engine: decode, call, encode, dead-letter.

Nothing here imports faust: the handlers take (topic, partition, offset, key, value) and return
the records to send, so the agents in `streams.app` stay a few lines each.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, MutableMapping
from dataclasses import dataclass
from typing import Any

import orjson

from schemas.codec import loads
from schemas.dead_letter import DeadLetter, kafka_dead_letter_topic, routed
from schemas.decisions import Decision, Evidence
from schemas.engine import NodeReport, NodeReportPack, NodeTermination, QuarantineRequest
from schemas.errors import SchemaError
from schemas.event_time import EventTimeBounds
from schemas.quarantine import QuarantineRecord
from schemas.topics import TopicNames
from streams.clock import PersistedClocks, now_ms
from streams.deferred import DEFER_BEHIND, DRAIN_CHUNK, HeldEvidence, HeldItem
from streams.engine.node_side import NodeSide, NodeState, PartitionClock
from streams.partitioner import key_partition
from streams.policy import Policy

log = logging.getLogger("gpufailover.classifier")
# Node reports of one job per failover.node-evidence record. Each can carry up to
# max_evidence_per_node items (~10 KB): 50 stay far under the 1 MiB request limit.
REPORTS_PER_RECORD = 50


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
    component: str,
) -> Out | None:
    """The DLQ record (`schemas.dead_letter`) for a bad input; None (logged) for topics without
    a DLQ (internal: written by the classifier itself)."""
    log.warning("dead-lettering %s[%d]@%d: %s (%s)", topic, partition, offset, error, kind)
    dlq = kafka_dead_letter_topic(names, topic, fallback=None)
    if dlq is None:
        log.error(
            "no DLQ for %s[%d]@%d: record dropped after error: %s", topic, partition, offset, error
        )
        return None
    letter = DeadLetter.of(
        error=error,
        error_kind=kind,
        component=component,
        topic=topic,
        partition=partition,
        offset=offset,
        key=key,
        value=value,
        now_ms=now_ms(),
    )
    return Out(*routed(letter, dlq))


class NodeGlue:
    """Node-keyed half: failover.node-signals (from `streams.signal_filter`), nodes.quarantine.

    Time moves only on the filter's watermark and idle records: the filter knows which of the
    raw inputs still have unread records, so the watermark never passes evidence in flight.
    """

    def __init__(
        self,
        policy: Policy,
        names: TopicNames,
        nodes: MutableMapping[str, NodeState],
        clocks: MutableMapping[str, PartitionClock],
        bounds: EventTimeBounds | None = None,
        clock: Callable[[], int] = now_ms,
        backlog: Callable[[int], int] = lambda partition: 0,
        busy: Callable[[], bool] = lambda: False,
        evidence_partitions: int | None = None,
    ) -> None:
        self.policy = policy
        # Partitions of failover.node-evidence: reports of several jobs bound for one partition
        # share a record. None: one job a record, its key picks the partition.
        self.evidence_partitions = evidence_partitions
        # Records of node-signals `partition` not processed yet: while more than DEFER_BEHIND,
        # evidence of nodes no termination waits on is held (`streams.deferred`).
        self.backlog = backlog
        # Held evidence waits while the worker drains a backlog elsewhere (the signal filter's
        # inputs): the decisions in that backlog come first.
        self.busy = busy
        self.held: dict[int, HeldEvidence] = {}
        self.capped: set[int] = set()  # partitions whose commit cap was set (`caps`)
        # Held items applied for the record being handled: (partition, node, offset, items).
        self._taken: list[tuple[int, str, int, list[HeldItem]]] = []
        self.clock = clock  # the wall clock of the event-time bound
        # The future bound for releases on nodes.quarantine (schemas.event_time): a release
        # stamped far ahead would void every later window's evidence on the node. Old
        # releases are harmless (the compacted topic keeps them): no past bound here.
        self.bounds = None if bounds is None else EventTimeBounds(bounds.max_future_skew_ms)
        self.names = names
        self.nodes = nodes
        # The clock (watermark and wake-ups) goes to the changelog whenever it moves (the
        # filter sends the watermark at most every 100 ms).
        self.clocks = PersistedClocks(
            clocks, "p", PartitionClock, lambda c: (c.watermark, len(c.closing))
        )
        self.sides: dict[int, NodeSide] = {}
        # The last watermark the filter sent, per partition: the base of the idle advance
        # (memory only; after a restart the persisted watermark stands in).
        self.filter_watermark: dict[int, int] = {}
        # The latest termination time read per partition: the idle advance's base too, so a
        # partition whose nodes sent no signal yet still closes its windows once quiet.
        self.latest_termination: dict[int, int] = {}

    def side(self, partition: int) -> NodeSide:
        side = self.sides.get(partition)
        if side is None:
            clock = self.clocks.load(partition)
            side = NodeSide(self.policy, self.nodes, clock, follow_records=False)
            self.sides[partition] = side
        return side

    def handle(
        self, topic: str, partition: int, offset: int, key: bytes | None, value: bytes | None
    ) -> list[Out]:
        self._taken.clear()
        try:
            return self._handle(topic, partition, offset, key, value)
        except BaseException:
            # The driver rolls this record's writes back: what it applied of the held
            # evidence must be held again, or it would be lost (`streams.deferred`).
            for held_partition, node, first, items in self._taken:
                self.held.setdefault(held_partition, HeldEvidence()).put_back(node, first, items)
            raise

    def _handle(
        self, topic: str, partition: int, offset: int, key: bytes | None, value: bytes | None
    ) -> list[Out]:
        side = self.side(partition)
        names = self.names
        outputs: list[NodeReport | QuarantineRequest]
        try:
            data = loads(value or b"")
            if topic == names.node_signals:
                outputs = self._signal(side, partition, offset, data)
            elif topic == names.nodes_quarantine:
                q = QuarantineRecord.from_dict(data)
                if self.bounds is not None:
                    self.bounds.check("ts_ms", q.ts_ms, self.clock())
                outputs = []
                if q.state == "released":
                    outputs = self._apply_held(side, partition, q.node)
                    side.on_release(q.node, q.ts_ms)
            else:
                raise SchemaError("topic", f"node agent does not read {topic!r}")
        except (SchemaError, KeyError, TypeError, ValueError) as exc:
            bad = dead_letter(
                names, topic, partition, offset, key, value, str(exc), "decode", "node-agent"
            )
            return [bad] if bad else []
        return self._encode(outputs, partition, side)

    def _signal(
        self, side: NodeSide, partition: int, offset: int, data: Any
    ) -> list[NodeReport | QuarantineRequest]:
        if "signals" in data:
            out: list[NodeReport | QuarantineRequest] = []
            held = self.held.get(partition)
            behind = self.backlog(partition) > DEFER_BEHIND
            for item in data["signals"]:
                try:
                    if "evidence" in item:
                        raw = item["evidence"]
                        node = raw["node"]
                        if (held is not None and node in held) or (
                            behind and not side.waits_on(node)
                        ):
                            if held is None:
                                held = self.held[partition] = HeldEvidence()
                                log.info(
                                    "node-signals p%d is %d records behind: holding the "
                                    "evidence of nodes no termination waits on, applied later",
                                    partition,
                                    self.backlog(partition),
                                )
                            held.hold(node, offset, (raw, side.clock.watermark))
                        else:
                            out += side.on_evidence(Evidence.from_dict(raw))
                    else:
                        term = NodeTermination.from_dict(item["termination"])
                        out += self._apply_held(side, partition, term.node)
                        latest = self.latest_termination.get(partition)
                        if latest is None or term.terminated_ts_ms > latest:
                            self.latest_termination[partition] = term.terminated_ts_ms
                        out += side.on_termination(term)
                except (SchemaError, KeyError, TypeError, ValueError):
                    # Our own filter wrote it (a bug, not bad input): skip the item, keep the rest.
                    log.exception("node-signals p%d: bad item %r skipped", partition, item)
            return out
        if "watermark" in data:
            watermark = int(data["watermark"])
            self.filter_watermark[partition] = watermark
            return side.advance(watermark)
        if "idle_ms" in data:
            # The filter says every input of the partition is read and quiet: nothing stamped
            # before the newest time we know of is still to come (the idle advance).
            known = (
                self.filter_watermark.get(partition, side.clock.watermark),
                self.latest_termination.get(partition),
            )
            base = max((t for t in known if t is not None), default=None)
            return [] if base is None else side.advance(base + int(data["idle_ms"]))
        raise SchemaError("value", "expected signals, watermark or idle_ms")

    # -- held evidence (`streams.deferred`) -------------------------------------------------
    def _apply_held(
        self, side: NodeSide, partition: int, node: str
    ) -> list[NodeReport | QuarantineRequest]:
        """`node`'s held evidence, applied before anything else of the node."""
        held = self.held.get(partition)
        first = None if held is None else held.first_offset_of(node)
        if held is None or first is None:
            return []
        items = held.take(node)
        self._taken.append((partition, node, first, items))
        return self._apply(side, partition, items)

    def _apply(
        self, side: NodeSide, partition: int, items: list[HeldItem]
    ) -> list[NodeReport | QuarantineRequest]:
        out: list[NodeReport | QuarantineRequest] = []
        for raw, read_at in items:
            try:
                out += side.on_evidence(Evidence.from_dict(raw), read_at)
            except (SchemaError, KeyError, TypeError, ValueError):
                log.exception("node-signals p%d: bad held item %r skipped", partition, raw)
        return out

    def held_count(self, partition: int) -> int:
        held = self.held.get(partition)
        return 0 if held is None else held.count

    def holding(self) -> list[int]:
        """Partitions with held evidence."""
        return [p for p, held in self.held.items() if held.count]

    def drain(self, partition: int, budget_s: float) -> list[Out]:
        """Apply the partition's held evidence, oldest node first, for about `budget_s` of
        time; one node only while the partition or the worker is behind (never stuck)."""
        held = self.held.get(partition)
        if held is None:
            return []
        behind = self.backlog(partition) > DEFER_BEHIND or self.busy()
        side = self.side(partition)
        outputs: list[NodeReport | QuarantineRequest] = []
        until = time.monotonic() + budget_s
        while held.count:
            for _, items in held.take_oldest(1 if behind else DRAIN_CHUNK):
                outputs += self._apply(side, partition, items)
            if behind or time.monotonic() >= until:
                break
        return self._encode(outputs, partition, side)

    def caps(self) -> list[tuple[int, int | None]]:
        """(partition, first offset with held evidence or None) for each partition whose
        commit cap may have changed: set after the batch's state is written."""
        out: list[tuple[int, int | None]] = []
        for partition in self.capped | set(self.held):
            held = self.held.get(partition)
            first = None if held is None else held.first_offset()
            out.append((partition, first))
            if first is None:
                if self.held.pop(partition, None) is not None:
                    log.info("node-signals p%d: held evidence all applied", partition)
                self.capped.discard(partition)
            else:
                self.capped.add(partition)
        return out

    def _encode(
        self, outputs: list[NodeReport | QuarantineRequest], partition: int, side: NodeSide
    ) -> list[Out]:
        out: list[Out] = []
        # Per destination: the job's node-evidence partition (one job when not known), each
        # job's reports in order.
        reports: dict[int | str, list[NodeReport]] = {}
        parts = self.evidence_partitions
        for o in outputs:
            if isinstance(o, NodeReport):
                dest = o.job_id if parts is None else key_partition(o.job_id.encode(), parts)
                reports.setdefault(dest, []).append(o)
            else:
                out.append(
                    Out(self.names.quarantine_requests, o.node.encode(), orjson.dumps(o.to_dict()))
                )
        for dest, items in reports.items():
            out.extend(self._reports(None if isinstance(dest, str) else dest, items))
        self.clocks.save(partition, side.clock, sent=bool(out))
        return out

    def _reports(self, partition: int | None, items: list[NodeReport]) -> list[Out]:
        """The reports of one input record for one node-evidence partition: one record when
        alone, else packed by up to REPORTS_PER_RECORD. Each record the job agent reads costs
        ~90 us in faust and a state write per job, so a termination on N nodes costs
        N/REPORTS_PER_RECORD records, not ~3N, and a turn's reports on many jobs a few."""
        topic = self.names.node_evidence
        if len(items) == 1:
            only = items[0]
            return [Out(topic, only.job_id.encode(), orjson.dumps(only.to_dict()), partition)]
        out: list[Out] = []
        for i in range(0, len(items), REPORTS_PER_RECORD):
            chunk = items[i : i + REPORTS_PER_RECORD]
            one_job = all(r.job_id == chunk[0].job_id for r in chunk)
            key = chunk[0].job_id.encode() if one_job else None  # None: several jobs
            value = orjson.dumps(NodeReportPack(tuple(chunk)).to_dict())
            out.append(Out(topic, key, value, partition))
        return out

    def forget(self, partitions: Iterable[int]) -> None:
        """Partitions revoked: their clocks are reloaded from the table if they come back
        (another worker may have moved them meanwhile)."""
        self.clocks.forget(partitions)
        for partition in partitions:
            self.sides.pop(partition, None)
            # Held evidence is read again from the (capped) committed offset by the next owner.
            self.held.pop(partition, None)
            self.filter_watermark.pop(partition, None)
            self.latest_termination.pop(partition, None)
