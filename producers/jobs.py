"""Publishing job lifecycle events (`jobs.events`, key job_id) from a scheduler's hooks.

    async with JobEventPublisher(bootstrap) as pub:
        await pub.publish(JobEvent(job_id="1234", attempt=0, type="started", ts_ms=now_ms(),
                                   nodes=("gpu-01", "gpu-02")))

Every event is checked (`validate_new_event` plus a decode round trip) before it is sent, and
`publish` returns only once the broker acknowledged it (idempotent producer, acks=all).
"""

from __future__ import annotations

import time
from types import TracebackType
from typing import Any

from gpufailover.kafka import make_producer, partitions_of
from gpufailover.security import PLAINTEXT, KafkaSecurity
from gpufailover.settings import default_bootstrap
from schemas.codec import dumps
from schemas.jobs import JobEvent, validate_new_event
from schemas.topics import TopicNames


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def checked_event(event: JobEvent) -> JobEvent:
    """The event as the stream will read it; SchemaError if the stream would dead-letter it."""
    validate_new_event(event)
    return JobEvent.from_dict(event.to_dict())


class JobEventPublisher:
    """An async context manager over one idempotent producer."""

    def __init__(
        self,
        bootstrap: str | None = None,
        *,
        topics: TopicNames | None = None,
        client_id: str = "gpufailover-jobs",
        security: KafkaSecurity = PLAINTEXT,
        **producer_options: Any,
    ) -> None:
        self.bootstrap = bootstrap or default_bootstrap()
        self.topic = (topics or TopicNames.from_env()).jobs_events
        self._security = security
        self._producer = make_producer(
            self.bootstrap, client_id, security=security, **producer_options
        )
        self._started = False

    async def __aenter__(self) -> JobEventPublisher:
        try:
            await self._producer.start()
        except BaseException:
            await self._producer.stop()  # release what a failed start left open
            raise
        self._started = True
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._started:
            self._started = False
            await self._producer.stop()

    async def require_topic(self) -> None:
        """TopicsMissing unless the broker has jobs.events, NotAuthorized if this principal
        may not see it (a send would wait out its timeout instead)."""
        await partitions_of(self.bootstrap, [self.topic], security=self._security)

    async def publish(self, event: JobEvent) -> None:
        """Validate, send and wait for the broker's acknowledgement."""
        if not self._started:
            raise RuntimeError("JobEventPublisher.publish outside `async with`")
        checked = checked_event(event)
        await self._producer.send_and_wait(
            self.topic, dumps(checked.to_dict()), key=checked.job_id.encode()
        )
