"""The agent without a broker: spool bound, publisher retries, de-dup and source failures.

The producer here is a scripted stand-in for aiokafka's (the broker path is proven in
tests/integration/test_producers.py)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
from aiokafka.errors import KafkaConnectionError, KafkaTimeoutError

from producers.agent import Agent, Sink
from producers.metrics import AgentMetrics
from producers.publisher import BufferedPublisher
from producers.spool import Cursor, Spool
from schemas.health import GpuHealth
from schemas.topics import TopicNames
from schemas.xid import GpuXid


class ScriptedProducer:
    """start() fails while `broker.down`; send_and_wait fails `broker.failing_sends` times."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.stopped = False

    async def start(self) -> None:
        self.broker.starts += 1
        self.broker.changed.set()
        if self.broker.down:
            raise KafkaConnectionError("Unable to bootstrap")

    async def stop(self) -> None:
        self.stopped = True

    async def send(self, topic: str, value: bytes, key: bytes | None = None) -> asyncio.Future[Any]:
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        once = orjson.loads(value).get("i") in self.broker.fail_once
        if self.broker.failing_sends or once:
            self.broker.failing_sends = max(0, self.broker.failing_sends - 1)
            self.broker.fail_once.discard(orjson.loads(value).get("i"))
            fut.set_exception(KafkaTimeoutError())
            return fut
        self.broker.log.append((topic, key, orjson.loads(value)))
        self.broker.changed.set()
        fut.set_result(None)
        return fut


class Broker:
    def __init__(self, down: bool = False) -> None:
        self.down = down
        self.failing_sends = 0
        self.fail_once: set[int] = set()  # values {"i": n} whose first send fails
        self.starts = 0
        self.log: list[tuple[str, bytes | None, Any]] = []
        self.changed = asyncio.Event()  # set on every start, send and buffered record

    def factory(self) -> Callable[[], ScriptedProducer]:
        return lambda: ScriptedProducer(self)

    async def until(self, condition: Callable[[], bool]) -> None:
        async with asyncio.timeout(10):
            while not condition():
                self.changed.clear()
                await self.changed.wait()

    async def wait_for(self, n: int) -> None:
        await self.until(lambda: len(self.log) >= n)

    def watch(self, spool: Spool) -> None:
        """Wake `until` whenever a record is spooled."""
        append = spool.append

        def append_and_signal(items: Any, cursor: Cursor | None = None) -> None:
            append(items, cursor)
            self.changed.set()

        spool.append = append_and_signal  # type: ignore[method-assign]


def make_publisher(
    broker: Broker, capacity: int = 100, spool_path: Path | None = None
) -> tuple[BufferedPublisher, AgentMetrics]:
    metrics = AgentMetrics()
    spool = Spool(spool_path, metrics, max_records=capacity)
    return BufferedPublisher(broker.factory(), spool, metrics, backoff_s=(0.001, 0.01)), metrics


def sample(metrics: AgentMetrics, name: str, **labels: str) -> float:
    value = metrics.registry.get_sample_value(name, labels)
    return 0.0 if value is None else value


async def test_buffered_while_the_broker_is_down_then_delivered_in_order() -> None:
    broker = Broker(down=True)
    publisher, metrics = make_publisher(broker, capacity=3)
    task = asyncio.create_task(publisher.run())
    for i in range(5):
        publisher.submit("gpu.xid", "p.gpu.xid", "node-a", {"i": i})
    await broker.until(lambda: broker.starts >= 2)  # it keeps trying
    assert broker.log == []
    broker.down = False
    await broker.wait_for(3)
    publisher.close()
    await asyncio.wait_for(task, 10)
    assert [v["i"] for _, _, v in broker.log] == [2, 3, 4]  # 0 and 1 dropped: oldest first
    assert {(t, k) for t, k, _ in broker.log} == {("p.gpu.xid", b"node-a")}
    assert sample(metrics, "gpufailover_agent_dropped_events_total") == 2
    assert sample(metrics, "gpufailover_agent_published_total", topic="gpu.xid") == 3
    assert sample(metrics, "gpufailover_agent_buffer_depth") == 0


async def test_a_failed_send_is_retried_not_skipped() -> None:
    broker = Broker()
    broker.failing_sends = 2
    publisher, _ = make_publisher(broker)
    task = asyncio.create_task(publisher.run())
    publisher.submit("gpu.health", "gpu.health", "node-a", {"i": 1})
    publisher.submit("gpu.health", "gpu.health", "node-a", {"i": 2})
    await broker.wait_for(2)
    publisher.close()
    await asyncio.wait_for(task, 10)
    assert [v["i"] for _, _, v in broker.log] == [1, 2]
    assert broker.starts == 2  # one batch failed (both sends): reconnected once


