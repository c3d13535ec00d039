"""streams.faust_patches: the recovery order, the lost-record guard, their bookkeeping.

The recovery tests run faust's own `Recovery` methods (patched, and the originals kept in
`__wrapped__`) against a small model of the consumer: records fetched while the seek is
awaited go into the stream buffer, which `flow_control.resume()` clears.
"""

from __future__ import annotations

import asyncio
import logging
from types import SimpleNamespace
from typing import Any

import faust
import pytest
from faust.tables.recovery import Recovery
from faust.transport.consumer import Consumer
from faust.types import TP
from intervaltree import IntervalTree

from streams import faust_patches
from streams.faust_patches import OffsetWatch, watch_of

INPUT = TP("jobs.events", 0)
CHANGELOG = TP("app-job-states-changelog", 0)


@pytest.fixture(autouse=True)
def patched() -> None:
    faust_patches.apply("all")


# --- OffsetWatch -------------------------------------------------------------------------


def test_a_fetched_record_overtaken_unacked_is_lost_and_holds_the_commit() -> None:
    watch = OffsetWatch()
    for offset in (10, 11, 12):
        watch.fetched(INPUT, offset)
    assert watch.overtaken(INPUT, 10, [11, 12]) == [10]
    assert watch.lost_total == 1
    assert watch.commit_limit(INPUT, 13) == 10
    assert watch.holes() == {INPUT: 10}


def test_records_acked_in_order_lose_nothing_and_commit_freely() -> None:
    watch = OffsetWatch()
    for offset in range(5):
        watch.fetched(INPUT, offset)
    assert watch.overtaken(INPUT, 0, range(5)) == []
    assert watch.commit_limit(INPUT, 5) == 5
    assert watch.lost_total == 0


def test_a_record_still_in_the_buffer_is_not_lost() -> None:
    watch = OffsetWatch()
    for offset in (3, 4, 5):
        watch.fetched(INPUT, offset)
    assert watch.overtaken(INPUT, 3, [3, 4]) == []  # 5 is not overtaken yet
    assert watch.overtaken(INPUT, 5, [5]) == []


def test_records_fetched_before_a_seek_and_again_after_it_are_not_lost() -> None:
    watch = OffsetWatch()
    for offset in (7, 8, 9):  # fetched, then the buffer was cleared and the consumer sought
        watch.fetched(INPUT, offset)
    watch.sought(INPUT, 7)
    for offset in (7, 8, 9):
        watch.fetched(INPUT, offset)
    assert watch.overtaken(INPUT, 7, [7, 8, 9]) == []
    assert watch.lost_total == 0


def test_a_record_fetched_before_the_seek_and_dropped_after_it_is_lost() -> None:
    # faust's "DROPPED MESSAGE ROFF": refetched offsets below its read offset never reach
    # the streams again.
    watch = OffsetWatch()
    watch.fetched(INPUT, 7)
    watch.sought(INPUT, 7)
    watch.fetched(INPUT, 8)
    assert watch.overtaken(INPUT, 7, [8]) == [7]


def test_offsets_never_fetched_are_not_lost() -> None:
    # Transaction markers and compacted records occupy offsets the fetcher never returns.
    watch = OffsetWatch()
    watch.fetched(INPUT, 5)
    assert watch.overtaken(INPUT, 3, [5]) == []
    assert watch.commit_limit(INPUT, 6) == 6


def test_offsets_below_the_committed_one_are_done() -> None:
    watch = OffsetWatch()
    for offset in (1, 2, 3):
        watch.fetched(INPUT, offset)
    assert watch.overtaken(INPUT, 3, [3]) == []


def test_a_seek_heals_the_hole() -> None:
    watch = OffsetWatch()
    watch.fetched(INPUT, 0)
    watch.fetched(INPUT, 1)
    assert watch.overtaken(INPUT, 0, [1]) == [0]
    watch.sought(INPUT, 0)  # the next start reads from the held commit
    assert watch.holes() == {}
    assert watch.commit_limit(INPUT, 2) == 2


def test_without_a_committed_offset_every_earlier_fetched_record_counts() -> None:
    watch = OffsetWatch()
    watch.fetched(INPUT, 0)
    watch.fetched(INPUT, 1)
    assert watch.overtaken(INPUT, None, [1]) == [0]


