"""The signal filter reads the records aiokafka decodes, not a ConsumerRecord built from each.

For every record it hands out, aiokafka builds a `ConsumerRecord` (eleven fields, two `len`s,
a headers tuple: `PartitionRecords._consumer_record`), ~15% of the classifier's CPU in the
throughput drain (py-spy, BENCHMARKS.md, issue 18, sixth pass). The filter reads only a
record's offset, key and value, which the record its decoder yields has already
(`aiokafka.record`; the batch's dict gives topic and partition). A consumer made with
`key_deserializer=raw_records` gets those records as they are; every other consumer (faust's)
gets what aiokafka builds.
"""

from __future__ import annotations

from typing import Any

import aiokafka.consumer.fetcher as fetcher


def raw_records(key: bytes | None) -> bytes | None:
    """The marker key deserializer (the identity: without `install` a consumer made with it is
    an ordinary one, whose ConsumerRecords have the same offset, key and value)."""
    return key


_PartitionRecords: Any = fetcher.PartitionRecords


class _RawPartitionRecords(_PartitionRecords):  # type: ignore[misc]
    def _consumer_record(self, tp: Any, record: Any) -> Any:
        return record


def _partition_records(
    tp: Any,
    records: Any,
    aborted_transactions: Any,
    fetch_offset: int,
    key_deserializer: Any,
    *rest: Any,
) -> Any:
    cls = _RawPartitionRecords if key_deserializer is raw_records else _PartitionRecords
    return cls(tp, records, aborted_transactions, fetch_offset, key_deserializer, *rest)


def install() -> None:
    """Consumers made with `key_deserializer=raw_records` return decoded records from now on
    (idempotent). aiokafka's fetcher builds each fetched partition's records through this."""
    fetcher.PartitionRecords = _partition_records
