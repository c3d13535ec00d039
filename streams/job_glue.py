"""Glue for the job-keyed half: jobs.events, training.telemetry, node reports, ticks."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, MutableMapping

import orjson

from schemas.alerts import JobAlert
from schemas.codec import loads
from schemas.decisions import Decision
from schemas.engine import NodeReport, NodeTermination
from schemas.errors import SchemaError
from schemas.event_time import EventTimeBounds
from schemas.jobs import JobEvent
from schemas.telemetry import TrainingTelemetry
from schemas.topics import TopicNames
from streams.clock import InputClock, Lagging, PersistedClocks, never_lagging, now_ms
from streams.engine.job_side import JobOutput, JobSide, JobState
from streams.engine.progress import Progress, ProgressClock, ProgressTracker
from streams.glue import Out, dead_letter
from streams.policy import Policy
from streams.tables import WriteBack

log = logging.getLogger("gpufailover.classifier")
CLOCK_PERSIST_EVERY_MS = 1000


class JobGlue:
    def __init__(
        self,
        policy: Policy,
        names: TopicNames,
        jobs: MutableMapping[str, JobState],
        progress: MutableMapping[str, Progress],
        clocks: MutableMapping[str, ProgressClock],
        idle_after_ms: int,
        lagging: Lagging = never_lagging,
        bounds: EventTimeBounds | None = None,
        clock: Callable[[], int] = now_ms,
    ) -> None:
        self.policy = policy
        # Clock-relative event-time bounds (schemas.event_time) against `clock`, the wall
        # clock; None: none (unit tests).
        self.bounds = bounds
        self.clock = clock
        self.names = names
        # Each record's job-state writes reach the table once, after it (streams.tables).
        self.jobs: WriteBack[JobState] = WriteBack(jobs)
        self.progress = progress
        # The job side's clock (hang alerts only) is persisted lazily.
        self.clocks = PersistedClocks(
            clocks,
            "j",
            ProgressClock,
            lambda c: (c.watermark, len(c.deadlines)),
            lazy_ms=CLOCK_PERSIST_EVERY_MS,
        )
        self.time = InputClock(
            (names.jobs_events, names.training_telemetry), idle_after_ms, lagging
        )
        self.sides: dict[int, JobSide] = {}

    def side(self, partition: int) -> JobSide:
        side = self.sides.get(partition)
        if side is None:
            clock = self.clocks.load(partition)
            tracker = ProgressTracker(self.policy, self.progress, clock)
            side = JobSide(self.policy, self.jobs, tracker)
            self.sides[partition] = side
        return side

    def forget(self, partitions: Iterable[int]) -> None:
        """Partitions revoked: reload their clocks from the table if they come back."""
        self.clocks.forget(partitions)
        for partition in partitions:
            self.sides.pop(partition, None)

    def handle(
        self, topic: str, partition: int, offset: int, key: bytes | None, value: bytes | None
    ) -> list[Out]:
        """The records to send for one input record; its job-state changes are written back
        once it is handled, and not at all if handling it raises."""
        try:
            out = self._handle(topic, partition, offset, key, value)
        except BaseException:
            self.jobs.discard()
            raise
        self.jobs.flush()
        return out

    def _handle(
        self, topic: str, partition: int, offset: int, key: bytes | None, value: bytes | None
    ) -> list[Out]:
        side = self.side(partition)
        tracker = side.progress
        assert tracker is not None
        names = self.names
        outputs: list[JobOutput | JobAlert] = []
        if topic == names.ticks:
            target = self.time.idle_target(partition, tracker.clock.watermark)
            if target is not None:
                outputs.extend(tracker.advance(target))
            return self._encode(outputs, partition, tracker)
        try:
            data = loads(value or b"")
            if topic == names.jobs_events:
                event = JobEvent.from_dict(data)
                self._check_time(event.ts_ms)
                outputs.extend(self._advance(tracker, partition, topic, event.ts_ms))
                outputs.extend(side.on_job_event(event))
            elif topic == names.training_telemetry:
                rec = TrainingTelemetry.from_dict(data)
                self._check_time(rec.ts_ms)
                outputs.extend(self._advance(tracker, partition, topic, rec.ts_ms))
                outputs.extend(tracker.on_telemetry(rec))
            elif topic == names.node_evidence:
                # One report, or several packed by the node agent (streams.glue).
                for report in data.get("reports", (data,)):
                    outputs.extend(side.on_node_report(NodeReport.from_dict(report)))
            else:
                raise SchemaError("topic", f"job agent does not read {topic!r}")
        except (SchemaError, KeyError, TypeError) as exc:
            self.jobs.discard()  # a packed record is used whole or not at all
            bad = dead_letter(
                names, topic, partition, offset, key, value, str(exc), "decode", "job-agent"
            )
            return [bad] if bad else []
        self.time.record_done(partition, tracker.clock.watermark)
        return self._encode(outputs, partition, tracker)

    def _check_time(self, ts_ms: int) -> None:
        """A record out of the event-time bounds is dead-lettered before it moves a clock."""
        if self.bounds is not None:
            self.bounds.check("ts_ms", ts_ms, self.clock())

    def _advance(
        self, tracker: ProgressTracker, partition: int, topic: str, ts_ms: int
    ) -> list[JobAlert]:
        candidate = self.time.candidate(partition, topic, ts_ms)
        deadlines = tracker.clock.deadlines
        if not (deadlines and deadlines[0][0] < candidate):
            return []  # no hang can be due: skip the lag check on the hot path
        watermark = self.time.effective(partition)
        return [] if watermark is None else tracker.advance(watermark)

    def _encode(
        self, outputs: list[JobOutput | JobAlert], partition: int, tracker: ProgressTracker
    ) -> list[Out]:
        names = self.names
        out: list[Out] = []
        for o in outputs:
            if isinstance(o, NodeTermination):
                out.append(Out(names.term_by_node, o.node.encode(), orjson.dumps(o.to_dict())))
            elif isinstance(o, JobAlert):
                log.warning(
                    "%s alert for job %s attempt %d: %s", o.kind, o.job_id, o.attempt, o.detail
                )
                out.append(
                    Out(
                        names.failover_alerts,
                        o.job_id.encode(),
                        orjson.dumps(o.to_dict()),
                        alert=o.kind,
                    )
                )
            else:
                out.append(self._decision(o))
        self.clocks.save(partition, tracker.clock, sent=bool(out))
        return out

    def _decision(self, d: Decision) -> Out:
        log.info(
            "decision %s attempt %d: %s -> %s (%s) suspects=%s rule=%s",
            d.job_id,
            d.attempt,
            d.verdict,
            d.action,
            d.status,
            ",".join(d.suspect_nodes) or "-",
            d.rule,
        )
        return Out(
            self.names.failover_decisions, d.job_id.encode(), orjson.dumps(d.to_dict()), decision=d
        )