# --- the consumer patches ---------------------------------------------------------------


def _consumer(committed: int | None) -> Any:
    """What faust's Consumer.ack, _new_offset and perform_seek read of the consumer."""
    return SimpleNamespace(
        _acked={INPUT: []},
        _acked_index={INPUT: set()},
        _gap={INPUT: IntervalTree()},
        _committed_offset={INPUT: committed},
        _read_offset={INPUT: committed, CHANGELOG: 0},
        _unacked_messages=set(),
        _n_acked=0,
        _waiting_for_ack=None,
        _is_changelog_tp=lambda tp: tp == CHANGELOG,
        app=SimpleNamespace(topics=SimpleNamespace(acks_enabled_for=lambda topic: True)),
    )


class _Message:
    def __init__(self, offset: int) -> None:
        self.tp, self.topic, self.offset, self.acked = INPUT, INPUT.topic, offset, False


def _ack(consumer: Any, offset: int) -> None:
    assert Consumer.ack(consumer, _Message(offset))


def test_faust_commits_over_a_one_record_head_gap() -> None:
    consumer = _consumer(committed=10)
    _ack(consumer, 11)
    _ack(consumer, 12)
    assert Consumer._new_offset.__wrapped__(consumer, INPUT) == 13  # type: ignore[attr-defined]


def test_the_guard_holds_the_commit_at_a_record_fetched_and_never_acked(
    caplog: pytest.LogCaptureFixture,
) -> None:
    consumer = _consumer(committed=10)
    watch_of(consumer).sought(INPUT, 10)
    for offset in (10, 11, 12):
        watch_of(consumer).fetched(INPUT, offset)
    with caplog.at_level(logging.ERROR, "gpufailover.faust_patches"):
        _ack(consumer, 11)
        _ack(consumer, 12)
    assert Consumer._new_offset(consumer, INPUT) == 10
    assert "faust lost 1 record(s) of jobs.events[0] at offsets 10" in caplog.text


def test_the_guard_lets_faust_commit_over_an_offset_never_fetched() -> None:
    consumer = _consumer(committed=10)  # offset 10: a transaction marker, say
    watch_of(consumer).sought(INPUT, 10)
    for offset in (11, 12):
        watch_of(consumer).fetched(INPUT, offset)
        _ack(consumer, offset)
    assert Consumer._new_offset(consumer, INPUT) == 13


def test_perform_seek_resets_the_watch_of_input_partitions_only() -> None:
    consumer = _consumer(committed=4)
    watch_of(consumer).fetched(INPUT, 4)
    watch_of(consumer).fetched(INPUT, 5)
    watch_of(consumer).overtaken(INPUT, 4, [5])
    assert watch_of(consumer).holes() == {INPUT: 4}

    async def seek(self: Any) -> None:
        self._read_offset[INPUT] = 4

    asyncio.run(faust_patches._patch_perform_seek(seek, seek_uncommitted=False)(consumer))
    assert watch_of(consumer).holes() == {}
    assert CHANGELOG not in watch_of(consumer)._parts


def _seekable(committed: dict[Any, int | None], earliest: dict[Any, int]) -> Any:
    consumer = _consumer(committed=None)
    consumer._committed_offset = dict(committed)
    consumer.sought = {}
    consumer.assignment = lambda: {INPUT, CHANGELOG, *committed}

    async def earliest_offsets(*tps: Any) -> dict[Any, int]:
        return {tp: earliest[tp] for tp in tps}

    async def seek_wait(offsets: dict[Any, int]) -> None:
        consumer.sought.update(offsets)

    consumer.earliest_offsets, consumer.seek_wait = earliest_offsets, seek_wait
    return consumer


def test_inputs_without_a_committed_offset_are_sought_to_their_earliest_offset() -> None:
    """faust seeks only partitions committed above 0: the others would keep the position of
    records fetched before a rebalance and cleared from the buffers (never fetched again)."""
    other = TP(INPUT.topic, INPUT.partition + 1)
    consumer = _seekable({INPUT: None, other: 7}, {INPUT: 3, other: 0})

    async def seek(self: Any) -> None:
        self._read_offset[INPUT] = None

    asyncio.run(faust_patches._patch_perform_seek(seek)(consumer))
    assert consumer.sought == {INPUT: 3}  # not the committed one, not the changelog


