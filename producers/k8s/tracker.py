"""Pods in, job events out: one `jobs.events` record per (job, attempt, type), at most.

The pods of one attempt of a training job (same job-id and attempt labels) make one job:
- `started` when its first container runs: event time the earliest container start, nodes
  the attempt's nodes known then;
- `pending` (reason `ImagePullBackOff`) when a pod of an attempt that has not started cannot
  pull its image: the job status service shows `Pending-imagepullbackoff`;
- `terminated` when the first pod ends in failure (`pods.py` says how it ended): nodes every
  node the attempt's pods were bound to, exit code and reason of that first pod (the others
  usually fail because of it: NCCL peers, the Job controller deleting them);
- `succeeded` when every pod of the attempt has succeeded;
- `cancelled` when the last pod of an attempt that started is deleted with no ending: the Job
  was deleted by its owner. (The requeue actuator deletes a Job only after its termination.)
`published` holds what was sent: the caller seeds it from `jobs.events` at start, so a
restarted process, or a watch that starts over and lists every pod again, sends nothing twice.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from producers.k8s.pods import PodView
from schemas.jobs import EventType, JobEvent

Key = tuple[str, int]  # job id, attempt
Sent = tuple[str, int, str]  # job id, attempt, event type
ORDER = ("started", "pending", "terminated", "succeeded", "cancelled")
ENDS = frozenset({"terminated", "succeeded", "cancelled"})


@dataclass
class _Attempt:
    pods: dict[str, PodView]
    nodes: set[str]  # every node a pod of it was bound to, also pods since deleted


class JobTracker:
    def __init__(self, published: Iterable[Sent] = ()) -> None:
        self._sent: dict[Key, set[str]] = {}
        for job_id, attempt, etype in published:
            self._sent.setdefault((job_id, attempt), set()).add(etype)
        self._attempts: dict[Key, _Attempt] = {}
        self._where: dict[str, Key] = {}  # pod uid -> its attempt

    def __len__(self) -> int:
        return len(self._attempts)

    @property
    def published(self) -> set[Sent]:
        return {(k[0], k[1], t) for k, types in self._sent.items() for t in types}

    def sent(self, event: JobEvent) -> None:
        """Record that `event` was published (acknowledged by the broker); forgotten with the
        attempt's last pod."""
        if (event.job_id, event.attempt) in self._attempts:
            self._sent.setdefault((event.job_id, event.attempt), set()).add(event.type)

    def observe(self, pod: PodView) -> list[JobEvent]:
        """The pod was added or changed (or deleted, `deleted=True` in its view)."""
        att = self._attempts.setdefault(pod.key, _Attempt({}, set()))
        att.pods[pod.uid] = pod
        self._where[pod.uid] = pod.key
        if pod.node:
            att.nodes.add(pod.node)
        return self._events(pod.key, att, gone=False)

    def gone(self, uid: str) -> list[JobEvent]:
        """The pod was deleted (after its last `observe`)."""
        key = self._where.pop(uid, None)
        if key is None:
            return []
        att = self._attempts[key]
        last = att.pods.pop(uid)
        if att.pods:
            return []
        del self._attempts[key]
        events = self._events(key, _Attempt({uid: last}, att.nodes), gone=True)
        self._forget(key)  # no pod of it is left to report on
        return events

    def _forget(self, key: Key) -> None:
        self._sent.pop(key, None)

    def resync(self, pods: Iterable[PodView]) -> list[JobEvent]:
        """A full list of the pods now (after a watch restart): pods no longer there are gone."""
        listed = {p.uid: p for p in pods}
        out: list[JobEvent] = []
        for uid in [u for u in self._where if u not in listed]:
            out.extend(self.gone(uid))
        for pod in listed.values():
            out.extend(self.observe(pod))
        # What was published for attempts that have no pod any more cannot be asked again.
        for key in set(self._sent) - set(self._attempts):
            self._forget(key)
        return out

    def _events(self, key: Key, att: _Attempt, *, gone: bool) -> list[JobEvent]:
        pods = list(att.pods.values())
        done = self._sent.get(key, set())
        want: dict[str, JobEvent] = {}
        first = pods[0]
        nodes = tuple(sorted(att.nodes))

        def event(
            etype: EventType,
            ts: int,
            *,
            exit_code: int | None = None,
            reason: str | None = None,
            spec: dict[str, Any] | None = None,
        ) -> JobEvent:
            return JobEvent(
                job_id=key[0],
                attempt=key[1],
                type=etype,
                ts_ms=ts,
                nodes=nodes,
                failover=first.failover,
                training_type=first.training_type,
                max_failovers=first.max_failovers,
                priority=first.priority,
                exit_code=exit_code,
                reason=reason,
                spec=spec,
            )

        starts = [p.started_ms for p in pods if p.started_ms is not None]
        ended = sorted((p.ended for p in pods if p.ended is not None), key=lambda e: e.ts_ms)
        if starts and nodes:
            spec = {"namespace": first.namespace, "job": first.owner} if first.owner else None
            want["started"] = event("started", min(starts), spec=spec)
        pulling = [p for p in pods if p.image_pull and p.phase == "Pending"]
        if pulling and not starts and not ended and not (done & ENDS):
            want["pending"] = event("pending", pulling[0].seen_ms, reason="ImagePullBackOff")
        if ended and nodes:
            e = ended[0]
            want["terminated"] = event(
                "terminated", e.ts_ms, exit_code=e.exit_code, reason=e.reason
            )
        elif all(p.succeeded for p in pods) and not gone:
            finished = [p.finished_ms or p.seen_ms for p in pods]
            want["succeeded"] = event("succeeded", max(finished), exit_code=0)
        elif gone and "started" in done:
            want["cancelled"] = event("cancelled", first.seen_ms)
        if done & ENDS:
            return []  # the attempt is over: nothing more about it, not even a late start
        return [want[t] for t in ORDER if t in want and t not in done]