async def test_only_what_was_not_acknowledged_is_sent_again() -> None:
    broker = Broker()
    broker.fail_once = {2}
    publisher, metrics = make_publisher(broker)
    for i in range(1, 5):
        publisher.submit("gpu.xid", "gpu.xid", "node-a", {"i": i})
    task = asyncio.create_task(publisher.run())
    await broker.wait_for(4)
    publisher.close()
    await asyncio.wait_for(task, 10)
    # 1, 3, 4 acknowledged in the first batch, 2 failed: only 2 is sent again, none twice
    assert [v["i"] for _, _, v in broker.log] == [1, 3, 4, 2]
    assert (len(publisher.spool), publisher.published) == (0, 4)
    assert sample(metrics, "gpufailover_agent_published_total", topic="gpu.xid") == 4


async def test_closing_with_the_broker_down_leaves_a_durable_spool_at_once(
    tmp_path: Path,
) -> None:
    broker = Broker(down=True)
    publisher, _ = make_publisher(broker, spool_path=tmp_path / "spool.sqlite")
    publisher.submit("gpu.xid", "gpu.xid", "node-a", {"i": 1})
    task = asyncio.create_task(publisher.run())
    await broker.until(lambda: broker.starts >= 1)
    publisher.close()
    await asyncio.wait_for(task, 1)  # not the backoff, not a drain timeout
    assert len(publisher.spool) == 1 and broker.log == []


class ListSource:
    """Hands fixed records over, then waits for close (or fails, when told to)."""

    def __init__(self, records: list[GpuXid | GpuHealth], fail: Exception | None = None) -> None:
        self.name = "list"
        self.records = records
        self.fail = fail
        self.closed = threading.Event()

    def run(self, sink: Sink) -> None:
        for rec in self.records:
            sink(rec)
        if self.fail is not None:
            raise self.fail
        self.closed.wait(10)

    def close(self) -> None:
        self.closed.set()


def xid(code: int, ts: int) -> GpuXid:
    return GpuXid(node="node-a", xid=code, ts_ms=ts, gpu_index=0, gpu_uuid="GPU-a", source="kmsg")


async def test_agent_dedups_a_flood_and_publishes_health_changes() -> None:
    broker = Broker()
    publisher, metrics = make_publisher(broker)
    agent = Agent(TopicNames("p."), publisher, metrics, dedup_window_s=3600)
    health = GpuHealth(node="node-a", ts_ms=10**12 + 5, condition="gpu_lost", gpu_index=0)
    source = ListSource([xid(31, ts) for ts in range(100)] + [health])
    run = asyncio.create_task(agent.run([source]))
    await broker.wait_for(2)
    agent.stop()
    assert await asyncio.wait_for(run, 10) == 0
    topics = [t for t, _, _ in broker.log]
    assert topics == ["p.gpu.xid", "p.gpu.health", "p.gpu.xid"]
    first, summary = broker.log[0][2], broker.log[2][2]
    assert (first["xid"], first.get("count", 1), summary["count"]) == (31, 1, 99)
    assert GpuHealth.from_dict(broker.log[1][2]) == health
    assert sample(metrics, "gpufailover_agent_xids_total", code="31") == 100
    assert sample(metrics, "gpufailover_agent_suppressed_repeats_total") == 99
    assert sample(metrics, "gpufailover_agent_health_conditions_total", condition="gpu_lost") == 1


async def test_a_failing_source_stops_the_agent_with_status_1() -> None:
    broker = Broker()
    publisher, metrics = make_publisher(broker)
    agent = Agent(TopicNames(""), publisher, metrics)
    source = ListSource([xid(79, 1)], fail=PermissionError("/dev/kmsg: Permission denied"))
    assert await asyncio.wait_for(agent.run([source]), 10) == 1
    assert [v["xid"] for _, _, v in broker.log] == [79]  # what it read is still delivered


async def test_shutdown_with_the_broker_down_gives_up_after_the_drain_timeout() -> None:
    broker = Broker(down=True)
    publisher, metrics = make_publisher(broker)
    agent = Agent(TopicNames(""), publisher, metrics, drain_timeout_s=0.05)
    source = ListSource([xid(79, 1)])
    broker.watch(publisher.spool)
    run = asyncio.create_task(agent.run([source]))
    await broker.until(lambda: len(publisher.spool) == 1)
    agent.stop()
    assert await asyncio.wait_for(run, 10) == 0
    assert len(publisher.spool) == 1 and broker.log == []


async def test_repeats_are_flushed_by_the_tick_when_the_window_closes() -> None:
    broker = Broker()
    publisher, metrics = make_publisher(broker)
    clock = [0.0]
    agent = Agent(TopicNames(""), publisher, metrics, dedup_window_s=60, clock=lambda: clock[0])
    task = asyncio.create_task(publisher.run())
    for ts in range(3):
        agent.emit(xid(13, ts))
    await broker.wait_for(1)
    clock[0] = 61.0
    agent.flush_due()
    await broker.wait_for(2)
    publisher.close()
    await asyncio.wait_for(task, 10)
    assert [v.get("count", 1) for _, _, v in broker.log] == [1, 2]
