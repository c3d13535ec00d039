"""Builders and a small driver for engine tests: records in, decisions and quarantines out.

Imported by the tests in this folder (pytest puts the folder on sys.path); the name is unique so
it cannot shadow another test helper.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from schemas.decisions import Decision
from schemas.engine import QuarantineRequest
from schemas.health import GpuHealth
from schemas.jobs import JobEvent
from schemas.xid import GpuXid
from streams.engine.local import LocalPipeline, Output
from streams.policy import Policy, load_policy

S = 1000  # ms per second
T0 = 1_773_532_800_000  # 2026-03-15T00:00:00Z, epoch ms
POLICY = load_policy()
LOOKBACK = POLICY.lookback_ms
GRACE = POLICY.grace_ms

Record = GpuXid | GpuHealth | JobEvent


def xid(node: str, code: int, ts: int, gpu: int | None = 0, count: int = 1) -> GpuXid:
    return GpuXid(node=node, xid=code, ts_ms=ts, gpu_index=gpu, source="sim", count=count)


def health(node: str, condition: str, ts: int, gpu: int | None = 0) -> GpuHealth:
    return GpuHealth(node=node, ts_ms=ts, condition=condition, gpu_index=gpu)


def terminated(
    job: str,
    nodes: Iterable[str],
    ts: int,
    attempt: int = 0,
    reason: str | None = None,
    **kw: Any,
) -> JobEvent:
    return JobEvent(
        job_id=job,
        attempt=attempt,
        type="terminated",
        ts_ms=ts,
        nodes=tuple(nodes),
        reason=reason,
        exit_code=1,
        **kw,
    )


def job_event(
    job: str, etype: str, ts: int, attempt: int = 0, nodes: Iterable[str] = ()
) -> JobEvent:
    return JobEvent(job_id=job, attempt=attempt, type=etype, ts_ms=ts, nodes=tuple(nodes))


def nodes(n: int, first: int = 1) -> list[str]:
    return [f"gpu-node-{i:03d}" for i in range(first, first + n)]


@dataclass
class Run:
    """Feeds records one at a time and remembers which input produced which output."""

    policy: Policy = POLICY
    pipeline: LocalPipeline = field(init=False)
    outputs: list[tuple[int, Output]] = field(default_factory=list)  # (input index, output)
    fed: int = 0
    finished: bool = False

    def __post_init__(self) -> None:
        self.pipeline = LocalPipeline(self.policy)

    def feed(self, *records: Record) -> list[Output]:
        out: list[Output] = []
        for rec in records:
            got = self.pipeline.feed(rec)
            self.outputs.extend((self.fed, o) for o in got)
            self.fed += 1
            out.extend(got)
        return out

    def release(self, node: str, ts_ms: int | None = None) -> None:
        self.pipeline.release(node, ts_ms)

    def finish(self) -> list[Output]:
        got = self.pipeline.finish()
        self.outputs.extend((self.fed, o) for o in got)
        self.finished = True
        return got

    @property
    def decisions(self) -> list[Decision]:
        return [o for _, o in self.outputs if isinstance(o, Decision)]

    @property
    def quarantines(self) -> list[QuarantineRequest]:
        return [o for _, o in self.outputs if isinstance(o, QuarantineRequest)]

    def quarantined_nodes(self) -> list[str]:
        return [q.node for q in self.quarantines]

    def decision(self, job: str, attempt: int = 0) -> Decision:
        found = [d for d in self.decisions if d.job_id == job and d.attempt == attempt]
        assert len(found) == 1, f"expected one decision for {job}/{attempt}, got {found}"
        return found[0]


def run(*records: Record, finish: bool = True, policy: Policy = POLICY) -> Run:
    r = Run(policy)
    r.feed(*records)
    if finish:
        r.finish()
    return r


def decisions_of(outputs: Iterable[Output]) -> list[Decision]:
    return [o for o in outputs if isinstance(o, Decision)]


def quarantines_of(outputs: Iterable[Output]) -> list[QuarantineRequest]:
    return [o for o in outputs if isinstance(o, QuarantineRequest)]
