"""Training progress per job, from the telemetry client: hangs, stragglers, last checkpoint.

- A running job whose heartbeats stop for longer than `hang_after` gets a `hang` alert while it
  is still running (when the job-side watermark passes the deadline), and its termination
  carries `Hang` as evidence (transient) when it came that long after the last heartbeat.
- A throughput sample well below the job's own recent level is a `straggler` alert.
- The last checkpoint (step, uri) goes into the decision, so the requeue can resume from it.
"""

from __future__ import annotations

import heapq
from collections.abc import MutableMapping
from dataclasses import dataclass, field
from typing import Any

from schemas.alerts import JobAlert
from schemas.decisions import Evidence
from schemas.jobs import JobEvent
from schemas.telemetry import TrainingTelemetry
from streams.policy import Policy

EWMA_WEIGHT = 0.2  # weight of the newest throughput sample in the job's recent level


@dataclass(slots=True)
class Progress:
    attempt: int = 0
    running: bool = False
    last_beat_ts: int | None = None
    checkpoint: dict[str, Any] | None = None  # {step, uri, ts_ms, attempt}
    throughput_avg: float | None = None
    throughput_n: int = 0
    hung: bool = False
    straggling: bool = False
    armed: bool = False  # a hang deadline for this job is in the clock's heap
    started_ts: int | None = None  # when this attempt started (its `started` event)

    def to_dict(self) -> dict[str, Any]:
        return {
            "attempt": self.attempt,
            "running": self.running,
            "last_beat_ts": self.last_beat_ts,
            "checkpoint": self.checkpoint,
            "throughput_avg": self.throughput_avg,
            "throughput_n": self.throughput_n,
            "hung": self.hung,
            "straggling": self.straggling,
            "armed": self.armed,
            "started_ts": self.started_ts,
        }

    @staticmethod
    def from_dict(d: dict[str, Any]) -> Progress:
        return Progress(**d)


@dataclass(slots=True)
class ProgressClock:
    """The job side's event time for one partition and the hang deadlines waiting on it."""

    watermark: int | None = None
    deadlines: list[tuple[int, str]] = field(default_factory=list)  # (due_ms, job_id)

    def to_dict(self) -> dict[str, Any]:
        return {"watermark": self.watermark, "deadlines": [list(d) for d in self.deadlines]}

    @staticmethod
    def from_dict(d: dict[str, Any]) -> ProgressClock:
        deadlines = [(due, job) for due, job in d["deadlines"]]
        heapq.heapify(deadlines)
        return ProgressClock(d["watermark"], deadlines)


