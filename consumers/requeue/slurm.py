"""The Slurm side of a requeue: put the same JobId back in the queue, away from the suspects.

For a failover/retry command of (job J, failed attempt a), read `scontrol show job J`:
- `Restarts == a` (the attempt that failed is the job's latest) and the job is not PENDING:
  `scontrol requeuehold J`
  (the job keeps its JobId; Restarts becomes a+1), wait until it is PENDING, `update JobId=J
  ExcNodeList=<excluded>`, `release J`, then `update JobId=J Priority=<before + boost>` (a held
  job's priority cannot be set, and `Nice=` would release it: hence this order);
- `Restarts > a`: already requeued, by us before a redelivery or a restart, or by Slurm
  itself (`--requeue` on a node failure). Only the missing parts are done: a job still held by us is
  excluded and released; a pending job gets the exclusion and the priority; a job already
  running again is left alone;
- `Restarts < a`: the command is older than the job's state: nothing to do.
So a redelivered command, or one repeated after a crash, requeues the job once; the last
update sets the priority and a Comment naming the attempt, which marks the requeue complete.
`give_up`/`reject`/`fail` leave the job ended and say why in its `Comment` where Slurm allows
it (not on a finished job in 22.05: there the log says why).
A job slurmctld no longer knows (MinJobAge passed) or that may not be requeued raises
`NotActionable`: retrying would not help. Any other failure raises `SlurmCommandError`.
"""

from __future__ import annotations

import asyncio
import logging

from consumers.quarantine.actuator_scontrol import OURS, SlurmCommandError, scontrol, show_job
from consumers.requeue.stage import NotActionable, Outcome
from schemas.decisions import Decision
from schemas.requeue import RequeueCommand

log = logging.getLogger(__name__)

__all__ = ["NotActionable", "Outcome", "SlurmScheduler"]

PENDING_TIMEOUT_S = 30.0
PRIORITY_MAX = 4_294_967_294  # Slurm's priority is a uint32; its top value means "infinite"
HELD_BY_REQUEUE = "job_requeued_in_held_state"
GONE = ("Invalid job id", "Invalid job id specified")
FINISHED = "Job has already finished"
NOT_REQUEUEABLE = ("disabled", "Only batch jobs", "not allowed")


def _restarts(job: dict[str, str]) -> int:
    try:
        return int(job.get("Restarts", "0"))
    except ValueError:
        return 0


def _priority(job: dict[str, str]) -> int:
    try:
        return int(job.get("Priority", "0"))
    except ValueError:
        return 0


async def _job(job_id: str) -> dict[str, str]:
    if not job_id.isdigit():
        raise NotActionable(f"{job_id!r} is not a Slurm JobId")
    try:
        return await show_job(job_id)
    except SlurmCommandError as exc:
        if any(g in exc.stderr for g in GONE):
            raise NotActionable(f"slurmctld no longer knows job {job_id}") from exc
        raise


def requeue_comment(cmd: RequeueCommand) -> str:
    return f"{OURS} {cmd.verdict} -> {cmd.action} ({cmd.reason}), requeued as attempt " + str(
        cmd.next_attempt
    )


class SlurmScheduler:
    def __init__(self, failover_boost: int = 100, retry_boost: int = 0) -> None:
        self.failover_boost, self.retry_boost = failover_boost, retry_boost

    def boost(self, action: str) -> int:
        return self.failover_boost if action == "failover" else self.retry_boost

    async def requeue(self, cmd: RequeueCommand) -> Outcome:
        j = cmd.job_id
        job = await _job(j)
        restarts, state = _restarts(job), job.get("JobState", "")
        before = _priority(job)
        if restarts < cmd.attempt:
            log.warning("slurm: job %s is at restart %d, the command is for attempt %d: stale",
                        j, restarts, cmd.attempt)  # fmt: skip
            return Outcome("stale", restarts)
        if restarts == cmd.attempt and state != "PENDING":
            try:
                await scontrol("requeuehold", j)
            except SlurmCommandError as exc:
                if any(n in exc.stderr for n in NOT_REQUEUEABLE):
                    raise NotActionable(f"Slurm refuses to requeue job {j}: {exc}") from exc
                raise
            job = await self._wait_pending(j)
            await self._exclude_release_boost(cmd, job, before)
            return Outcome("requeued", _restarts(job))
        if state == "PENDING":
            # Requeued already: by us (a redelivery; held if we stopped half-way) or by Slurm.
            await self._exclude_release_boost(cmd, job, before)
            return Outcome("completed", restarts)
        log.info("slurm: job %s already requeued (restart %d) and %s: left alone", j, restarts,
                 state)  # fmt: skip
        return Outcome("running", restarts)

    async def _wait_pending(self, job_id: str) -> dict[str, str]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + PENDING_TIMEOUT_S
        while True:
            job = await _job(job_id)
            if job.get("JobState") == "PENDING":
                return job
            if loop.time() > deadline:
                raise SlurmCommandError(
                    ["scontrol", "show", "job", job_id], 0, f"still {job.get('JobState')}"
                )
            await asyncio.sleep(0.2)  # slurmctld finishes the requeue in ~0.3 s

    async def _exclude_release_boost(
        self, cmd: RequeueCommand, job: dict[str, str], before: int
    ) -> None:
        j = cmd.job_id
        marker = requeue_comment(cmd)
        if job.get("Comment") == marker:
            log.info("slurm: job %s already requeued for attempt %d: nothing to do", j,
                     cmd.next_attempt)  # fmt: skip
            return
        excluded = ",".join(cmd.exclude_nodes)
        if excluded and job.get("ExcNodeList") != excluded:
            await scontrol("update", f"JobId={j}", f"ExcNodeList={excluded}")
        if job.get("Reason") == HELD_BY_REQUEUE or _priority(job) == 0:
            await scontrol("release", j)
        # `before` is 0 when the job was already held: take what release recomputed.
        base = before or _priority(await _job(j))
        target = min(base + self.boost(cmd.action), PRIORITY_MAX)
        # One update: the Comment marks the requeue done, so a redelivery does not boost twice.
        await scontrol("update", f"JobId={j}", f"Priority={target}", f"Comment={marker}")
        log.info(
            "slurm: job %s requeued for attempt %d excluding %s, priority %d -> %d",
            j,
            cmd.next_attempt,
            excluded or "nothing",
            base,
            target,
        )

    async def leave_ended(self, d: Decision) -> Outcome:
        """give_up / reject / fail: the job stays ended; its Comment says why while slurmctld
        lets it be changed (22.05 refuses any update of a finished job: then the log line and
        the decision on failover.decisions are the record)."""
        job = await _job(d.job_id)
        comment = f"{OURS} {d.verdict} -> {d.action} ({d.rule}), attempt {d.attempt}, not requeued"
        if job.get("Comment") == comment:
            return Outcome("ended", _restarts(job))
        try:
            await scontrol("update", f"JobId={d.job_id}", f"Comment={comment}")
        except SlurmCommandError as exc:
            if FINISHED not in exc.stderr:
                raise
            log.info("slurm: job %s left ended (%s); Slurm keeps no comment on a finished job",
                     d.job_id, comment)  # fmt: skip
            return Outcome("ended", _restarts(job))
        log.info("slurm: job %s left ended: %s", d.job_id, comment)
        return Outcome("ended", _restarts(job))
