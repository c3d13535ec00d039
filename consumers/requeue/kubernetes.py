"""The Kubernetes side of a requeue (`--scheduler kubernetes`): recreate the job's `batch/v1`
Job away from the suspect and quarantined nodes, at the failover priority.

For a failover/retry command of (job J, failed attempt a), list the Jobs labelled
`gpufailover.io/job-id=J` (`k8s_job.py` says what the copy changes):
- the newest is attempt a: create `<base>-r<a+1>` (node affinity excluding the command's
  nodes, the failover PriorityClass), then delete the Jobs of attempts <= a (background
  propagation: the garbage collector deletes their pods). Create first, so a crash in between
  leaves the new Job and a redelivery only finishes the deletion;
- the newest is attempt a+1: created before (a redelivery, or a restart after a crash): only
  the older Jobs still there are deleted (`completed`);
- newer than a+1, or older than a: the command is stale; nothing is done.
So one decision creates one Job, whatever the redeliveries. The Job controller creates its pods
and the scheduler binds them only to allowed nodes: gpufailover never places a pod itself.
`give_up`/`reject`/`fail` leave the Job as it is, annotated with the decision.
No Job for J (deleted, e.g. by `ttlSecondsAfterFinished`), or J in several namespaces, raises
`NotActionable`: retrying would not help.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Any, cast

from lightkube import ALL_NS, ApiError, AsyncClient
from lightkube.resources.batch_v1 import Job
from lightkube.resources.scheduling_v1 import PriorityClass
from lightkube.types import CascadeType, PatchType

from consumers.requeue.k8s_job import DECISION, JOB_ID_LABEL, attempt_of, relocated_job
from consumers.requeue.stage import NotActionable, Outcome
from schemas.decisions import Decision
from schemas.requeue import RequeueCommand

log = logging.getLogger(__name__)

# A label value: what a job id must look like to be found by label.
LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")
NOT_FOUND, CONFLICT = 404, 409


def _code(exc: ApiError) -> int:
    return int(exc.status.code or 0)


class KubernetesScheduler:
    def __init__(
        self,
        client: AsyncClient,
        *,
        namespace: str | None = None,
        failover_priority_class: str | None = "gpufailover-failover",
        retry_priority_class: str | None = None,
    ) -> None:
        self.client, self.namespace = client, namespace
        self.failover_priority_class = failover_priority_class
        self.retry_priority_class = retry_priority_class

    def priority_class(self, action: str) -> str | None:
        if action == "failover":
            return self.failover_priority_class
        return self.retry_priority_class

    async def check(self) -> None:
        """Refuse to start when a configured PriorityClass is missing: every relocated pod
        would be refused by the Priority admission plugin."""
        for name in {self.failover_priority_class, self.retry_priority_class} - {None, ""}:
            assert name is not None
            try:
                await self.client.get(PriorityClass, name)
            except ApiError as exc:
                if _code(exc) == NOT_FOUND:
                    raise SystemExit(
                        f"PriorityClass {name!r} does not exist: create it (deploy/k8s/) or "
                        "set --k8s-failover-priority-class / --k8s-retry-priority-class"
                    ) from None
                raise

    async def _jobs(self, job_id: str) -> dict[int, dict[str, Any]]:
        if not LABEL_VALUE.match(job_id):
            raise NotActionable(f"{job_id!r} cannot be a label value: no Job can carry it")
        found: dict[int, dict[str, Any]] = {}
        namespaces: set[str] = set()
        async for job in self.client.list(
            Job, namespace=self.namespace or ALL_NS, labels={JOB_ID_LABEL: job_id}
        ):
            body = job.to_dict()
            meta = body["metadata"]
            if meta.get("deletionTimestamp"):
                continue  # being deleted: by us (an earlier requeue) or by its owner
            try:
                attempt = attempt_of(meta.get("labels"))
            except ValueError as exc:
                raise NotActionable(f"Job {meta.get('name')}: {exc}") from exc
            namespaces.add(meta.get("namespace", ""))
            found[attempt] = body
        if len(namespaces) > 1:
            raise NotActionable(f"job {job_id} is labelled on Jobs in {sorted(namespaces)}")
        return found

    async def requeue(self, cmd: RequeueCommand) -> Outcome:
        jobs = await self._jobs(cmd.job_id)
        if not jobs:
            raise NotActionable(f"no Job labelled {JOB_ID_LABEL}={cmd.job_id} (deleted?)")
        latest = max(jobs)
        if latest == cmd.next_attempt:
            await self._delete_older(jobs, cmd.next_attempt)
            log.info("kubernetes: job %s already requeued as %s (attempt %d)", cmd.job_id,
                     _name(jobs[latest]), latest)  # fmt: skip
            return Outcome("completed", latest)
        if latest != cmd.attempt:
            log.warning("kubernetes: job %s is at attempt %d, the command is for attempt %d -> "
                        "%d: stale", cmd.job_id, latest, cmd.attempt, cmd.next_attempt)  # fmt: skip
            return Outcome("stale", latest)
        body = relocated_job(
            jobs[latest],
            job_id=cmd.job_id,
            next_attempt=cmd.next_attempt,
            exclude_nodes=cmd.exclude_nodes,
            priority_class=self.priority_class(cmd.action),
            decision=f"{cmd.verdict} -> {cmd.action} ({cmd.reason}), attempt {cmd.attempt} "
            f"requeued as attempt {cmd.next_attempt}",
            checkpoint=cmd.checkpoint,
        )
        try:
            await self.client.create(cast(Job, Job.from_dict(body)))
        except ApiError as exc:
            if _code(exc) != CONFLICT:
                raise
            log.info("kubernetes: Job %s exists already: created before", body["metadata"]["name"])
        await self._delete_older(jobs, cmd.next_attempt)
        log.info(
            "kubernetes: job %s requeued: Job %s -> %s (attempt %d), excluding %s, "
            "priorityClassName %s",
            cmd.job_id,
            _name(jobs[latest]),
            body["metadata"]["name"],
            cmd.next_attempt,
            ",".join(cmd.exclude_nodes) or "nothing",
            self.priority_class(cmd.action) or "unchanged",
        )
        return Outcome("requeued", cmd.next_attempt)

    async def _delete_older(self, jobs: Mapping[int, Mapping[str, Any]], before: int) -> None:
        for attempt, job in sorted(jobs.items()):
            if attempt >= before:
                continue
            meta = job["metadata"]
            try:
                await self.client.delete(
                    Job, meta["name"], namespace=meta["namespace"], cascade=CascadeType.BACKGROUND
                )
            except ApiError as exc:
                if _code(exc) != NOT_FOUND:
                    raise
            log.info("kubernetes: deleted Job %s/%s (attempt %d) and its pods",
                     meta["namespace"], meta["name"], attempt)  # fmt: skip

    async def leave_ended(self, d: Decision) -> Outcome:
        """give_up / reject / fail: the Job stays as it is; an annotation says why."""
        jobs = await self._jobs(d.job_id)
        note = f"{d.verdict} -> {d.action} ({d.rule}), attempt {d.attempt}, not requeued"
        job = jobs.get(d.attempt)
        if job is None:
            log.info("kubernetes: job %s left ended (%s); no Job of attempt %d to annotate",
                     d.job_id, note, d.attempt)  # fmt: skip
            return Outcome("ended", max(jobs, default=d.attempt))
        meta = job["metadata"]
        if (meta.get("annotations") or {}).get(DECISION) != note:
            await self.client.patch(
                Job,
                meta["name"],
                {"metadata": {"annotations": {DECISION: note}}},
                namespace=meta["namespace"],
                patch_type=PatchType.MERGE,
            )
        log.info("kubernetes: job %s left ended: %s", d.job_id, note)
        return Outcome("ended", d.attempt)


def _name(job: Mapping[str, Any]) -> str:
    meta = job["metadata"]
    return f"{meta.get('namespace')}/{meta.get('name')}"
