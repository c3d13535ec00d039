"""The relocated copy of a training Job (pure: no API server): exclusions, priority, names,
and what the Job controller owns stripped."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from consumers.requeue.k8s_job import (
    ATTEMPT_LABEL,
    BASE_NAME,
    CHECKPOINT,
    EXCLUDED_NODES,
    JOB_ID_LABEL,
    REQUEUED_FROM,
    attempt_of,
    relocated_job,
    relocated_name,
    with_excluded_nodes,
)


def stored_job(**pod_spec: Any) -> dict[str, Any]:
    """A Job as the API server returns it once the Job controller has seen it."""
    uid = "0b6c3c8e-1"
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "train",
            "namespace": "ml",
            "uid": uid,
            "resourceVersion": "812",
            "labels": {JOB_ID_LABEL: "train-7", "team": "vision"},
            "annotations": {"batch.kubernetes.io/job-tracking": "", "owner": "ana"},
        },
        "spec": {
            "completions": 4,
            "parallelism": 4,
            "completionMode": "Indexed",
            "backoffLimit": 0,
            "manualSelector": False,
            "selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}},
            "template": {
                "metadata": {
                    "labels": {
                        JOB_ID_LABEL: "train-7",
                        "batch.kubernetes.io/controller-uid": uid,
                        "controller-uid": uid,
                        "batch.kubernetes.io/job-name": "train",
                        "job-name": "train",
                        "team": "vision",
                    }
                },
                "spec": {"restartPolicy": "Never", "containers": [{"name": "t"}], **pod_spec},
            },
        },
        "status": {"failed": 1},
    }


def relocate(old: dict[str, Any], nodes: tuple[str, ...] = ("gpu-2",), **kw: Any) -> Any:
    args: dict[str, Any] = {
        "job_id": "train-7",
        "next_attempt": 1,
        "exclude_nodes": nodes,
        "priority_class": "gpufailover-failover",
        "decision": "hardware -> failover",
    }
    args.update(kw)
    return relocated_job(old, **args)


def excluded(job: dict[str, Any]) -> list[list[str]]:
    terms = job["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    return [
        [r["values"][0] for r in t.get("matchFields", []) if r["operator"] == "NotIn"]
        for t in terms
    ]


def test_the_copy_excludes_each_node_by_name_and_runs_at_the_failover_priority() -> None:
    new = relocate(stored_job(priority=0), ("gpu-3", "gpu-2"))
    assert excluded(new) == [["gpu-2", "gpu-3"]]
    fields = new["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"][0]["matchFields"]
    assert all(f["key"] == "metadata.name" and len(f["values"]) == 1 for f in fields)
    pod = new["spec"]["template"]["spec"]
    assert pod["priorityClassName"] == "gpufailover-failover" and "priority" not in pod


def test_the_copy_is_a_new_job_of_the_next_attempt_with_nothing_the_controller_owns() -> None:
    new = relocate(stored_job())
    meta, spec = new["metadata"], new["spec"]
    assert (meta["name"], meta["namespace"]) == ("train-r1", "ml")
    assert set(meta) == {"name", "namespace", "labels", "annotations"}  # no uid, no version
    assert meta["labels"] == {JOB_ID_LABEL: "train-7", ATTEMPT_LABEL: "1", "team": "vision"}
    assert spec["template"]["metadata"]["labels"] == meta["labels"]
    assert "selector" not in spec and "manualSelector" not in spec and "status" not in new
    assert meta["annotations"]["owner"] == "ana"
    assert not any(k.startswith("batch.kubernetes.io/") for k in meta["annotations"])
    assert (meta["annotations"][BASE_NAME], meta["annotations"][REQUEUED_FROM]) == (
        "train",
        "train",
    )
    assert meta["annotations"][EXCLUDED_NODES] == "gpu-2"
    assert (spec["completions"], spec["completionMode"], spec["backoffLimit"]) == (4, "Indexed", 0)


def test_the_stored_job_is_not_changed() -> None:
    old = stored_job()
    before = copy.deepcopy(old)
    relocate(old)
    assert old == before


def test_a_second_requeue_replaces_the_earlier_exclusions_and_keeps_the_base_name() -> None:
    first = relocate(stored_job(), ("gpu-2",))
    first["metadata"]["uid"] = "x"
    second = relocate(first, ("gpu-5",), next_attempt=2)
    assert second["metadata"]["name"] == "train-r2"
    assert second["metadata"]["annotations"][REQUEUED_FROM] == "train-r1"
    assert excluded(second) == [["gpu-5"]]
    assert second["metadata"]["labels"][ATTEMPT_LABEL] == "2"


def test_the_users_own_node_requirements_are_kept_in_every_term() -> None:
    user = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "gpu", "operator": "In", "values": ["h100"]}]},
                    {
                        "matchFields": [
                            {"key": "metadata.name", "operator": "NotIn", "values": ["gpu-9"]}
                        ]
                    },
                ]
            },
            "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1, "preference": {}}],
        },
        "podAntiAffinity": {"x": 1},
    }
    out = with_excluded_nodes(user, ["gpu-2"])
    terms = out["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert terms[0]["matchExpressions"] == [{"key": "gpu", "operator": "In", "values": ["h100"]}]
    assert [[r["values"][0] for r in t["matchFields"]] for t in terms] == [
        ["gpu-2"],
        ["gpu-9", "gpu-2"],  # the user's own exclusion of gpu-9 stays
    ]
    assert out["podAntiAffinity"] == {"x": 1}
    assert "preferredDuringSchedulingIgnoredDuringExecution" in out["nodeAffinity"]


def test_no_excluded_nodes_leaves_no_empty_affinity() -> None:
    new = relocate(stored_job(), ())
    assert "affinity" not in new["spec"]["template"]["spec"]
    earlier = relocate(stored_job(), ("gpu-2",))
    assert "affinity" not in relocate(earlier, (), next_attempt=2)["spec"]["template"]["spec"]


def test_a_retry_without_a_priority_class_keeps_the_jobs_own() -> None:
    new = relocate(stored_job(priorityClassName="batch"), priority_class=None)
    assert new["spec"]["template"]["spec"]["priorityClassName"] == "batch"


def test_names_fit_the_job_name_label() -> None:
    assert relocated_name("a" * 80, 12) == "a" * 59 + "-r12"
    assert len(relocated_name("a" * 80, 12)) == 63
    assert relocated_name("train-" + "b" * 55 + "-x", 3).endswith("b-r3")


@pytest.mark.parametrize(("labels", "attempt"), [(None, 0), ({}, 0), ({ATTEMPT_LABEL: "3"}, 3)])
def test_attempt_of_reads_the_label(labels: dict[str, str] | None, attempt: int) -> None:
    assert attempt_of(labels) == attempt


@pytest.mark.parametrize("bad", ["x", "-1", ""])
def test_attempt_of_refuses_a_bad_label(bad: str) -> None:
    with pytest.raises(ValueError, match=ATTEMPT_LABEL):
        attempt_of({ATTEMPT_LABEL: bad})


def test_the_last_checkpoint_is_handed_to_the_relocated_pods_and_not_kept_when_absent() -> None:
    ckpt = {"step": 1200, "uri": "s3://ckpt/train-7/1200", "ts_ms": 5, "attempt": 0}
    new = relocate(stored_job(), checkpoint=ckpt)
    raw = new["spec"]["template"]["metadata"]["annotations"][CHECKPOINT]
    assert json.loads(raw) == ckpt
    later = relocate(new, next_attempt=2)  # no checkpoint reported since: none handed on
    assert CHECKPOINT not in later["spec"]["template"]["metadata"].get("annotations", {})
