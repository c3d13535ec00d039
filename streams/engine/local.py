"""The whole engine in one process, one partition: what `gpufailover replay` runs.

The node side and the job side exchange the same messages the Kafka glue puts on internal
topics; here an in-process queue carries them. The watermark is the largest `ts_ms` of any input
record.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable

from schemas.alerts import JobAlert
from schemas.decisions import Decision
from schemas.engine import NodeReport, NodeTermination, QuarantineRequest
from schemas.health import GpuHealth
from schemas.jobs import JobEvent
from schemas.telemetry import TrainingTelemetry
from schemas.xid import GpuXid
from streams.engine.job_side import JobSide, JobState
from streams.engine.node_side import NodeSide, NodeState, PartitionClock
from streams.engine.progress import Progress, ProgressClock, ProgressTracker
from streams.policy import Policy

Output = Decision | QuarantineRequest | JobAlert
_Message = NodeReport | NodeTermination | QuarantineRequest | Decision | JobAlert


class LocalPipeline:
    def __init__(self, policy: Policy) -> None:
        self.node_states: dict[str, NodeState] = {}
        self.job_states: dict[str, JobState] = {}
        self.node_side = NodeSide(policy, self.node_states, PartitionClock())
        self.progress_states: dict[str, Progress] = {}
        self.progress = ProgressTracker(policy, self.progress_states, ProgressClock())
        self.job_side = JobSide(policy, self.job_states, self.progress)

    def feed(self, record: GpuXid | GpuHealth | JobEvent | TrainingTelemetry) -> list[Output]:
        if isinstance(record, JobEvent):
            first: list[_Message] = [
                *self.progress.advance(record.ts_ms),
                *self.job_side.on_job_event(record),
            ]
            return self._route(first)
        if isinstance(record, TrainingTelemetry):
            # Job events and telemetry move the job side's clock only: the node side's
            # watermark is the time of the evidence (gpu.xid, gpu.health), as on Kafka.
            return [*self.progress.advance(record.ts_ms), *self.progress.on_telemetry(record)]
        signal_out: list[_Message] = list(self.node_side.on_signal(record))
        return self._signal_done(signal_out, record.ts_ms)

    def feed_ignored(self, ts_ms: int) -> list[Output]:
        """A signal the policy ignores, stamped `ts_ms`: what `feed` of it returns (time
        moves, nothing is stored), without decoding it into a record (most of a fleet's
        samples are `ok`). Replay's node side follows the records: `advance` is its time."""
        node_out = self.node_side.advance(ts_ms)
        deadlines = self.progress.clock.deadlines
        if not node_out and not (deadlines and deadlines[0][0] < ts_ms):
            return []
        return self._signal_done(list(node_out), ts_ms)

    def quiet_until(self) -> int | float:
        """Up to this time a signal the policy ignores passes nothing the node side or the job
        side waits for: `feed_ignored` of it only moves the watermark and returns nothing."""
        closing, deadlines = self.node_side.clock.closing, self.progress.clock.deadlines
        return min(
            closing[0][0] if closing else math.inf, deadlines[0][0] if deadlines else math.inf
        )

    def _signal_done(self, signal_out: list[_Message], ts_ms: int) -> list[Output]:
        deadlines = self.progress.clock.deadlines
        if deadlines and deadlines[0][0] < ts_ms:  # one watermark for both halves
            signal_out.extend(self.progress.advance(ts_ms))
        return self._route(signal_out) if signal_out else []

    def release(self, node: str, ts_ms: int | None = None) -> None:
        self.node_side.on_release(node, ts_ms)

    def finish(self) -> list[Output]:
        # End of input closes the windows; it does not make running jobs silent.
        return self._route(list(self.node_side.close_all()))

    def _route(self, messages: Iterable[_Message]) -> list[Output]:
        out: list[Output] = []
        queue: deque[_Message] = deque(messages)
        while queue:
            msg = queue.popleft()
            if isinstance(msg, NodeTermination):
                queue.extend(self.node_side.on_termination(msg))
            elif isinstance(msg, NodeReport):
                queue.extend(self.job_side.on_node_report(msg))
            else:
                out.append(msg)
        return out
