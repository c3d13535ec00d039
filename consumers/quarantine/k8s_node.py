"""What the Kubernetes actuator changes on a Node, and what it may undo: pure functions.

Quarantine = cordon (`spec.unschedulable`), a taint `<key>=<reason>:<effect>` and the annotation
`gpufailover.io/quarantine`, a JSON record of what gpufailover did, when and why, including
whether *it* cordoned the node. Release removes our taint and annotation, and uncordons only if
the annotation says gpufailover cordoned it: a node that an operator or another tool had
cordoned before stays cordoned. Every patch carries the resourceVersion it was computed from,
so a concurrent change makes the API server refuse it (409) and the retry recomputes it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from schemas.quarantine import QuarantineRecord

ANNOTATION = "gpufailover.io/quarantine"
DEFAULT_TAINT_KEY = "gpufailover.io/quarantine"
TAINT_EFFECTS = ("NoSchedule", "NoExecute")
_LABEL_VALUE = re.compile(r"[^A-Za-z0-9._-]")
_LABEL_VALUE_MAX = 63


@dataclass(frozen=True)
class TaintSpec:
    key: str = DEFAULT_TAINT_KEY
    effect: str = "NoSchedule"

    def __post_init__(self) -> None:
        if self.effect not in TAINT_EFFECTS:
            raise ValueError(f"taint effect must be one of {TAINT_EFFECTS}, got {self.effect!r}")
        if not self.key or "=" in self.key or ":" in self.key.split("/")[-1]:
            raise ValueError(f"not a taint key: {self.key!r}")


@dataclass(frozen=True)
class KubernetesSettings:
    """How the Kubernetes actuator reaches the cluster and marks nodes."""

    kubeconfig: Path | None = None  # None: KUBECONFIG, ~/.kube/config, else in-cluster
    taint: TaintSpec = field(default_factory=TaintSpec)
    event_namespace: str = "default"


@dataclass(frozen=True)
class NodeView:
    """The parts of a Node the actuator reads."""

    name: str
    resource_version: str
    unschedulable: bool
    taints: tuple[dict[str, Any], ...]
    annotations: dict[str, str]
    uid: str | None = None

    @staticmethod
    def from_node(node: Any) -> NodeView:
        """From a lightkube Node."""
        spec = node.spec
        taints = tuple(t.to_dict() for t in (spec.taints or [])) if spec else ()
        return NodeView(
            name=node.metadata.name,
            resource_version=node.metadata.resourceVersion or "",
            unschedulable=bool(spec and spec.unschedulable),
            taints=taints,
            annotations=dict(node.metadata.annotations or {}),
            uid=node.metadata.uid,
        )


def taint_value(reason: str) -> str:
    """A taint value is a label value: [A-Za-z0-9._-], at most 63, alphanumeric at both ends."""
    return _LABEL_VALUE.sub("-", reason)[:_LABEL_VALUE_MAX].strip("-._")


def evidence_summary(record: QuarantineRecord) -> str:
    """`xid 79 gpu 3, xid 48`: each distinct signal once, in evidence order."""
    seen: list[str] = []
    for e in record.evidence:
        item = f"{e.kind} {e.code}" + ("" if e.gpu_index is None else f" gpu {e.gpu_index}")
        if item not in seen:
            seen.append(item)
    return ", ".join(seen)


def ownership(record: QuarantineRecord, *, cordoned_by_us: bool, now_ms: int) -> dict[str, Any]:
    """The annotation's content: who did what, when, why, on which evidence."""
    return {
        "by": "gpufailover",
        "at_ms": now_ms,
        "reason": record.reason,
        "evidence": evidence_summary(record),
        "evidence_ts_ms": [e.ts_ms for e in record.evidence],
        "job_id": record.job_id,
        "record_ts_ms": record.ts_ms,  # identifies the nodes.quarantine record acted on
        "cordoned_by_us": cordoned_by_us,
    }


def read_ownership(node: NodeView) -> dict[str, Any] | None:
    """Our annotation, or None (absent, or not ours: unreadable JSON is not ours to trust)."""
    raw = node.annotations.get(ANNOTATION)
    if raw is None:
        return None
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    return value if isinstance(value, dict) and value.get("by") == "gpufailover" else None


def our_taints(node: NodeView, taint: TaintSpec) -> list[dict[str, Any]]:
    return [t for t in node.taints if t.get("key") == taint.key and t.get("effect") == taint.effect]


def already_applied(node: NodeView, record: QuarantineRecord, taint: TaintSpec) -> bool:
    """This very record was carried out and nothing of it was undone since (redelivery)."""
    note = read_ownership(node)
    wanted = {"key": taint.key, "value": taint_value(record.reason), "effect": taint.effect}
    return (
        note is not None
        and note.get("record_ts_ms") == record.ts_ms
        and node.unschedulable
        and any(_same_taint(t, wanted) for t in node.taints)
    )


