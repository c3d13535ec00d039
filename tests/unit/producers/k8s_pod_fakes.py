"""Pods as the API server returns them (`Pod.to_dict()`), in the states a kubelet reports."""

from __future__ import annotations

from typing import Any

T0 = "2026-12-01T10:00:00Z"
T0_MS = 1_796_119_200_000


def at(seconds: int) -> str:
    return f"2026-12-01T10:{seconds // 60:02d}:{seconds % 60:02d}Z"


def pod(
    name: str = "train-0",
    *,
    job: str = "train-7",
    attempt: int | None = None,
    node: str | None = "gpu-1",
    phase: str = "Pending",
    labels: dict[str, str] | None = None,
    **status: Any,
) -> dict[str, Any]:
    all_labels = {"gpufailover.io/job-id": job, "batch.kubernetes.io/job-name": "train"}
    if attempt is not None:
        all_labels["gpufailover.io/attempt"] = str(attempt)
    all_labels.update(labels or {})
    spec: dict[str, Any] = {"containers": [{"name": "trainer"}], "priority": 1000}
    if node:
        spec["nodeName"] = node
    return {
        "metadata": {
            "name": name,
            "namespace": "ml",
            "uid": f"uid-{name}-{attempt}",
            "labels": all_labels,
            "ownerReferences": [{"kind": "Job", "name": "train", "uid": "j", "apiVersion": "v"}],
        },
        "spec": spec,
        "status": {"phase": phase, **status},
    }


def container(state: dict[str, Any], name: str = "trainer") -> dict[str, Any]:
    """A container status with every field the API always returns."""
    return {"name": name, "image": "registry.example/trainer:1", "imageID": "",
            "ready": "running" in state, "restartCount": 0, "state": state}  # fmt: skip


def running(name: str = "train-0", started: int = 5, **kw: Any) -> dict[str, Any]:
    state = {"running": {"startedAt": at(started)}}
    return pod(name, phase="Running", containerStatuses=[container(state)],
               **kw)  # fmt: skip


def failed(
    name: str = "train-0", code: int = 1, reason: str = "Error", ended: int = 50, **kw: Any
) -> dict[str, Any]:
    state = {"terminated": {"exitCode": code, "reason": reason, "startedAt": at(5),
                            "finishedAt": at(ended)}}  # fmt: skip
    return pod(name, phase="Failed", containerStatuses=[container(state)],
               **kw)  # fmt: skip


def succeeded(name: str = "train-0", ended: int = 90, **kw: Any) -> dict[str, Any]:
    state = {"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": at(5),
                            "finishedAt": at(ended)}}  # fmt: skip
    return pod(name, phase="Succeeded", containerStatuses=[container(state)],
               **kw)  # fmt: skip


def image_pull_backoff(name: str = "train-0", **kw: Any) -> dict[str, Any]:
    state = {"waiting": {"reason": "ImagePullBackOff", "message": "Back-off pulling image"}}
    return pod(name, containerStatuses=[container(state)], **kw)


def disrupted(base: dict[str, Any], reason: str, when: int = 60) -> dict[str, Any]:
    """`base` as Kubernetes leaves it when it kills the pod itself (DisruptionTarget)."""
    out = {**base, "metadata": {**base["metadata"], "deletionTimestamp": at(when + 1)}}
    cond = {"type": "DisruptionTarget", "status": "True", "reason": reason,
            "lastTransitionTime": at(when)}  # fmt: skip
    out["status"] = {**base["status"], "conditions": [cond]}
    return out
