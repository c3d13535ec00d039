"""How long a fetch may wait at the broker: faust's worker consumer hard-codes 1.5 s.

aiokafka keeps one fetch request in flight per broker, and leaves out of it every partition
whose fetched records are still buffered or paused (`Fetcher._get_actions_per_node`). A record
that lands on such a partition waits until the request in flight returns, and with nothing new
on the partitions that request asked for, it returns after its whole `fetch_max_wait_ms`.
faust-streaming 0.15.3 hard-codes 1,500 ms for its worker consumer
(`AIOKafkaConsumerThread._create_worker_consumer`): a node report, or a termination the job
agent fanned out, could sit in the broker up to 1.5 s while the worker idled (the throughput
drain's last decisions waited for the next clock tick: BENCHMARKS.md, issue 18, sixth pass).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from faust.transport.drivers.aiokafka import AIOKafkaConsumerThread

# The most a worker's consumer (faust's and the signal filter's) waits at the broker for a
# fetch to fill. Shorter costs idle fetches (20 a second per consumer when nothing moves).
FETCH_MAX_WAIT_MS = 50

_original: Callable[..., Any] = AIOKafkaConsumerThread._create_worker_consumer


@functools.wraps(_original)
def _create_worker_consumer(self: Any, transport: Any) -> Any:
    consumer = _original(self, transport)
    # Read by `AIOKafkaConsumer.start` when it builds the fetcher: set before the start.
    consumer._fetch_max_wait_ms = FETCH_MAX_WAIT_MS
    return consumer


def install() -> None:
    """faust's worker consumers fetch with FETCH_MAX_WAIT_MS from now on (idempotent)."""
    AIOKafkaConsumerThread._create_worker_consumer = _create_worker_consumer  # type: ignore[method-assign]