def _same_taint(have: dict[str, Any], want: dict[str, str]) -> bool:
    return all(have.get(k) == v for k, v in want.items())


def holds_our_marks(node: NodeView, taint: TaintSpec) -> bool:
    """Anything of ours left on the node (annotation or taint)."""
    return read_ownership(node) is not None or bool(our_taints(node, taint))


def quarantine_patch(
    node: NodeView, record: QuarantineRecord, taint: TaintSpec, now_ms: int
) -> dict[str, Any]:
    """A merge patch: cordon, our taint (replacing an older one of ours), our annotation.

    A node cordoned before we came is recorded as not cordoned by us (so release leaves it
    cordoned); one we cordon now, or had cordoned before, as cordoned by us."""
    previous = read_ownership(node)
    cordoned_by_us = not node.unschedulable or (
        previous is not None and previous.get("cordoned_by_us") is True
    )
    ours = {"key": taint.key, "value": taint_value(record.reason), "effect": taint.effect}
    others = [t for t in node.taints if t.get("key") != taint.key]
    note = ownership(record, cordoned_by_us=cordoned_by_us, now_ms=now_ms)
    return {
        "metadata": {
            "resourceVersion": node.resource_version,
            "annotations": {ANNOTATION: json.dumps(note, sort_keys=True)},
        },
        "spec": {"unschedulable": True, "taints": [*others, ours]},
    }


def release_patch(node: NodeView, taint: TaintSpec) -> dict[str, Any]:
    """A merge patch removing only our marks: our taint, our annotation, and the cordon only if
    the annotation says we cordoned. No annotation of ours: the cordon is someone else's."""
    previous = read_ownership(node)
    spec: dict[str, Any] = {"taints": [t for t in node.taints if t.get("key") != taint.key]}
    if previous is not None and previous.get("cordoned_by_us") is True:
        spec["unschedulable"] = None
    return {
        "metadata": {"resourceVersion": node.resource_version, "annotations": {ANNOTATION: None}},
        "spec": spec,
    }


def describe(action: str, node: str, record: QuarantineRecord, taint: TaintSpec) -> str:
    """The kubectl commands equivalent to an action (dry-run log, `command()`)."""
    if action == "quarantine":
        return (
            f"kubectl cordon {node} && kubectl taint node {node} "
            f"{taint.key}={taint_value(record.reason)}:{taint.effect} --overwrite && "
            f"kubectl annotate node {node} {ANNOTATION}=<who/when/why> --overwrite"
        )
    return (
        f"kubectl taint node {node} {taint.key}:{taint.effect}- && "
        f"kubectl annotate node {node} {ANNOTATION}- && "
        f"kubectl uncordon {node} (only if gpufailover cordoned it)"
    )


def event_body(
    action: str, node: NodeView, record: QuarantineRecord, taint: TaintSpec, *, namespace: str,
    now_ms: int,
) -> dict[str, Any]:  # fmt: skip
    """A core/v1 Event on the Node (what `kubectl describe node` shows), named by the action
    and the record, so that carrying out the same record again does not repeat it."""
    when = _rfc3339(now_ms)
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": event_name(action, node.name, record), "namespace": namespace},
        "involvedObject": {"kind": "Node", "apiVersion": "v1", "name": node.name, "uid": node.uid},
        "reason": "GpufailoverQuarantined" if action == "quarantine" else "GpufailoverReleased",
        "type": "Warning" if action == "quarantine" else "Normal",
        "message": event_message(action, record, taint),
        "source": {"component": "gpufailover-quarantine"},
        "reportingComponent": "gpufailover.io/quarantine",
        "reportingInstance": "gpufailover-quarantine",
        "firstTimestamp": when,
        "lastTimestamp": when,
        "count": 1,
    }


def event_name(action: str, node: str, record: QuarantineRecord) -> str:
    """`<node>.gpufailover-<action>-<record ts>`: one Event per action on one record."""
    return f"{node}.gpufailover-{action}-{record.ts_ms}"


def event_message(action: str, record: QuarantineRecord, taint: TaintSpec) -> str:
    if action == "quarantine":
        why = evidence_summary(record) or "no evidence listed"
        job = f", job {record.job_id}" if record.job_id else ""
        return (
            f"gpufailover cordoned and tainted the node ({taint.key}={taint_value(record.reason)}"
            f":{taint.effect}): {record.reason} ({why}{job})"
        )
    return f"gpufailover released the node ({record.reason}): removed its taint and annotation"


def _rfc3339(ms: int) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
