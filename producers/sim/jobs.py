"""The workload: jobs, their lifecycle events and training telemetry, and their useful time.

Jobs make progress only while an attempt runs past its start-up (`Costs.restart_ms`); they
checkpoint every `Costs.checkpoint_ms`, and a failure sends the next attempt back to the last
checkpoint (`effective.run_segment`, the same accounting the baselines use).
"""

from __future__ import annotations

import itertools
import random
from typing import Any

from producers.sim.config import SimConfig
from producers.sim.effective import run_segment
from producers.sim.fleet import Job, JobQueue
from producers.sim.records import Out, job_out, telemetry_out
from producers.sim.truth import Incident
from schemas.jobs import JobEvent
from schemas.telemetry import TrainingTelemetry

ACTIVE = frozenset({"queued", "running", "doomed", "failing", "deciding", "awaiting"})
PRIORITIES = (0, 0, 0, 10, 20, 50)


class JobBook:
    def __init__(self, cfg: SimConfig, rng: random.Random) -> None:
        self.cfg, self.rng = cfg, rng
        self.noise = random.Random(rng.random())  # noqa: S311 - throughput jitter only
        self.costs = cfg.costs
        self.jobs: dict[str, Job] = {}
        self._ids = itertools.count(1)
        self._ticks = 0

    def running(self) -> list[Job]:
        """Jobs an incident can hit now (not already doomed by another)."""
        return [j for j in self.jobs.values() if j.state == "running"]

    def completion_ms(self, job: Job) -> int:
        assert job.started_ms is not None
        return job.started_ms + self.costs.restart_ms + max(0, job.work_ms - job.progress_ms)

    def finishes_after(self, job: Job, ts_ms: int) -> bool:
        return self.completion_ms(job) > ts_ms

    def top_up(self, queue: JobQueue, now_ms: int, usable_nodes: int) -> list[Out]:
        """Submit jobs while the active ones ask for fewer nodes than the utilization target."""
        cap = max(1, self.cfg.nodes // 4)
        demand = sum(j.nodes_needed for j in self.jobs.values() if j.state in ACTIVE)
        out: list[Out] = []
        sizes, weights = zip(*self.cfg.job_nodes, strict=True)
        while demand < self.cfg.target_utilization * usable_nodes:
            need = min(cap, self.rng.choices(sizes, weights=weights)[0])
            job = Job(
                job_id=f"train-{next(self._ids):04d}",
                nodes_needed=need,
                priority=self.rng.choice(PRIORITIES),
                work_ms=self.rng.randrange(*self.cfg.job_work_ms),
                submitted_ms=now_ms,
            )
            self.jobs[job.job_id] = job
            queue.push(job.job_id, job.priority, need)
            demand += need
            out.append(
                job_out(
                    JobEvent(
                        job.job_id, 0, "submitted", now_ms, priority=job.priority, spec=job.spec()
                    )
                )
            )
        return out

    def started(self, job: Job, nodes: tuple[str, ...], now_ms: int) -> Out:
        job.state, job.nodes, job.started_ms = "running", nodes, now_ms
        if job.first_start_ms is None:
            job.first_start_ms = now_ms
        if job.terminated_ms is not None:
            job.resumes_ms.append(now_ms - job.terminated_ms)
            job.terminated_ms = None
        event = JobEvent(
            job.job_id, job.attempt, "started", now_ms, nodes=nodes,
            priority=job.priority, spec=job.spec(),
        )  # fmt: skip
        return job_out(event)

    def fail(self, job: Job, now_ms: int) -> None:
        """The attempt stops making progress (the fault's onset): keep what was checkpointed."""
        if job.started_ms is not None and job.state in ("running", "doomed"):
            seg = run_segment(
                job.started_ms, now_ms, job.progress_ms, job.work_ms, self.costs, failed=True
            )
            job.progress_ms += seg.gain_ms
        job.state = "failing"

    def terminated(
        self, job: Job, now_ms: int, reason: str | None, exit_code: int | None, inc: Incident
    ) -> Out:
        job.state, job.started_ms, job.terminated_ms = "deciding", None, now_ms
        event = JobEvent(
            job.job_id, job.attempt, "terminated", now_ms, nodes=job.nodes,
            exit_code=exit_code, reason=reason,
        )  # fmt: skip
        return job_out(event, inc)

    def succeeded(self, job: Job, now_ms: int) -> Out:
        job.progress_ms, job.state, job.started_ms = job.work_ms, "done", None
        job.ended_ms, job.end_reason = now_ms, "succeeded"
        return job_out(JobEvent(job.job_id, job.attempt, "succeeded", now_ms, nodes=job.nodes))

    def end(self, job: Job, now_ms: int, action: str) -> None:
        job.state, job.ended_ms, job.end_reason = "ended", now_ms, action

    def useful_at(self, job: Job, horizon_ms: int) -> int:
        """Progress kept by `horizon_ms`, counting the running attempt's progress so far."""
        if job.started_ms is None or job.state not in ("running", "doomed"):
            return job.progress_ms
        seg = run_segment(
            job.started_ms, horizon_ms, job.progress_ms, job.work_ms, self.costs, failed=False
        )
        return job.progress_ms + seg.gain_ms

    def telemetry(self, now_ms: int) -> list[Out]:
        """Heartbeats of every live attempt, throughput every 5th tick."""
        self._ticks += 1
        out: list[Out] = []
        for job in self.jobs.values():
            if job.state in ("running", "doomed") and job.started_ms is not None:
                out += self._job_telemetry(job, job.started_ms, now_ms)
        return out

    def _job_telemetry(self, job: Job, started_ms: int, now_ms: int) -> list[Out]:
        productive = max(0, now_ms - started_ms - self.costs.restart_ms)
        out = [self._record(job, now_ms, "heartbeat", step=(job.progress_ms + productive) // 1000)]
        if self._ticks % 5 == 0 and productive > 0:
            rate = 120.0 * job.gpus * self.noise.uniform(0.95, 1.05)
            out.append(self._record(job, now_ms, "throughput", samples_per_s=rate))
        return out

    def _record(self, job: Job, now_ms: int, kind: str, **extra: Any) -> Out:
        node = job.nodes[0] if job.nodes else None
        return telemetry_out(
            TrainingTelemetry(job.job_id, job.attempt, kind, now_ms, node=node, **extra)
        )

    def first_checkpoint_ms(self, job: Job) -> int:
        assert job.started_ms is not None
        return job.started_ms + self.costs.restart_ms + self.costs.checkpoint_ms

    def checkpoint(self, job: Job, now_ms: int) -> Out:
        """The attempt wrote a checkpoint now (it is due every `checkpoint_ms` of training)."""
        assert job.started_ms is not None
        productive = now_ms - job.started_ms - self.costs.restart_ms
        done = productive // self.costs.checkpoint_ms * self.costs.checkpoint_ms
        step = (job.progress_ms + done) // 1000
        return self._record(
            job, now_ms, "checkpoint", step=step, uri=f"s3://sim-ckpt/{job.job_id}/step-{step}"
        )
