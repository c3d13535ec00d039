"""The one dead-letter record: round trip, validation, size bound, owners of each input topic."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas.dead_letter import (
    COMPONENTS,
    MAX_RAW_BYTES,
    MAX_RECORD_BYTES,
    OWNERS,
    DeadLetter,
    dead_letter_topic,
    owner,
)
from schemas.errors import SchemaError
from schemas.topics import SPECS

NOW = 1_773_532_800_000


def kafka_letter(value: bytes | None, key: bytes | None = b"job-1", **kw: object) -> DeadLetter:
    args: dict[str, object] = {
        "error": "attempt: must be >= 0, got -1",
        "error_kind": "decode",
        "component": "job-agent",
        "topic": "p.jobs.events",
        "partition": 3,
        "offset": 41,
        "key": key,
        "value": value,
        "record_ts_ms": NOW - 5,
        "now_ms": NOW,
    }
    return DeadLetter.of(**(args | kw))  # type: ignore[arg-type]


def round_trip(letter: DeadLetter) -> DeadLetter:
    return DeadLetter.from_dict(orjson.loads(letter.encode()))


def test_a_kafka_dead_letter_round_trips_with_its_coordinates_and_key() -> None:
    value = b'{"job_id": "job-1", "attempt": -1}'
    letter = kafka_letter(value)
    assert round_trip(letter) == letter
    assert letter.kafka_key() == b"p.jobs.events[3]@41"
    assert (letter.key, letter.raw_encoding, letter.raw_size) == ("job-1", "utf-8", len(value))
    assert (letter.raw_bytes(), letter.raw_truncated) == (value, False)
    assert letter.to_dict()["kind"] == "dead-letter"  # told apart on failover.alerts


def test_a_replayed_line_is_the_same_record_addressed_by_line() -> None:
    letter = DeadLetter.of(
        error="xid: expected an integer",
        error_kind="decode",
        component="replay",
        topic="gpu.xid",
        line=12,
        value=b'{"topic": "gpu.xid", "value": {"xid": "79"}}',
    )
    assert round_trip(letter) == letter
    assert (letter.partition, letter.offset, letter.dead_lettered_ts_ms) == (None, None, None)
    assert letter.where == "gpu.xid@line:12"


def test_a_value_that_is_not_utf8_is_kept_exactly_in_base64() -> None:
    value = b"\xff\xfe\x00binary"
    letter = kafka_letter(value)
    assert letter.raw_encoding == "base64"
    assert round_trip(letter).raw_bytes() == value


def test_a_tombstone_and_a_missing_key_round_trip() -> None:
    letter = kafka_letter(None, key=None)
    assert (letter.raw, letter.raw_size, letter.key) == (None, 0, None)
    assert round_trip(letter) == letter


@pytest.mark.parametrize("size", [600_000, 5_000_000])
@pytest.mark.parametrize(
    ("unit", "encoding"),
    [
        (b"a", "utf-8"),
        (b"\x00", "utf-8"),  # JSON writes each as \u0000: six bytes a byte, the worst case
        ("é".encode(), "utf-8"),  # two-byte characters: the cut must not split one
        (b"\xff", "base64"),
    ],
    ids=["ascii", "control", "two-byte", "binary"],
)
def test_a_large_value_is_cut_so_the_dead_letter_fits_the_producer_limit(
    size: int, unit: bytes, encoding: str
) -> None:
    value = (unit * (size // len(unit) + 1))[:size]
    if unit == "é".encode():
        value = b"x" + value[:-1]  # shift so that MAX_RAW_BYTES falls inside a character
    letter = kafka_letter(value, key=b"k" * 5_000, error="e" * 100_000)
    encoded = letter.encode()
    assert len(encoded) < MAX_RECORD_BYTES
    assert (letter.raw_size, letter.raw_truncated, letter.raw_encoding) == (size, True, encoding)
    kept = letter.raw_bytes()
    assert kept is not None and value.startswith(kept)
    assert MAX_RAW_BYTES - 1 <= len(kept) <= MAX_RAW_BYTES
    assert round_trip(letter) == letter


def test_a_small_value_is_not_cut() -> None:
    letter = kafka_letter(b"x" * MAX_RAW_BYTES)
    assert (letter.raw_truncated, len(letter.raw_bytes() or b"")) == (False, MAX_RAW_BYTES)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"error_kind": "schema"}, "error_kind"),
        ({"component": "someone"}, "component"),
        ({"offset": None}, "offset"),
        ({"dead_lettered_ts_ms": None}, "dead_lettered_ts_ms"),
        ({"line": 3}, "line"),
        ({"raw_encoding": "latin-1"}, "raw_encoding"),
        ({"raw_encoding": "base64", "raw": "not base64!"}, "raw"),
        ({"partition": -1}, "partition"),
        ({"schema_version": 2}, "schema_version"),
        ({"error": None}, "error"),
    ],
)
def test_a_malformed_dead_letter_is_a_schema_error_naming_the_field(
    change: dict[str, object], field: str
) -> None:
    d = kafka_letter(b"{}").to_dict() | change
    with pytest.raises(SchemaError) as err:
        DeadLetter.from_dict(d)
    assert err.value.field == field


def test_every_input_topic_with_a_dead_letter_topic_has_one_owner() -> None:
    with_dlq = {s.logical for s in SPECS.values() if s.dlq}
    assert with_dlq <= set(OWNERS)
    assert set(OWNERS.values()) <= COMPONENTS
    assert owner("jobs.events") == "job-agent" and owner("failover.node-signals") is None
    assert dead_letter_topic("gpu.xid") == "gpu.xid.dlq" and dead_letter_topic(None) == "replay.dlq"


@settings(max_examples=300, deadline=None)
@given(
    value=st.one_of(st.none(), st.binary(max_size=2_000), st.text(max_size=500).map(str.encode)),
    key=st.one_of(st.none(), st.binary(max_size=100)),
    error=st.text(min_size=1, max_size=200),
    partition=st.integers(0, 1_000),
    offset=st.integers(0, 2**62),
)
def test_any_record_round_trips_and_keeps_its_value_exactly(
    value: bytes | None, key: bytes | None, error: str, partition: int, offset: int
) -> None:
    letter = kafka_letter(value, key=key, error=error, partition=partition, offset=offset)
    assert round_trip(letter) == letter
    assert letter.raw_bytes() == value  # under MAX_RAW_BYTES nothing is cut or altered
    assert letter.kafka_key() == f"p.jobs.events[{partition}]@{offset}".encode()