def test_an_input_committed_at_zero_is_sought_too() -> None:
    consumer = _seekable({INPUT: 0}, {INPUT: 0})
    asyncio.run(faust_patches.seek_uncommitted_inputs(consumer))
    assert consumer.sought == {INPUT: 0}


def test_getmany_records_the_input_records_it_returns() -> None:
    consumer = _consumer(committed=0)
    records = {INPUT: [SimpleNamespace(offset=0), SimpleNamespace(offset=1)]}
    records[CHANGELOG] = [SimpleNamespace(offset=9)]

    async def getmany(self: Any, active_partitions: Any, **kwargs: Any) -> dict[Any, Any]:
        return records

    wrapped = faust_patches._patch_getmany(snapshot=False)(getmany)
    assert asyncio.run(wrapped(consumer, active_partitions={INPUT}, timeout=1.0)) is records
    assert sorted(watch_of(consumer)._parts[INPUT].fetched) == [0, 1]
    assert CHANGELOG not in watch_of(consumer)._parts


def test_another_faust_release_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(faust, "__version__", "0.16.0")
    with pytest.raises(RuntimeError, match=r"0\.15\.3"):
        faust_patches.apply("all")


def test_the_patch_set_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(faust_patches.PATCHES_ENV, "guard-only")
    assert faust_patches.patches_from_env() == "guard-only"
    monkeypatch.setenv(faust_patches.PATCHES_ENV, "some")
    with pytest.raises(ValueError, match="all, guard-only, none"):
        faust_patches.patches_from_env()


# --- the recovery order ------------------------------------------------------------------


class ModelConsumer:
    """An input partition whose records 0..end-1 are fetched one per `fetch()` while it is
    active; the stream buffer is `buffer`. Methods on the class, as faust's are."""

    def __init__(self, committed: int, end: int) -> None:
        self.active = {CHANGELOG}
        self.position, self.committed, self.end = committed, committed, end
        self.buffer: list[int] = []

    def assignment(self) -> set[TP]:
        return {INPUT, CHANGELOG}

    def resume_partitions(self, tps: Any) -> None:
        self.active |= set(tps)

    def fetch(self) -> bool:
        if INPUT in self.active and self.position < self.end:
            self.buffer.append(self.position)
            self.position += 1
            return True
        return False

    async def perform_seek(self) -> None:
        self.position = self.committed
        self.fetch()  # the fetcher keeps running while the seek is awaited

    def resume_flow(self) -> None:
        pass


class ModelFlowControl:
    def __init__(self, consumer: ModelConsumer) -> None:
        self.consumer = consumer

    def resume(self) -> None:
        self.consumer.buffer.clear()  # faust: every clear_on_resume queue


class _Log:
    def info(self, *args: Any) -> None: ...
    def dev(self, *args: Any) -> None: ...
    def warning(self, *args: Any) -> None: ...


async def _noop(*args: Any, **kwargs: Any) -> None: ...


def _recovery(consumer: ModelConsumer) -> Any:
    app = SimpleNamespace(
        consumer=consumer,
        flow_control=ModelFlowControl(consumer),
        on_rebalance_complete=SimpleNamespace(send=_noop),
        consumer_generation_id=0,
        conf=SimpleNamespace(broker_request_timeout=1.0),
        _fetcher=SimpleNamespace(maybe_start=_noop),
        assignor=SimpleNamespace(assigned_standbys=set),
        on_rebalance_end=lambda: None,
    )

    async def wait(coro: Any, **kwargs: Any) -> None:  # faust's _wait(coro, timeout=...)
        await coro

    return SimpleNamespace(
        app=app,
        log=_Log(),
        tables=SimpleNamespace(
            values=list, on_actives_ready=lambda: None, on_standbys_ready=lambda: None
        ),
        actives_for_table={},
        standbys_for_table={},
        completed=asyncio.Event(),
        _set_recovery_ended=lambda: None,
        _is_changelog_tp=lambda tp: tp == CHANGELOG,
        _wait=wait,
    )


