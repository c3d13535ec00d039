"""The current quarantine set: the latest `nodes.quarantine` value per node.

Fed by a tail of the compacted topic (every partition, from the beginning) and by the service's
own acknowledged writes. Both carry the record's offset, so an older record arriving late (the
tail catching up on what the service already applied) never overwrites a newer one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Final

from consumers.runtime.records import InRecord, now_ms
from schemas.codec import loads
from schemas.quarantine import QuarantineRecord

QUARANTINED: Final = "quarantined"
VALIDATING: Final = "validating"  # still out of service: the validation runs on a drained node
RELEASED: Final = "released"

OnChange = Callable[[QuarantineRecord | None, QuarantineRecord], None]


class QuarantineTable:
    def __init__(self) -> None:
        self._latest: dict[str, tuple[tuple[int, int], QuarantineRecord]] = {}
        self._deleted: dict[str, tuple[int, int]] = {}
        self.quarantined_at: dict[str, int] = {}  # node -> ts_ms of its latest quarantine
        # node -> wall clock its latest quarantine arrived (the breaker's window): the Kafka
        # timestamp of the record read back, or when the service applied its own write.
        self.arrived_at: dict[str, int] = {}
        self.on_change: OnChange | None = None

    def apply_record(self, rec: InRecord) -> None:
        """One record read from `nodes.quarantine` (a tombstone forgets the node)."""
        node = rec.key_str()
        position = (rec.partition, rec.offset)
        if rec.value is None:
            if node is not None and self._newer(node, position):
                self._latest.pop(node, None)
                self._deleted[node] = position
            return
        record = QuarantineRecord.from_dict(loads(rec.value))
        self.apply(record, rec.partition, rec.offset, rec.timestamp_ms or now_ms())

    def apply(
        self, record: QuarantineRecord, partition: int, offset: int, arrived_ms: int | None = None
    ) -> bool:
        """Take `record` (arrived at wall time `arrived_ms`, default now) unless a newer one for
        its node is known; True when taken."""
        position = (partition, offset)
        if not self._newer(record.node, position):
            return False
        previous = self._latest.get(record.node)
        self._latest[record.node] = (position, record)
        self._deleted.pop(record.node, None)
        if record.state == QUARANTINED and record.validation is None:  # a new episode
            self.quarantined_at[record.node] = record.ts_ms
            self.arrived_at[record.node] = now_ms() if arrived_ms is None else arrived_ms
        if self.on_change is not None:
            self.on_change(None if previous is None else previous[1], record)
        return True

    def _newer(self, node: str, position: tuple[int, int]) -> bool:
        known = self._latest.get(node)
        seen = known[0] if known is not None else self._deleted.get(node)
        # Offsets order records of one partition; a node's key stays on one partition.
        return seen is None or seen[0] != position[0] or position[1] > seen[1]

    def get(self, node: str) -> QuarantineRecord | None:
        known = self._latest.get(node)
        return None if known is None else known[1]

    def is_quarantined(self, node: str) -> bool:
        record = self.get(node)
        return record is not None and record.state != RELEASED

    def quarantined(self) -> frozenset[str]:
        """Nodes out of service: quarantined or validating."""
        return frozenset(n for n, (_, r) in self._latest.items() if r.state != RELEASED)

    def lemons(self) -> frozenset[str]:
        """Nodes out of service and marked lemon."""
        return frozenset(n for n, (_, r) in self._latest.items() if r.state != RELEASED and r.lemon)

    def nodes(self) -> Iterable[str]:
        return self._latest.keys()
