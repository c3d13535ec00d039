"""JSON Schema (draft 2020-12) of every topic's value, generated from the schemas/ types.

The generator reads each record's dataclass fields and their types (str, int, float, bool,
Literal, `X | None`, tuple/list, dict, nested records) and writes one schema per topic into
this folder, shipped with the package, for tools in other languages that publish or read our
topics. It is a small walk over the types, not pydantic's TypeAdapter: the wire shape is not
always the field layout (`Evidence.cls` is written `class`, a job alert writes its `detail` at
the top level, a status record flattens its current step, every top-level record may carry
`schema_version`), and those differences are declared here, next to the walk, in a few tables.

Objects allow properties beyond the ones listed: a reader ignores fields it does not know,
so a newer writer's additions do not break it. `python -m schemas.jsonschema write` writes
the files and docs/topics.md; `--check` says whether the committed ones are current.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any

from schemas import _fields as f
from schemas.alerts import (
    KIND_BREAKER,
    KIND_DRY_RUN,
    KIND_LEMON,
    KIND_REFUSED,
    KIND_VALIDATION,
    BreakerAlert,
    DryRunAlert,
    JobAlert,
    LemonAlert,
    RefusedAlert,
    ValidationAlert,
)
from schemas.audit import OperatorCommand
from schemas.dead_letter import KIND as DEAD_LETTER_KIND
from schemas.dead_letter import DeadLetter
from schemas.decisions import Evidence
from schemas.engine import NodeTermination, QuarantineRequest, SignalPack
from schemas.quarantine import QuarantineRecord
from schemas.registry import VALUE_TYPES
from schemas.status import JobStatus, Step
from schemas.topics import SPECS

DRAFT = "https://json-schema.org/draft/2020-12/schema"
ID_BASE = "urn:gpufailover:topic:"  # a name, not a place: the files ship in the package

# Field name -> the key it is written under.
_RENAMED: dict[type[Any], dict[str, str]] = {Evidence: {"cls": "class"}}
# Fields not written under their own name (flattened into the record, or shaped by hand below).
_NOT_WRITTEN: dict[type[Any], frozenset[str]] = {JobAlert: frozenset({"detail"})}
# Keys a record writes beyond its fields: key -> schema (always written: required).
_EXTRA: dict[type[Any], dict[str, dict[str, Any]]] = {
    DeadLetter: {"kind": {"const": DEAD_LETTER_KIND}},
    BreakerAlert: {"kind": {"const": KIND_BREAKER}},
    RefusedAlert: {"kind": {"const": KIND_REFUSED}, "node": {"type": "string"}},
    DryRunAlert: {"kind": {"const": KIND_DRY_RUN}, "node": {"type": "string"}},
    LemonAlert: {"kind": {"const": KIND_LEMON}, "node": {"type": "string"}},
    ValidationAlert: {"kind": {"const": KIND_VALIDATION}},
    OperatorCommand: {"operator": {"type": "string"}},
}
# Top-level records: they carry `schema_version` (checked on read when present).
_VERSIONED: frozenset[type[Any]] = frozenset(
    t
    for ts in VALUE_TYPES.values()
    for t in ts
    if t.__module__ != "schemas.engine" or t is QuarantineRequest
)


class Defs:
    """The `$defs` of one topic's schema: every record type reached, by name."""

    def __init__(self) -> None:
        self.defs: dict[str, dict[str, Any]] = {}

    def ref(self, tp: type[Any]) -> dict[str, Any]:
        name = tp.__name__
        if name not in self.defs:
            self.defs[name] = {}  # placeholder: a record that refers to itself stops here
            self.defs[name] = self.record(tp)
        return {"$ref": f"#/$defs/{name}"}

    def record(self, tp: type[Any]) -> dict[str, Any]:
        shaped = _SHAPED.get(tp)
        if shaped is not None:
            return shaped(self)
        hints = typing.get_type_hints(tp)
        props: dict[str, Any] = {}
        required: list[str] = []
        skip = _NOT_WRITTEN.get(tp, frozenset())
        for field in dataclasses.fields(tp):
            if not field.init or field.name in skip:
                continue
            key = _RENAMED.get(tp, {}).get(field.name, field.name)
            props[key] = self.type(hints[field.name])
            no_default = (
                field.default is dataclasses.MISSING
                and field.default_factory is dataclasses.MISSING
            )
            if no_default:
                required.append(key)
        for key, schema in _EXTRA.get(tp, {}).items():
            props[key] = schema
            required.append(key)
        if tp in _VERSIONED:
            props = {"schema_version": {"const": f.SCHEMA_VERSION}, **props}
        return _object(tp, props, required)

    def type(self, tp: Any) -> dict[str, Any]:
        origin, args = typing.get_origin(tp), typing.get_args(tp)
        if tp is Any:
            return {}
        if tp is type(None):
            return {"type": "null"}
        if tp is bool:
            return {"type": "boolean"}
        if tp is int:
            return {"type": "integer"}
        if tp is float:
            return {"type": "number"}
        if tp is str:
            return {"type": "string"}
        if origin is typing.Literal:
            return {"enum": list(args)}
        if origin in (typing.Union, types.UnionType):
            return {"anyOf": [self.type(a) for a in args]}
        if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
            return {"type": "array", "items": self.type(args[0])}
        if origin is tuple:
            return {"type": "array", "prefixItems": [self.type(a) for a in args], "items": False}
        if origin is list:
            return {"type": "array", "items": self.type(args[0])}
        if origin is dict:
            return {"type": "object"}
        if dataclasses.is_dataclass(tp) and isinstance(tp, type):
            return self.ref(tp)
        raise TypeError(f"no JSON Schema for {tp!r}: add it to schemas/jsonschema")


