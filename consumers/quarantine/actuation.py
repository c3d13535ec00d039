"""What the actuator still owes the scheduler: desired states read, not yet carried out.

`nodes.quarantine` is the desired state of every node. The actuation stage reads it in its own
consumer group and commits an offset only once every record before it has been actuated, so
the committed offset is the durable "actuated up to here" marker: a restart resumes with what
was not done (a release published while the service was down, an actuation that failed), and
nothing already done is lost. This module is the pure part, with the clock passed in: per node
the latest desired state not yet actuated, retried with exponential back-off, and the offsets
that are safe to commit.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from consumers.quarantine.actions import QUARANTINE, RELEASE
from consumers.quarantine.table import RELEASED
from gpufailover.backoff import Backoff
from schemas.quarantine import QuarantineRecord


@dataclass
class Owed:
    """One desired state of one node, read at (partition, offset), not actuated yet."""

    record: QuarantineRecord
    partition: int
    offset: int
    failures: int = 0
    next_try_ms: int = 0

    @property
    def action(self) -> str:
        return action_of(self.record)


def action_of(record: QuarantineRecord) -> str:
    """Quarantined and validating nodes stay drained: only a release resumes one."""
    return RELEASE if record.state == RELEASED else QUARANTINE


class ActuationQueue:
    def __init__(self, backoff: Backoff) -> None:
        self.backoff = backoff
        self._owed: dict[str, Owed] = {}  # node -> its latest desired state not yet actuated
        self._next_offset: dict[int, int] = {}  # partition -> offset after the last one read
        self._done: dict[str, str] = {}  # node -> action last actuated by this process

    def read(self, partition: int, offset: int, record: QuarantineRecord | None) -> None:
        """A record read from `nodes.quarantine` (None: a tombstone or unreadable, nothing to do).

        A newer desired state of a node replaces an older one still owed: only the latest
        matters, and it may make the owed one unnecessary (released before it was drained)."""
        self._next_offset[partition] = max(self._next_offset.get(partition, 0), offset + 1)
        if record is None:
            return
        node = record.node
        if self._done.get(node) == action_of(record):
            self._owed.pop(node, None)  # already in that state: nothing (left) to do
            return
        self._owed[node] = Owed(record, partition, offset)

    def read_to(self, partition: int, position: int) -> None:
        """The consumer's position: past transaction markers, which are not records."""
        self._next_offset[partition] = max(self._next_offset.get(partition, 0), position)

    def due(self, now_ms: int) -> list[Owed]:
        """Owed actuations whose (re)try time has come, oldest read first."""
        ready = [o for o in self._owed.values() if o.next_try_ms <= now_ms]
        return sorted(ready, key=lambda o: (o.partition, o.offset))

    def succeeded(self, owed: Owed) -> None:
        node = owed.record.node
        if self._owed.get(node) is owed:
            del self._owed[node]
        self._done[node] = owed.action

    def failed(self, owed: Owed, now_ms: int) -> int:
        """Schedule the retry; the delay in ms."""
        owed.failures += 1
        delay = self.backoff.delay_ms(owed.failures)
        owed.next_try_ms = now_ms + delay
        return delay

    def next_try_ms(self) -> int | None:
        return min((o.next_try_ms for o in self._owed.values()), default=None)

    def committable(self) -> dict[int, int]:
        """Per partition read: the offset to commit (everything before it actuated)."""
        out = dict(self._next_offset)
        for owed in self._owed.values():
            out[owed.partition] = min(out[owed.partition], owed.offset)
        return out

    def forget(self, partitions: Iterable[int]) -> None:
        """Partitions revoked: their new owner resumes them from the committed offset."""
        gone = set(partitions)
        for p in gone:
            self._next_offset.pop(p, None)
        for node in [n for n, o in self._owed.items() if o.partition in gone]:
            del self._owed[node]

    def __len__(self) -> int:
        return len(self._owed)
