"""The signal filter's consumer gets aiokafka's decoded records, and reduces them exactly as it
reduces the same records as InputRecords (`streams.raw_fetch`)."""

from __future__ import annotations

import random

import orjson
from aiokafka.consumer import fetcher
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from aiokafka.record.memory_records import MemoryRecords
from aiokafka.structs import ConsumerRecord, TopicPartition

from schemas.topics import TopicNames
from streams.glue import Out
from streams.policy import load_policy
from streams.raw_fetch import install, raw_records
from streams.signal_filter import InputRecord, SignalFilter

NAMES = TopicNames("")
T0 = 1_700_000_000_000


def fetched(values: list[bytes], key_deserializer: object) -> list[object]:
    """`values` as one Kafka record batch at offsets 0.., handed out as aiokafka's fetcher
    hands out a fetched partition's records."""
    builder = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 1 << 20)
    for i, value in enumerate(values):
        builder.append(i, timestamp=T0 + i, key=b"k%d" % i, value=value, headers=[])
    data = MemoryRecords(bytes(builder.build()))
    tp = TopicPartition(NAMES.gpu_health, 1)
    records = fetcher.PartitionRecords(
        tp, data, [], 0, key_deserializer, None, True, "read_uncommitted"
    )
    return list(records)


def comparable(out: list[Out]) -> list[tuple[str, bytes | None, object, int | None]]:
    """The outputs without the wall-clock time a dead letter is stamped with."""
    found: list[tuple[str, bytes | None, object, int | None]] = []
    for o in out:
        body = orjson.loads(o.value)
        if o.topic == NAMES.dlq(NAMES.gpu_health):
            del body["dead_lettered_ts_ms"]
        found.append((o.topic, o.key, body, o.partition))
    return found


def test_a_consumer_made_with_raw_records_gets_decoded_records_and_others_consumer_records() -> (
    None
):
    install()
    values = [b'{"n":%d}' % i for i in range(5)]
    raw = fetched(values, raw_records)
    built = fetched(values, None)
    assert not any(isinstance(r, ConsumerRecord) for r in raw)
    assert all(isinstance(r, ConsumerRecord) for r in built)
    assert [(r.offset, r.key, r.value) for r in raw] == [  # type: ignore[attr-defined]
        (r.offset, r.key, r.value)  # type: ignore[attr-defined]
        for r in built
    ]
    assert [r.offset for r in raw] == list(range(5))  # type: ignore[attr-defined]


def test_decoded_records_reduce_as_the_same_input_records() -> None:
    install()
    rng = random.Random(7)
    conditions = ["ok"] * 20 + ["throttle", "ecc_uncorrectable", "nvlink", "thermal", "gpu_lost"]
    values = [
        orjson.dumps(
            {
                "node": f"n{rng.randrange(30)}",
                "condition": rng.choice(conditions),
                "ts_ms": T0 + i * 10,
                "gpu_index": rng.randrange(8),
            }
        )
        for i in range(400)
    ]
    values[17] = b"not json"  # dead-lettered either way, with its offset and key
    raw = fetched(values, raw_records)
    policy = load_policy()
    by_runs = SignalFilter(policy, NAMES, 5_000).reduce_runs(
        [(TopicPartition(NAMES.gpu_health, 1), raw)],  # type: ignore[list-item]
        wall_ms=0,
    )
    as_inputs = [
        InputRecord(NAMES.gpu_health, 1, i, b"k%d" % i, value) for i, value in enumerate(values)
    ]
    by_records = SignalFilter(policy, NAMES, 5_000).reduce(as_inputs, wall_ms=0)
    assert comparable(by_runs) == comparable(by_records)
    assert len(by_runs) > 2  # evidence forwarded and the dead letter, not only nothing
