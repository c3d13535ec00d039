"""What the quarantine service writes to, and reads from, `failover.alerts`.

Every value is a JSON object with `schema_version` and a `kind`; the key says what it is about:

| key             | kind                 | written by                                |
|-----------------|----------------------|-------------------------------------------|
| `breaker`       | `breaker`            | the service: its breaker state            |
| node name       | `quarantine-refused` | the service, while the breaker is tripped |
| node name       | `dry-run`            | the service, with `--dry-run`             |
| node name       | `lemon`              | the service: a lemon node was quarantined |
| node name       | `validation`         | the service: a validation failed, was     |
|                 |                      | refused, or passed on a lemon (held)      |

Records of other kinds (dead letters, the classifier's alerts) are not the service's business.
Breaker resets (`ResetCommand`, key `breaker-reset`) come from `operators.audit`, which only
operators may write (schemas/audit.py), never from this topic.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from consumers.quarantine.breaker import BreakerConfig, BreakerState
from consumers.quarantine.lifecycle import LifecyclePolicy, Step
from schemas import _fields as f
from schemas.errors import SchemaError
from schemas.quarantine import QuarantineRecord

BREAKER_KEY = "breaker"
RESET_KEY = "breaker-reset"
KIND_BREAKER = "breaker"
KIND_RESET = "breaker-reset"
KIND_REFUSED = "quarantine-refused"
KIND_DRY_RUN = "dry-run"
KIND_LEMON = "lemon"
KIND_VALIDATION = "validation"


def breaker_alert(
    state: BreakerState, cfg: BreakerConfig, *, group: str, dry_run: bool, ts_ms: int
) -> dict[str, Any]:
    return {
        "schema_version": f.SCHEMA_VERSION,
        "kind": KIND_BREAKER,
        "state": "tripped" if state.tripped else "closed",
        "cause": state.cause,
        "in_window": state.in_window,
        "fleet": state.fleet,
        "tripped_ts_ms": state.tripped_ts_ms,
        "tripped_wall_ms": state.tripped_wall_ms,
        "floor_ts_ms": state.floor_ts_ms,
        "window_ms": cfg.window_ms,
        "max_share": cfg.max_share,
        "max_nodes": cfg.max_nodes,
        "group": group,
        "dry_run": dry_run,
        "ts_ms": ts_ms,
    }


def breaker_state_from_alert(value: Any) -> BreakerState:
    d = f.as_object(value)
    f.check_version(d)
    if d.get("kind") != KIND_BREAKER:
        raise SchemaError("kind", f"expected {KIND_BREAKER!r}")
    return BreakerState(
        tripped=f.req_enum(d, "state", frozenset({"tripped", "closed"})) == "tripped",
        cause=f.opt_str(d, "cause"),
        in_window=f.opt_int(d, "in_window") or 0,
        fleet=f.opt_int(d, "fleet") or 0,
        tripped_ts_ms=f.opt_int(d, "tripped_ts_ms"),
        tripped_wall_ms=f.opt_int(d, "tripped_wall_ms"),
        floor_ts_ms=f.opt_int(d, "floor_ts_ms"),
    )


@dataclass(frozen=True)
class ResetCommand:
    ts_ms: int  # wall clock when the operator issued it
    operator: str
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": f.SCHEMA_VERSION,
            "kind": KIND_RESET,
            "ts_ms": self.ts_ms,
            "operator": self.operator,
            "reason": self.reason,
        }

    @staticmethod
    def from_dict(value: Any) -> ResetCommand:
        d = f.as_object(value)
        f.check_version(d)
        f.req_enum(d, "kind", frozenset({KIND_RESET}))
        return ResetCommand(
            ts_ms=f.req_int(d, "ts_ms"),
            operator=f.opt_str(d, "operator") or "",
            reason=f.opt_str(d, "reason") or "",
        )


def refused_alert(record: QuarantineRecord, cause: str | None, ts_ms: int) -> dict[str, Any]:
    return {
        "schema_version": f.SCHEMA_VERSION,
        "kind": KIND_REFUSED,
        "node": record.node,
        "reason": record.reason,
        "job_id": record.job_id,
        "request_ts_ms": record.ts_ms,
        "breaker_cause": cause,
        "record": record.to_dict(),
        "ts_ms": ts_ms,
    }


def dry_run_alert(
    action: str, record: QuarantineRecord, command: str, ts_ms: int
) -> dict[str, Any]:
    return {
        "schema_version": f.SCHEMA_VERSION,
        "kind": KIND_DRY_RUN,
        "dry_run": True,
        "action": action,
        "node": record.node,
        "command": command,
        "record": record.to_dict(),
        "ts_ms": ts_ms,
    }


def lemon_alert(record: QuarantineRecord, lp: LifecyclePolicy, ts_ms: int) -> dict[str, Any]:
    return {
        "schema_version": f.SCHEMA_VERSION,
        "kind": KIND_LEMON,
        "node": record.node,
        "quarantines_in_window": len(record.history),
        "history": list(record.history),
        "lemon_count": lp.lemon_count,
        "lemon_window_ms": lp.lemon_window_ms,
        "record": record.to_dict(),
        "ts_ms": ts_ms,
    }


def validation_alert(node: str, step: Step, ts_ms: int) -> dict[str, Any]:
    return {
        "schema_version": f.SCHEMA_VERSION,
        "kind": KIND_VALIDATION,
        "node": node,
        "outcome": step.outcome,
        "detail": step.detail,
        "record": None if step.record is None else step.record.to_dict(),
        "ts_ms": ts_ms,
    }
