"""The quarantine service's alerts (`schemas.alerts`), built from its own state.

Records of other kinds on `failover.alerts` (dead letters, the classifier's alerts) are not the
service's business. Breaker resets (`ResetCommand`, key `breaker-reset`) come from
`operators.audit`, which only operators may write (schemas/audit.py), never from that topic.
"""

from __future__ import annotations

from typing import Any

from consumers.quarantine.breaker import BreakerConfig, BreakerState
from consumers.quarantine.lifecycle import LifecyclePolicy, Step
from schemas.alerts import (
    BREAKER_KEY,
    BreakerAlert,
    DryRunAlert,
    LemonAlert,
    RefusedAlert,
    ValidationAlert,
)
from schemas.quarantine import QuarantineRecord

__all__ = ["BREAKER_KEY", "breaker_alert", "breaker_state_from_alert"]


def breaker_alert(
    state: BreakerState, cfg: BreakerConfig, *, group: str, dry_run: bool, ts_ms: int
) -> dict[str, Any]:
    return BreakerAlert(
        state="tripped" if state.tripped else "closed",
        cause=state.cause,
        in_window=state.in_window,
        fleet=state.fleet,
        tripped_ts_ms=state.tripped_ts_ms,
        tripped_wall_ms=state.tripped_wall_ms,
        floor_ts_ms=state.floor_ts_ms,
        window_ms=cfg.window_ms,
        max_share=cfg.max_share,
        max_nodes=cfg.max_nodes,
        group=group,
        dry_run=dry_run,
        ts_ms=ts_ms,
    ).to_dict()


def breaker_state_from_alert(value: Any) -> BreakerState:
    alert = BreakerAlert.from_dict(value)
    return BreakerState(
        tripped=alert.state == "tripped",
        cause=alert.cause,
        in_window=alert.in_window,
        fleet=alert.fleet,
        tripped_ts_ms=alert.tripped_ts_ms,
        tripped_wall_ms=alert.tripped_wall_ms,
        floor_ts_ms=alert.floor_ts_ms,
    )


def refused_alert(record: QuarantineRecord, cause: str | None, ts_ms: int) -> dict[str, Any]:
    return RefusedAlert(record, cause, ts_ms).to_dict()


def dry_run_alert(
    action: str, record: QuarantineRecord, command: str, ts_ms: int
) -> dict[str, Any]:
    return DryRunAlert(action, record, command, ts_ms).to_dict()


def lemon_alert(record: QuarantineRecord, lp: LifecyclePolicy, ts_ms: int) -> dict[str, Any]:
    return LemonAlert(record, lp.lemon_count, lp.lemon_window_ms, ts_ms).to_dict()


def validation_alert(node: str, step: Step, ts_ms: int) -> dict[str, Any]:
    return ValidationAlert(node, step.outcome, step.detail, step.record, ts_ms).to_dict()
