"""What a pod of a training job says, read from its API object (pure: a dict as the API
returns it, `Pod.to_dict()`).

A training pod carries the label `gpufailover.io/job-id` (the job id on `jobs.events`) and
`gpufailover.io/attempt` (absent: 0; the requeue actuator sets it on the Jobs it recreates).
Optional labels: `gpufailover.io/failover: "false"` (did not opt in),
`gpufailover.io/training-type: spot`, `gpufailover.io/max-failovers: N`.

How a pod ended, most specific first:
1. a `DisruptionTarget` condition (Kubernetes >= 1.26 sets it before it kills a pod for a
   reason of its own): node lost (taint manager, pod GC) -> `WorkerLost`, preempted ->
   `Preempted`, evicted -> `Evicted`;
2. the pod's `status.reason` when the kubelet failed it: `NodeLost`/`Shutdown` -> `WorkerLost`,
   `Evicted` -> `Evicted`;
3. the container that failed: its reason (`OOMKilled`, `Error`, `ContainerCannotRun`, ...) and
   exit code, the first failed container in spec order.
A pod ends when its phase is `Failed`, or when it is deleted under a `DisruptionTarget`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from consumers.requeue.k8s_job import ATTEMPT_LABEL, JOB_ID_LABEL, attempt_of
from schemas.jobs import TRAINING_TYPES, TrainingType

FAILOVER_LABEL = "gpufailover.io/failover"
TRAINING_TYPE_LABEL = "gpufailover.io/training-type"
MAX_FAILOVERS_LABEL = "gpufailover.io/max-failovers"
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
DISRUPTION_REASONS = {
    "DeletionByTaintManager": "WorkerLost",  # NoExecute taint, e.g. node unreachable
    "DeletionByPodGC": "WorkerLost",  # its node is gone
    "PreemptionByScheduler": "Preempted",
    "EvictionByEvictionAPI": "Evicted",  # drain, descheduler
    "TerminationByKubelet": "Evicted",  # node pressure, graceful node shutdown
}
POD_REASONS = {"NodeLost": "WorkerLost", "Shutdown": "WorkerLost", "Evicted": "Evicted"}
IMAGE_PULL_REASONS = frozenset({"ImagePullBackOff", "ErrImagePull", "InvalidImageName"})


class BadPod(ValueError):
    """A labelled pod whose gpufailover labels cannot be read."""


@dataclass(frozen=True)
class Ending:
    ts_ms: int
    reason: str | None
    exit_code: int | None


@dataclass(frozen=True)
class PodView:
    uid: str
    namespace: str
    name: str
    job_id: str
    attempt: int
    node: str | None
    phase: str
    seen_ms: int  # wall clock when this state was read
    started_ms: int | None  # when its first container started running
    finished_ms: int | None  # when its last container finished
    ended: Ending | None  # failed, or killed by Kubernetes
    succeeded: bool
    image_pull: str | None  # the waiting reason of a container that cannot pull its image
    failover: bool = True
    training_type: TrainingType = "on_demand"
    max_failovers: int | None = None
    priority: int | None = None
    owner: str | None = None  # the Job that owns it

    @property
    def key(self) -> tuple[str, int]:
        return self.job_id, self.attempt


def ts_ms(value: Any) -> int | None:
    """An API timestamp (RFC 3339 text or a datetime) in epoch ms; None when absent."""
    if value is None or value == "":
        return None
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    if not isinstance(value, datetime) or value.tzinfo is None:
        raise BadPod(f"timestamp {value!r} has no time zone")
    return int(value.timestamp() * 1000)


def _condition(status: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    for c in status.get("conditions") or []:
        if c.get("type") == kind and c.get("status") == "True":
            return dict(c)
    return None


def _failed_container(status: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The first container that terminated with a non-zero code, else the first terminated."""
    terminated: list[Mapping[str, Any]] = [
        (s.get("state") or {})["terminated"]
        for s in status.get("containerStatuses") or []
        if (s.get("state") or {}).get("terminated")
    ]
    failed = [t for t in terminated if t.get("exitCode")]
    chosen = failed or terminated
    return chosen[0] if chosen else None


