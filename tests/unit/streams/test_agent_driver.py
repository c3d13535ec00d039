"""The agents' loop per batch: outputs acknowledged before any state of the batch is written,
one record's failure undoing that record alone, a crash writing nothing and holding commits."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson
import pytest
from aiokafka.errors import KafkaTimeoutError

from gpufailover.offsets import AgentProgress
from schemas.decisions import Evidence
from schemas.topics import TopicNames
from streams.agent_driver import AgentDriver, Outputs, TopicLabels
from streams.changelog import Changelog
from streams.deferred import DEFER_BEHIND
from streams.engine.node_side import NodeState, PartitionClock
from streams.faust_patches import OffsetWatch
from streams.glue import NodeGlue, Out
from streams.metrics import ClassifierMetrics
from streams.policy import load_policy
from streams.tables import CodecTable, WriteBack

NAMES = TopicNames("")
SOURCE = NAMES.jobs_events
SINK = NAMES.failover_decisions


@dataclass(frozen=True)
class Msg:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None

    @property
    def tp(self) -> tuple[str, int]:
        return (self.topic, self.partition)


@dataclass(frozen=True)
class Event:
    message: Msg


class Glue:
    """Writes value -> key into the table and sends one output per record; b"bad" raises a
    plain error (a bug: dead-lettered), b"kafka" a broker error (the agent crashes)."""

    def __init__(self, table: WriteBack[int]) -> None:
        self.table = table

    def handle(
        self, topic: str, partition: int, offset: int, key: bytes | None, value: bytes | None
    ) -> list[Out]:
        assert key is not None and value is not None
        self.table[key.decode()] = offset
        if value == b"bad":
            raise ValueError("bad record")
        if value == b"kafka":
            raise KafkaTimeoutError()
        return [Out(SINK, key, value)]


class Sink:
    """A faust topic whose sends resolve when the test says the broker acknowledged them."""

    def __init__(self, expect: int = 0) -> None:
        self.sent: list[tuple[bytes | None, bytes]] = []
        self.acks: list[asyncio.Future[None]] = []
        self.expect = expect
        self.all_sent = asyncio.Event()  # set once `expect` records are sent

    async def send(self, key: bytes | None, value: bytes, partition: int | None) -> Any:
        self.sent.append((key, value))
        ack: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.acks.append(ack)
        if len(self.acks) == self.expect:
            self.all_sent.set()
        return ack


def driver(table: WriteBack[int], sink: Sink, held: list[tuple[Any, int]]) -> AgentDriver:
    metrics = ClassifierMetrics()
    label = TopicLabels(NAMES)
    outputs = Outputs(lambda real: sink, (SINK,), metrics, label)
    progress = AgentProgress(lambda: None, (SOURCE,), lambda t, p: (t, p))
    return AgentDriver(
        "job",
        Glue(table),  # type: ignore[arg-type]
        [table],
        (SOURCE,),
        outputs,
        progress,
        metrics,
        NAMES,
        label,
        lambda tp, offset: held.append((tp, offset)),
    )


def batch(*values: bytes, partition: int = 0) -> list[Event]:
    return [Event(Msg(SOURCE, partition, i, f"k{i}".encode(), v)) for i, v in enumerate(values)]


async def test_no_state_of_a_batch_is_written_before_every_output_is_acknowledged() -> None:
    stored: dict[str, int] = {}
    sink = Sink(expect=3)
    d = driver(WriteBack(stored), sink, [])
    run = asyncio.create_task(d.handle(batch(b"a", b"b", b"c")))
    await sink.all_sent.wait()
    sink.acks[0].set_result(None)
    sink.acks[2].set_result(None)
    for _ in range(5):
        await asyncio.sleep(0)
    assert not run.done() and stored == {}  # one output still unacknowledged: no state
    sink.acks[1].set_result(None)
    await run
    assert stored == {"k0": 0, "k1": 1, "k2": 2}
    assert [v for _, v in sink.sent] == [b"a", b"b", b"c"]


async def test_a_failing_record_undoes_its_own_changes_and_keeps_the_others() -> None:
    stored = {"k1": 99}
    sink = Sink(expect=3)
    d = driver(WriteBack(stored), sink, [])
    run = asyncio.create_task(d.handle(batch(b"a", b"bad", b"c")))
    await sink.all_sent.wait()
    for ack in sink.acks:
        ack.set_result(None)
    await run
    # k1 keeps its old value: the failed record's write is undone, its neighbours' are kept.
    assert stored == {"k0": 0, "k1": 99, "k2": 2}
    (_, first), (_, letter), (_, last) = sink.sent
    assert (first, last) == (b"a", b"c")
    assert orjson.loads(letter)["error"] == "ValueError: bad record"


async def test_a_broker_error_writes_nothing_of_the_batch_and_holds_each_partition() -> None:
    stored: dict[str, int] = {}
    sink = Sink()
    held: list[tuple[Any, int]] = []
    d = driver(WriteBack(stored), sink, held)
    msgs = [
        *batch(b"a"),
        Event(Msg(SOURCE, 1, 40, b"x", b"b")),
        Event(Msg(SOURCE, 1, 41, b"y", b"kafka")),
    ]
    with pytest.raises(KafkaTimeoutError):
        await d.handle(msgs)
    assert stored == {}
    assert held == [((SOURCE, 0), 0), ((SOURCE, 1), 40)]


def test_rollback_restores_what_the_record_found() -> None:
    stored = {"old": 1, "gone": 2}
    wb: WriteBack[int] = WriteBack(stored)
    wb.mark()
    wb["new"] = 1
    wb["old"] = 2
    wb.mark()  # second record
    wb["old"] = 3
    wb["new"] = 4
    wb["third"] = 5
    del wb["gone"]
    wb.rollback()
    assert wb.get("old") == 2 and wb.get("new") == 1 and wb.get("third") is None
    assert wb.get("gone") == 2
    wb.flush()
    assert stored == {"old": 2, "new": 1, "gone": 2}


def test_a_held_offset_caps_the_commit_until_a_seek() -> None:
    watch = OffsetWatch()
    watch.hold("tp", 40)
    watch.hold("tp", 45)
    assert watch.commit_limit("tp", 50) == 40
    assert watch.commit_limit("tp", 30) == 30
    watch.sought("tp", 40)
    assert watch.commit_limit("tp", 50) == 50


def test_each_key_is_written_back_as_the_record_that_last_wrote_it() -> None:
    stored: dict[str, int] = {}
    writes: list[tuple[str, int | None, str]] = []
    wb: WriteBack[int] = WriteBack(stored, write=lambda k, v, r: writes.append((k, v, r)))
    wb.mark("r1")
    wb["a"] = 1
    wb["b"] = 1
    wb["gone"] = 0
    wb.mark("r2")
    wb["b"] = 2
    wb["c"] = 2
    del wb["gone"]
    wb.mark("r3")
    wb["a"] = 3
    wb.rollback()  # r3 failed: "a" is r1's again
    wb.flush()
    assert stored == {}  # the writer writes, not the mapping
    assert sorted(writes) == [("a", 1, "r1"), ("b", 2, "r2"), ("c", 2, "r2"), ("gone", None, "r2")]


class FakeTopic:
    def get_topic_name(self) -> str:
        return "app-node-states-changelog"


class FakeTable:
    def __init__(self) -> None:
        self.data: dict[str, Any] = {"old": {"x": 1}}
        self.changelog_topic = FakeTopic()


class FakeProducer:
    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes, bytes | None, int]] = []

    async def send(
        self, topic: str, key: bytes, value: bytes | None, partition: int, ts: Any, headers: Any
    ) -> Any:
        self.sent.append((topic, key, value, partition))
        return asyncio.get_running_loop().create_future()


async def test_changelog_writes_the_store_and_sends_each_key_on_its_records_partition() -> None:
    producer, table = FakeProducer(), FakeTable()
    changelog = Changelog(lambda: producer)
    wb: WriteBack[dict[str, Any]] = WriteBack(table.data, write=changelog.writer(table))
    wb.mark(Event(Msg(SOURCE, 3, 7, b"k", b"v")))
    wb["n1"] = {"a": [1, 2]}
    del wb["old"]
    wb.flush()
    assert table.data == {"n1": {"a": [1, 2]}}  # in the store before anything is sent
    assert producer.sent == []
    deliveries = await changelog.send()
    assert len(deliveries) == 2 and changelog.queued == []
    topic = "app-node-states-changelog"
    assert sorted(producer.sent, key=str) == sorted(
        [(topic, b'"n1"', b'{"a":[1,2]}', 3), (topic, b'"old"', None, 3)], key=str
    )


class Acked:
    """A faust topic whose every send is acknowledged at once."""

    def __init__(self) -> None:
        self.sent: list[tuple[bytes | None, bytes]] = []

    async def send(self, key: bytes | None, value: bytes, partition: int | None) -> Any:
        self.sent.append((key, value))
        ack: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        ack.set_result(None)
        return ack


def node_driver(
    backlog: Callable[[int], int],
    sink: Acked,
    write: Callable[[str, Any, Any], None] | None = None,
    cap: Callable[[int, int | None], None] = lambda partition, offset: None,
) -> tuple[AgentDriver, NodeGlue, ClassifierMetrics]:
    """The node agent's driver over in-memory tables (node states written with `write`)."""
    states: WriteBack[Any] = WriteBack({}, write=write)
    clocks: WriteBack[Any] = WriteBack({})
    glue = NodeGlue(
        load_policy(),
        NAMES,
        CodecTable(states, NodeState.from_dict, NodeState.to_dict),
        CodecTable(clocks, PartitionClock.from_dict, PartitionClock.to_dict),
        backlog=backlog,
    )
    metrics = ClassifierMetrics()
    label = TopicLabels(NAMES)
    driver = AgentDriver(
        "node",
        glue,
        [states, clocks],
        (NAMES.node_signals,),
        Outputs(lambda real: sink, (), metrics, label),
        AgentProgress(lambda: None, (NAMES.node_signals,), lambda t, p: (t, p)),
        metrics,
        NAMES,
        label,
        cap=cap,
    )
    return driver, glue, metrics


