"""Every wire record decodes to the value it was encoded from, whatever its field values; and
every type under schemas/, streams/ and consumers/ that encodes itself has such a test."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from schemas.alerts import (
    JOB_ALERT_KINDS,
    BreakerAlert,
    DryRunAlert,
    JobAlert,
    LemonAlert,
    RefusedAlert,
    ValidationAlert,
)
from schemas.audit import KINDS as AUDIT_KINDS
from schemas.audit import OperatorCommand
from schemas.codec import decode
from schemas.dead_letter import COMPONENTS, ERROR_KINDS, DeadLetter
from schemas.decisions import ACTIONS, STATUSES, VERDICTS, Decision, Evidence
from schemas.health import CONDITIONS, SEVERITIES, GpuHealth
from schemas.jobs import EVENT_TYPES, TRAINING_TYPES, JobEvent
from schemas.quarantine import (
    KIND_REPAIR,
    KIND_RESULT,
    REASONS,
    RESULTS,
    STATES,
    TRIGGERS,
    QuarantineRecord,
    Validation,
    ValidationRequest,
    ValidationResult,
)
from schemas.telemetry import TELEMETRY_KINDS, TrainingTelemetry
from schemas.xid import XID_SOURCES, GpuXid
from tests.roundtrip import (
    RoundTrip,
    assert_round_trip,
    canonical,
    distinct_ints,
    evidence,
    field_values,
    json_trip,
    named_text,
    records,
)


def _valid_telemetry(kwargs: dict[str, Any]) -> bool:
    kind = kwargs["kind"]
    if kind in ("heartbeat", "checkpoint") and kwargs["step"] is None:
        return False
    if kind == "throughput" and kwargs["samples_per_s"] is None:
        return False
    return not (kind == "checkpoint" and not kwargs["uri"])


def optional(values: frozenset[str]) -> st.SearchStrategy[str | None]:
    return st.none() | st.sampled_from(sorted(values))


telemetry = (
    field_values(TrainingTelemetry, kind=st.sampled_from(sorted(TELEMETRY_KINDS)))
    .filter(_valid_telemetry)
    .map(lambda kwargs: TrainingTelemetry(**kwargs))
)
decisions = records(
    Decision,
    verdict=st.sampled_from(sorted(VERDICTS)),
    action=st.sampled_from(sorted(ACTIONS)),
    status=st.sampled_from(sorted(STATUSES)),
)
job_events = records(
    JobEvent,
    type=st.sampled_from(sorted(EVENT_TYPES)),
    training_type=st.sampled_from(sorted(TRAINING_TYPES)),
    exit_code=st.none() | st.integers(-255, 255),
    priority=st.none() | st.integers(-(2**31), 2**31 - 1),
)
xids = records(GpuXid, source=optional(XID_SOURCES), count=st.integers(1, 2**31))
healths = records(
    GpuHealth, condition=st.sampled_from(sorted(CONDITIONS)), severity=optional(SEVERITIES)
)
validations = records(
    Validation, trigger=st.sampled_from(sorted(TRIGGERS)), result=optional(RESULTS)
)
quarantine_records = records(
    QuarantineRecord,
    state=st.sampled_from(sorted(STATES)),
    reason=st.sampled_from(sorted(REASONS)),
    validation=st.none() | validations,
)
validation_requests = records(ValidationRequest, trigger=st.sampled_from(sorted(TRIGGERS)))
validation_results = st.one_of(
    records(ValidationResult, kind=st.just(KIND_REPAIR), result=optional(RESULTS)),
    records(
        ValidationResult,
        kind=st.just(KIND_RESULT),
        request_id=named_text("request_id"),
        result=st.sampled_from(sorted(RESULTS)),
    ),
)
operator_commands = records(OperatorCommand, kind=st.sampled_from(sorted(AUDIT_KINDS)))
# A job alert's own fields are written at the top level next to the common ones.
job_alerts = records(
    JobAlert,
    kind=st.sampled_from(sorted(JOB_ALERT_KINDS)),
    detail=st.dictionaries(st.sampled_from(["silent_s", "node", "ratio"]), st.integers(0, 2**31)),
)
quarantine_alerts = {
    cls: records(cls, record=quarantine_records) for cls in (RefusedAlert, DryRunAlert, LemonAlert)
}
validation_alerts = records(ValidationAlert, record=st.none() | quarantine_records)

# type -> how it is persisted (see test_every_persisted_type_has_a_case).
# Dead letters are made by DeadLetter.of (the writers' one entry point): values of any bytes,
# keys, coordinates; either Kafka coordinates or a replay line.
_letter_common = {
    "error": st.text(min_size=1, max_size=50),
    "error_kind": st.sampled_from(sorted(ERROR_KINDS)),
    "component": st.sampled_from(sorted(COMPONENTS)),
    "key": st.one_of(st.none(), st.binary(max_size=40)),
    "value": st.one_of(st.none(), st.binary(max_size=200), st.text(max_size=100).map(str.encode)),
}
dead_letters = st.one_of(
    st.builds(  # a Kafka record: its coordinates, group, timestamps
        DeadLetter.of,
        topic=named_text("topic"),
        partition=distinct_ints(1),
        offset=distinct_ints(2),
        group=st.one_of(st.none(), named_text("group")),
        record_ts_ms=st.one_of(st.none(), distinct_ints(4)),
        now_ms=distinct_ints(5),
        **_letter_common,
    ),
    st.builds(  # a replayed line: addressed by its line number only
        DeadLetter.of,
        topic=st.one_of(st.none(), named_text("topic")),
        line=distinct_ints(3),
        **_letter_common,
    ),
)

ROUNDTRIP_CASES: dict[type[Any], RoundTrip] = {
    Evidence: RoundTrip(evidence(), Evidence.to_dict, Evidence.from_dict),
    Decision: RoundTrip(decisions, Decision.to_dict, Decision.from_dict),
    QuarantineRecord: RoundTrip(
        quarantine_records, QuarantineRecord.to_dict, QuarantineRecord.from_dict
    ),
    Validation: RoundTrip(validations, Validation.to_dict, Validation.from_dict),
    ValidationRequest: RoundTrip(
        validation_requests, ValidationRequest.to_dict, ValidationRequest.from_dict
    ),
    ValidationResult: RoundTrip(
        validation_results, ValidationResult.to_dict, ValidationResult.from_dict
    ),
    GpuXid: RoundTrip(xids, GpuXid.to_dict, GpuXid.from_dict),
    GpuHealth: RoundTrip(healths, GpuHealth.to_dict, GpuHealth.from_dict),
    JobEvent: RoundTrip(job_events, JobEvent.to_dict, JobEvent.from_dict),
    TrainingTelemetry: RoundTrip(telemetry, TrainingTelemetry.to_dict, TrainingTelemetry.from_dict),
    DeadLetter: RoundTrip(dead_letters, DeadLetter.to_dict, DeadLetter.from_dict),
    OperatorCommand: RoundTrip(
        operator_commands, OperatorCommand.to_dict, OperatorCommand.from_dict
    ),
    JobAlert: RoundTrip(job_alerts, JobAlert.to_dict, JobAlert.from_dict),
    BreakerAlert: RoundTrip(records(BreakerAlert), BreakerAlert.to_dict, BreakerAlert.from_dict),
    RefusedAlert: RoundTrip(
        quarantine_alerts[RefusedAlert], RefusedAlert.to_dict, RefusedAlert.from_dict
    ),
    DryRunAlert: RoundTrip(
        quarantine_alerts[DryRunAlert], DryRunAlert.to_dict, DryRunAlert.from_dict
    ),
    LemonAlert: RoundTrip(quarantine_alerts[LemonAlert], LemonAlert.to_dict, LemonAlert.from_dict),
    ValidationAlert: RoundTrip(
        validation_alerts, ValidationAlert.to_dict, ValidationAlert.from_dict
    ),
}
INPUT_TOPICS = {
    GpuXid: "gpu.xid",
    GpuHealth: "gpu.health",
    JobEvent: "jobs.events",
    TrainingTelemetry: "training.telemetry",
}


@pytest.mark.parametrize("cls", list(ROUNDTRIP_CASES), ids=lambda c: c.__name__)
@given(data=st.data())
def test_wire_record_round_trips(cls: type[Any], data: st.DataObject) -> None:
    case = ROUNDTRIP_CASES[cls]
    assert_round_trip(case, data.draw(case.strategy, label=cls.__name__))


@pytest.mark.parametrize("cls", list(INPUT_TOPICS), ids=lambda c: c.__name__)
@given(data=st.data())
def test_input_record_decodes_by_its_topic(cls: type[Any], data: st.DataObject) -> None:
    value = data.draw(ROUNDTRIP_CASES[cls].strategy, label=cls.__name__)
    assert decode(INPUT_TOPICS[cls], json_trip(value.to_dict())) == value


@given(xids)
def test_xid_fast_and_checked_decoders_agree(xid: GpuXid) -> None:
    raw = json_trip(xid.to_dict())
    assert GpuXid.from_dict(raw) == GpuXid.from_dict_checked(raw) == xid


@given(healths)
def test_health_fast_and_checked_decoders_agree(health: GpuHealth) -> None:
    raw = json_trip(health.to_dict())
    assert GpuHealth.from_dict(raw) == GpuHealth.from_dict_checked(raw) == health


@given(records(Evidence, last_ts_ms=st.none(), kind=st.just("xid"), cls=st.just("hardware")))
def test_evidence_seen_once_is_written_with_its_own_time_as_last(item: Evidence) -> None:
    restored = Evidence.from_dict(json_trip(item.to_dict()))
    assert restored.last_ts_ms == item.ts_ms
    assert restored == canonical(item)


# -- every encodable type has a round-trip case ------------------------------------------------
PACKAGES = ("schemas", "streams", "consumers")
ROUNDTRIP_TEST_FILES = (
    "tests/unit/schemas/test_roundtrip_properties.py",
    "tests/unit/streams/test_state_roundtrip.py",
    "tests/unit/consumers/test_consumer_state_roundtrip.py",
)


def _modules() -> list[ModuleType]:
    # Files, not pkgutil: streams/engine is a namespace package (no __init__.py).
    root = Path(__file__).resolve().parents[3]
    names = sorted(
        ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")
        for package in PACKAGES
        for path in (root / package).rglob("*.py")
        if path.name != "__main__.py"
    )
    return [importlib.import_module(name) for name in names]


def encodable_types() -> set[str]:
    """Classes defined under PACKAGES that write themselves with `to_dict`."""
    return {
        f"{obj.__module__}.{obj.__qualname__}"
        for module in _modules()
        for _, obj in inspect.getmembers(module, inspect.isclass)
        if obj.__module__ == module.__name__ and callable(getattr(obj, "to_dict", None))
    }


def _load(path: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"_roundtrip_{Path(path).stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_persisted_type_has_a_case() -> None:
    root = Path(__file__).resolve().parents[3]
    tested: set[str] = set()
    write_only: dict[str, str] = {}
    for path in ROUNDTRIP_TEST_FILES:
        module = _load(str(root / path))
        tested |= {f"{c.__module__}.{c.__qualname__}" for c in module.ROUNDTRIP_CASES}
        write_only |= getattr(module, "WRITE_ONLY", {})
    missing = encodable_types() - tested - set(write_only)
    assert not missing, f"types with to_dict but no round-trip case: {sorted(missing)}"
    assert tested.isdisjoint(write_only)
