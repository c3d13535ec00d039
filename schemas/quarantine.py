"""`nodes.quarantine` (key: node, compacted): the current quarantine state of each node, and the
validation gate's requests (`nodes.validate`) and results (`nodes.validation-results`).

A node's lifecycle (docs/node-lifecycle.md): `quarantined` -> `validating` (a validation runs on
the node) -> `released`, or back to `quarantined` with the validation's outcome attached.
Because the topic is compacted, every record carries what the next decision needs: `history`
(event times of the node's quarantines within the lemon window), `lemon`, and the episode's
validation count.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, get_args

from schemas import _fields as f
from schemas import bounds as b
from schemas.bounds import TS_CEIL_MS
from schemas.decisions import Evidence, evidence_list
from schemas.errors import SchemaError

QuarantineState = Literal["quarantined", "validating", "released"]
QuarantineReason = Literal["hardware", "precursor", "operator", "validation"]
ValidationOutcome = Literal["pass", "fail"]
ValidationTrigger = Literal["operator", "repair"]
STATES: frozenset[QuarantineState] = frozenset(get_args(QuarantineState))
REASONS: frozenset[QuarantineReason] = frozenset(get_args(QuarantineReason))
RESULTS: frozenset[ValidationOutcome] = frozenset(get_args(ValidationOutcome))
TRIGGERS: frozenset[ValidationTrigger] = frozenset(get_args(ValidationTrigger))
OUTPUT_MAX_CHARS = b.TEXT_MAX_CHARS  # diagnostic output kept with a result, tail first
HISTORY_MAX = 64  # quarantine times a record carries (the lemon count is at most this)


@dataclass(frozen=True, slots=True)
class Validation:
    """One validation of a node: requested, then its outcome (`result` None while it runs)."""

    request_id: str
    trigger: ValidationTrigger
    requested_ts_ms: int
    result: ValidationOutcome | None = None
    exit_code: int | None = None
    output: str = ""
    command: str = ""
    finished_ts_ms: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "request_id": self.request_id,
            "trigger": self.trigger,
            "requested_ts_ms": self.requested_ts_ms,
            "result": self.result,
            "exit_code": self.exit_code,
            "output": self.output,
            "command": self.command,
            "finished_ts_ms": self.finished_ts_ms,
        }

    @staticmethod
    def from_dict(value: Any) -> Validation:
        d = f.as_object(value)
        return Validation(
            request_id=f.req_id(d, "request_id"),
            trigger=f.req_enum(d, "trigger", TRIGGERS),
            requested_ts_ms=f.req_int(d, "requested_ts_ms", maximum=TS_CEIL_MS),
            result=f.opt_enum(d, "result", RESULTS),
            exit_code=_opt_exit_code(d),
            output=f.opt_str(d, "output", max_len=OUTPUT_MAX_CHARS) or "",
            command=f.opt_str(d, "command") or "",
            finished_ts_ms=f.opt_int(d, "finished_ts_ms", maximum=TS_CEIL_MS),
        )


def _opt_exit_code(d: Any) -> int | None:
    v = d.get("exit_code")
    return None if v is None else f.check_int("exit_code", v, -(2**31), 2**31)


@dataclass(frozen=True, slots=True)
class QuarantineRecord:
    node: str
    state: QuarantineState
    reason: QuarantineReason
    evidence: tuple[Evidence, ...]
    job_id: str | None
    ts_ms: int
    # Event times of the node's quarantines within the lemon window, oldest first (this
    # episode's included): carried on every record, so the compacted topic keeps the count.
    history: tuple[int, ...] = ()
    lemon: bool = False  # quarantined too often: only an operator may release it
    validations: int = 0  # validations run in this quarantine episode (capped by policy)
    validation: Validation | None = None  # the episode's latest validation

    @property
    def validated(self) -> bool:
        """Quarantined, and its latest validation passed: awaiting an operator's release."""
        v = self.validation
        return self.state == "quarantined" and v is not None and v.result == "pass"

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "schema_version": f.SCHEMA_VERSION,
            "node": self.node,
            "state": self.state,
            "reason": self.reason,
            "evidence": [e.to_dict() for e in self.evidence],
            "job_id": self.job_id,
            "ts_ms": self.ts_ms,
        }
        # Lifecycle fields only when set: records of nodes never validated stay as they were.
        if self.history:
            out["history"] = list(self.history)
        if self.lemon:
            out["lemon"] = True
        if self.validations:
            out["validations"] = self.validations
        if self.validation is not None:
            out["validation"] = self.validation.to_dict()
            out["validated"] = self.validated
        return out

    @staticmethod
    def from_dict(value: Any) -> QuarantineRecord:
        d = f.as_object(value)
        f.check_version(d)
        ev = evidence_list(d, required=False)
        raw_history = d.get("history") or []
        if not isinstance(raw_history, list) or len(raw_history) > HISTORY_MAX:
            raise SchemaError("history", f"expected a list of at most {HISTORY_MAX} times")
        raw_validation = d.get("validation")
        return QuarantineRecord(
            node=f.req_id(d, "node"),
            state=f.req_enum(d, "state", STATES),
            reason=f.req_enum(d, "reason", REASONS),
            evidence=tuple(Evidence.from_dict(e) for e in ev),
            job_id=f.opt_id(d, "job_id"),
            ts_ms=f.req_int(d, "ts_ms", maximum=TS_CEIL_MS),  # floor: schemas.event_time
            history=tuple(f.check_int("history", t, 0, TS_CEIL_MS) for t in raw_history),
            lemon=f.opt_bool(d, "lemon", False),
            validations=f.opt_int(d, "validations", minimum=0) or 0,
            validation=None if raw_validation is None else Validation.from_dict(raw_validation),
        )


