"""The generated JSON Schemas (schemas/jsonschema/) and docs/topics.md: current, one per topic,
and true to what the code writes: every record type's encoding, every example record and every
record replay makes of the examples and of a chaos workload validates against its topic's
schema."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from gpufailover.chaos.workload import WorkloadConfig, build
from schemas.codec import DECODERS
from schemas.errors import SchemaError
from schemas.jsonschema import topic_schema
from schemas.jsonschema.__main__ import HERE, generated, stale
from schemas.quarantine import QuarantineRecord
from schemas.registry import VALUE_TYPES
from schemas.topics import SPECS, Topic
from streams.policy import load_policy
from streams.replay import Replayer
from tests.roundtrip import json_trip
from tests.unit.schemas.test_roundtrip_properties import ROUNDTRIP_TEST_FILES, _load

REPO = Path(__file__).resolve().parents[3]
EXAMPLES = sorted((REPO / "examples").glob("*.jsonl"))
NOW_MS = 1_900_000_000_000  # after every example's records: the future bound never bites


@functools.cache
def validator(logical: str) -> Draft202012Validator:
    """The committed schema of a topic (a replayed line without a topic goes to replay.dlq)."""
    if logical == "replay.dlq":
        logical = "gpu.xid.dlq"
    return Draft202012Validator(orjson.loads((HERE / f"{logical}.json").read_bytes()))


def assert_valid(logical: str, value: Any, where: str) -> None:
    errors = sorted(validator(logical).iter_errors(value), key=lambda e: list(e.path))
    assert not errors, f"{where}: {logical}: " + "; ".join(
        f"{'/'.join(map(str, e.path)) or '(root)'}: {e.message}" for e in errors[:3]
    )


@functools.cache
def round_trip_cases() -> dict[type[Any], Any]:
    cases: dict[type[Any], Any] = {}
    for path in ROUNDTRIP_TEST_FILES:
        cases |= _load(str(REPO / path)).ROUNDTRIP_CASES
    return cases


# -- (a) the generated files are current and are JSON Schemas ---------------------------------
def test_committed_schemas_and_topics_doc_are_current() -> None:
    assert stale() == [], "run: python -m schemas.jsonschema write"


@pytest.mark.parametrize("logical", list(SPECS))
def test_each_schema_is_a_valid_draft_2020_12_schema(logical: str) -> None:
    schema = orjson.loads((HERE / f"{logical}.json").read_bytes())
    Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema == topic_schema(logical)


def test_the_schemas_ship_in_the_package() -> None:
    text = (REPO / "pyproject.toml").read_text()
    assert '"jsonschema/*.json"' in text
    assert {p.name for p in HERE.glob("*.json")} == {f"{t}.json" for t in SPECS}


# -- (b) every topic has a schemas/ type, a JSON schema and a round-trip test -----------------
@pytest.mark.parametrize("logical", list(SPECS))
def test_every_topic_has_a_type_a_schema_and_a_round_trip_test(logical: str) -> None:
    types = VALUE_TYPES[logical]
    assert types, f"{logical}: no value type in schemas/registry.py"
    for tp in types:
        assert tp.__module__.startswith("schemas."), f"{logical}: {tp} is not a schemas/ type"
        assert tp in round_trip_cases(), f"{logical}: {tp.__name__} has no round-trip case"
    assert (HERE / f"{logical}.json") in generated()
    assert (HERE / f"{logical}.json").exists()


# -- (c) what the code writes validates --------------------------------------------------------
TOPIC_TYPES = [(logical, tp) for logical, types in VALUE_TYPES.items() for tp in types]


@pytest.mark.parametrize(
    ("logical", "tp"), TOPIC_TYPES, ids=[f"{t}-{tp.__name__}" for t, tp in TOPIC_TYPES]
)
@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_every_encoded_record_validates_against_its_topic_schema(
    logical: str, tp: type[Any], data: st.DataObject
) -> None:
    case = round_trip_cases()[tp]
    value = data.draw(case.strategy, label=tp.__name__)
    assert_valid(logical, json_trip(case.encode(value)), tp.__name__)


def _decodes(topic: str, value: Any) -> bool:
    decoder = DECODERS.get(topic) or (
        QuarantineRecord.from_dict if topic == Topic.NODES_QUARANTINE else None
    )
    assert decoder is not None, f"an example on {topic}: no decoder to check it with"
    try:
        decoder(value)
    except (SchemaError, KeyError, TypeError, ValueError):
        return False
    return True


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_every_example_record_that_decodes_validates(path: Path) -> None:
    """The examples are what a scheduler or agent publishes; the deliberately bad lines (the
    flood-and-garbage example) are the decoder's to refuse, not the schema's to describe."""
    checked = 0
    for lineno, raw in enumerate(path.read_bytes().splitlines(), start=1):
        try:
            line = orjson.loads(raw)
        except orjson.JSONDecodeError:
            continue
        if not isinstance(line, dict) or line.get("topic") not in SPECS:
            continue
        if _decodes(line["topic"], line.get("value")):
            assert_valid(line["topic"], line["value"], f"{path.name}:{lineno}")
            checked += 1
    assert checked > 0


def _replay_outputs(lines: list[bytes]) -> list[dict[str, Any]]:
    replayer = Replayer(load_policy(), now_ms=NOW_MS)
    return [orjson.loads(out) for out in replayer.run(lines)]


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_every_record_replay_makes_of_an_example_validates(path: Path) -> None:
    outputs = _replay_outputs(path.read_bytes().splitlines())
    assert outputs
    for i, out in enumerate(outputs):
        assert_valid(out["topic"], out["value"], f"replay of {path.name}, output {i}")


def test_every_record_replay_makes_of_a_chaos_workload_validates() -> None:
    """The simulator's records (every scenario, bad records included) and what replay writes."""
    workload = build(WorkloadConfig(seed=3, rounds=4, jobs_per_round=4, nodes=24))
    records = list(workload.records())
    for rec in records:
        value = orjson.loads(rec.value) if rec.bad is None else None
        if value is not None and _decodes(rec.topic, value):
            assert_valid(rec.topic, value, f"workload {rec.topic} {rec.key}")
    outputs = _replay_outputs([rec.replay_line() for rec in records])
    assert {o["topic"] for o in outputs} >= {Topic.FAILOVER_DECISIONS, Topic.NODES_QUARANTINE}
    for i, out in enumerate(outputs):
        assert_valid(out["topic"], out["value"], f"replay of the workload, output {i}")


def test_a_record_of_the_wrong_shape_is_refused() -> None:
    """The schemas say something: a decision without a verdict, or with one outside the set,
    does not validate."""
    decision = {
        "schema_version": 1, "job_id": "j", "attempt": 0, "verdict": "hardware",
        "action": "failover", "status": "Pending-failoverinprogress", "suspect_nodes": [],
        "next_attempt": 1, "evidence": [], "rule": "r", "terminated_ts_ms": 1,
        "decided_ts_ms": 2,
    }  # fmt: skip
    assert validator(Topic.FAILOVER_DECISIONS).is_valid(decision)
    assert not validator(Topic.FAILOVER_DECISIONS).is_valid(decision | {"verdict": "cosmic"})
    assert not validator(Topic.FAILOVER_DECISIONS).is_valid(
        {k: v for k, v in decision.items() if k != "verdict"}
    )
    assert not validator(Topic.FAILOVER_DECISIONS).is_valid(decision | {"schema_version": 2})
