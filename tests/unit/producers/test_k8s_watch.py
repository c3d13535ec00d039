"""The pod watcher's reactions to what the API server and the broker do, with stand-ins for
both (the real ones are in tests/integration/kube/test_k8s_events.py): a 410 Gone lists again
and sends nothing twice; a failed publish is retried and marked sent only once acknowledged."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from k8s_pod_fakes import container, failed, running
from lightkube import ApiError
from lightkube.models.meta_v1 import Status
from lightkube.resources.core_v1 import Pod

from gpufailover.backoff import Backoff
from producers.k8s.metrics import K8sEventsMetrics
from producers.k8s.tracker import JobTracker
from producers.k8s.watch import PodEvents
from schemas.jobs import JobEvent


def api_pod(raw: dict[str, Any], version: str) -> Pod:
    raw["metadata"]["resourceVersion"] = version
    for c in raw["status"].get("containerStatuses", []):
        c.update({k: v for k, v in container({}).items() if k not in c})
    return Pod.from_dict(raw)  # type: ignore[return-value]


class Listing:
    def __init__(self, pods: list[Pod], version: str) -> None:
        self.pods, self.resourceVersion = pods, version

    async def __aiter__(self) -> AsyncIterator[Pod]:
        for p in self.pods:
            yield p


class StandInApi:
    """Lists `pods`; the first watch answers 410 Gone (the resourceVersion expired), later
    watches deliver `later` and then stay open."""

    def __init__(self, pods: list[Pod], later: list[tuple[str, Pod]]) -> None:
        self.pods, self.later = pods, later
        self.lists: list[str] = []
        self.watched_from: list[str | None] = []
        self.idle = asyncio.Event()

    def list(self, res: Any, **kw: Any) -> Listing:
        self.lists.append("list")
        return Listing(self.pods, str(10 * len(self.lists)))

    async def watch(self, res: Any, **kw: Any) -> AsyncIterator[tuple[str, Pod]]:
        self.watched_from.append(kw["resource_version"])
        if len(self.watched_from) == 1:
            raise ApiError(status=Status(code=410, message="too old resource version"))
        for item in self.later:
            yield item
        self.idle.set()
        await asyncio.Event().wait()  # open until cancelled


class StandInPublisher:
    def __init__(self, failures: int = 0) -> None:
        self.failures, self.sent = failures, []  # type: list[JobEvent]

    async def publish(self, event: JobEvent) -> None:
        if self.failures:
            self.failures -= 1
            raise ConnectionError("broker unreachable")
        self.sent.append(event)


def count(metric: Any) -> float:
    return float(metric._value.get())


async def run_until_idle(watcher: PodEvents, api: StandInApi) -> None:
    stop = asyncio.Event()
    task = asyncio.create_task(watcher.run(stop))
    await asyncio.wait_for(api.idle.wait(), 5)
    stop.set()
    await asyncio.wait_for(task, 5)


async def test_a_410_gone_lists_again_and_sends_nothing_twice() -> None:
    pod = api_pod(running("train-0", node="gpu-1"), "5")
    api = StandInApi([pod], [("MODIFIED", api_pod(failed("train-0", node="gpu-1"), "12"))])
    publisher, metrics = StandInPublisher(), K8sEventsMetrics.create()
    watcher = PodEvents(api, publisher, JobTracker(), metrics)  # type: ignore[arg-type]
    await run_until_idle(watcher, api)
    assert api.lists == ["list", "list"] and api.watched_from == ["10", "20"]
    assert count(metrics.watch_restarts.labels(why="gone")) == 1
    assert [(e.type, e.attempt) for e in publisher.sent] == [("started", 0), ("terminated", 0)]


async def test_a_failed_publish_is_retried_and_marked_sent_only_once_acknowledged() -> None:
    pod = api_pod(running("train-0", node="gpu-1"), "5")
    api = StandInApi([pod], [("MODIFIED", api_pod(running("train-0", node="gpu-1"), "11"))])
    publisher, metrics = StandInPublisher(failures=2), K8sEventsMetrics.create()
    tracker = JobTracker()
    watcher = PodEvents(api, publisher, tracker, metrics,  # type: ignore[arg-type]
                        backoff=Backoff(first_ms=1, max_ms=2))  # fmt: skip
    await run_until_idle(watcher, api)
    assert [e.type for e in publisher.sent] == ["started"]
    assert count(metrics.publish_errors) == 2
    assert count(metrics.published.labels(type="started")) == 1
    assert tracker.published == {("train-7", 0, "started")}