def _processed_after(method: Any, committed: int = 3, end: int = 6) -> list[int]:
    consumer = ModelConsumer(committed, end)
    asyncio.run(method(_recovery(consumer), 0))
    while consumer.fetch():
        pass
    return consumer.buffer


@pytest.mark.parametrize("name", ["on_recovery_completed", "_resume_streams"])
def test_faust_0153_order_loses_the_record_fetched_during_the_seek(name: str) -> None:
    original = getattr(Recovery, name).__wrapped__
    assert _processed_after(original) == [4, 5]  # offset 3 was cleared, never fetched again


@pytest.mark.parametrize("name", ["on_recovery_completed", "_resume_streams"])
def test_patched_recovery_processes_every_record_from_the_committed_offset(name: str) -> None:
    assert _processed_after(getattr(Recovery, name)) == [3, 4, 5]


def test_patched_recovery_restores_faust_methods_afterwards() -> None:
    consumer = ModelConsumer(0, 1)
    recovery = _recovery(consumer)
    asyncio.run(Recovery.on_recovery_completed(recovery, 0))
    assert "resume_partitions" not in vars(consumer)
    assert "resume" not in vars(recovery.app.flow_control)
    assert INPUT in consumer.active


def test_the_consumer_thread_gets_a_snapshot_of_the_active_partitions() -> None:
    live = {INPUT, CHANGELOG}
    seen: list[Any] = []

    async def getmany(self: Any, active_partitions: Any, **kwargs: Any) -> dict[Any, Any]:
        live.clear()  # faust pauses partitions while the thread waits for records
        seen.append(active_partitions)
        return {}

    wrapped = faust_patches._patch_getmany(snapshot=True)(getmany)
    asyncio.run(wrapped(_consumer(0), active_partitions=live, timeout=1.0))
    assert seen == [frozenset({INPUT, CHANGELOG})]  # not the (now empty: "all") live set


def test_a_snapshot_is_waited_on_briefly_so_a_partition_resumed_meanwhile_is_asked_next() -> None:
    waits: list[Any] = []

    async def getmany(self: Any, active_partitions: Any, **kwargs: Any) -> dict[Any, Any]:
        waits.append(kwargs["timeout"])
        return {}

    wrapped = faust_patches._patch_getmany(snapshot=True)(getmany)
    for asked in (1.0, None, 0.01):  # faust's fetch loop asks for 1 s
        asyncio.run(wrapped(_consumer(0), active_partitions={INPUT}, timeout=asked))
    assert waits == [faust_patches.SNAPSHOT_WAIT_S, None, 0.01]  # None: return at once
    assert faust_patches.SNAPSHOT_WAIT_S <= 0.1


def test_apply_installs_exactly_the_set_asked_for() -> None:
    original = Recovery.on_recovery_completed.__wrapped__  # type: ignore[attr-defined]
    try:
        faust_patches.apply("guard-only")
        assert Recovery.on_recovery_completed is original
        assert hasattr(Consumer._new_offset, "__wrapped__")
        faust_patches.apply("none")
        assert not hasattr(Consumer._new_offset, "__wrapped__")
        faust_patches.apply("all")
        faust_patches.apply("all")
        assert Recovery.on_recovery_completed.__wrapped__ is original  # type: ignore[attr-defined]
    finally:
        faust_patches.apply("all")


def test_a_cap_holds_commits_and_keeps_the_acks_past_it_for_when_it_is_lifted() -> None:
    consumer = _consumer(committed=10)
    watch_of(consumer).cap(INPUT, 12)  # the node agent holds evidence read at offset 12
    for offset in (10, 11, 12, 13, 14):
        _ack(consumer, offset)
    assert Consumer._new_offset(consumer, INPUT) == 12
    consumer._committed_offset[INPUT] = 12  # faust committed it
    _ack(consumer, 15)
    assert Consumer._new_offset(consumer, INPUT) == 12  # still held
    consumer._committed_offset[INPUT] = 12
    watch_of(consumer).cap(INPUT, None)  # applied: nothing held any more
    _ack(consumer, 16)
    assert Consumer._new_offset(consumer, INPUT) == 17