def _object(tp: type[Any], props: dict[str, Any], required: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "object"}
    doc = (tp.__doc__ or "").strip()
    if doc and not doc.startswith(f"{tp.__name__}("):  # the dataclass's generated signature
        out["description"] = " ".join(doc.split())
    out["properties"] = props
    if required:
        out["required"] = required
    return out


def _job_status(defs: Defs) -> dict[str, Any]:
    """Written with its current step flattened into it (`status`, `event`, ...)."""
    step = defs.ref(Step)
    step_hints = typing.get_type_hints(Step)
    props = {
        "schema_version": {"const": f.SCHEMA_VERSION},
        "job_id": {"type": "string"},
        "attempt": {"type": "integer"},
        "status": defs.type(step_hints["status"]),
        "event": defs.type(step_hints["event"]),
        "rule": {"anyOf": [{"type": "string"}, {"type": "null"}]},
        "ts_ms": {"type": "integer"},
        "history": {"type": "array", "items": step, "minItems": 1},
        "awaiting_decision": defs.type(typing.get_type_hints(JobStatus)["awaiting"]),
    }
    return _object(JobStatus, props, ["job_id", "attempt", "status", "event", "ts_ms", "history"])


def _quarantine_request(defs: Defs) -> dict[str, Any]:
    """Written as a QuarantineRecord in state `quarantined` with one evidence item."""
    hints = typing.get_type_hints(QuarantineRequest)
    props = {
        "schema_version": {"const": f.SCHEMA_VERSION},
        "node": {"type": "string"},
        "state": {"const": "quarantined"},
        "reason": defs.type(hints["reason"]),
        "evidence": {"type": "array", "items": defs.ref(Evidence), "minItems": 1, "maxItems": 1},
        "job_id": defs.type(hints["job_id"]),
        "ts_ms": {"type": "integer"},
    }
    return _object(QuarantineRequest, props, list(props)[1:])


def _signal_pack(defs: Defs) -> dict[str, Any]:
    """Each signal is `{"evidence": ...}` or `{"termination": ...}`."""
    items = {
        "oneOf": [
            _keyed("evidence", defs.ref(Evidence)),
            _keyed("termination", defs.ref(NodeTermination)),
        ]
    }
    return _object(SignalPack, {"signals": {"type": "array", "items": items}}, ["signals"])


def _keyed(key: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": {key: schema}, "required": [key]}


_SHAPED = {
    JobStatus: _job_status,
    QuarantineRequest: _quarantine_request,
    SignalPack: _signal_pack,
}
# QuarantineRecord is reached from alerts and requests: a `validated` flag goes with a validation.
_EXTRA_OPTIONAL: dict[type[Any], dict[str, dict[str, Any]]] = {
    QuarantineRecord: {"validated": {"type": "boolean"}},
}


def topic_schema(logical: str) -> dict[str, Any]:
    """The JSON Schema of the values of the declared topic `logical`."""
    spec = SPECS[logical]
    defs = Defs()
    refs = [defs.ref(tp) for tp in VALUE_TYPES[logical]]
    for tp, extra in _EXTRA_OPTIONAL.items():
        if tp.__name__ in defs.defs:
            defs.defs[tp.__name__]["properties"].update(extra)
    root: dict[str, Any] = {
        "$schema": DRAFT,
        "$id": f"{ID_BASE}{logical}",
        "title": logical,
        "description": f"{spec.description} (key: {spec.key.value})",
    }
    root |= refs[0] if len(refs) == 1 else {"anyOf": refs}
    root["$defs"] = dict(sorted(defs.defs.items()))
    return root


def all_schemas() -> dict[str, dict[str, Any]]:
    return {logical: topic_schema(logical) for logical in SPECS}