def _started_ms(status: Mapping[str, Any]) -> int | None:
    times = []
    for s in status.get("containerStatuses") or []:
        state = s.get("state") or {}
        for phase in ("running", "terminated"):
            started = ts_ms((state.get(phase) or {}).get("startedAt"))
            if started is not None:
                times.append(started)
    return min(times, default=None)


def _finished_ms(status: Mapping[str, Any]) -> int | None:
    times = [
        ts_ms(((s.get("state") or {}).get("terminated") or {}).get("finishedAt"))
        for s in status.get("containerStatuses") or []
    ]
    return max((t for t in times if t is not None), default=None)


def _ending(pod: Mapping[str, Any], deleted: bool, now_ms: int) -> Ending | None:
    status = pod.get("status") or {}
    meta = pod.get("metadata") or {}
    disruption = _condition(status, "DisruptionTarget")
    phase = status.get("phase")
    if phase != "Failed" and not (disruption and (deleted or meta.get("deletionTimestamp"))):
        return None
    container = _failed_container(status) or {}
    exit_code = container.get("exitCode")
    reason: str | None
    if disruption is not None:
        reason = DISRUPTION_REASONS.get(disruption.get("reason") or "", "Evicted")
        when = ts_ms(disruption.get("lastTransitionTime"))
    elif status.get("reason") in POD_REASONS:
        reason, when = POD_REASONS[status["reason"]], None
    else:
        reason, when = container.get("reason") or status.get("reason"), None
    when = ts_ms(container.get("finishedAt")) or when or ts_ms(meta.get("deletionTimestamp"))
    return Ending(ts_ms=when or now_ms, reason=reason, exit_code=exit_code)


def _image_pull(status: Mapping[str, Any]) -> str | None:
    for s in (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or []):
        reason = ((s.get("state") or {}).get("waiting") or {}).get("reason")
        if reason in IMAGE_PULL_REASONS:
            return str(reason)
    return None


def _opt_int(labels: Mapping[str, str], key: str) -> int | None:
    raw = labels.get(key)
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise BadPod(f"label {key}={raw!r} is not an integer") from None
    if value < 0:
        raise BadPod(f"label {key}={raw!r} is negative")
    return value


def pod_view(pod: Mapping[str, Any], *, now_ms: int, deleted: bool = False) -> PodView | None:
    """The pod as gpufailover sees it; None if it is not a training pod (no job-id label).
    BadPod when its labels cannot be read."""
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    job_id = labels.get(JOB_ID_LABEL)
    if not job_id:
        return None
    try:
        attempt = attempt_of(labels)
    except ValueError as exc:
        raise BadPod(str(exc)) from None
    training_type = labels.get(TRAINING_TYPE_LABEL, "on_demand")
    if training_type not in TRAINING_TYPES:
        raise BadPod(f"label {TRAINING_TYPE_LABEL}={training_type!r}: not one of "
                     f"{sorted(TRAINING_TYPES)}")  # fmt: skip
    status = pod.get("status") or {}
    spec = pod.get("spec") or {}
    owners = [o.get("name") for o in meta.get("ownerReferences") or [] if o.get("kind") == "Job"]
    priority = spec.get("priority")
    return PodView(
        uid=str(meta.get("uid") or f"{meta.get('namespace')}/{meta.get('name')}"),
        namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name") or ""),
        job_id=str(job_id),
        attempt=attempt,
        node=spec.get("nodeName") or None,
        phase=str(status.get("phase") or "Pending"),
        seen_ms=now_ms,
        started_ms=_started_ms(status),
        finished_ms=_finished_ms(status),
        ended=_ending(pod, deleted, now_ms),
        succeeded=status.get("phase") == "Succeeded",
        image_pull=_image_pull(status),
        failover=labels.get(FAILOVER_LABEL, "true").lower() != "false",
        training_type=training_type,
        max_failovers=_opt_int(labels, MAX_FAILOVERS_LABEL),
        priority=priority if isinstance(priority, int) else None,
        owner=owners[0] if owners else labels.get(JOB_NAME_LABEL),
    )


__all__ = ["ATTEMPT_LABEL", "JOB_ID_LABEL", "BadPod", "Ending", "PodView", "pod_view"]
