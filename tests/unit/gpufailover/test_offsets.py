"""Offset and lag probing (gpufailover.offsets) over fake aiokafka and faust consumers."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from aiokafka.errors import IllegalStateError
from aiokafka.structs import TopicPartition
from faust.types import TP

from gpufailover.offsets import AgentProgress, PartitionProbe, behind, end_offset, lag

A0, A1, B0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)


@dataclass
class FakeAiokafka:
    """What aiokafka's consumer answers after a fetch: ends and positions per partition."""

    stable: dict[Any, int | None] = field(default_factory=dict)
    highwaters: dict[Any, int | None] = field(default_factory=dict)
    positions: dict[Any, int] = field(default_factory=dict)
    revoked: set[Any] = field(default_factory=set)

    def last_stable_offset(self, tp: Any) -> int | None:
        return self.stable.get(tp)

    def highwater(self, tp: Any) -> int | None:
        return self.highwaters.get(tp)

    async def position(self, tp: Any) -> int:
        if tp in self.revoked:
            raise IllegalStateError(f"{tp} not assigned")
        return self.positions[tp]


def test_lag_is_the_records_between_position_and_end_and_never_negative() -> None:
    assert lag(10, 4) == 6
    assert lag(10, 10) == 0
    assert lag(10, 12) == 0


def test_end_is_the_last_stable_offset_else_the_high_water() -> None:
    consumer = FakeAiokafka(stable={A0: 7}, highwaters={A0: 9, A1: 5})
    assert end_offset(consumer, A0) == 7  # read_committed: a transaction marker is no record
    assert end_offset(consumer, A1) == 5
    assert end_offset(consumer, B0) is None  # nothing fetched yet


async def test_behind_lists_partitions_not_read_to_their_end() -> None:
    consumer = FakeAiokafka(positions={A0: 3, A1: 5})
    assert await behind(consumer, {A0: 5, A1: 5}) == [A0]
    assert await behind(consumer, {A0: 3, A1: 5}) == []


async def test_probe_reports_lag_and_what_is_read_to_its_end() -> None:
    # B0 has no position yet: the fake raises KeyError if the probe asks for it.
    consumer = FakeAiokafka(stable={A0: 10, A1: 4}, positions={A0: 6, A1: 4})
    probe = PartitionProbe()
    await probe.refresh(consumer, [A0, A1, B0])
    assert probe.lags() == [("a", 0, 4), ("a", 1, 0)]  # B0 not fetched: no lag to report
    assert probe.read_to_end() == {("a", 1)}
    assert probe.lagging(("a", 0))
    assert not probe.lagging(("a", 1))
    assert probe.lagging(("b", 0))  # not fetched yet: it may hold records
    assert not probe.lagging(("c", 0))  # not assigned here
    assert [probe.backlog(k) for k in (("a", 0), ("a", 1), ("b", 0), ("c", 0))] == [4, 0, 0, 0]


async def test_probe_drops_partitions_revoked_while_asked_and_forgotten_ones() -> None:
    consumer = FakeAiokafka(stable={A0: 10, A1: 4}, positions={A0: 6, A1: 4})
    probe = PartitionProbe()
    await probe.refresh(consumer, [A0, A1])
    consumer.revoked.add(A0)
    await probe.refresh(consumer, [A0, A1])
    assert probe.lags() == [("a", 1, 0)]
    assert not probe.lagging(("a", 0))
    probe.forget([("a", 1)])
    assert probe.lags() == []
    assert probe.read_to_end() == frozenset()


@dataclass
class FakeFaust:
    """faust's consumer: high waters of assigned partitions, its committed offsets."""

    highwaters: dict[Any, int | None]
    _committed_offset: dict[Any, int | None]

    def highwater(self, tp: Any) -> int | None:
        if tp not in self.highwaters:
            raise AssertionError("Partition is not assigned")  # as aiokafka's assert
        return self.highwaters[tp]

    def assignment(self) -> set[Any]:
        return set(self.highwaters)


def test_agents_lag_from_the_committed_offset_until_a_record_is_processed() -> None:
    consumer = FakeFaust(
        highwaters={TP("in", 0): 10, TP("in", 1): None, TP("app-changelog", 0): 50},
        _committed_offset={TP("in", 0): 4},
    )
    progress = AgentProgress(lambda: consumer, ["in"], TP)
    assert progress.lags() == [("in", 0, 6)]  # not fetched and changelog partitions left out
    assert progress.lagging("in", 0)
    assert progress.lagging("in", 1)  # not fetched yet: it may hold older records
    assert not progress.lagging("in", 2)  # not assigned here
    progress.processed(TP("in", 0), 8)
    assert progress.lags() == [("in", 0, 1)]
    assert progress.lagging("in", 0)
    progress.processed(TP("in", 0), 9)
    assert progress.lags() == [("in", 0, 0)]
    assert not progress.lagging("in", 0)


def test_agents_report_no_lag_before_the_consumer_exists() -> None:
    def not_started() -> Any:
        raise AttributeError("consumer")

    progress = AgentProgress(not_started, ["in"], TP)
    assert progress.lags() == []
    assert not progress.lagging("in", 0)
