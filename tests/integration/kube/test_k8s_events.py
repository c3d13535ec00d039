"""`gpufailover k8s-events` on the real control plane and the real broker: pod reports written
the way a kubelet writes them become the right `jobs.events`, each once, across watch renewals,
a node loss, and a restart of the process."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest
from lightkube.resources.core_v1 import Pod
from lightkube.types import PatchType

from producers.jobs import JobEventPublisher
from producers.k8s.config import K8sEventsSettings
from producers.k8s.metrics import K8sEventsMetrics
from producers.k8s.tracker import JobTracker
from producers.k8s.watch import PodEvents, run_k8s_events
from schemas.topics import TopicNames
from tests.integration.kafka_io import Rec, wait_for
from tests.integration.kube.training_jobs import (
    now_rfc3339,
    report_failed,
    report_image_pull_backoff,
    report_running,
    training_job,
    wait_bound,
)
from tests.integration.kube_cluster import KubeCluster


@contextlib.asynccontextmanager
async def k8s_events(
    kube: KubeCluster, bootstrap: str, names: TopicNames, namespace: str
) -> AsyncIterator[None]:
    """The service in this process, watching `namespace`; its watch requests last 1 s, so
    they are renewed many times in a test."""
    settings = K8sEventsSettings(bootstrap, names, namespace=namespace, watch_timeout_s=1)
    stop, ready = asyncio.Event(), asyncio.Event()
    client = kube.async_client()
    task = asyncio.create_task(run_k8s_events(settings, stop, client=client, ready=ready))
    try:
        await asyncio.wait_for(_first(ready, task), 60)
        yield
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)
        await client.close()


async def _first(ready: asyncio.Event, task: asyncio.Task[None]) -> None:
    waiter = asyncio.create_task(ready.wait())
    await asyncio.wait({waiter, task}, return_when=asyncio.FIRST_COMPLETED)
    waiter.cancel()
    if task.done():
        task.result()  # raises what stopped it


def events(recs: list[Rec], job: str) -> list[tuple[str, int]]:
    return [(r.value["type"], r.value["attempt"]) for r in recs if r.key == job]


def has(job: str, *wanted: tuple[str, int]) -> object:
    return lambda rs: all(w in events(rs, job) for w in wanted)


@pytest.mark.timeout(240)
async def test_pod_reports_become_job_events_once_across_watch_renewals_and_restarts(
    kube: KubeCluster, kube_namespace: str, kafka_bootstrap: str, topic_names: TopicNames
) -> None:
    admin, ns, topic = kube.client(), kube_namespace, topic_names.jobs_events
    admin.create(training_job(ns, "train", "train-1", pods=2))
    admin.create(training_job(ns, "oom", "oom-1", pods=1))
    train = wait_bound(admin, ns, "train-1", 0, 2)
    (oom,) = wait_bound(admin, ns, "oom-1", 0, 1)

    async with k8s_events(kube, kafka_bootstrap, topic_names, ns):
        for pod in [*train, oom]:
            report_running(admin, pod)
        await wait_for(kafka_bootstrap, [topic], has("train-1", ("started", 0)))
        report_failed(admin, oom, 137, "OOMKilled")
        report_failed(admin, train[1], 1, "Error")
        recs = await wait_for(kafka_bootstrap, [topic], lambda rs: len(rs) >= 4)
    by_type = {(r.key, r.value["type"]): r.value for r in recs}
    started = by_type[("train-1", "started")]
    assert started["nodes"] == sorted(p.spec.nodeName for p in train)
    assert started["spec"] == {"namespace": ns, "job": "train"}
    term = by_type[("train-1", "terminated")]
    assert (term["nodes"], term["exit_code"], term["reason"]) == (started["nodes"], 1, "Error")
    assert (by_type[("oom-1", "terminated")]["reason"], by_type[("oom-1", "terminated")]
            ["exit_code"]) == ("OOMKilled", 137)  # fmt: skip

    # Restarted: what was published is not published again; what changed meanwhile is.
    admin.create(training_job(ns, "lost", "lost-1", pods=1))
    (lost,) = wait_bound(admin, ns, "lost-1", 0, 1)
    report_running(admin, lost)  # while nobody watches
    async with k8s_events(kube, kafka_bootstrap, topic_names, ns):
        await wait_for(kafka_bootstrap, [topic], has("lost-1", ("started", 0)))
        # Its node is lost: Kubernetes marks the pod, then deletes it (as the taint manager does).
        cond = {"type": "DisruptionTarget", "status": "True", "reason": "DeletionByTaintManager",
                "message": "Taint manager: deleting due to NoExecute taint",
                "lastTransitionTime": now_rfc3339()}  # fmt: skip
        admin.patch(Pod.Status, lost.metadata.name, {"status": {"conditions": [cond]}},
                    namespace=ns, patch_type=PatchType.STRATEGIC)  # fmt: skip
        admin.delete(Pod, lost.metadata.name, namespace=ns, grace_period=0)
        # A relocated attempt that cannot pull its image.
        admin.create(training_job(ns, "pull", "pull-1", pods=1))
        (pulling,) = wait_bound(admin, ns, "pull-1", 0, 1)
        report_image_pull_backoff(admin, pulling)
        recs = await wait_for(
            kafka_bootstrap, [topic],
            lambda rs: ("terminated", 0) in events(rs, "lost-1")
            and ("pending", 0) in events(rs, "pull-1"),
            settle_s=3.0,  # several watch renewals: any duplicate would show
        )  # fmt: skip
    lost_term = next(r.value for r in recs if r.key == "lost-1" and r.value["type"] == "terminated")
    assert (lost_term["reason"], lost_term["nodes"]) == ("WorkerLost", [lost.spec.nodeName])
    pending = next(r.value for r in recs if r.key == "pull-1")
    assert (pending["type"], pending["reason"]) == ("pending", "ImagePullBackOff")
    keys = [(r.key, r.value["type"], r.value["attempt"]) for r in recs]
    assert sorted(keys) == sorted(set(keys)), "an event was published twice"
    assert sorted(keys) == sorted([
        ("train-1", "started", 0), ("train-1", "terminated", 0), ("oom-1", "started", 0),
        ("oom-1", "terminated", 0), ("lost-1", "started", 0), ("lost-1", "terminated", 0),
        ("pull-1", "pending", 0),
    ])  # fmt: skip


async def test_a_watch_resumed_from_an_old_resource_version_sends_nothing_twice(
    kube: KubeCluster, kube_namespace: str, kafka_bootstrap: str, topic_names: TopicNames
) -> None:
    admin, ns, topic = kube.client(), kube_namespace, topic_names.jobs_events
    admin.create(training_job(ns, "train", "old-1", pods=1))
    (pod,) = wait_bound(admin, ns, "old-1", 0, 1)
    report_running(admin, pod)

    class FromTheStart(PodEvents):
        """Watches from resourceVersion 1 after its first list, as a watcher resuming after a
        long absence: the API server replays the pod's whole history (ADDED, MODIFIED...)."""

        async def _relist(self, stop: asyncio.Event) -> str | None:
            await super()._relist(stop)
            return "1"

    metrics = K8sEventsMetrics.create()
    client, stop = kube.async_client(), asyncio.Event()
    async with JobEventPublisher(kafka_bootstrap, topics=topic_names) as publisher:
        watcher = FromTheStart(client, publisher, JobTracker(), metrics, namespace=ns)
        task = asyncio.create_task(watcher.run(stop))
        try:
            await wait_for(kafka_bootstrap, [topic], has("old-1", ("started", 0)))
            report_failed(admin, pod, 1, "Error")
            recs = await wait_for(kafka_bootstrap, [topic],
                                  has("old-1", ("terminated", 0)), settle_s=2.0)  # fmt: skip
        finally:
            stop.set()
            await asyncio.wait_for(task, 30)
            await client.close()
    assert events(recs, "old-1") == [("started", 0), ("terminated", 0)]
    assert metrics.published.labels(type="started")._value.get() == 1
