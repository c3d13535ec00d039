"""Pods of a training job in, job events out, each at most once (no API server, no broker)."""

from __future__ import annotations

from typing import Any

from k8s_pod_fakes import T0_MS, disrupted, failed, image_pull_backoff, pod, running, succeeded

from producers.k8s.pods import pod_view
from producers.k8s.tracker import JobTracker
from schemas.jobs import JobEvent

NOW = T0_MS + 999_000


def see(t: JobTracker, p: dict[str, Any], deleted: bool = False) -> list[JobEvent]:
    v = pod_view(p, now_ms=NOW, deleted=deleted)
    assert v is not None
    events = t.observe(v)
    for e in events:
        t.sent(e)  # the broker acknowledged it
    return events


def gone(t: JobTracker, p: dict[str, Any]) -> list[JobEvent]:
    events = see(t, p, deleted=True) + t.gone(p["metadata"]["uid"])
    for e in events:
        t.sent(e)
    return events


def kinds(events: list[JobEvent]) -> list[tuple[str, int]]:
    return [(e.type, e.attempt) for e in events]


def four_pods_running(t: JobTracker, attempt: int | None = None) -> list[JobEvent]:
    out: list[JobEvent] = []
    for i in range(4):
        out += see(t, pod(f"train-{i}", node=f"gpu-{i}", attempt=attempt))
    for i in range(4):
        out += see(t, running(f"train-{i}", started=5 + i, node=f"gpu-{i}", attempt=attempt))
    return out


def test_a_job_starts_once_with_its_nodes_and_the_earliest_start() -> None:
    t = JobTracker()
    events = four_pods_running(t)
    assert kinds(events) == [("started", 0)]
    (started,) = events
    assert started.nodes == ("gpu-0", "gpu-1", "gpu-2", "gpu-3")
    assert started.ts_ms == T0_MS + 5_000
    assert started.spec == {"namespace": "ml", "job": "train"} and started.priority == 1000


def test_the_first_failed_pod_terminates_the_attempt_once_with_every_node() -> None:
    t = JobTracker()
    four_pods_running(t)
    (term,) = see(t, failed("train-2", code=137, reason="OOMKilled", node="gpu-2", ended=50))
    assert (term.type, term.exit_code, term.reason) == ("terminated", 137, "OOMKilled")
    assert term.nodes == ("gpu-0", "gpu-1", "gpu-2", "gpu-3") and term.ts_ms == T0_MS + 50_000
    # its peers fail after it (NCCL), then the Job controller deletes the rest: nothing more
    assert see(t, failed("train-0", code=1, node="gpu-0", ended=55)) == []
    assert gone(t, running("train-1", node="gpu-1")) == []


def test_a_restarted_process_seeded_with_what_was_published_sends_nothing_again() -> None:
    first = JobTracker()
    published = four_pods_running(first) + see(first, failed("train-1", node="gpu-1"))
    again = JobTracker((e.job_id, e.attempt, e.type) for e in published)
    pods = [running(f"train-{i}", node=f"gpu-{i}") for i in (0, 2, 3)]
    views = [pod_view(p, now_ms=NOW) for p in [*pods, failed("train-1", node="gpu-1")]]
    assert again.resync(v for v in views if v is not None) == []


def test_a_watch_restart_that_missed_a_failure_reports_it_from_the_list() -> None:
    t = JobTracker()
    four_pods_running(t)
    listed = [running(f"train-{i}", node=f"gpu-{i}") for i in (0, 1, 3)]
    listed.append(failed("train-2", node="gpu-2", code=1))
    views = [pod_view(p, now_ms=NOW) for p in listed]
    assert kinds(t.resync(v for v in views if v is not None)) == [("terminated", 0)]


def test_a_pod_deleted_by_node_loss_terminates_with_workerlost() -> None:
    t = JobTracker()
    four_pods_running(t)
    lost = disrupted(running("train-3", node="gpu-3"), "DeletionByTaintManager", when=70)
    (term,) = gone(t, lost)
    assert (term.reason, term.exit_code, term.ts_ms) == ("WorkerLost", None, T0_MS + 70_000)


def test_the_relocated_attempt_is_a_new_job_attempt() -> None:
    t = JobTracker()
    four_pods_running(t)
    see(t, failed("train-1", node="gpu-1"))
    for i in range(4):  # the requeue actuator deletes the old Job: its pods go
        gone(t, pod(f"train-{i}", node=f"gpu-{i}", phase="Running"))
    events = four_pods_running(t, attempt=1)
    assert kinds(events) == [("started", 1)]
    assert len(t) == 1 and {a for (_, a, _) in t.published} == {1}  # attempt 0 forgotten


def test_succeeded_only_when_every_pod_succeeded() -> None:
    t = JobTracker()
    four_pods_running(t)
    for i in range(3):
        assert see(t, succeeded(f"train-{i}", node=f"gpu-{i}", ended=80 + i)) == []
    (done,) = see(t, succeeded("train-3", node="gpu-3", ended=95))
    assert (done.type, done.exit_code, done.ts_ms) == ("succeeded", 0, T0_MS + 95_000)


def test_a_job_deleted_by_its_owner_while_running_is_cancelled() -> None:
    t = JobTracker()
    four_pods_running(t)
    out: list[JobEvent] = []
    for i in range(4):
        out += gone(t, running(f"train-{i}", node=f"gpu-{i}"))
    assert kinds(out) == [("cancelled", 0)]


def test_image_pull_backoff_before_the_start_is_reported_once_as_pending() -> None:
    t = JobTracker()
    (pending,) = see(t, image_pull_backoff("train-0", attempt=1))
    assert (pending.type, pending.reason, pending.attempt) == ("pending", "ImagePullBackOff", 1)
    assert see(t, image_pull_backoff("train-1", node="gpu-2", attempt=1)) == []
    assert kinds(see(t, running("train-0", attempt=1))) == [("started", 1)]


def test_nothing_is_reported_for_an_attempt_after_its_end() -> None:
    t = JobTracker()
    see(t, pod("train-0"))
    # failed before it was seen running: its start (from the container) goes out first
    assert kinds(see(t, failed("train-0", code=2))) == [("started", 0), ("terminated", 0)]
    assert see(t, running("train-0")) == []  # a late, stale start: never after the end
