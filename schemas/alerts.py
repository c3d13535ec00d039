"""`failover.alerts` (key: job_id, node, or `breaker`): what operators are told.

Every value is a JSON object with `schema_version` and a `kind` that says which record it is:

| kind                 | key     | record          | written by                                    |
|----------------------|---------|-----------------|-----------------------------------------------|
| `hang`, `straggler`  | job_id  | JobAlert        | the classifier (training progress)            |
| `decision_overdue`   | job_id  | JobAlert        | the job status service (no decision in time)  |
| `breaker`            | breaker | BreakerAlert    | the quarantine service: its breaker state     |
| `quarantine-refused` | node    | RefusedAlert    | the quarantine service, breaker tripped       |
| `dry-run`            | node    | DryRunAlert     | the quarantine service, with `--dry-run`      |
| `lemon`              | node    | LemonAlert      | the quarantine service: a lemon quarantined   |
| `validation`         | node    | ValidationAlert | the quarantine service: a validation outcome  |
| `dead-letter`        | coords  | DeadLetter      | a reader of a topic without `.dlq` companion  |
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal, get_args

from schemas import _fields as f
from schemas.errors import SchemaError
from schemas.quarantine import QuarantineRecord

# Closed sets as Literals, not enums: the values stay plain strings (orjson refuses a str
# subclass as a dict key, and alert kinds are counted by kind).
JobAlertKind = Literal["hang", "straggler", "decision_overdue"]
JOB_ALERT_KINDS: frozenset[JobAlertKind] = frozenset(get_args(JobAlertKind))
KIND_BREAKER: Final = "breaker"
KIND_REFUSED: Final = "quarantine-refused"
KIND_DRY_RUN: Final = "dry-run"
KIND_LEMON: Final = "lemon"
KIND_VALIDATION: Final = "validation"
BreakerPosition = Literal["tripped", "closed"]
BREAKER_POSITIONS: frozenset[BreakerPosition] = frozenset(get_args(BreakerPosition))
_JOB_ALERT_FIELDS = frozenset({"schema_version", "kind", "job_id", "attempt", "ts_ms"})
BREAKER_KEY = "breaker"  # the key of the breaker's state record (compaction keeps the latest)


@dataclass(frozen=True, slots=True)
class JobAlert:
    """About one job: `detail` holds the kind's own fields, written at the top level."""

    kind: JobAlertKind
    job_id: str
    attempt: int
    ts_ms: int
    detail: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": f.SCHEMA_VERSION,
            "kind": self.kind,
            "job_id": self.job_id,
            "attempt": self.attempt,
            "ts_ms": self.ts_ms,
            **self.detail,
        }

    @staticmethod
    def from_dict(value: Any) -> JobAlert:
        d = f.as_object(value)
        f.check_version(d)
        return JobAlert(
            kind=f.req_enum(d, "kind", JOB_ALERT_KINDS),
            job_id=f.req_id(d, "job_id"),
            attempt=f.req_int(d, "attempt", minimum=0),
            ts_ms=f.req_int(d, "ts_ms"),
            detail={k: v for k, v in d.items() if k not in _JOB_ALERT_FIELDS},
        )


@dataclass(frozen=True, slots=True)
class BreakerAlert:
    """The quarantine service's circuit breaker, written whenever it moves (key `breaker`)."""

    state: BreakerPosition
    cause: str | None
    in_window: int
    fleet: int
    tripped_ts_ms: int | None
    tripped_wall_ms: int | None
    floor_ts_ms: int | None
    window_ms: int
    max_share: float
    max_nodes: int
    group: str
    dry_run: bool
    ts_ms: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": f.SCHEMA_VERSION,
            "kind": KIND_BREAKER,
            "state": self.state,
            "cause": self.cause,
            "in_window": self.in_window,
            "fleet": self.fleet,
            "tripped_ts_ms": self.tripped_ts_ms,
            "tripped_wall_ms": self.tripped_wall_ms,
            "floor_ts_ms": self.floor_ts_ms,
            "window_ms": self.window_ms,
            "max_share": self.max_share,
            "max_nodes": self.max_nodes,
            "group": self.group,
            "dry_run": self.dry_run,
            "ts_ms": self.ts_ms,
        }

    @staticmethod
    def from_dict(value: Any) -> BreakerAlert:
        """Only what a restarted service needs is required (older records lack the rest)."""
        d = f.as_object(value)
        f.check_version(d)
        if d.get("kind") != KIND_BREAKER:
            raise SchemaError("kind", f"expected {KIND_BREAKER!r}")
        return BreakerAlert(
            state=f.req_enum(d, "state", BREAKER_POSITIONS),
            cause=f.opt_str(d, "cause"),
            in_window=f.opt_int(d, "in_window") or 0,
            fleet=f.opt_int(d, "fleet") or 0,
            tripped_ts_ms=f.opt_int(d, "tripped_ts_ms"),
            tripped_wall_ms=f.opt_int(d, "tripped_wall_ms"),
            floor_ts_ms=f.opt_int(d, "floor_ts_ms"),
            window_ms=f.opt_int(d, "window_ms") or 0,
            max_share=float(d.get("max_share") or 0.0),
            max_nodes=f.opt_int(d, "max_nodes") or 0,
            group=f.opt_str(d, "group") or "",
            dry_run=f.opt_bool(d, "dry_run", False),
            ts_ms=f.opt_int(d, "ts_ms") or 0,
        )