class ProgressTracker:
    def __init__(
        self, policy: Policy, jobs: MutableMapping[str, Progress], clock: ProgressClock
    ) -> None:
        self.policy = policy
        self.jobs = jobs
        self.clock = clock

    def on_job_event(self, event: JobEvent) -> None:
        state = self.jobs.get(event.job_id)
        if event.type == "started":
            if state is not None and event.attempt < state.attempt:
                return  # a stale start of an earlier attempt
            state = state or Progress()
            state.attempt, state.running = event.attempt, True
            state.started_ts = event.ts_ms
            state.hung = state.straggling = False
            state.throughput_avg, state.throughput_n = None, 0
            # Only jobs that report telemetry can be judged silent: the clock starts at the
            # first record of this attempt, not at `started`.
            state.last_beat_ts = None
            self.jobs[event.job_id] = state
        elif event.type in ("terminated", "succeeded", "cancelled"):
            if state is None or event.attempt < state.attempt:
                return
            state.running = False
            self.jobs[event.job_id] = state

    def on_telemetry(self, rec: TrainingTelemetry) -> list[JobAlert]:
        state = self.jobs.get(rec.job_id) or Progress(attempt=rec.attempt)
        if rec.attempt < state.attempt:
            return []  # a late record of an attempt already replaced
        if rec.attempt > state.attempt:  # telemetry ahead of its `started` event
            state = Progress(attempt=rec.attempt, checkpoint=state.checkpoint, armed=state.armed)
        elif not state.running and state.last_beat_ts is not None:
            return []  # a late record of an attempt that already ended
        state.running = True
        out: list[JobAlert] = []
        if rec.kind == "throughput" and rec.samples_per_s is not None:
            out.extend(self._throughput(state, rec, rec.samples_per_s))
        else:
            if rec.kind == "checkpoint":
                state.checkpoint = {
                    "step": rec.step,
                    "uri": rec.uri,
                    "ts_ms": rec.ts_ms,
                    "attempt": rec.attempt,
                }
            state.hung = False  # alive again
        self._beat(state, rec.job_id, rec.ts_ms)
        return out

    def hang_evidence(self, job_id: str, attempt: int, terminated_ts_ms: int) -> Evidence | None:
        """`Hang` when the job had been silent longer than `hang_after` when it ended."""
        state = self.jobs.get(job_id)
        if state is None or state.attempt != attempt or state.last_beat_ts is None:
            return None
        silent = terminated_ts_ms - state.last_beat_ts
        if silent <= self.policy.hang_after_ms:
            return None
        return Evidence(
            node=None,
            gpu_index=None,
            kind="reason",
            code="Hang",
            ts_ms=state.last_beat_ts + self.policy.hang_after_ms,
            cls=self.policy.classify_reason("Hang"),
        )

    def started_at(self, job_id: str, attempt: int) -> int | None:
        state = self.jobs.get(job_id)
        return state.started_ts if state is not None and state.attempt == attempt else None

    def checkpoint(self, job_id: str) -> dict[str, Any] | None:
        state = self.jobs.get(job_id)
        return None if state is None else state.checkpoint

    def advance(self, ts_ms: int) -> list[JobAlert]:
        """Move the watermark; alert on running jobs silent past their deadline."""
        clock = self.clock
        if clock.watermark is not None and ts_ms <= clock.watermark:
            return []
        clock.watermark = ts_ms
        out: list[JobAlert] = []
        while clock.deadlines and clock.deadlines[0][0] < ts_ms:
            _, job_id = heapq.heappop(clock.deadlines)
            state = self.jobs.get(job_id)
            if state is None:
                continue
            state.armed = False
            if not state.running or state.hung or state.last_beat_ts is None:
                self.jobs[job_id] = state
                continue
            due = state.last_beat_ts + self.policy.hang_after_ms
            if due >= ts_ms:  # it beat since: wait for the new deadline
                heapq.heappush(clock.deadlines, (due, job_id))
                state.armed = True
                self.jobs[job_id] = state
                continue
            state.hung = True
            self.jobs[job_id] = state
            out.append(
                JobAlert(
                    "hang",
                    job_id,
                    state.attempt,
                    ts_ms,
                    {
                        "last_heartbeat_ts_ms": state.last_beat_ts,
                        "silent_s": (ts_ms - state.last_beat_ts) // 1000,
                    },
                )
            )
        return out

    def _beat(self, state: Progress, job_id: str, ts_ms: int) -> None:
        if state.last_beat_ts is None or ts_ms > state.last_beat_ts:
            state.last_beat_ts = ts_ms
        if not state.armed:
            # One deadline per job in the heap: advance() re-arms it lazily after later beats.
            heapq.heappush(
                self.clock.deadlines, (state.last_beat_ts + self.policy.hang_after_ms, job_id)
            )
            state.armed = True
        self.jobs[job_id] = state

    def _throughput(self, state: Progress, rec: TrainingTelemetry, rate: float) -> list[JobAlert]:
        p = self.policy
        out: list[JobAlert] = []
        avg = state.throughput_avg
        if avg is not None and state.throughput_n >= p.straggler_min_samples:
            slow = rate < p.straggler_ratio * avg
            if slow and not state.straggling:
                out.append(
                    JobAlert(
                        "straggler",
                        rec.job_id,
                        rec.attempt,
                        rec.ts_ms,
                        {
                            "samples_per_s": rate,
                            "recent_samples_per_s": round(avg, 3),
                            "ratio": round(rate / avg, 3) if avg else 0.0,
                            "node": rec.node,
                        },
                    )
                )
            state.straggling = slow
        state.throughput_avg = rate if avg is None else (1 - EWMA_WEIGHT) * avg + EWMA_WEIGHT * rate
        state.throughput_n += 1
        return out
