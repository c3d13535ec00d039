"""The whole engine in one process, one partition: what `gpufailover replay` runs.

The node side and the job side exchange the same messages the Kafka glue puts on internal
topics; here an in-process queue carries them. The watermark is the largest `ts_ms` of any input
record.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

from schemas.decisions import Decision
from schemas.health import GpuHealth
from schemas.jobs import JobEvent
from schemas.xid import GpuXid
from streams.engine.job_side import JobSide, JobState
from streams.engine.messages import NodeReport, NodeTermination, QuarantineRequest
from streams.engine.node_side import NodeSide, NodeState, PartitionClock
from streams.policy import Policy

Output = Decision | QuarantineRequest
_Message = NodeReport | NodeTermination | QuarantineRequest | Decision


class LocalPipeline:
    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self.node_states: dict[str, NodeState] = {}
        self.job_states: dict[str, JobState] = {}
        self.node_side = NodeSide(policy, self.node_states, PartitionClock())
        self.job_side = JobSide(policy, self.job_states)

    def feed(self, record: GpuXid | GpuHealth | JobEvent) -> list[Output]:
        if isinstance(record, JobEvent):
            first: list[_Message] = list(self.job_side.on_job_event(record))
            out = self._route(first)
            return out + self._route(list(self.node_side.advance(record.ts_ms)))
        signal_out = self.node_side.on_signal(record)
        return self._route(signal_out) if signal_out else []

    def release(self, node: str) -> None:
        self.node_side.on_release(node)

    def finish(self) -> list[Output]:
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
