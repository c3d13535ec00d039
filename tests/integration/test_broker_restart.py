"""The local broker stopped and started again is the same broker: same address and cluster id,
records and committed offsets kept, and clients made before the restart carry on.

Each test runs its own broker (the session's is shared with other tests and not restarted).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError

from deploy.broker import Broker, BrokerError, running_broker
from deploy.topics import describe_topics

_REPO = Path(__file__).resolve().parents[2]
_WAIT_S = 60.0


@pytest.fixture
def broker() -> Iterator[Broker]:
    with running_broker() as started:
        yield started


async def cluster_id(bootstrap: str) -> str:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        cluster: dict[str, Any] = await admin.describe_cluster()
    finally:
        await admin.close()
    return str(cluster["cluster_id"])


async def committed_offset(bootstrap: str, group: str, tp: TopicPartition) -> int | None:
    """`group`'s committed offset of `tp`, waiting up to _WAIT_S for the coordinator to load it.

    A broker just started loads `__consumer_offsets` in the background; until it has, the
    coordinator answers COORDINATOR_LOAD_IN_PROGRESS, which aiokafka's admin client turns into
    an empty answer (it ignores the top-level error when no partition is listed). None only if
    the offset never shows up.
    """
    deadline = time.monotonic() + _WAIT_S
    while True:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await admin.start()
        try:
            offsets = await admin.list_consumer_group_offsets(group)
        except KafkaError as error:
            if not error.retriable:
                raise
            offsets = {}
        finally:
            await admin.close()
        if tp in offsets or time.monotonic() > deadline:
            return offsets[tp].offset if tp in offsets else None
        await asyncio.sleep(0.2)


async def read_values(consumer: AIOKafkaConsumer, count: int) -> list[bytes]:
    """The next `count` values `consumer` delivers; fails after _WAIT_S with what it got."""
    values: list[bytes] = []
    deadline = time.monotonic() + _WAIT_S
    while len(values) < count:
        if time.monotonic() > deadline:
            raise AssertionError(f"got {len(values)} of {count} records in {_WAIT_S:g} s: {values}")
        batch = await consumer.getmany(timeout_ms=500)
        values.extend(m.value for messages in batch.values() for m in messages)
    return values


async def read_all_from_start(bootstrap: str, tp: TopicPartition) -> list[bytes]:
    """Every value of `tp` up to its end offset, by a new group-less consumer."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest")
    await consumer.start()
    try:
        consumer.assign([tp])
        end = (await consumer.end_offsets([tp]))[tp]
        return await read_values(consumer, end)
    finally:
        await consumer.stop()


@pytest.mark.parametrize("hard", [False, True], ids=["graceful", "sigkill"])
async def test_restart_keeps_address_records_offsets_and_clients(
    broker: Broker, hard: bool
) -> None:
    bootstrap = broker.bootstrap
    topic = f"restart-{uuid.uuid4().hex[:8]}"
    tp = TopicPartition(topic, 0)
    group = f"restart-group-{uuid.uuid4().hex[:8]}"
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])
    finally:
        await admin.close()
    before_id = await cluster_id(bootstrap)
    assert before_id == broker.cluster_id
    with pytest.raises(BrokerError, match="already running"):
        broker.start()
    with pytest.raises(BrokerError, match="stop it before removing it"):
        broker.remove_files()

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True)
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    await producer.start()
    await consumer.start()
    try:
        old = [f"old-{i}".encode() for i in range(10)]
        for value in old:
            await producer.send_and_wait(topic, value)
        assert await read_values(consumer, 10) == old
        await consumer.commit()
        assert await committed_offset(bootstrap, group, tp) == 10

        await asyncio.to_thread(broker.kill if hard else broker.stop)
        assert not broker.is_running()
        # Sent while the broker is down: the producer holds it and delivers it after the start.
        new = [f"new-{i}".encode() for i in range(5)]
        sent_while_down = asyncio.ensure_future(producer.send_and_wait(topic, new[0]))
        await asyncio.to_thread(broker.start)

        assert broker.bootstrap == bootstrap
        assert await cluster_id(bootstrap) == before_id
        assert await committed_offset(bootstrap, group, tp) == 10
        await asyncio.wait_for(sent_while_down, _WAIT_S)
        for value in new[1:]:
            await asyncio.wait_for(producer.send_and_wait(topic, value), _WAIT_S)
        # The consumer made before the restart goes on from its committed position: exactly
        # the new records, none of the old ones again.
        assert await read_values(consumer, 5) == new
        await asyncio.wait_for(consumer.commit(), _WAIT_S)
    finally:
        await consumer.stop()
        await producer.stop()
    assert await committed_offset(bootstrap, group, tp) == 15
    assert await read_all_from_start(bootstrap, tp) == old + new


def gpufailover(state_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    unset = ("KAFKA_BOOTSTRAP", "GPUFAILOVER_BOOTSTRAP", "GPUFAILOVER_TOPIC_PREFIX")
    env = {k: v for k, v in os.environ.items() if k not in unset}
    env["GPUFAILOVER_STATE_DIR"] = str(state_dir)
    env["PYTHONPATH"] = str(_REPO)
    return subprocess.run(
        [sys.executable, "-m", "gpufailover", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


async def test_cli_stop_start_keeps_the_cluster_and_fresh_gives_an_empty_one(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    bootstrap = ok(gpufailover(state, "broker", "start"))
    try:
        ok(gpufailover(state, "topics", "create", "--bootstrap", bootstrap, "--partitions", "2"))
        topics = await describe_topics(bootstrap, prefix="")
        assert topics and all(count == 2 for count in topics.values())
        first_id = await cluster_id(bootstrap)

        ok(gpufailover(state, "broker", "stop"))
        assert gpufailover(state, "broker", "status").returncode == 1
        assert ok(gpufailover(state, "broker", "start")) == bootstrap
        assert await cluster_id(bootstrap) == first_id
        assert await describe_topics(bootstrap, prefix="") == topics

        refused = gpufailover(state, "broker", "start", "--fresh")
        assert refused.returncode == 1 and "restart --fresh" in refused.stderr

        fresh = ok(gpufailover(state, "broker", "restart", "--fresh"))
        assert await cluster_id(fresh) != first_id
        assert await describe_topics(fresh, prefix="") == {}
        assert len(list((state / "runs").iterdir())) == 1  # the old cluster's files are gone
    finally:
        gpufailover(state, "broker", "stop", "--delete-data")
    assert not list((state / "runs").iterdir())
