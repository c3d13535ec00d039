"""A node's lifecycle as a pure state machine: quarantine episodes, the validation gate, lemons.

    quarantined --validate--> validating --pass--> released          (auto_release, not a lemon)
         ^                        |        --pass--> quarantined, validated (awaits an operator)
         +-------- fail ----------+        (output attached)

Every function takes the node's current record (the latest on `nodes.quarantine`, None if none)
and an input, and returns a `Step`: the node's next record (None: no change) and what else to
write. Nothing here reads a clock: times come from the inputs, so the same inputs give the same
records (docs/node-lifecycle.md).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Final

from schemas.quarantine import (
    HISTORY_MAX,
    QuarantineRecord,
    Validation,
    ValidationRequest,
    ValidationResult,
    ValidationTrigger,
)
from streams.policy import Policy

QUARANTINED: Final = "quarantined"
VALIDATING: Final = "validating"
RELEASED: Final = "released"

# Step outcomes (also the `outcome` label of the validation metrics: a closed set).
STARTED = "started"  # the node entered validating
DUPLICATE = "duplicate"  # this request or result was applied already
NOT_QUARANTINED = "not_quarantined"  # nothing to validate
BUSY = "busy"  # another validation is running
CAPPED = "capped"  # the episode's validations are spent
IGNORED = "ignored"  # a repair signal the policy does not act on
STALE = "stale"  # a result for a request that is not the running one
PASSED = "passed"  # stays quarantined, validated, awaiting an operator
LEMON_HELD = "lemon_held"  # passed, but a lemon is never released automatically
RELEASED_AUTO = "released"  # passed and auto-released
FAILED = "failed"  # stays quarantined with the output


@dataclass(frozen=True)
class LifecyclePolicy:
    lemon_count: int = 3
    lemon_window_ms: int = 7 * 24 * 3_600_000
    auto_release: bool = False
    validate_on_repair: bool = False
    max_validations_per_episode: int = 3

    @staticmethod
    def from_policy(p: Policy) -> LifecyclePolicy:
        return LifecyclePolicy(
            lemon_count=p.lemon_count,
            lemon_window_ms=p.lemon_window_ms,
            auto_release=p.auto_release,
            validate_on_repair=p.validate_on_repair,
            max_validations_per_episode=p.max_validations_per_episode,
        )


@dataclass(frozen=True)
class Step:
    outcome: str
    detail: str
    record: QuarantineRecord | None = None  # the node's next state; None: unchanged
    request: ValidationRequest | None = None  # to write on nodes.validate


def is_out_of_service(record: QuarantineRecord | None) -> bool:
    """Quarantined or validating: the scheduler must not use the node."""
    return record is not None and record.state != RELEASED


def new_episode(
    previous: QuarantineRecord | None, record: QuarantineRecord, lp: LifecyclePolicy
) -> QuarantineRecord:
    """A new quarantine of a node not out of service: its history within the lemon window
    (this quarantine included) and whether that makes it a lemon."""
    floor = record.ts_ms - lp.lemon_window_ms
    past = previous.history if previous is not None else ()
    history = (*sorted(t for t in past if t > floor), record.ts_ms)[-HISTORY_MAX:]
    # (a new quarantine record has no validations yet: nothing of the last episode's to reset)
    return replace(record, history=history, lemon=len(history) >= lp.lemon_count)


def request_validation(
    current: QuarantineRecord | None,
    *,
    request_id: str,
    trigger: ValidationTrigger,
    reason: str,
    ts_ms: int,
    lp: LifecyclePolicy,
) -> Step:
    """An operator's `quarantine validate` or, with `validate_on_repair`, a repair signal."""
    taken = current.validation if current is not None else None
    if taken is not None and taken.request_id == request_id:
        return Step(DUPLICATE, f"request {request_id} was taken already")
    if current is None or current.state == RELEASED:
        return Step(NOT_QUARANTINED, "the node is not quarantined")
    if current.state == VALIDATING:
        running = current.validation.request_id if current.validation else "?"
        return Step(BUSY, f"validation {running} is still running")
    if trigger == "repair":
        if not lp.validate_on_repair:
            return Step(IGNORED, "the policy does not validate on repair signals")
        if current.validated:
            return Step(IGNORED, "already validated, awaiting an operator's release")
        if ts_ms <= current.ts_ms:
            return Step(IGNORED, "the signal is not newer than the node's state")
    if current.validations >= lp.max_validations_per_episode:
        return Step(
            CAPPED,
            f"{current.validations} validation(s) this episode, the cap "
            f"(max_validations_per_episode); release or repair it by hand",
        )
    validation = Validation(request_id=request_id, trigger=trigger, requested_ts_ms=ts_ms)
    record = replace(
        current,
        state=VALIDATING,
        ts_ms=max(ts_ms, current.ts_ms),
        validations=current.validations + 1,
        validation=validation,
    )
    request = ValidationRequest(current.node, request_id, trigger, reason, True, record.ts_ms)
    return Step(STARTED, f"validation {request_id} requested ({trigger})", record, request)


def take_result(
    current: QuarantineRecord | None, result: ValidationResult, lp: LifecyclePolicy
) -> Step:
    """A node agent's validation result: only the running request's first result counts."""
    running = current.validation if current is not None else None
    if current is None or running is None or running.request_id != result.request_id:
        return Step(STALE, f"result for {result.request_id}: not the node's validation")
    if current.state != VALIDATING:
        return Step(DUPLICATE, f"result for {result.request_id} was taken already")
    ts = max(result.ts_ms, current.ts_ms)
    done = replace(
        running,
        result=result.result,
        exit_code=result.exit_code,
        output=result.output,
        command=result.command,
        finished_ts_ms=result.ts_ms,
    )
    closed = ValidationRequest(current.node, running.request_id, running.trigger, "", False, ts)
    if result.result != "pass":
        record = replace(current, state=QUARANTINED, ts_ms=ts, validation=done)
        why = f"validation {running.request_id} failed (exit {result.exit_code})"
        return Step(FAILED, why, record, closed)
    if lp.auto_release and not current.lemon:
        record = QuarantineRecord(
            current.node,
            RELEASED,
            "validation",
            (),
            None,
            ts,
            history=current.history,
            validations=current.validations,
            validation=done,
        )
        return Step(RELEASED_AUTO, f"validation {running.request_id} passed", record, closed)
    record = replace(current, state=QUARANTINED, ts_ms=ts, validation=done)
    if lp.auto_release:
        why = "passed, but a lemon is released only by an operator"
        return Step(LEMON_HELD, why, record, closed)
    why = "passed; auto_release is off: awaiting an operator's release"
    return Step(PASSED, why, record, closed)
