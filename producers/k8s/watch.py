"""`gpufailover k8s-events`: watch the pods of labelled training jobs, publish `jobs.events`.

Start: read `jobs.events` to its end and note every (job, attempt, type) already there, then
list the labelled pods (the tracker reports what the list shows and was not published yet, and
forgets what no pod is left of), then watch from the list's resourceVersion. A watch request
the API server ends is renewed from the last resourceVersion seen (lightkube does this); a
resourceVersion too old (410 Gone) means events were missed: list again and compare. A broken
connection is retried with back-off from the last resourceVersion. So a restarted process, a
renewed watch or a new list sends nothing twice; what changed while nobody watched is sent once.
(lightkube 1.0 does not ask for watch bookmarks: after a long quiet spell a renewal may get
410 and list again, which costs a list, not a duplicate.)
An event is marked sent only once the broker has acknowledged it; a failed publish is retried
with back-off until it is, so none is lost while the process runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import httpx2
from lightkube import ALL_NS, ApiError, AsyncClient, operators
from lightkube.resources.core_v1 import Pod
from lightkube.types import OnErrorAction, OnErrorResult
from prometheus_client import CollectorRegistry

from consumers.runtime.oneshot import partitions_of
from gpufailover.backoff import Backoff
from gpufailover.security import PLAINTEXT, KafkaSecurity
from producers.jobs import JobEventPublisher, now_ms
from producers.k8s.config import K8sEventsSettings
from producers.k8s.metrics import K8sEventsMetrics
from producers.k8s.pods import JOB_ID_LABEL, BadPod, pod_view
from producers.k8s.tracker import JobTracker, Sent
from schemas.codec import loads
from schemas.errors import SchemaError
from schemas.jobs import JobEvent

log = logging.getLogger(__name__)

GONE = 410
SELECTOR: dict[str, Any] = {JOB_ID_LABEL: operators.exists()}


async def published_events(
    bootstrap: str, topic: str, security: KafkaSecurity = PLAINTEXT
) -> set[Sent]:
    """Every (job, attempt, type) on `topic` now, read from its beginning to its end."""
    from aiokafka import TopicPartition

    from gpufailover.kafka import make_consumer
    from gpufailover.offsets import behind

    parts = (await partitions_of(bootstrap, [topic], security=security))[topic]
    consumer = make_consumer(
        bootstrap, None, client_id="gpufailover-k8s-events-seed", security=security
    )
    await consumer.start()
    out: set[Sent] = set()
    try:
        tps = [TopicPartition(topic, p) for p in parts]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends: dict[Any, int] = await consumer.end_offsets(tps)
        while await behind(consumer, ends):
            batch = await consumer.getmany(*tps, timeout_ms=200)
            for records in batch.values():
                for r in records:
                    try:
                        e = JobEvent.from_dict(loads(r.value))
                    except SchemaError:
                        continue  # the classifier owns jobs.events and dead-letters it
                    out.add((e.job_id, e.attempt, e.type))
    finally:
        await consumer.stop()
    return out


class PodEvents:
    def __init__(
        self,
        client: AsyncClient,
        publisher: JobEventPublisher,
        tracker: JobTracker,
        metrics: K8sEventsMetrics,
        *,
        namespace: str | None = None,
        watch_timeout_s: int = 300,
        backoff: Backoff | None = None,
    ) -> None:
        self.client, self.publisher, self.tracker = client, publisher, tracker
        self.metrics, self.namespace = metrics, namespace or ALL_NS
        self.watch_timeout_s = watch_timeout_s
        self.backoff = backoff or Backoff(first_ms=500, max_ms=30_000)
        self.synced = asyncio.Event()  # set once the first list has been published

    async def run(self, stop: asyncio.Event) -> None:
        follow = asyncio.create_task(self._follow(stop))
        halt = asyncio.create_task(stop.wait())
        try:
            await asyncio.wait({follow, halt}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (follow, halt):
                task.cancel()
            for task in (follow, halt):
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        if follow.done() and not follow.cancelled() and follow.exception() is not None:
            raise follow.exception()  # type: ignore[misc]

    async def _follow(self, stop: asyncio.Event) -> None:
        version = await self._relist(stop)
        failures = 0
        while not stop.is_set():
            try:
                async for kind, pod in self.client.watch(
                    Pod,
                    namespace=self.namespace,
                    labels=SELECTOR,
                    resource_version=version,
                    server_timeout=self.watch_timeout_s,
                    on_error=self._renew,
                ):
                    version = pod.metadata.resourceVersion if pod.metadata else version
                    failures = 0
                    if kind != "BOOKMARK":
                        await self._on_pod(kind, pod.to_dict(), stop)
            except ApiError as exc:
                if exc.status.code != GONE:
                    failures = await self._pause(exc, failures, stop)
                    continue
                self.metrics.watch_restarts.labels(why="gone").inc()
                log.info("k8s-events: resourceVersion %s expired (410 Gone): listing again",
                         version)  # fmt: skip
                version = await self._relist(stop)
            except (httpx2.HTTPError, OSError) as exc:
                failures = await self._pause(exc, failures, stop)

    def _renew(self, exc: Exception, count: int) -> OnErrorResult:
        """The API server ends a watch request at its timeout by closing the connection (seen
        as a protocol error): lightkube watches again at once from the last resourceVersion.
        A second failure in a row is a real one: raised, retried here with back-off."""
        if isinstance(exc, httpx2.TransportError) and count <= 1:
            return OnErrorResult(OnErrorAction.RETRY)
        return OnErrorResult(OnErrorAction.RAISE)

    async def _pause(self, exc: Exception, failures: int, stop: asyncio.Event) -> int:
        failures += 1
        self.metrics.watch_restarts.labels(why="error").inc()
        delay = self.backoff.delay_ms(failures) / 1000
        log.warning("k8s-events: pod watch failed (%s); watching again in %.1f s", exc, delay)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), delay)
        return failures

    async def _relist(self, stop: asyncio.Event) -> str | None:
        failures = 0
        while True:
            try:
                listing = self.client.list(Pod, namespace=self.namespace, labels=SELECTOR)
                views = []
                async for pod in listing:
                    view = self._view(pod.to_dict(), deleted=False)
                    if view is not None:
                        views.append(view)
                version = listing.resourceVersion
                break
            except (httpx2.HTTPError, OSError) as exc:
                failures = await self._pause(exc, failures, stop)
                if stop.is_set():
                    return None
        events = self.tracker.resync(views)
        log.info("k8s-events: %d labelled pods listed at resourceVersion %s; %d events to send",
                 len(views), version, len(events))  # fmt: skip
        await self._publish_all(events, stop)
        self.synced.set()
        return version

    def _view(self, pod: dict[str, Any], *, deleted: bool) -> Any:
        try:
            return pod_view(pod, now_ms=now_ms(), deleted=deleted)
        except BadPod as exc:
            meta = pod.get("metadata") or {}
            self.metrics.bad_pods.inc()
            log.warning("k8s-events: pod %s/%s skipped: %s", meta.get("namespace"),
                        meta.get("name"), exc)  # fmt: skip
            return None

    async def _on_pod(self, kind: str, pod: dict[str, Any], stop: asyncio.Event) -> None:
        deleted = kind == "DELETED"
        view = self._view(pod, deleted=deleted)
        events: list[JobEvent] = []
        if view is not None:
            events = self.tracker.observe(view)
            if deleted:
                events += self.tracker.gone(view.uid)
        self.metrics.attempts.set(len(self.tracker))
        await self._publish_all(events, stop)

    async def _publish_all(self, events: list[JobEvent], stop: asyncio.Event) -> None:
        for event in events:
            failures = 0
            while not stop.is_set():
                try:
                    await self.publisher.publish(event)
                except SchemaError as exc:
                    self.metrics.bad_pods.inc()
                    log.error("k8s-events: %s not publishable: %s", event, exc)  # noqa: TRY400
                    break
                except Exception as exc:  # noqa: BLE001 - any broker failure: retried
                    failures += 1
                    self.metrics.publish_errors.inc()
                    delay = self.backoff.delay_ms(failures) / 1000
                    log.warning("k8s-events: publishing %s of %s attempt %d failed (%s); "
                                "retrying in %.1f s", event.type, event.job_id, event.attempt,
                                exc, delay)  # fmt: skip
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(stop.wait(), delay)
                    continue
                self.tracker.sent(event)
                self.metrics.published.labels(type=event.type).inc()
                log.info("k8s-events: %s job %s attempt %d nodes %s exit %s reason %s",
                         event.type, event.job_id, event.attempt, ",".join(event.nodes),
                         event.exit_code, event.reason)  # fmt: skip
                break


async def run_k8s_events(
    settings: K8sEventsSettings,
    stop: asyncio.Event,
    *,
    registry: CollectorRegistry | None = None,
    client: AsyncClient | None = None,
    ready: asyncio.Event | None = None,
) -> None:
    """Run until `stop` is set; `ready` is set once the first pod list has been published."""
    from gpufailover.kubeclient import make_async_client

    metrics = K8sEventsMetrics.create(registry)
    topic = settings.names.jobs_events
    seeded = await published_events(settings.bootstrap, topic, settings.security)
    metrics.already_published.set(len(seeded))
    log.info("k8s-events: %d (job, attempt, type) already on %s", len(seeded), topic)
    kube = client or make_async_client(settings.kubeconfig, "gpufailover-k8s-events")
    try:
        async with JobEventPublisher(
            settings.bootstrap,
            topics=settings.names,
            client_id="gpufailover-k8s-events",
            security=settings.security,
        ) as publisher:
            watcher = PodEvents(
                kube,
                publisher,
                JobTracker(seeded),
                metrics,
                namespace=settings.namespace,
                watch_timeout_s=settings.watch_timeout_s,
            )
            if ready is not None:
                waiter = asyncio.create_task(_relay(watcher.synced, ready))
            try:
                await watcher.run(stop)
            finally:
                if ready is not None:
                    waiter.cancel()
    finally:
        if client is None:
            await kube.close()


async def _relay(source: asyncio.Event, target: asyncio.Event) -> None:
    await source.wait()
    target.set()
