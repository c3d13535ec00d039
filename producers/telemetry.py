"""The training-telemetry client a training script imports.

    from producers.telemetry import TelemetryClient

    with TelemetryClient(job_id="llm-7b-0042", attempt=0) as tm:
        for step, batch in enumerate(loader):
            ...
            tm.heartbeat(step)
            tm.throughput(samples_per_s=1843.0)
            if step % 1000 == 0:
                tm.checkpoint(step, f"s3://ckpt/llm-7b-0042/step-{step}")

Records go to `training.telemetry` (key: job_id). The calls never block and never raise: they
queue the record (a bounded queue; the oldest record is dropped and counted when it is full)
and a background thread with its own asyncio loop and aiokafka producer sends them in
batches. While the bus is down records wait in the queue, then are dropped and counted.
`close()` (or leaving the `with` block) flushes with a timeout.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import logging
import os
import socket
import threading
import time
from collections import deque
from types import TracebackType
from typing import Any

from gpufailover.security import KafkaSecurity
from schemas.codec import dumps
from schemas.telemetry import TrainingTelemetry
from schemas.topics import TopicNames

log = logging.getLogger(__name__)


class TelemetryClient:
    def __init__(
        self,
        job_id: str,
        attempt: int = 0,
        bootstrap: str | None = None,
        *,
        node: str | None = None,
        topics: TopicNames | None = None,
        queue_size: int = 10_000,
        batch_size: int = 500,
        backoff_s: tuple[float, float] = (0.5, 10.0),
        close_timeout_s: float = 10.0,
        producer_options: dict[str, Any] | None = None,
        security: KafkaSecurity | None = None,
    ) -> None:
        from gpufailover.settings import default_bootstrap

        if not isinstance(job_id, str) or not job_id:
            raise ValueError(f"job_id must be a non-empty string, got {job_id!r}")
        if not isinstance(attempt, int) or isinstance(attempt, bool) or attempt < 0:
            raise ValueError(f"attempt must be an integer >= 0, got {attempt!r}")
        if queue_size < 1 or batch_size < 1:
            raise ValueError("queue_size and batch_size must be >= 1")
        self.job_id = job_id
        self.attempt = attempt
        self.node = node if node is not None else socket.gethostname()
        self.bootstrap = bootstrap or default_bootstrap()
        # None: from GPUFAILOVER_SECURITY_PROTOCOL etc. (a bad setting raises here, before
        # the training loop, never inside it)
        self.security = KafkaSecurity.build() if security is None else security
        self.topic = (topics or TopicNames.from_env()).training_telemetry
        self.queue_size = queue_size
        self.batch_size = batch_size
        self.backoff_min, self.backoff_max = backoff_s
        self.close_timeout_s = close_timeout_s
        self.producer_options: dict[str, Any] = {"linger_ms": 100, "request_timeout_ms": 15_000}
        self.producer_options.update(producer_options or {})
        self.sent = 0  # acknowledged by the broker
        self.dropped = 0  # queue full, bus down, bad values, or after close
        self._key = job_id.encode()
        self._queue: deque[bytes] = deque()
        self._lock = threading.Lock()
        self._wake_pending = False
        self._closing = False
        self._warned: set[str] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self.connected = threading.Event()
        self._thread = threading.Thread(
            target=self._thread_main, name=f"telemetry-{job_id}", daemon=True
        )
        self._thread.start()
        atexit.register(self.close)

    @classmethod
    def from_env(cls, **kwargs: Any) -> TelemetryClient:
        """job_id from GPUFAILOVER_JOB_ID (else SLURM_JOB_ID), attempt from GPUFAILOVER_ATTEMPT
        (else SLURM_RESTART_COUNT, else 0)."""
        job_id = os.environ.get("GPUFAILOVER_JOB_ID") or os.environ.get("SLURM_JOB_ID") or ""
        raw = os.environ.get("GPUFAILOVER_ATTEMPT") or os.environ.get("SLURM_RESTART_COUNT") or "0"
        try:
            attempt = int(raw)
        except ValueError:
            raise ValueError(f"attempt from the environment is not an integer: {raw!r}") from None
        return cls(job_id, attempt, **kwargs)

    # -- the training loop's side: never blocks, never raises -----------------------------
    def heartbeat(self, step: int) -> bool:
        """The loop is alive at `step`. True if queued."""
        return self._record("heartbeat", step=step)

    def throughput(self, samples_per_s: float) -> bool:
        return self._record("throughput", samples_per_s=samples_per_s)

    def checkpoint(self, step: int, uri: str) -> bool:
        """A checkpoint of `step` was written to `uri` (what a requeued job resumes from)."""
        return self._record("checkpoint", step=step, uri=uri)

    @property
    def queued(self) -> int:
        return len(self._queue)

    def _record(self, kind: str, **fields: Any) -> bool:
        try:
            if self._closing:
                self._drop(1, "closed", "telemetry after close() is dropped")
                return False
            rec = TrainingTelemetry(
                job_id=self.job_id,
                attempt=self.attempt,
                kind=kind,
                ts_ms=time.time_ns() // 1_000_000,
                step=None if fields.get("step") is None else int(fields["step"]),
                samples_per_s=_number(fields.get("samples_per_s")),
                uri=None if fields.get("uri") is None else str(fields["uri"]),
                node=self.node,
            )
            value = dumps(TrainingTelemetry.from_dict(rec.to_dict()).to_dict())
            self._enqueue(value)
        except Exception as exc:  # noqa: BLE001 - never raise into the training loop
            self._drop(1, f"bad-{kind}", f"{kind} record dropped: {exc}")
            return False
        return True

    def _enqueue(self, value: bytes) -> None:
        with self._lock:
            if len(self._queue) >= self.queue_size:
                self._queue.popleft()
                self.dropped += 1
            self._queue.append(value)
            wake = not self._wake_pending
            self._wake_pending = True
        if wake:
            self._notify()

    def _notify(self) -> None:
        loop, event = self._loop, self._wake
        if loop is not None and event is not None:
            with contextlib.suppress(RuntimeError):  # the loop has closed
                loop.call_soon_threadsafe(event.set)

    def _drop(self, n: int, key: str, message: str) -> None:
        with self._lock:
            self.dropped += n
            first = key not in self._warned
            self._warned.add(key)
        if first:
            log.warning("%s (further ones are only counted)", message)

    # -- closing ----------------------------------------------------------------------------
    def close(self, timeout: float | None = None) -> None:
        """Send what is queued (waiting at most `timeout`, default `close_timeout_s` seconds),
        then stop. Idempotent; also runs at interpreter exit."""
        if self._closing and not self._thread.is_alive():
            return
        timeout = self.close_timeout_s if timeout is None else timeout
        self._closing = True
        atexit.unregister(self.close)
        self._notify()
        self._thread.join(timeout)
        if self._thread.is_alive() and self._loop is not None and self._task is not None:
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self._task.cancel)
            self._thread.join(5.0)
        with self._lock:
            left = len(self._queue)
            self._queue.clear()
            self.dropped += left
        if left:
            log.warning("telemetry: %d records not delivered before close", left)

    def __enter__(self) -> TelemetryClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- the background thread ------------------------------------------------------------
    def _thread_main(self) -> None:
        try:
            asyncio.run(self._main())
        except asyncio.CancelledError:
            pass
        except Exception:  # the sender must not die silently
            log.exception("telemetry sender stopped")

    async def _main(self) -> None:
        self._wake = asyncio.Event()
        self._task = asyncio.current_task()
        self._loop = asyncio.get_running_loop()
        producer: Any = None
        backoff = self.backoff_min
        try:
            while True:
                if not self._has_pending():
                    if self._closing:
                        return
                    await self._wake.wait()
                    self._wake.clear()
                    continue
                if producer is None:
                    producer = await self._connect()
                    if producer is None:
                        await asyncio.sleep(backoff)
                        backoff = min(backoff * 2, self.backoff_max)
                        continue
                    backoff = self.backoff_min
                if not await self._send_batch(producer, self._take()):
                    await _stop_quietly(producer)
                    producer = None
                    self.connected.clear()
        finally:
            if producer is not None:
                await _stop_quietly(producer)

    def _has_pending(self) -> bool:
        with self._lock:
            if self._queue:
                return True
            self._wake_pending = False
            return False

    def _take(self) -> list[bytes]:
        with self._lock:
            n = min(self.batch_size, len(self._queue))
            batch = [self._queue.popleft() for _ in range(n)]
            self._wake_pending = False
        return batch

    async def _connect(self) -> Any:
        from aiokafka.errors import KafkaError

        from gpufailover.kafka import make_producer

        producer = make_producer(
            self.bootstrap,
            f"gpufailover-telemetry-{self.job_id}",
            security=self.security,
            **self.producer_options,
        )
        try:
            await producer.start()
        except (KafkaError, OSError) as exc:
            if "connect" not in self._warned:
                self._warned.add("connect")
                log.warning("telemetry: bus unreachable at %s (%r); queueing", self.bootstrap, exc)
            await _stop_quietly(producer)
            return None
        except BaseException:  # cancelled by close(): release the half-started client
            await _stop_quietly(producer)
            raise
        self.connected.set()
        return producer

    async def _send_batch(self, producer: Any, batch: list[bytes]) -> bool:
        """Send a batch; False if the bus failed (what was not sent is dropped and counted)."""
        from aiokafka.errors import KafkaError

        futures = []
        error: KafkaError | None = None
        try:
            for value in batch:
                futures.append(await producer.send(self.topic, value, key=self._key))
        except KafkaError as exc:
            error = exc
        results = await asyncio.gather(*futures, return_exceptions=True)
        acked = sum(1 for r in results if not isinstance(r, BaseException))
        with self._lock:
            self.sent += acked
        failed = len(batch) - acked
        if failed:
            reason = error or next(r for r in results if isinstance(r, BaseException))
            self._drop(failed, "send", f"telemetry: {failed} records not delivered: {reason!r}")
        return error is None and not failed


def _number(v: Any) -> float | None:
    return None if v is None else float(v)


async def _stop_quietly(producer: Any) -> None:
    from aiokafka.errors import KafkaError

    try:
        await producer.stop()
    except (KafkaError, OSError) as exc:
        log.debug("telemetry: stopping the producer: %r", exc)
