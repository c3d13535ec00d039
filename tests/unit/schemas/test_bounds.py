"""Bounded decode (issue 12): every decoder refuses what could overflow, outgrow or lie."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from schemas import bounds as b
from schemas.codec import decode, loads
from schemas.dead_letter import MAX_RECORD_BYTES, DeadLetter
from schemas.decisions import Decision
from schemas.errors import SchemaError
from schemas.event_time import BOUNDS_OFF_ENV, EVENT_AGE_ENV, FUTURE_SKEW_ENV, EventTimeBounds
from schemas.health import GpuHealth
from schemas.quarantine import QuarantineRecord
from schemas.xid import GpuXid

T = 1_773_532_800_000  # 2026-03-15, epoch ms


def xid(**changes: Any) -> dict[str, Any]:
    return {"node": "gpu-1", "xid": 79, "ts_ms": T, "gpu_index": 0} | changes


def health(**changes: Any) -> dict[str, Any]:
    return {"node": "gpu-1", "ts_ms": T, "condition": "ok"} | changes


def job(**changes: Any) -> dict[str, Any]:
    body = {"job_id": "j-1", "attempt": 0, "type": "terminated", "ts_ms": T, "nodes": ["gpu-1"]}
    return body | changes


def telemetry(**changes: Any) -> dict[str, Any]:
    return {"job_id": "j-1", "attempt": 0, "kind": "heartbeat", "ts_ms": T, "step": 1} | changes


BUILDERS = {
    "gpu.xid": xid,
    "gpu.health": health,
    "jobs.events": job,
    "training.telemetry": telemetry,
}


@pytest.mark.parametrize("topic", sorted(BUILDERS))
@pytest.mark.parametrize(
    ("ts", "why"),
    [
        (0, "below the floor"),
        (-1, "below the floor"),
        (1_773_532_800, "in seconds"),
        (b.TS_FLOOR_MS - 1, "below the floor"),
        (b.TS_CEIL_MS + 1, "year 9999"),
        (2**64 - 1, "year 9999"),
    ],
)
def test_event_times_outside_the_absolute_bounds_are_refused(topic: str, ts: int, why: str) -> None:
    with pytest.raises(SchemaError, match=why) as err:
        decode(topic, BUILDERS[topic](ts_ms=ts))
    assert err.value.field == "ts_ms"


@pytest.mark.parametrize("topic", sorted(BUILDERS))
def test_the_bounds_themselves_are_accepted(topic: str) -> None:
    assert decode(topic, BUILDERS[topic](ts_ms=b.TS_FLOOR_MS)).ts_ms == b.TS_FLOOR_MS
    assert decode(topic, BUILDERS[topic](ts_ms=b.TS_CEIL_MS)).ts_ms == b.TS_CEIL_MS


@pytest.mark.parametrize(
    "node", ["", " ", "\u0000", "gpu 1", "gpu-1\n", "\t", "\u00a0", "x" * (b.ID_MAX_CHARS + 1)]
)
@pytest.mark.parametrize("topic", ["gpu.xid", "gpu.health"])
def test_blank_spaced_control_and_long_node_ids_are_refused(topic: str, node: str) -> None:
    with pytest.raises(SchemaError) as err:
        decode(topic, BUILDERS[topic](node=node))
    assert err.value.field == "node"


@pytest.mark.parametrize("job_id", ["", " ", "\u0000", "a b", "j" * (b.ID_MAX_CHARS + 1)])
def test_bad_job_ids_are_refused(job_id: str) -> None:
    with pytest.raises(SchemaError, match="job_id"):
        decode("jobs.events", job(job_id=job_id))
    with pytest.raises(SchemaError, match="job_id"):
        decode("training.telemetry", telemetry(job_id=job_id))


def test_ids_at_the_limit_and_with_punctuation_are_accepted() -> None:
    node = "n" * b.ID_MAX_CHARS
    assert decode("gpu.xid", xid(node=node)).node == node
    assert decode("jobs.events", job(job_id="ns/train-7:0@a")).job_id == "ns/train-7:0@a"


def test_node_lists_are_capped_and_every_item_is_an_id() -> None:
    many = [f"n{i}" for i in range(b.MAX_JOB_NODES + 1)]
    with pytest.raises(SchemaError, match="more than the cap"):
        decode("jobs.events", job(nodes=many))
    assert len(decode("jobs.events", job(nodes=many[:-1])).nodes) == b.MAX_JOB_NODES
    with pytest.raises(SchemaError, match=r"nodes\[1\]"):
        decode("jobs.events", job(nodes=["gpu-1", " "]))


@pytest.mark.parametrize(
    ("topic", "field", "value"),
    [
        ("gpu.xid", "xid", b.XID_MAX + 1),
        ("gpu.xid", "xid", -1),
        ("gpu.xid", "gpu_index", b.GPU_INDEX_MAX + 1),
        ("gpu.xid", "count", 0),
        ("gpu.xid", "count", 2**64),  # orjson reads it as a float
        ("gpu.health", "gpu_index", b.GPU_INDEX_MAX + 1),
        ("jobs.events", "attempt", b.I32_MAX + 1),
        ("jobs.events", "exit_code", b.I32_MAX + 1),
        ("jobs.events", "priority", b.I32_MIN - 1),
        ("jobs.events", "max_failovers", b.I32_MAX + 1),
        ("training.telemetry", "attempt", b.I32_MAX + 1),
        ("training.telemetry", "step", b.STEP_MAX + 1),
    ],
)
def test_integers_out_of_range_are_refused(topic: str, field: str, value: int) -> None:
    raw = orjson.dumps(BUILDERS[topic](**{field: value})) if value < 2**64 else None
    data = loads(raw) if raw is not None else BUILDERS[topic](**{field: float(value)})
    with pytest.raises(SchemaError) as err:
        decode(topic, data)
    assert err.value.field == field


def test_an_xid_count_of_2_64_minus_1_is_accepted_and_sums_saturate() -> None:
    top = decode("gpu.xid", loads(orjson.dumps(xid(count=2**64 - 1))))
    assert isinstance(top, GpuXid) and top.count == b.U64_MAX
    assert b.saturating_add(top.count, top.count) == b.U64_MAX
    assert b.saturating_add(2, 3) == 5
    orjson.dumps(b.saturating_add(top.count, 1))  # still encodable


@pytest.mark.parametrize(
    ("topic", "field", "limit"),
    [
        ("gpu.xid", "message", b.TEXT_MAX_CHARS),
        ("gpu.xid", "gpu_uuid", b.SHORT_MAX_CHARS),
        ("gpu.xid", "pci_bus_id", b.SHORT_MAX_CHARS),
        ("gpu.health", "detail", b.TEXT_MAX_CHARS),
        ("gpu.health", "gpu_uuid", b.SHORT_MAX_CHARS),
        ("jobs.events", "reason", b.SHORT_MAX_CHARS),
        ("training.telemetry", "uri", b.TEXT_MAX_CHARS),
    ],
)
def test_strings_are_bounded(topic: str, field: str, limit: int) -> None:
    assert getattr(decode(topic, BUILDERS[topic](**{field: "x" * limit})), field) == "x" * limit
    with pytest.raises(SchemaError, match="longer than") as err:
        decode(topic, BUILDERS[topic](**{field: "x" * (limit + 1)}))
    assert err.value.field == field


def nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(depth - 1):
        value = {"k": value}
    return value


def test_free_form_objects_are_bounded_in_depth_entries_and_strings() -> None:
    assert decode("gpu.health", health(metrics=nested(b.MAX_DEPTH))).metrics is not None
    with pytest.raises(SchemaError, match="deeper than"):
        decode("gpu.health", health(metrics=nested(b.MAX_DEPTH + 1)))
    with pytest.raises(SchemaError, match="deeper than"):
        decode("jobs.events", job(spec={"a": [[[[[[[[[]]]]]]]]]}))
    with pytest.raises(SchemaError, match="entries"):
        decode("jobs.events", job(spec={str(i): i for i in range(b.MAX_OBJECT_ITEMS + 1)}))
    with pytest.raises(SchemaError, match="a string longer"):
        decode("gpu.health", health(metrics={"k": "x" * (b.TEXT_MAX_CHARS + 1)}))
    with pytest.raises(SchemaError, match="a key longer"):
        decode("gpu.health", health(metrics={"k" * (b.TEXT_MAX_CHARS + 1): 1}))


def test_health_with_metrics_takes_the_checked_path_and_decodes_the_same() -> None:
    value = health(metrics={"temp_c": 71, "xids": [79]})
    assert GpuHealth.from_dict(value) == GpuHealth.from_dict_checked(value)


def test_a_value_over_the_size_limit_is_refused_before_parsing() -> None:
    big = b'"' + b"x" * b.MAX_VALUE_BYTES + b'"'
    with pytest.raises(SchemaError, match="over the limit"):
        loads(big)
    assert loads(b"1") == 1


def test_invalid_utf8_and_lone_surrogates_are_schema_errors() -> None:
    with pytest.raises(SchemaError, match="not valid JSON"):
        loads(b'{"node": "\xff"}')
    with pytest.raises(SchemaError, match="not valid JSON"):
        loads(b'{"node": "\\ud800"}')


def test_decisions_and_quarantine_records_cap_nodes_evidence_and_times() -> None:
    d = {
        "job_id": "j",
        "attempt": 0,
        "verdict": "hardware",
        "action": "failover",
        "status": "Pending-failoverinprogress",
        "suspect_nodes": ["n1"],
        "next_attempt": 1,
        "evidence": [],
        "rule": "r",
        "terminated_ts_ms": T,
        "decided_ts_ms": T,
    }
    assert Decision.from_dict(d).decided_ts_ms == T
    with pytest.raises(SchemaError, match="decided_ts_ms"):
        Decision.from_dict(d | {"decided_ts_ms": b.TS_CEIL_MS + 1})
    with pytest.raises(SchemaError, match="evidence"):
        Decision.from_dict(d | {"evidence": [{}] * (b.MAX_JOB_NODES + 1)})
    with pytest.raises(SchemaError, match="evidence"):
        Decision.from_dict({k: v for k, v in d.items() if k != "evidence"})
    q = {"node": "n1", "state": "quarantined", "reason": "hardware", "ts_ms": T}
    assert QuarantineRecord.from_dict(q).evidence == ()
    with pytest.raises(SchemaError, match="node"):
        QuarantineRecord.from_dict(q | {"node": "\u0000"})
    with pytest.raises(SchemaError, match="ts_ms"):
        QuarantineRecord.from_dict(q | {"ts_ms": 2**64 - 1})


def test_a_dead_letter_of_a_huge_hostile_value_fits_the_producer_limit() -> None:
    # Control characters cost orjson 6 bytes each: the worst case for the cut raw value.
    value = b"\x01" * (2 * 1024 * 1024)
    letter = DeadLetter.of(
        error="e" * 100_000,
        error_kind="decode",
        component="signal-filter",
        topic="gpu.xid",
        partition=0,
        offset=0,
        key=b"\x01" * 100_000,
        value=value,
        now_ms=T,
    )
    assert len(letter.encode()) < MAX_RECORD_BYTES
    assert DeadLetter.from_dict(orjson.loads(letter.encode())) == letter


# -- the clock-relative bounds --------------------------------------------------------------


def test_event_time_bounds_future_past_and_floor() -> None:
    live = EventTimeBounds(max_future_skew_ms=300_000, max_age_ms=3_600_000)
    assert live.violation(T, T) is None
    assert live.violation(T + 300_000, T) is None
    assert "ahead of the clock" in (live.violation(T + 300_001, T) or "")
    assert live.violation(T - 3_600_000, T) is None
    assert "retention horizon" in (live.violation(T - 3_600_001, T) or "")
    assert "below the floor" in (live.violation(0, T) or "")
    replay = EventTimeBounds(max_future_skew_ms=300_000)
    assert replay.violation(T - 10 * 365 * 86_400_000, T) is None  # last year's export
    assert live.range_at(T) == (T - 3_600_000, T + 300_000)
    assert replay.range_at(T) == (b.TS_FLOOR_MS, T + 300_000)
    assert live.check("ts_ms", T, T) == T
    with pytest.raises(SchemaError, match=r"ts_ms: .* ahead"):
        live.check("ts_ms", T + 10**9, T)


def test_event_time_bounds_reject_nonsense_settings() -> None:
    with pytest.raises(ValueError, match="skew"):
        EventTimeBounds(max_future_skew_ms=-1)
    with pytest.raises(ValueError, match="age"):
        EventTimeBounds(max_age_ms=0)


def test_event_time_bounds_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(FUTURE_SKEW_ENV, raising=False)
    monkeypatch.delenv(EVENT_AGE_ENV, raising=False)
    assert EventTimeBounds.from_env(live=True) == EventTimeBounds(300_000, 172_800_000)
    assert EventTimeBounds.from_env(live=False) == EventTimeBounds(300_000, None)
    monkeypatch.setenv(FUTURE_SKEW_ENV, "60")
    monkeypatch.setenv(EVENT_AGE_ENV, "0")
    assert EventTimeBounds.from_env(live=True) == EventTimeBounds(60_000, None)
    for name, value in BOUNDS_OFF_ENV.items():
        monkeypatch.setenv(name, value)
    off = EventTimeBounds.from_env(live=True)
    assert off.violation(b.TS_CEIL_MS, T) is None and off.violation(b.TS_FLOOR_MS, T) is None
    monkeypatch.setenv(FUTURE_SKEW_ENV, "soon")
    with pytest.raises(SystemExit, match=FUTURE_SKEW_ENV):
        EventTimeBounds.from_env(live=True)
    monkeypatch.setenv(FUTURE_SKEW_ENV, "-5")
    with pytest.raises(SystemExit, match=">= 0"):
        EventTimeBounds.from_env(live=True)


@pytest.mark.parametrize(
    "metrics",
    [
        {"temp_c": 71, "power_w": 300.5, "ok": True, "none": None, "name": "x"},
        {str(i): i for i in range(b.FLAT_MAX_ITEMS)},
        {str(i): i for i in range(b.FLAT_MAX_ITEMS + 1)},  # not flat: the full check takes it
        {"k": "x" * b.TEXT_MAX_CHARS},
        {"k": "x" * (b.TEXT_MAX_CHARS + 1)},
        {"k" * (b.TEXT_MAX_CHARS + 1): 1},
        {"nested": {"a": [1, 2]}},
    ],
)
def test_health_metrics_fast_and_checked_paths_agree(metrics: dict[str, Any]) -> None:
    value = health(metrics=metrics)
    try:
        checked: Any = GpuHealth.from_dict_checked(value)
    except SchemaError as exc:
        checked = str(exc)
    try:
        fast: Any = GpuHealth.from_dict(value)
    except SchemaError as exc:
        fast = str(exc)
    assert fast == checked
    assert b.is_flat(metrics) == (len(metrics) <= b.FLAT_MAX_ITEMS and isinstance(fast, GpuHealth)
                                  and "nested" not in metrics)  # fmt: skip
