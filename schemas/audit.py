"""`operators.audit` (append-only, never compacted): every operator command, who and why.

Key: the node a release is for, or `breaker-reset`. Only the `operator` role may write this
topic (deploy/acls.py), so a record on it was written with an operator's credential; the
quarantine service obeys breaker resets from here and nowhere else. `principal` is the SASL
user the command was sent as; without SASL it is `unauthenticated:<login>` and
`authenticated` is false. A reset record is also a `ResetCommand` (`kind`, `ts_ms`,
`operator`, `reason`), which is what the service decodes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from schemas import _fields as f
from schemas.errors import SchemaError

RELEASE = "release"
BREAKER_RESET = "breaker-reset"
RESET_KEY = BREAKER_RESET  # the Kafka key of a breaker reset
VALIDATE = "validate"  # key: the node; the quarantine service starts its validation
KINDS = frozenset({RELEASE, BREAKER_RESET, VALIDATE})
MAX_REASON = 1024


@dataclass(frozen=True, slots=True)
class OperatorCommand:
    kind: str
    target: str  # the node released, or "breaker"
    principal: str
    authenticated: bool
    reason: str
    ts_ms: int  # wall clock when it was issued

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise SchemaError("kind", f"expected one of {sorted(KINDS)}, got {self.kind!r}")
        if not self.reason.strip():
            raise SchemaError("reason", "an operator command needs a reason")
        if len(self.reason) > MAX_REASON:
            raise SchemaError("reason", f"longer than {MAX_REASON} characters")
        if not self.principal:
            raise SchemaError("principal", "must not be empty")

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": f.SCHEMA_VERSION,
            "kind": self.kind,
            "target": self.target,
            "principal": self.principal,
            "operator": self.principal,
            "authenticated": self.authenticated,
            "reason": self.reason,
            "ts_ms": self.ts_ms,
        }

    @staticmethod
    def from_dict(value: Any) -> OperatorCommand:
        d = f.as_object(value)
        f.check_version(d)
        return OperatorCommand(
            kind=f.req_enum(d, "kind", KINDS),
            target=f.req_str(d, "target"),
            principal=f.req_str(d, "principal"),
            authenticated=f.opt_bool(d, "authenticated", False),
            reason=f.req_str(d, "reason"),
            ts_ms=f.req_int(d, "ts_ms", minimum=0),
        )


@dataclass(frozen=True)
class ResetCommand:
    """The quarantine service's view of a breaker reset (key `breaker-reset`)."""

    ts_ms: int  # wall clock when the operator issued it
    operator: str
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": f.SCHEMA_VERSION,
            "kind": BREAKER_RESET,
            "ts_ms": self.ts_ms,
            "operator": self.operator,
            "reason": self.reason,
        }

    @staticmethod
    def from_dict(value: Any) -> ResetCommand:
        d = f.as_object(value)
        f.check_version(d)
        f.req_enum(d, "kind", frozenset({BREAKER_RESET}))
        return ResetCommand(
            ts_ms=f.req_int(d, "ts_ms"),
            operator=f.opt_str(d, "operator") or "",
            reason=f.opt_str(d, "reason") or "",
        )
