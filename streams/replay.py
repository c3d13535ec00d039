"""Offline replay: run the engine over a JSONL dump of topics, in file order.

Each input line is `{"topic": ..., "key": ..., "value": {...}}`. The output is the records the
pipeline would publish, in the same line format. Bad lines become dead letters, never a stop:
a line that does not decode, one stamped more than the max future skew ahead of `now`
(`schemas.event_time`; only that bound and the absolute floor apply here, so an old export
replays unchanged), and one whose processing raised (a bug: dead-lettered as `process`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson

from schemas.alerts import JobAlert
from schemas.bounds import MAX_VALUE_BYTES
from schemas.codec import DECODERS
from schemas.dead_letter import DeadLetter, dead_letter_topic
from schemas.decisions import Decision
from schemas.errors import SchemaError
from schemas.event_time import EventTimeBounds
from schemas.health import CONDITIONS, GpuHealth
from schemas.quarantine import QuarantineRecord
from schemas.topics import Topic
from schemas.xid import GpuXid
from streams.clock import now_ms as wall_ms
from streams.engine.local import LocalPipeline, Output
from streams.policy import Policy

# Topics the pipeline itself writes: a dump may hold them; replay recomputes them instead.
OUTPUT_TOPICS = frozenset(
    {
        Topic.FAILOVER_DECISIONS,
        Topic.JOBS_REQUEUE,
        Topic.JOBS_STATUS,
        Topic.FAILOVER_ALERTS,
    }
)
QUARANTINE_TOPIC = Topic.NODES_QUARANTINE
HEALTH_TOPIC = Topic.GPU_HEALTH
XID_TOPIC = Topic.GPU_XID


@dataclass
class ReplayStats:
    records: int = 0
    skipped: int = 0
    dead_letters: Counter[str] = field(default_factory=Counter)
    verdicts: Counter[str] = field(default_factory=Counter)
    actions: Counter[str] = field(default_factory=Counter)
    quarantined: list[str] = field(default_factory=list)
    alerts: Counter[str] = field(default_factory=Counter)
    unknown_xids: int = 0
    duplicate_terminations: int = 0

    def summary(self) -> str:
        lines = [
            f"replay: {self.records} records read, {self.skipped} output-topic records skipped"
        ]
        decided = sum(self.verdicts.values())
        lines.append(f"decisions: {decided}")
        for verdict, n in sorted(self.verdicts.items()):
            lines.append(f"  verdict {verdict}: {n}")
        for action, n in sorted(self.actions.items()):
            lines.append(f"  action {action}: {n}")
        nodes = ", ".join(self.quarantined) if self.quarantined else "none"
        lines.append(f"quarantined nodes ({len(self.quarantined)}): {nodes}")
        if self.alerts:
            kinds = ", ".join(f"{k} {n}" for k, n in sorted(self.alerts.items()))
            lines.append(f"alerts: {kinds}")
        lines.append(
            f"unknown XID codes seen: {self.unknown_xids}; "
            f"duplicate terminations ignored: {self.duplicate_terminations}"
        )
        rejected = sum(self.dead_letters.values())
        lines.append(f"rejected lines (dead-lettered): {rejected}")
        for topic, n in sorted(self.dead_letters.items()):
            lines.append(f"  {topic}: {n}")
        return "\n".join(lines)


def _line(topic: str, key: str | None, value: dict[str, Any]) -> bytes:
    return orjson.dumps({"topic": topic, "key": key, "value": value})


def dead_letter(
    topic: str | None, raw: bytes, error: str, lineno: int, kind: str = "decode"
) -> tuple[str, bytes]:
    """The dead letter of a bad line (`schemas.dead_letter`, addressed by line number, no wall
    clock: replay's output is a function of its input and `--now`) and its topic."""
    dlq = dead_letter_topic(topic)
    letter = DeadLetter.of(
        error=error,
        error_kind=kind,
        component="replay",
        topic=topic,
        line=lineno,
        value=raw.rstrip(b"\n"),
    )
    return dlq, _line(dlq, letter.where, letter.to_dict())


# The value may be up to MAX_VALUE_BYTES; the envelope around it adds little.
MAX_LINE_BYTES = MAX_VALUE_BYTES + 64 * 1024


class Replayer:
    def __init__(
        self,
        policy: Policy,
        now_ms: int | None = None,
        bounds: EventTimeBounds | None = None,
    ) -> None:
        """`now_ms`: the clock of the future bound (default: the wall clock); `bounds`: default
        the max future skew setting (`schemas.event_time`), never a past bound."""
        self.pipeline = LocalPipeline(policy)
        self.stats = ReplayStats()
        self.bounds = EventTimeBounds.from_env(live=False) if bounds is None else bounds
        self.now_ms = wall_ms() if now_ms is None else now_ms
        self.accepted = self.bounds.range_at(self.now_ms)
        condition_class = self.pipeline.node_side.evidence_of.condition_class
        self.ignored_conditions = frozenset(c for c in CONDITIONS if condition_class(c) is None)
        # XID codes the policy lists as ignored (unknown codes are counted: not these).
        self.ignored_xids = frozenset(c for c, cls in policy.xid_class.items() if cls == "ignore")

    def run(self, lines: Iterable[bytes]) -> Iterator[bytes]:
        stats, one, pipeline = self.stats, self._one, self.pipeline
        loads, health_peek, xid_peek = orjson.loads, GpuHealth.peek, GpuXid.peek
        ignored_conditions, ignored_xids = self.ignored_conditions, self.ignored_xids
        low, high = self.accepted
        # Most lines are signals the policy ignores (`ok` samples, noise XIDs), and most of
        # those pass no time anything waits for (`LocalPipeline.quiet_until`): all they do is
        # move the watermark. Such a line only raises `held_ts` (the latest such time); the
        # pipeline gets it before the next other line and at the end. The outputs are the
        # same, line by line (tests/unit/streams/test_replay_fast_path.py).
        limit = min(high, pipeline.quiet_until())
        held_ts = 0  # none held (event times are later)
        held_line: tuple[bytes, int, Any] = (b"", 0, None)  # the line that carried held_ts
        records = 0  # counted in a local: an attribute per record costs ~2% here
        try:
            for lineno, raw in enumerate(lines, start=1):
                if not raw or raw.isspace():
                    continue
                records += 1
                if len(raw) <= MAX_LINE_BYTES:
                    try:
                        envelope = loads(raw)
                    except orjson.JSONDecodeError:
                        envelope = None
                    if type(envelope) is dict:
                        topic = envelope.get("topic")
                        ts_ms = 0
                        if topic == HEALTH_TOPIC:
                            sample = health_peek(envelope.get("value"))
                            if sample is not None and sample[2] in ignored_conditions:
                                ts_ms = sample[1]
                        elif topic == XID_TOPIC:
                            xid = xid_peek(envelope.get("value"))
                            if xid is not None and xid[1] in ignored_xids:
                                ts_ms = xid[2]
                        if ts_ms and low <= ts_ms <= limit:
                            if ts_ms > held_ts:
                                held_ts, held_line = ts_ms, (raw, lineno, topic)
                            continue
                if held_ts:
                    yield from self._release(held_ts, *held_line)
                    held_ts = 0
                out = one(raw, lineno)  # parses the line again: the uncommon lines only
                limit = min(high, pipeline.quiet_until())
                if out:
                    yield from out
        finally:
            stats.records += records
        if held_ts:
            yield from self._release(held_ts, *held_line)
        yield from self._emit(self.pipeline.finish())
        stats.unknown_xids = self.pipeline.node_side.unknown_xids
        stats.duplicate_terminations = self.pipeline.job_side.duplicates

    def _release(self, ts_ms: int, raw: bytes, lineno: int, topic: str) -> list[bytes]:
        """Give the pipeline the latest time of the ignored signals read since the last other
        line (`raw`, line `lineno` of `topic`, carried it); a failure there (a bug) is its
        dead letter."""
        try:
            outputs = self.pipeline.feed_ignored(ts_ms)  # nothing waits up to it: no outputs
            return list(self._emit(outputs)) if outputs else []
        except Exception as exc:  # noqa: BLE001 - one record's failure must not stop the replay
            return [self._dead(topic, raw, f"{type(exc).__name__}: {exc}", lineno, "process")]

    def _one(self, raw: bytes, lineno: int) -> list[bytes]:
        """The output lines for one input line (usually none): a list, not a generator, as this
        runs once per record."""
        topic: str | None = None
        try:
            if len(raw) > MAX_LINE_BYTES:
                raise SchemaError("line", f"{len(raw)} bytes, over the limit of {MAX_LINE_BYTES}")
            envelope = orjson.loads(raw)
            if not isinstance(envelope, dict):
                raise SchemaError("line", "expected a JSON object with topic and value")
            topic_v = envelope.get("topic")
            if not isinstance(topic_v, str):
                raise SchemaError("topic", "missing or not a string")
            decoder = DECODERS.get(topic_v)
            if decoder is None:
                if topic_v in OUTPUT_TOPICS or topic_v.endswith(".dlq"):
                    self.stats.skipped += 1
                    return []
                if topic_v == QUARANTINE_TOPIC:
                    topic = topic_v
                    self._quarantine_input(envelope.get("value"))
                    return []
                raise SchemaError("topic", f"unknown topic {topic_v!r}")
            topic = topic_v
            value = envelope.get("value")
            # Most records are samples the policy ignores: they move only time, undecoded.
            peek = GpuHealth.peek(value) if topic_v == HEALTH_TOPIC else None
            if peek is not None and peek[2] in self.ignored_conditions:
                record = None
                ts_ms = peek[1]
            else:
                record = decoder(value)
                ts_ms = record.ts_ms
            low, high = self.accepted
            if not low <= ts_ms <= high:  # the reason only when refused: hot path
                self.bounds.check("ts_ms", ts_ms, self.now_ms)
        except (orjson.JSONDecodeError, SchemaError) as exc:
            reason = (
                f"not valid JSON: {exc}" if isinstance(exc, orjson.JSONDecodeError) else str(exc)
            )
            return [self._dead(topic, raw, reason, lineno, "decode")]
        try:
            if record is None:
                outputs = self.pipeline.feed_ignored(ts_ms)
            else:
                outputs = self.pipeline.feed(record)
            return list(self._emit(outputs)) if outputs else []
        except Exception as exc:  # noqa: BLE001 - one record's failure must not stop the replay
            return [self._dead(topic, raw, f"{type(exc).__name__}: {exc}", lineno, "process")]

    def _dead(self, topic: str | None, raw: bytes, reason: str, lineno: int, kind: str) -> bytes:
        dlq, line = dead_letter(topic, raw, reason, lineno, kind)
        self.stats.dead_letters[dlq] += 1
        return line

    def _quarantine_input(self, value: Any) -> None:
        """A released node in the dump (operator or repair) may be quarantined again later."""
        rec = QuarantineRecord.from_dict(value)
        self.bounds.check("ts_ms", rec.ts_ms, self.now_ms)
        if rec.state == "released":
            self.pipeline.release(rec.node, rec.ts_ms)

    def _emit(self, outputs: list[Output]) -> Iterator[bytes]:
        for out in outputs:
            if isinstance(out, Decision):
                self.stats.verdicts[out.verdict] += 1
                self.stats.actions[out.action] += 1
                yield _line(Topic.FAILOVER_DECISIONS, out.job_id, out.to_dict())
            elif isinstance(out, JobAlert):
                self.stats.alerts[out.kind] += 1
                yield _line(Topic.FAILOVER_ALERTS, out.job_id, out.to_dict())
            else:
                self.stats.quarantined.append(out.node)
                yield _line(QUARANTINE_TOPIC, out.node, out.to_dict())
