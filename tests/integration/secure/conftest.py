"""One `broker start --secure` broker per session (SASL_SSL, SCRAM users, ACLs enforced),
started only when a test here asks for it; a fresh topic set with the role ACLs per test."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import orjson
import pytest

from deploy.acls import all_bindings
from deploy.broker import Broker, running_broker
from deploy.topics import TopicNames, create_topics
from gpufailover.cli.acls import apply_acls
from gpufailover.kafka import make_consumer, make_producer
from gpufailover.security import KafkaSecurity

PARTITIONS = 2


@pytest.fixture(scope="session")
def secure_broker() -> Iterator[Broker]:
    with running_broker(secure=True, ready_timeout_s=120.0) as broker:
        yield broker


@pytest.fixture
async def secure_names(secure_broker: Broker, request: pytest.FixtureRequest) -> TopicNames:
    """Every declared topic under a prefix unique to this test, and every role's ACLs on it."""
    name = re.sub(r"[^A-Za-z0-9-]+", "-", request.node.name)[:40].strip("-")
    prefix = f"s-{name}-{uuid.uuid4().hex[:8]}."
    admin = secure_broker.security()
    await create_topics(secure_broker.bootstrap, PARTITIONS, prefix, security=admin)
    await apply_acls(secure_broker.bootstrap, all_bindings(prefix), security=admin)
    return TopicNames(prefix)


async def produce_as(
    bootstrap: str, security: KafkaSecurity, records: Iterable[tuple[str, str, Any]]
) -> None:
    producer = make_producer(bootstrap, "test-producer", security=security)
    await producer.start()
    try:
        for topic, key, value in records:
            await producer.send_and_wait(topic, orjson.dumps(value), key=key.encode())
    finally:
        await producer.stop()


async def read_all(
    bootstrap: str, security: KafkaSecurity, topics: Sequence[str]
) -> list[tuple[str, str | None, Any]]:
    """(topic, key, value) of every committed record of `topics`, read to their ends now."""
    from aiokafka import TopicPartition

    consumer = make_consumer(bootstrap, None, security=security, client_id="test-reader")
    await consumer.start()
    try:
        tps = [TopicPartition(t, p) for t in topics for p in range(PARTITIONS)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        out: list[tuple[str, str | None, Any]] = []
        while [tp for tp in tps if await consumer.position(tp) < ends[tp]]:
            batch = await consumer.getmany(*tps, timeout_ms=200)
            for tp, msgs in batch.items():
                out.extend(
                    (tp.topic, m.key.decode() if m.key else None, orjson.loads(m.value))
                    for m in msgs
                    if m.offset < ends[tp] and m.value
                )
        return out
    finally:
        await consumer.stop()


async def cli_as(env: dict[str, str], *args: str, timeout_s: float = 60.0) -> tuple[int, str, str]:
    """Run `gpufailover ARGS...` with `env` added (a role's credentials); (rc, stdout, stderr)."""
    import asyncio
    import os
    import sys

    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gpufailover", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, **env},
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), timeout_s)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


def role_env(broker: Broker, role: str) -> dict[str, str]:
    assert broker.secure is not None
    return broker.secure.env(role)
