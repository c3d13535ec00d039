"""The pure half of the Kubernetes requeue: the relocated copy of a `batch/v1` Job.

A training job is a Job labelled `gpufailover.io/job-id=<job id>`; its attempt is the label
`gpufailover.io/attempt` on the Job and its pod template (absent: 0). A failover or retry of
attempt a creates `<base>-r<a+1>`: the same Job with
- a required node affinity term per excluded node, `matchFields metadata.name NotIn [node]`
  (exact node names, one value each: the API server allows only one per field requirement),
  added to every existing node selector term (terms are ORed, so each must exclude them),
  replacing the ones an earlier requeue added (listed in `gpufailover.io/excluded-nodes`);
- `priorityClassName` set to the failover PriorityClass (and any stale `priority` dropped: the
  Priority admission plugin fills it from the class);
- what the Job controller and the API server own stripped (selector, controller-uid and
  job-name labels, uid, resourceVersion, status), so the Job controller adopts nothing old.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

JOB_ID_LABEL = "gpufailover.io/job-id"
ATTEMPT_LABEL = "gpufailover.io/attempt"
BASE_NAME = "gpufailover.io/base-name"
REQUEUED_FROM = "gpufailover.io/requeued-from"
EXCLUDED_NODES = "gpufailover.io/excluded-nodes"
DECISION = "gpufailover.io/decision"
# On the relocated pods: the job's last checkpoint ({step, uri, ts_ms, attempt}) as JSON, for
# the trainer to resume from (downward API: metadata.annotations['gpufailover.io/checkpoint']).
CHECKPOINT = "gpufailover.io/checkpoint"
# Labels the Job controller puts on a Job and its pod template: a copy must not carry them.
CONTROLLER_LABELS = frozenset(
    {"controller-uid", "job-name", "batch.kubernetes.io/controller-uid",
     "batch.kubernetes.io/job-name"}
)  # fmt: skip
OWNED_ANNOTATION_PREFIXES = ("batch.kubernetes.io/", "kubectl.kubernetes.io/")
NAME_MAX = 63  # the job-name label the controller sets is a label value: at most 63 characters


def attempt_of(labels: Mapping[str, str] | None) -> int:
    """The attempt a Job or pod belongs to: its `gpufailover.io/attempt` label, 0 when absent."""
    raw = (labels or {}).get(ATTEMPT_LABEL, "0")
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"label {ATTEMPT_LABEL}={raw!r} is not an attempt number") from None
    if value < 0:
        raise ValueError(f"label {ATTEMPT_LABEL}={raw!r} is negative")
    return value


def relocated_name(base: str, next_attempt: int) -> str:
    suffix = f"-r{next_attempt}"
    return base[: NAME_MAX - len(suffix)].rstrip("-.") + suffix


def _field_excludes(node: str) -> dict[str, Any]:
    return {"key": "metadata.name", "operator": "NotIn", "values": [node]}


def _is_exclusion_of(req: Mapping[str, Any], nodes: frozenset[str]) -> bool:
    values = req.get("values") or []
    return (
        req.get("key") == "metadata.name"
        and req.get("operator") == "NotIn"
        and len(values) == 1
        and values[0] in nodes
    )


def with_excluded_nodes(
    affinity: Mapping[str, Any] | None, excluded: Sequence[str], previous: Iterable[str] = ()
) -> dict[str, Any]:
    """`affinity` whose required node terms each exclude `excluded` (and no longer `previous`,
    what an earlier requeue excluded); the user's own requirements are kept as they are."""
    out: dict[str, Any] = copy.deepcopy(dict(affinity or {}))
    node_affinity = out.setdefault("nodeAffinity", {})
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    terms = [dict(t) for t in required.get("nodeSelectorTerms") or []] or [{}]
    ours = frozenset(previous) | frozenset(excluded)
    for term in terms:
        kept = [r for r in term.get("matchFields") or [] if not _is_exclusion_of(r, ours)]
        term["matchFields"] = kept + [_field_excludes(n) for n in sorted(set(excluded))]
        if not term["matchFields"]:
            del term["matchFields"]
    terms = [t for t in terms if t]
    if terms:
        node_affinity["requiredDuringSchedulingIgnoredDuringExecution"] = {
            **required,
            "nodeSelectorTerms": terms,
        }
    else:
        node_affinity.pop("requiredDuringSchedulingIgnoredDuringExecution", None)
        if not node_affinity:
            del out["nodeAffinity"]
    return out


def _labels(labels: Mapping[str, str] | None, job_id: str, attempt: int) -> dict[str, str]:
    out = {k: v for k, v in (labels or {}).items() if k not in CONTROLLER_LABELS}
    out[JOB_ID_LABEL] = job_id
    out[ATTEMPT_LABEL] = str(attempt)
    return out


def _annotations(annotations: Mapping[str, str] | None) -> dict[str, str]:
    return {
        k: v for k, v in (annotations or {}).items() if not k.startswith(OWNED_ANNOTATION_PREFIXES)
    }


def excluded_before(job: Mapping[str, Any]) -> list[str]:
    raw = (job.get("metadata", {}).get("annotations") or {}).get(EXCLUDED_NODES, "")
    return [n for n in raw.split(",") if n]


def relocated_job(
    old: Mapping[str, Any],
    *,
    job_id: str,
    next_attempt: int,
    exclude_nodes: Sequence[str],
    priority_class: str | None,
    decision: str,
    checkpoint: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The Job (as the API's JSON) that restarts `old` as `next_attempt` away from
    `exclude_nodes`, at `priority_class` (None: keep the template's)."""
    meta = old["metadata"]
    base = (meta.get("annotations") or {}).get(BASE_NAME) or meta["name"]
    annotations = _annotations(meta.get("annotations"))
    annotations.update(
        {
            BASE_NAME: base,
            REQUEUED_FROM: meta["name"],
            EXCLUDED_NODES: ",".join(sorted(set(exclude_nodes))),
            DECISION: decision,
        }
    )
    spec = copy.deepcopy(dict(old["spec"]))
    for owned in ("selector", "manualSelector"):
        spec.pop(owned, None)
    template = spec.setdefault("template", {})
    tmeta = template.setdefault("metadata", {})
    tmeta["labels"] = _labels(tmeta.get("labels"), job_id, next_attempt)
    template_annotations = dict(tmeta.get("annotations") or {})
    template_annotations.pop(CHECKPOINT, None)  # an earlier attempt's
    if checkpoint is not None:
        template_annotations[CHECKPOINT] = json.dumps(dict(checkpoint), sort_keys=True)
    if template_annotations:
        tmeta["annotations"] = template_annotations
    else:
        tmeta.pop("annotations", None)
    pod = template.setdefault("spec", {})
    pod["affinity"] = with_excluded_nodes(pod.get("affinity"), exclude_nodes, excluded_before(old))
    if not pod["affinity"]:
        del pod["affinity"]
    if priority_class:
        pod["priorityClassName"] = priority_class
        pod.pop("priority", None)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": relocated_name(base, next_attempt),
            "namespace": meta.get("namespace"),
            "labels": _labels(meta.get("labels"), job_id, next_attempt),
            "annotations": annotations,
        },
        "spec": spec,
    }
