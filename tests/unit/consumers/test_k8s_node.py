"""The Kubernetes actuator's pure part: the patches, the ownership rule, the Event."""

from __future__ import annotations

import json
from typing import Any

import pytest

from consumers.quarantine import k8s_node as kn
from schemas.decisions import Evidence
from schemas.quarantine import QuarantineRecord

TAINT = kn.TaintSpec()
OTHER_TAINT = {"key": "example.com/maintenance", "value": "disk", "effect": "NoSchedule"}


def record(ts_ms: int = 1_000, reason: str = "hardware") -> QuarantineRecord:
    evidence = (
        Evidence("gpu-2", 3, "xid", 79, 900, "hardware"),
        Evidence("gpu-2", 3, "xid", 79, 950, "hardware"),
        Evidence("gpu-2", None, "health", "row_remap=failed", 960, "hardware"),
    )
    return QuarantineRecord("gpu-2", "quarantined", reason, evidence, "job-42", ts_ms)


def view(
    *, unschedulable: bool = False, taints: tuple[dict[str, Any], ...] = (), **annotations: str
) -> kn.NodeView:
    return kn.NodeView("gpu-2", "77", unschedulable, taints, dict(annotations), uid="u-1")


def applied(node: kn.NodeView, patch: dict[str, Any]) -> kn.NodeView:
    """What a JSON merge patch of the kind the actuator sends does to the node."""
    annotations = dict(node.annotations)
    for k, v in patch["metadata"].get("annotations", {}).items():
        if v is None:
            annotations.pop(k, None)
        else:
            annotations[k] = v
    spec = patch["spec"]
    unschedulable = node.unschedulable
    if "unschedulable" in spec:
        unschedulable = bool(spec["unschedulable"])
    taints = tuple(spec.get("taints", node.taints))
    return kn.NodeView(node.name, "78", unschedulable, taints, annotations, node.uid)


def test_quarantine_cordons_taints_and_records_why() -> None:
    patch = kn.quarantine_patch(view(taints=(OTHER_TAINT,)), record(), TAINT, now_ms=5_000)
    assert patch["metadata"]["resourceVersion"] == "77"  # a concurrent change gets a 409
    assert patch["spec"]["unschedulable"] is True
    assert patch["spec"]["taints"] == [
        OTHER_TAINT,
        {"key": "gpufailover.io/quarantine", "value": "hardware", "effect": "NoSchedule"},
    ]
    note = json.loads(patch["metadata"]["annotations"][kn.ANNOTATION])
    assert note == {
        "by": "gpufailover",
        "at_ms": 5_000,
        "reason": "hardware",
        "evidence": "xid 79 gpu 3, health row_remap=failed",
        "evidence_ts_ms": [900, 950, 960],
        "job_id": "job-42",
        "record_ts_ms": 1_000,
        "cordoned_by_us": True,
    }


def test_a_node_cordoned_by_someone_else_is_recorded_as_not_ours() -> None:
    patch = kn.quarantine_patch(view(unschedulable=True), record(), TAINT, now_ms=5_000)
    assert json.loads(patch["metadata"]["annotations"][kn.ANNOTATION])["cordoned_by_us"] is False


def test_requarantine_keeps_our_cordon_ours_and_replaces_our_older_taint() -> None:
    first = applied(view(), kn.quarantine_patch(view(), record(1_000), TAINT, now_ms=5_000))
    patch = kn.quarantine_patch(first, record(2_000, "precursor"), TAINT, now_ms=6_000)
    note = json.loads(patch["metadata"]["annotations"][kn.ANNOTATION])
    assert note["cordoned_by_us"] is True
    assert note["record_ts_ms"] == 2_000
    assert [t["value"] for t in patch["spec"]["taints"]] == ["precursor"]


def test_release_undoes_exactly_what_quarantine_did() -> None:
    before = view(taints=(OTHER_TAINT,))
    quarantined = applied(before, kn.quarantine_patch(before, record(), TAINT, now_ms=5_000))
    released = applied(quarantined, kn.release_patch(quarantined, TAINT))
    assert (released.unschedulable, released.taints, released.annotations) == (
        False,
        (OTHER_TAINT,),
        {},
    )


