"""Wire schemas v1: a missing field, a wrong type or a bad enum is a SchemaError naming the field;
unknown extra fields are ignored; to_dict/from_dict round-trip."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
import pytest

from schemas.codec import decode, dumps, loads
from schemas.decisions import Decision, Evidence
from schemas.errors import SchemaError
from schemas.health import GpuHealth
from schemas.jobs import JobEvent, validate_new_event
from schemas.quarantine import QuarantineRecord
from schemas.xid import GpuXid

TS = 1_773_532_800_000

XID = {
    "schema_version": 1,
    "node": "gpu-node-017",
    "xid": 79,
    "ts_ms": TS,
    "gpu_index": 3,
    "gpu_uuid": "GPU-5f1c2a7e-0000-4b1d-9c3e-6a8f00000017",
    "pci_bus_id": "00000000:3B:00.0",
    "message": "NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.",
    "source": "kmsg",
}
HEALTH = {
    "schema_version": 1,
    "node": "gpu-node-017",
    "ts_ms": TS,
    "condition": "thermal",
    "gpu_index": 3,
    "severity": "critical",
    "detail": "GPU temperature 97 C above slowdown threshold",
    "metrics": {"temp_c": 97, "power_w": 612.5},
}
JOB = {
    "schema_version": 1,
    "job_id": "train-llm-7b-0042",
    "attempt": 1,
    "type": "terminated",
    "ts_ms": TS,
    "nodes": ["gpu-node-017", "gpu-node-018"],
    "exit_code": 137,
    "reason": "NCCLTimeout",
    "failover": True,
    "training_type": "on_demand",
    "max_failovers": 3,
    "priority": 10,
    "spec": {"image": "registry.local/train:1.4", "gpus": 16},
}
EVIDENCE = {
    "node": "gpu-node-017",
    "gpu_index": 3,
    "kind": "xid",
    "code": 79,
    "ts_ms": TS,
    "class": "hardware",
    "count": 4,
    "last_ts_ms": TS + 900,
}
DECISION = {
    "schema_version": 1,
    "job_id": "train-llm-7b-0042",
    "attempt": 1,
    "verdict": "hardware",
    "action": "failover",
    "status": "Pending-failoverinprogress",
    "suspect_nodes": ["gpu-node-017"],
    "next_attempt": 2,
    "evidence": [EVIDENCE],
    "rule": "hardware.failover",
    "terminated_ts_ms": TS,
    "decided_ts_ms": TS,
    "checkpoint": {"step": 1200, "uri": "s3://ckpt/step-1200", "ts_ms": TS - 5, "attempt": 0},
}
QUARANTINE = {
    "schema_version": 1,
    "node": "gpu-node-017",
    "state": "quarantined",
    "reason": "hardware",
    "evidence": [EVIDENCE],
    "job_id": "train-llm-7b-0042",
    "ts_ms": TS,
}

Decoder = Callable[[Any], Any]
SCHEMAS: dict[str, tuple[Decoder, dict[str, Any]]] = {
    "xid": (GpuXid.from_dict, XID),
    "health": (GpuHealth.from_dict, HEALTH),
    "job": (JobEvent.from_dict, JOB),
    "evidence": (Evidence.from_dict, EVIDENCE),
    "decision": (Decision.from_dict, DECISION),
    "quarantine": (QuarantineRecord.from_dict, QUARANTINE),
}

REQUIRED = [
    ("xid", "node"),
    ("xid", "xid"),
    ("xid", "ts_ms"),
    ("health", "node"),
    ("health", "ts_ms"),
    ("health", "condition"),
    ("job", "job_id"),
    ("job", "attempt"),
    ("job", "type"),
    ("job", "ts_ms"),
    ("job", "nodes"),
    ("evidence", "kind"),
    ("evidence", "code"),
    ("evidence", "ts_ms"),
    ("evidence", "class"),
    ("decision", "job_id"),
    ("decision", "attempt"),
    ("decision", "verdict"),
    ("decision", "action"),
    ("decision", "status"),
    ("decision", "suspect_nodes"),
    ("decision", "evidence"),
    ("decision", "rule"),
    ("decision", "terminated_ts_ms"),
    ("decision", "decided_ts_ms"),
    ("quarantine", "node"),
    ("quarantine", "state"),
    ("quarantine", "reason"),
    ("quarantine", "ts_ms"),
]

WRONG_TYPES = [
    ("xid", "node", 17),
    ("xid", "node", ""),
    ("xid", "xid", "79"),
    ("xid", "xid", 79.0),
    ("xid", "xid", True),
    ("xid", "xid", -1),
    ("xid", "ts_ms", "2026-03-15T00:00:00Z"),
    ("xid", "gpu_index", "3"),
    ("xid", "gpu_index", -1),
    ("xid", "message", ["oops"]),
    ("xid", "count", 0),
    ("health", "ts_ms", 1.5),
    ("health", "condition", 3),
    ("health", "metrics", [1, 2]),
    ("health", "detail", {"a": 1}),
    ("job", "attempt", -1),
    ("job", "attempt", "1"),
    ("job", "nodes", "gpu-node-017"),
    ("job", "failover", "yes"),
    ("job", "failover", 1),
    ("job", "max_failovers", -1),
    ("job", "exit_code", "137"),
    ("job", "priority", "high"),
    ("job", "spec", "image:1.4"),
    ("job", "reason", 5),
    ("evidence", "code", True),
    ("evidence", "code", 1.5),
    ("evidence", "count", 0),
    ("decision", "next_attempt", "2"),
    ("decision", "suspect_nodes", "gpu-node-017"),
    ("decision", "evidence", {}),
    ("quarantine", "evidence", "none"),
    ("quarantine", "job_id", 42),
]

BAD_ENUMS = [
    ("xid", "source", "syslog"),
    ("health", "condition", "melted"),
    ("health", "severity", "fatal"),
    ("job", "type", "exploded"),
    ("job", "training_type", "preemptible"),
    ("evidence", "kind", "log"),
    ("evidence", "class", "cosmic"),
    ("decision", "verdict", "maybe"),
    ("decision", "action", "panic"),
    ("decision", "status", "Running"),
    ("quarantine", "state", "drained"),
    ("quarantine", "reason", "vibes"),
]


def without(d: dict[str, Any], name: str) -> dict[str, Any]:
    return {k: v for k, v in d.items() if k != name}


@pytest.mark.parametrize(("schema", "field"), REQUIRED)
def test_missing_required_field_is_a_schema_error_naming_it(schema: str, field: str) -> None:
    decoder, full = SCHEMAS[schema]
    with pytest.raises(SchemaError) as info:
        decoder(without(full, field))
    assert info.value.field == field
    assert field in str(info.value)


@pytest.mark.parametrize(("schema", "field"), REQUIRED)
def test_null_required_field_is_a_schema_error_naming_it(schema: str, field: str) -> None:
    decoder, full = SCHEMAS[schema]
    with pytest.raises(SchemaError) as info:
        decoder(full | {field: None})
    assert info.value.field == field


@pytest.mark.parametrize(("schema", "field", "value"), WRONG_TYPES)
def test_wrong_type_or_range_is_a_schema_error_naming_the_field(
    schema: str, field: str, value: Any
) -> None:
    decoder, full = SCHEMAS[schema]
    with pytest.raises(SchemaError) as info:
        decoder(full | {field: value})
    assert info.value.field == field


@pytest.mark.parametrize(("schema", "field", "value"), BAD_ENUMS)
def test_bad_enum_value_is_a_schema_error_naming_the_field(
    schema: str, field: str, value: str
) -> None:
    decoder, full = SCHEMAS[schema]
    with pytest.raises(SchemaError) as info:
        decoder(full | {field: value})
    assert info.value.field == field
    assert repr(value) in str(info.value)


@pytest.mark.parametrize("schema", sorted(SCHEMAS))
@pytest.mark.parametrize("value", [None, [], "text", 42], ids=["null", "list", "str", "int"])
def test_value_that_is_not_an_object_is_a_schema_error(schema: str, value: Any) -> None:
    decoder, _ = SCHEMAS[schema]
    with pytest.raises(SchemaError) as info:
        decoder(value)
    assert info.value.field == "value"


@pytest.mark.parametrize("schema", ["xid", "health", "job", "decision", "quarantine"])
def test_unsupported_schema_version_is_a_schema_error(schema: str) -> None:
    decoder, full = SCHEMAS[schema]
    with pytest.raises(SchemaError) as info:
        decoder(full | {"schema_version": 2})
    assert info.value.field == "schema_version"


@pytest.mark.parametrize("schema", sorted(SCHEMAS))
def test_unknown_extra_fields_are_ignored(schema: str) -> None:
    decoder, full = SCHEMAS[schema]
    extra = full | {"added_in_v2": {"nested": [1, 2]}, "zz": None}
    assert decoder(extra) == decoder(full)


@pytest.mark.parametrize("schema", sorted(SCHEMAS))
def test_to_dict_from_dict_round_trip(schema: str) -> None:
    decoder, full = SCHEMAS[schema]
    rec = decoder(full)
    again = decoder(orjson.loads(orjson.dumps(rec.to_dict())))
    assert again == rec
    assert again.to_dict() == rec.to_dict()


def test_full_records_encode_every_field_they_were_given() -> None:
    assert GpuXid.from_dict(XID).to_dict() == XID
    assert GpuHealth.from_dict(HEALTH).to_dict() == HEALTH
    assert Decision.from_dict(DECISION).to_dict() == DECISION
    assert QuarantineRecord.from_dict(QUARANTINE).to_dict() == QUARANTINE
    job = JobEvent.from_dict(JOB).to_dict()
    assert job == {k: v for k, v in JOB.items() if k not in ("failover", "training_type")}


def test_minimal_records_get_their_defaults() -> None:
    x = GpuXid.from_dict({"node": "gpu-node-001", "xid": 13, "ts_ms": TS})
    assert (x.gpu_index, x.source, x.count) == (None, None, 1)
    h = GpuHealth.from_dict({"node": "gpu-node-001", "ts_ms": TS, "condition": "ok"})
    assert (h.gpu_index, h.severity, h.metrics) == (None, None, None)
    j = JobEvent.from_dict({"job_id": "j", "attempt": 0, "type": "submitted", "ts_ms": TS})
    assert (j.nodes, j.failover, j.training_type, j.max_failovers) == ((), True, "on_demand", None)


def test_job_event_defaults_round_trip_through_a_minimal_dict() -> None:
    spot = JobEvent.from_dict(JOB | {"failover": False, "training_type": "spot"})
    assert JobEvent.from_dict(spot.to_dict()) == spot
    assert spot.to_dict()["failover"] is False
    assert spot.to_dict()["training_type"] == "spot"


@pytest.mark.parametrize("etype", ["started", "terminated"])
def test_nodes_are_required_for_started_and_terminated(etype: str) -> None:
    with pytest.raises(SchemaError) as info:
        JobEvent.from_dict(without(JOB, "nodes") | {"type": etype})
    assert info.value.field == "nodes"


@pytest.mark.parametrize("etype", ["submitted", "succeeded", "cancelled"])
def test_nodes_are_optional_for_other_job_events(etype: str) -> None:
    assert JobEvent.from_dict(without(JOB, "nodes") | {"type": etype}).nodes == ()


def test_bad_node_in_the_list_is_named_by_index() -> None:
    with pytest.raises(SchemaError) as info:
        JobEvent.from_dict(JOB | {"nodes": ["gpu-node-017", 18]})
    assert info.value.field == "nodes[1]"
    with pytest.raises(SchemaError) as info:
        JobEvent.from_dict(JOB | {"nodes": ["", "gpu-node-018"]})
    assert info.value.field == "nodes[0]"


def test_bad_evidence_inside_a_decision_names_the_inner_field() -> None:
    with pytest.raises(SchemaError) as info:
        Decision.from_dict(DECISION | {"evidence": [EVIDENCE | {"class": "cosmic"}]})
    assert info.value.field == "class"


def test_new_events_need_nodes_to_be_published() -> None:
    empty = JobEvent(job_id="j", attempt=0, type="terminated", ts_ms=TS, nodes=())
    with pytest.raises(SchemaError) as info:
        validate_new_event(empty)
    assert info.value.field == "nodes"
    ok = JobEvent(job_id="j", attempt=0, type="terminated", ts_ms=TS, nodes=("gpu-node-001",))
    assert validate_new_event(ok) is ok


def test_records_are_frozen() -> None:
    rec = GpuXid.from_dict(XID)
    with pytest.raises(AttributeError):
        rec.xid = 13  # type: ignore[misc]


def test_schema_error_is_a_value_error_with_field_and_reason() -> None:
    err = SchemaError("ts_ms", "required field is missing")
    assert isinstance(err, ValueError)
    assert (err.field, err.reason, str(err)) == (
        "ts_ms",
        "required field is missing",
        "ts_ms: required field is missing",
    )


# -- codec --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("topic", "value", "cls"),
    [("gpu.xid", XID, GpuXid), ("gpu.health", HEALTH, GpuHealth), ("jobs.events", JOB, JobEvent)],
)
def test_decode_by_topic(topic: str, value: dict[str, Any], cls: type) -> None:
    assert isinstance(decode(topic, loads(dumps(value))), cls)


def test_decode_unknown_topic_is_a_schema_error_naming_topic() -> None:
    with pytest.raises(SchemaError) as info:
        decode("gpu.xids", XID)
    assert info.value.field == "topic"


@pytest.mark.parametrize("raw", [b"{", b"not json", b"\xff\xfe", ""])
def test_loads_of_bad_json_is_a_schema_error_on_value(raw: bytes | str) -> None:
    with pytest.raises(SchemaError) as info:
        loads(raw)
    assert info.value.field == "value"