def xid_pack(*nodes: str, code: int = 79, cls: str = "hardware") -> bytes:
    items = [
        {"evidence": Evidence(n, 0, "xid", code, 1_700_000_000_000, cls).to_dict()}  # type: ignore[arg-type]
        for n in nodes
    ]
    return orjson.dumps({"signals": items})


async def test_the_node_agent_applies_held_evidence_after_a_batch_and_caps_its_commits() -> None:
    nodes: dict[str, Any] = {}
    writes: list[tuple[str, int]] = []  # (node key, changelog partition) as written back
    order: list[str] = []

    def write(key: str, value: Any, record: Any) -> None:
        nodes[key] = value
        writes.append((key, record.message.partition))
        order.append(f"write {key}")

    caps: list[tuple[int, int | None]] = []

    def cap(partition: int, offset: int | None) -> None:
        caps.append((partition, offset))
        order.append(f"cap {partition} {offset}")

    behind = {"n": DEFER_BEHIND + 1}
    sink = Acked()
    d, glue, _ = node_driver(lambda partition: behind["n"], sink, write, cap)
    # Read while behind: held, and the commit capped at its record.
    glue.handle(NAMES.node_signals, 3, 8, None, xid_pack("n1"))
    assert glue.caps() == [(3, 8)]
    behind["n"] = 0
    watermark = orjson.dumps({"watermark": 1_700_000_000_001})
    await d.handle([Event(Msg(NAMES.node_signals, 3, 9, None, watermark))])
    assert "n1" in nodes and ("n1", 3) in writes  # written to partition 3's changelog
    assert caps == [(3, None)]
    assert order.index("write n1") < order.index("cap 3 None")  # lifted once it is written
    assert any(orjson.loads(v).get("node") == "n1" for _, v in sink.sent)  # its quarantine


async def test_held_evidence_is_applied_between_batches_when_the_inputs_are_quiet() -> None:
    sink = Acked()
    d, glue, _ = node_driver(lambda partition: DEFER_BEHIND + 1, sink)
    glue.handle(NAMES.node_signals, 0, 5, None, xid_pack("n1"))
    assert glue.holding() == [0]
    await d.drain_held()  # no batch came: the timer's turn applies it
    assert glue.holding() == [] and [orjson.loads(v)["node"] for _, v in sink.sent] == ["n1"]


async def test_the_held_evidence_gauge_counts_what_a_partition_still_holds() -> None:
    d, _, metrics = node_driver(lambda partition: DEFER_BEHIND + 1, Acked())
    value = xid_pack("n0", "n1", "n2", code=13, cls="software")
    await d.handle([Event(Msg(NAMES.node_signals, 2, 0, None, value))])
    # Behind: all three held, and the turn after the batch applies one node.
    gauge = "gpufailover_classifier_held_evidence"
    assert metrics.registry.get_sample_value(gauge, {"partition": "2"}) == 2