def test_release_leaves_someone_elses_cordon() -> None:
    before = view(unschedulable=True, **{"owner/note": "rma"})
    quarantined = applied(before, kn.quarantine_patch(before, record(), TAINT, now_ms=5_000))
    patch = kn.release_patch(quarantined, TAINT)
    assert "unschedulable" not in patch["spec"]
    released = applied(quarantined, patch)
    assert released.unschedulable is True
    assert released.annotations == {"owner/note": "rma"}
    assert released.taints == ()


def test_without_our_annotation_release_never_uncordons() -> None:
    stray = {"key": TAINT.key, "value": "hardware", "effect": "NoSchedule"}
    patch = kn.release_patch(view(unschedulable=True, taints=(stray,)), TAINT)
    assert "unschedulable" not in patch["spec"]
    assert patch["spec"]["taints"] == []


@pytest.mark.parametrize(
    "annotation", ["not json", json.dumps({"by": "someone-else", "cordoned_by_us": True}), "[1]"]
)
def test_an_annotation_not_written_by_us_is_not_ours(annotation: str) -> None:
    node = view(unschedulable=True, **{kn.ANNOTATION: annotation})
    assert kn.read_ownership(node) is None
    assert "unschedulable" not in kn.release_patch(node, TAINT)["spec"]


def test_already_applied_only_for_the_same_record_with_its_marks_intact() -> None:
    quarantined = applied(view(), kn.quarantine_patch(view(), record(1_000), TAINT, now_ms=5_000))
    assert kn.already_applied(quarantined, record(1_000), TAINT)
    assert not kn.already_applied(quarantined, record(2_000), TAINT)
    uncordoned = kn.NodeView("gpu-2", "79", False, quarantined.taints, quarantined.annotations)
    assert not kn.already_applied(uncordoned, record(1_000), TAINT)
    untainted = kn.NodeView("gpu-2", "79", True, (), quarantined.annotations)
    assert not kn.already_applied(untainted, record(1_000), TAINT)


def test_holds_our_marks_sees_a_lone_taint_or_a_lone_annotation() -> None:
    note = json.dumps({"by": "gpufailover"})
    assert not kn.holds_our_marks(view(taints=(OTHER_TAINT,)), TAINT)
    assert kn.holds_our_marks(view(**{kn.ANNOTATION: note}), TAINT)
    ours = {"key": TAINT.key, "value": "x", "effect": "NoSchedule"}
    assert kn.holds_our_marks(view(taints=(ours,)), TAINT)


def test_taint_value_is_a_valid_label_value() -> None:
    assert kn.taint_value("hardware") == "hardware"
    assert kn.taint_value("xid 79: bus/off!") == "xid-79--bus-off"
    assert len(kn.taint_value("a" * 100)) == 63


@pytest.mark.parametrize(("key", "effect"), [("k", "PreferNoSchedule"), ("", "NoSchedule"),
                                             ("a=b", "NoSchedule")])  # fmt: skip
def test_bad_taint_settings_are_refused(key: str, effect: str) -> None:
    with pytest.raises(ValueError, match="taint"):
        kn.TaintSpec(key=key, effect=effect)


def test_no_execute_taint_is_configurable() -> None:
    taint = kn.TaintSpec(key="example.com/bad-gpu", effect="NoExecute")
    patch = kn.quarantine_patch(view(), record(), taint, now_ms=1)
    assert patch["spec"]["taints"] == [
        {"key": "example.com/bad-gpu", "value": "hardware", "effect": "NoExecute"}
    ]


def test_event_is_named_by_action_and_record_and_points_at_the_node() -> None:
    body = kn.event_body("quarantine", view(), record(), TAINT, namespace="default", now_ms=0)
    assert body["metadata"] == {"name": "gpu-2.gpufailover-quarantine-1000", "namespace": "default"}
    assert body["involvedObject"] == {"kind": "Node", "apiVersion": "v1", "name": "gpu-2",
                                      "uid": "u-1"}  # fmt: skip
    assert (body["type"], body["reason"]) == ("Warning", "GpufailoverQuarantined")
    assert "xid 79 gpu 3" in body["message"] and "job job-42" in body["message"]
    assert body["firstTimestamp"] == "1970-01-01T00:00:00Z"
    release = kn.event_body("release", view(), record(), TAINT, namespace="ops", now_ms=0)
    assert (release["type"], release["reason"]) == ("Normal", "GpufailoverReleased")
    assert release["metadata"]["name"] != body["metadata"]["name"]
