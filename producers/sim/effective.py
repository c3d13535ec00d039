"""Effective training time: useful GPU-time / GPU-time the jobs held, for the pipeline and for
two baselines replayed on the same failure trace.

A job's clock runs from its first start to its end: success, a software failure (the user has
to fix the code: the job is over in every strategy), or the end of the run. A job that stops
for any other reason (a wrong reject, the retry cap) keeps its clock running to the end of the
run with nothing useful done: that time is what a person would have to win back.

Inside an attempt the first `restart_ms` are start-up (loading the checkpoint); after that the
job progresses and checkpoints every `checkpoint_ms`. A failure loses what was done since the
last checkpoint; the time between the failure and the next start is lost too.

Baselines, on the same hits (job, fault onset, termination, true class):
- no failover: a person restarts the job `mttr_ms` after the termination;
- naive restart-in-place: the scheduler restarts it on the same nodes after `naive_restart_ms`.
  That works for transient and unknown failures; on broken hardware the job crashes again
  until a person repairs the node (`mttr_ms`); a software bug crash-loops until a person stops
  it (`mttr_ms` more of GPU-time held for nothing).
A hit that finds the job down in a baseline does not hit it there.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

STRATEGIES = ("no_failover", "naive_restart")


@dataclass(frozen=True, slots=True)
class Costs:
    restart_ms: int = 180_000  # start-up of an attempt: scheduling, image, checkpoint load
    checkpoint_ms: int = 1_800_000  # checkpoint every 30 min of training
    mttr_ms: int = 3_600_000  # a person notices, diagnoses and restarts (no failover)
    naive_restart_ms: int = 60_000  # the scheduler's own retry delay (restart in place)


@dataclass(frozen=True, slots=True)
class JobSpan:
    job_id: str
    gpus: int
    first_start_ms: int
    work_ms: int


@dataclass(frozen=True, slots=True)
class Hit:
    job_id: str
    onset_ms: int
    term_ms: int
    true_class: str  # hardware | software | transient | unknown


@dataclass(frozen=True, slots=True)
class Segment:
    gain_ms: int  # progress kept
    done_ms: int | None  # when the job finished inside the segment


def run_segment(
    start_ms: int, stop_ms: int, progress_ms: int, work_ms: int, costs: Costs, *, failed: bool
) -> Segment:
    """An attempt running from `start_ms` until `stop_ms` (a failure when `failed`, else the
    end of the run): the progress it keeps, and its end if it finishes the job first."""
    productive = max(0, stop_ms - start_ms - costs.restart_ms)
    left = max(0, work_ms - progress_ms)
    if productive >= left:
        return Segment(left, start_ms + costs.restart_ms + left)
    if failed:
        return Segment(productive // costs.checkpoint_ms * costs.checkpoint_ms, None)
    return Segment(productive, None)


@dataclass(frozen=True, slots=True)
class Ett:
    useful_gpu_ms: int
    held_gpu_ms: int

    @property
    def ratio(self) -> float:
        return self.useful_gpu_ms / self.held_gpu_ms if self.held_gpu_ms else 0.0

    def __add__(self, other: Ett) -> Ett:
        return Ett(self.useful_gpu_ms + other.useful_gpu_ms, self.held_gpu_ms + other.held_gpu_ms)


def replay_job(
    strategy: str, job: JobSpan, hits: Iterable[Hit], horizon_ms: int, costs: Costs
) -> Ett:
    """One job under a baseline strategy, until `horizon_ms`."""
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}")
    t, progress, end = job.first_start_ms, 0, horizon_ms
    finished = False
    for hit in sorted(hits, key=lambda h: h.onset_ms):
        if hit.onset_ms < t or hit.onset_ms >= horizon_ms:
            continue  # the job is down (or not started) here: the fault misses it
        seg = run_segment(t, hit.onset_ms, progress, job.work_ms, costs, failed=True)
        progress += seg.gain_ms
        if seg.done_ms is not None:
            end, finished = seg.done_ms, True
            break
        if hit.true_class == "software":
            crash_loop = costs.mttr_ms if strategy == "naive_restart" else 0
            end, finished = min(horizon_ms, hit.term_ms + crash_loop), True
            break
        quick = strategy == "naive_restart" and hit.true_class in ("transient", "unknown")
        t = hit.term_ms + (costs.naive_restart_ms if quick else costs.mttr_ms)
    if not finished and t < horizon_ms:
        seg = run_segment(t, horizon_ms, progress, job.work_ms, costs, failed=False)
        progress += seg.gain_ms
        if seg.done_ms is not None:
            end = seg.done_ms
    held = max(0, min(end, horizon_ms) - job.first_start_ms)
    return Ett(job.gpus * min(progress, held), job.gpus * held)


def replay(
    strategy: str, jobs: Iterable[JobSpan], hits: Iterable[Hit], horizon_ms: int, costs: Costs
) -> Ett:
    by_job: dict[str, list[Hit]] = {}
    for h in hits:
        by_job.setdefault(h.job_id, []).append(h)
    total = Ett(0, 0)
    for job in jobs:
        total += replay_job(strategy, job, by_job.get(job.job_id, ()), horizon_ms, costs)
    return total