@dataclass(frozen=True, slots=True)
class ValidationRequest:
    """`nodes.validate` (key: node, compacted): the validation the node's agent must run.

    The quarantine service writes it `open` when the node enters `validating`, and again closed
    once the result is taken (or the node left `validating`): an agent that starts runs the
    latest open request of its node, and only once per `request_id`."""

    node: str
    request_id: str
    trigger: ValidationTrigger
    reason: str
    open: bool
    ts_ms: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": f.SCHEMA_VERSION,
            "node": self.node,
            "request_id": self.request_id,
            "trigger": self.trigger,
            "reason": self.reason,
            "open": self.open,
            "ts_ms": self.ts_ms,
        }

    @staticmethod
    def from_dict(value: Any) -> ValidationRequest:
        d = f.as_object(value)
        f.check_version(d)
        return ValidationRequest(
            node=f.req_id(d, "node"),
            request_id=f.req_id(d, "request_id"),
            trigger=f.req_enum(d, "trigger", TRIGGERS),
            reason=f.opt_str(d, "reason") or "",
            open=f.opt_bool(d, "open", True),
            ts_ms=f.req_int(d, "ts_ms", maximum=TS_CEIL_MS),
        )


KIND_RESULT = "result"
KIND_REPAIR = "repair"  # the agent (re)started on a node: a repair signal
RESULT_KINDS = frozenset({KIND_RESULT, KIND_REPAIR})


@dataclass(frozen=True, slots=True)
class ValidationResult:
    """`nodes.validation-results` (key: node): what an agent reports about its own node.

    `kind` result: the outcome of request `request_id`; `kind` repair: the agent started
    (after a reboot or driver reload), which may trigger a validation if the policy says so."""

    node: str
    kind: str
    ts_ms: int
    request_id: str | None = None
    result: ValidationOutcome | None = None  # kind result
    exit_code: int | None = None
    output: str = ""
    command: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": f.SCHEMA_VERSION,
            "node": self.node,
            "kind": self.kind,
            "ts_ms": self.ts_ms,
            "request_id": self.request_id,
            "result": self.result,
            "exit_code": self.exit_code,
            "output": self.output,
            "command": self.command,
        }

    @staticmethod
    def from_dict(value: Any) -> ValidationResult:
        d = f.as_object(value)
        f.check_version(d)
        kind = f.req_enum(d, "kind", RESULT_KINDS)
        result = ValidationResult(
            node=f.req_id(d, "node"),
            kind=kind,
            ts_ms=f.req_int(d, "ts_ms", maximum=TS_CEIL_MS),
            request_id=f.opt_id(d, "request_id"),
            result=f.opt_enum(d, "result", RESULTS),
            exit_code=_opt_exit_code(d),
            output=f.opt_str(d, "output", max_len=OUTPUT_MAX_CHARS) or "",
            command=f.opt_str(d, "command") or "",
        )
        if kind == KIND_RESULT and (result.request_id is None or result.result is None):
            raise SchemaError("result", "a validation result needs request_id and result")
        return result
