"""Where a consumer stands on its partitions: end offsets, positions, lag.

One place for the three readers that ask: the consumer services' loop and tails (aiokafka), the
classifier's signal filter (aiokafka) and the classifier's faust agents. Clients are duck-typed
(`Any`): this kernel module imports neither aiokafka nor faust at import time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

Key = tuple[str, int]  # (topic, partition)


def lag(end: int, position: int) -> int:
    """Records between `position` (the next offset to read) and `end`; never negative."""
    return max(0, end - position)


def end_offset(consumer: Any, tp: Any) -> int | None:
    """The end of `tp` as of an aiokafka consumer's last fetch: its last stable offset
    (read_committed: transaction markers are not records), else its high water; None before
    the first fetch."""
    end: int | None = consumer.last_stable_offset(tp)
    return consumer.highwater(tp) if end is None else end


async def behind(consumer: Any, ends: Mapping[Any, int]) -> list[Any]:
    """The partitions an assigned aiokafka consumer has not read up to `ends` yet."""
    return [tp for tp, end in ends.items() if await consumer.position(tp) < end]


class PartitionProbe:
    """Ends and positions of an aiokafka consumer's assigned partitions, as of its last fetch.

    `refresh` after each fetch; `forget` partitions when they are revoked.
    """

    def __init__(self) -> None:
        self.ends: dict[Key, int | None] = {}  # None: not fetched yet
        self.positions: dict[Key, int] = {}  # the next offset to read

    async def refresh(self, consumer: Any, assigned: Iterable[Any]) -> None:
        from aiokafka.errors import IllegalStateError

        for tp in assigned:
            key = (tp.topic, tp.partition)
            end = self.ends[key] = end_offset(consumer, tp)
            if end is None:  # nothing fetched yet: no position to compare (it may not be known)
                self.positions.pop(key, None)
                continue
            try:
                self.positions[key] = await consumer.position(tp)
            except IllegalStateError:  # revoked meanwhile: no longer ours to report
                self.ends.pop(key, None)

    def forget(self, keys: Iterable[Key]) -> None:
        for key in keys:
            self.ends.pop(key, None)
            self.positions.pop(key, None)

    def lagging(self, key: Key) -> bool:
        """Does this partition hold records not read yet (or may it: not fetched yet)?
        False when it is not assigned here."""
        if key not in self.ends:
            return False
        end, position = self.ends[key], self.positions.get(key)
        return end is None or position is None or end > position

    def backlog(self, key: Key) -> int:
        """Records not read yet as of the last fetch; 0 when not known or not assigned."""
        end, position = self.ends.get(key), self.positions.get(key)
        return 0 if end is None or position is None else lag(end, position)

    def lags(self) -> list[tuple[str, int, int]]:
        """(topic, partition, lag) of each partition whose end and position are known."""
        rows: list[tuple[str, int, int]] = []
        for (topic, partition), end in list(self.ends.items()):
            position = self.positions.get((topic, partition))
            if end is not None and position is not None:
                rows.append((topic, partition, lag(end, position)))
        return rows

    def read_to_end(self) -> frozenset[Key]:
        """The partitions read up to their end as of the last fetch."""
        return frozenset(
            key
            for key, end in self.ends.items()
            if end is not None and key in self.positions and self.positions[key] >= end
        )


def faust_committed(consumer: Any, tp: Any) -> int | None:
    """The offset a faust consumer last committed (or sought to at assignment) for `tp`.

    faust has no public read of it: its Consumer keeps it in the private `_committed_offset`
    (faust-streaming is pinned exactly in pyproject). Its public alternatives do not fit:
    `position()` is the fetch position, past records fetched but not processed yet, and the
    sensors' `on_tp_commit` misses the offsets a worker starts from. This is the one place
    that reads it.
    """
    committed: int | None = consumer._committed_offset.get(tp)
    return committed


class AgentProgress:
    """What a faust worker's agents processed, against the high water of their inputs."""

    def __init__(
        self, consumer: Callable[[], Any], inputs: Iterable[str], tp: Callable[[str, int], Any]
    ) -> None:
        """`consumer`: returns the faust app's consumer (faust creates it lazily); `inputs`:
        the agents' input topics (the consumer reads changelogs too); `tp`: faust's `TP`, the
        key of its consumer's maps (passed in: the light install has no faust)."""
        self._tp = tp
        self._consumer = consumer
        self._inputs = frozenset(inputs)
        self._processed: dict[Any, int] = {}  # TP -> last offset processed by this process

    def processed(self, tp: Any, offset: int) -> None:
        self._processed[tp] = offset

    def _position(self, consumer: Any, tp: Any) -> int:
        """The next offset to process: after the last processed one, else the committed one."""
        last = self._processed.get(tp)
        if last is None:
            return faust_committed(consumer, tp) or 0
        return last + 1

    def lagging(self, topic: str, partition: int) -> bool:
        """Does this input partition hold records this worker has not processed yet?"""
        tp = self._tp(topic, partition)
        try:
            consumer = self._consumer()
            highwater = consumer.highwater(tp)
        except (KeyError, AssertionError, AttributeError):
            return False  # not assigned here
        if highwater is None:
            return True  # not fetched yet: it may hold older records
        return bool(highwater > self._position(consumer, tp))

    def backlog(self, topic: str, partition: int) -> int:
        """Records of the input partition this worker has not processed yet, as of its last
        fetch (0 when not assigned here or not fetched yet)."""
        tp = self._tp(topic, partition)
        try:
            consumer = self._consumer()
            highwater = consumer.highwater(tp)
        except (KeyError, AssertionError, AttributeError):
            return 0
        return 0 if highwater is None else lag(int(highwater), self._position(consumer, tp))

    def lags(self) -> list[tuple[str, int, int]]:
        """(topic, partition, high water - next offset) of each assigned input partition that
        was fetched."""
        rows: list[tuple[str, int, int]] = []
        try:
            consumer = self._consumer()
            assigned = consumer.assignment()
        except (AttributeError, AssertionError):
            return rows  # consumer not started
        for tp in assigned:
            if tp.topic not in self._inputs:
                continue  # changelogs
            highwater = consumer.highwater(tp)
            if highwater is None:
                continue  # not fetched yet
            rows.append((tp.topic, tp.partition, lag(int(highwater), self._position(consumer, tp))))
        return rows
