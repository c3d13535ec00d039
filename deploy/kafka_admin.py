"""The one place deploy/ talks to aiokafka's admin client (aiokafka ships no type hints)."""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from typing import Any, TypeVar

from gpufailover.kafka import make_admin
from gpufailover.security import PLAINTEXT, KafkaSecurity

T = TypeVar("T")


class KafkaUnavailableError(RuntimeError):
    """The cluster could not be reached or did not answer in time."""


@asynccontextmanager
async def admin_client(
    bootstrap: str, *, timeout_s: float = 10.0, security: KafkaSecurity = PLAINTEXT
) -> AsyncIterator[Any]:
    """A started AIOKafkaAdminClient that is always closed again.

    Raises KafkaUnavailableError when the cluster cannot be reached at all; errors of later
    requests surface as aiokafka's KafkaError (a RuntimeError).
    """
    from aiokafka.errors import KafkaError

    admin = make_admin(
        bootstrap,
        "gpufailover-deploy",
        security=security,
        request_timeout_ms=int(timeout_s * 1000),
    )
    try:
        try:
            await admin.start()
        except (KafkaError, OSError) as exc:
            raise KafkaUnavailableError(f"cannot reach Kafka at {bootstrap}: {exc!r}") from exc
        yield admin
    finally:
        await admin.close()


async def cluster_broker_ids(
    bootstrap: str, *, timeout_s: float = 10.0, security: KafkaSecurity = PLAINTEXT
) -> list[int]:
    """One metadata round trip: the node ids of the brokers the cluster reports."""
    from aiokafka.errors import KafkaError

    try:
        async with asyncio.timeout(timeout_s):
            async with admin_client(bootstrap, timeout_s=timeout_s, security=security) as admin:
                cluster: dict[str, Any] = await admin.describe_cluster()
    except KafkaUnavailableError:
        raise
    except (KafkaError, OSError, TimeoutError) as exc:
        raise KafkaUnavailableError(f"no metadata from {bootstrap}: {exc!r}") from exc
    return sorted(int(b["node_id"]) for b in cluster["brokers"])


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to completion from synchronous code, even inside a running loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()