@dataclass(frozen=True, slots=True)
class RefusedAlert:
    """A quarantine the tripped breaker refused."""

    record: QuarantineRecord  # the quarantine asked for
    breaker_cause: str | None
    ts_ms: int

    def to_dict(self) -> dict[str, Any]:
        r = self.record
        return {
            "schema_version": f.SCHEMA_VERSION,
            "kind": KIND_REFUSED,
            "node": r.node,
            "reason": r.reason,
            "job_id": r.job_id,
            "request_ts_ms": r.ts_ms,
            "breaker_cause": self.breaker_cause,
            "record": r.to_dict(),
            "ts_ms": self.ts_ms,
        }

    @staticmethod
    def from_dict(value: Any) -> RefusedAlert:
        d = _alert_object(value, KIND_REFUSED)
        return RefusedAlert(
            record=QuarantineRecord.from_dict(d.get("record")),
            breaker_cause=f.opt_str(d, "breaker_cause"),
            ts_ms=f.req_int(d, "ts_ms"),
        )


@dataclass(frozen=True, slots=True)
class DryRunAlert:
    """What the service would have done to a node (`--dry-run`)."""

    action: str
    record: QuarantineRecord
    command: str
    ts_ms: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": f.SCHEMA_VERSION,
            "kind": KIND_DRY_RUN,
            "dry_run": True,
            "action": self.action,
            "node": self.record.node,
            "command": self.command,
            "record": self.record.to_dict(),
            "ts_ms": self.ts_ms,
        }

    @staticmethod
    def from_dict(value: Any) -> DryRunAlert:
        d = _alert_object(value, KIND_DRY_RUN)
        return DryRunAlert(
            action=f.req_str(d, "action"),
            record=QuarantineRecord.from_dict(d.get("record")),
            command=f.req_str(d, "command"),
            ts_ms=f.req_int(d, "ts_ms"),
        )


@dataclass(frozen=True, slots=True)
class LemonAlert:
    """A node quarantined `lemon_count` times within `lemon_window_ms`: only an operator may
    release it."""

    record: QuarantineRecord
    lemon_count: int
    lemon_window_ms: int
    ts_ms: int

    def to_dict(self) -> dict[str, Any]:
        r = self.record
        return {
            "schema_version": f.SCHEMA_VERSION,
            "kind": KIND_LEMON,
            "node": r.node,
            "quarantines_in_window": len(r.history),
            "history": list(r.history),
            "lemon_count": self.lemon_count,
            "lemon_window_ms": self.lemon_window_ms,
            "record": r.to_dict(),
            "ts_ms": self.ts_ms,
        }

    @staticmethod
    def from_dict(value: Any) -> LemonAlert:
        d = _alert_object(value, KIND_LEMON)
        return LemonAlert(
            record=QuarantineRecord.from_dict(d.get("record")),
            lemon_count=f.req_int(d, "lemon_count", minimum=0),
            lemon_window_ms=f.req_int(d, "lemon_window_ms", minimum=0),
            ts_ms=f.req_int(d, "ts_ms"),
        )


@dataclass(frozen=True, slots=True)
class ValidationAlert:
    """A validation failed, was refused, or passed on a lemon (held for an operator)."""

    node: str
    outcome: str
    detail: str
    record: QuarantineRecord | None  # the node's next state; None: unchanged
    ts_ms: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": f.SCHEMA_VERSION,
            "kind": KIND_VALIDATION,
            "node": self.node,
            "outcome": self.outcome,
            "detail": self.detail,
            "record": None if self.record is None else self.record.to_dict(),
            "ts_ms": self.ts_ms,
        }

    @staticmethod
    def from_dict(value: Any) -> ValidationAlert:
        d = _alert_object(value, KIND_VALIDATION)
        raw = d.get("record")
        return ValidationAlert(
            node=f.req_id(d, "node"),
            outcome=f.req_str(d, "outcome"),
            detail=f.opt_str(d, "detail") or "",
            record=None if raw is None else QuarantineRecord.from_dict(raw),
            ts_ms=f.req_int(d, "ts_ms"),
        )


def _alert_object(value: Any, kind: str) -> Mapping[str, Any]:
    d = f.as_object(value)
    f.check_version(d)
    if d.get("kind") != kind:
        raise SchemaError("kind", f"expected {kind!r}")
    return d
