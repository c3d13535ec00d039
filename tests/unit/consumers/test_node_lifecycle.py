"""The node lifecycle's pure state machine (consumers/quarantine/lifecycle.py): quarantine
episodes and the lemon rule, validation requests, results."""

from __future__ import annotations

from dataclasses import replace

import pytest

from consumers.quarantine import lifecycle as lc
from consumers.quarantine.lifecycle import LifecyclePolicy
from schemas.quarantine import (
    HISTORY_MAX,
    QuarantineRecord,
    Validation,
    ValidationRequest,
    ValidationResult,
)
from streams.policy import load_policy

DAY = 86_400_000
LP = LifecyclePolicy(lemon_count=3, lemon_window_ms=7 * DAY)
T0 = 1_800_000_000_000


def quarantined(
    ts: int = T0, history: tuple[int, ...] = (), lemon: bool = False, validations: int = 0
) -> QuarantineRecord:
    record = QuarantineRecord("n1", "quarantined", "hardware", (), "job-1", ts)
    return replace(record, history=history, lemon=lemon, validations=validations)


def released(ts: int, history: tuple[int, ...] = ()) -> QuarantineRecord:
    return QuarantineRecord("n1", "released", "operator", (), None, ts, history=history)


def ask(
    current: QuarantineRecord | None,
    rid: str = "operator-0-1",
    trigger: str = "operator",
    ts: int = T0 + 10,
    lp: LifecyclePolicy = LP,
) -> lc.Step:
    return lc.request_validation(
        current, request_id=rid, trigger=trigger, reason="swapped GPU 3", ts_ms=ts, lp=lp
    )


def validating(
    rid: str = "operator-0-1", ts: int = T0 + 10, history: tuple[int, ...] = (), lemon: bool = False
) -> QuarantineRecord:
    step = ask(quarantined(history=history, lemon=lemon), rid=rid, ts=ts)
    assert step.record is not None
    return step.record


def result(rid: str = "operator-0-1", ok: bool = True, ts: int = T0 + 20) -> ValidationResult:
    return ValidationResult(
        "n1",
        "result",
        ts,
        request_id=rid,
        result="pass" if ok else "fail",
        exit_code=0 if ok else 2,
        output="diag: all tests passed" if ok else "diag: memory test FAILED on GPU 3",
        command="dcgmi diag -r 2",
    )


# -- quarantine episodes and the lemon rule ---------------------------------------------------
def test_a_first_quarantine_starts_the_history_and_is_no_lemon() -> None:
    record = lc.new_episode(None, quarantined(), LP)
    assert (record.history, record.lemon, record.validations) == ((T0,), False, 0)


def test_the_third_quarantine_within_the_window_makes_a_lemon() -> None:
    previous = released(T0 + 2 * DAY, history=(T0, T0 + DAY))
    record = lc.new_episode(previous, quarantined(T0 + 3 * DAY), LP)
    assert record.history == (T0, T0 + DAY, T0 + 3 * DAY)
    assert record.lemon


def test_quarantines_older_than_the_window_do_not_count() -> None:
    now = T0 + 7 * DAY
    # exactly one window old: out; one ms younger: in
    previous = released(now - 1, history=(T0, T0 + 1))
    record = lc.new_episode(previous, quarantined(now), LP)
    assert record.history == (T0 + 1, now)
    assert not record.lemon


def test_a_new_episode_forgets_the_last_episodes_validations() -> None:
    done = Validation("operator-0-1", "operator", T0, result="pass")
    previous = replace(released(T0, history=(T0,)), validations=2, validation=done)
    record = lc.new_episode(previous, quarantined(T0 + 1), LP)
    assert (record.validations, record.validation) == (0, None)


def test_the_history_is_capped() -> None:
    lp = LifecyclePolicy(lemon_count=HISTORY_MAX, lemon_window_ms=10 * DAY)
    history = tuple(T0 + i for i in range(HISTORY_MAX + 5))
    record = lc.new_episode(released(T0 + DAY, history), quarantined(T0 + DAY + 1), lp)
    assert len(record.history) == HISTORY_MAX
    assert record.history[-1] == T0 + DAY + 1
    assert record.lemon


def test_a_lemon_count_of_one_makes_every_quarantined_node_a_lemon() -> None:
    assert lc.new_episode(None, quarantined(), replace(LP, lemon_count=1)).lemon


# -- validation requests -----------------------------------------------------------------------
def test_an_operator_request_moves_a_quarantined_node_to_validating() -> None:
    current = quarantined(history=(T0,))
    step = ask(current, ts=T0 + 10)
    assert step.outcome == lc.STARTED
    assert step.record is not None and step.request is not None
    assert step.record.state == "validating"
    assert step.record.ts_ms == T0 + 10
    assert step.record.validations == 1
    assert step.record.validation == Validation("operator-0-1", "operator", T0 + 10)
    assert (step.record.evidence, step.record.job_id, step.record.history) == (
        current.evidence,
        "job-1",
        (T0,),
    )
    r = step.request
    assert (r.node, r.request_id, r.trigger, r.reason, r.open, r.ts_ms) == (
        "n1",
        "operator-0-1",
        "operator",
        "swapped GPU 3",
        True,
        T0 + 10,
    )


def test_a_request_stamped_before_the_nodes_state_does_not_move_time_back() -> None:
    step = ask(quarantined(T0), ts=T0 - 5)
    assert step.record is not None and step.record.ts_ms == T0


@pytest.mark.parametrize("current", [None, released(T0)], ids=["unknown", "released"])
def test_a_node_not_quarantined_is_not_validated(current: QuarantineRecord | None) -> None:
    step = ask(current)
    assert (step.outcome, step.record, step.request) == (lc.NOT_QUARANTINED, None, None)


def test_a_redelivered_request_is_taken_once_in_any_state() -> None:
    running = validating()
    assert ask(running).outcome == lc.DUPLICATE
    step = lc.take_result(running, result(), LP)
    assert step.record is not None
    assert ask(step.record).outcome == lc.DUPLICATE
    assert ask(step.record).record is None


def test_a_second_request_while_validating_is_refused() -> None:
    step = ask(validating(), rid="operator-0-2")
    assert (step.outcome, step.record) == (lc.BUSY, None)
    assert "operator-0-1" in step.detail


def test_the_episodes_validations_are_capped() -> None:
    lp = replace(LP, max_validations_per_episode=2)
    assert ask(quarantined(validations=1), lp=lp).outcome == lc.STARTED
    step = ask(quarantined(validations=2), lp=lp)
    assert (step.outcome, step.record) == (lc.CAPPED, None)


def test_a_repair_signal_is_ignored_unless_the_policy_says_so() -> None:
    step = ask(quarantined(), rid="repair-1", trigger="repair", ts=T0 + 1)
    assert (step.outcome, step.record) == (lc.IGNORED, None)


def test_a_repair_signal_starts_a_validation_when_the_policy_says_so() -> None:
    lp = replace(LP, validate_on_repair=True)
    step = ask(quarantined(), rid="repair-1", trigger="repair", ts=T0 + 1, lp=lp)
    assert step.outcome == lc.STARTED
    assert step.request is not None and step.request.trigger == "repair"


def test_a_repair_signal_not_after_the_nodes_state_is_ignored() -> None:
    lp = replace(LP, validate_on_repair=True)
    step = ask(quarantined(T0), rid="repair-1", trigger="repair", ts=T0, lp=lp)
    assert (step.outcome, step.record) == (lc.IGNORED, None)


def test_a_repair_signal_does_not_revalidate_a_validated_node() -> None:
    lp = replace(LP, validate_on_repair=True)
    passed = lc.take_result(validating(), result(), LP).record
    assert passed is not None and passed.validated
    step = ask(passed, rid="repair-9", trigger="repair", ts=T0 + 100, lp=lp)
    assert (step.outcome, step.record) == (lc.IGNORED, None)


def test_an_operator_may_revalidate_a_validated_node() -> None:
    passed = lc.take_result(validating(), result(), LP).record
    assert ask(passed, rid="operator-0-7", ts=T0 + 100).outcome == lc.STARTED


# -- results ---------------------------------------------------------------------------------
def test_a_failed_validation_returns_the_node_to_quarantined_with_the_output() -> None:
    step = lc.take_result(validating(), result(ok=False, ts=T0 + 20), LP)
    assert step.outcome == lc.FAILED
    assert step.record is not None and step.request is not None
    assert (step.record.state, step.record.ts_ms, step.record.validated) == (
        "quarantined",
        T0 + 20,
        False,
    )
    v = step.record.validation
    assert v is not None
    assert (v.result, v.exit_code, v.output, v.command, v.finished_ts_ms) == (
        "fail",
        2,
        "diag: memory test FAILED on GPU 3",
        "dcgmi diag -r 2",
        T0 + 20,
    )
    assert (step.request.request_id, step.request.open) == ("operator-0-1", False)
    assert "exit 2" in step.detail


def test_a_pass_without_auto_release_stays_quarantined_and_validated() -> None:
    step = lc.take_result(validating(), result(), LP)
    assert step.outcome == lc.PASSED
    assert step.record is not None and step.record.state == "quarantined"
    assert step.record.validated
    assert step.request is not None and not step.request.open


def test_a_pass_with_auto_release_releases_the_node_keeping_its_history() -> None:
    lp = replace(LP, auto_release=True)
    step = lc.take_result(validating(history=(T0,)), result(ts=T0 + 20), lp)
    assert step.outcome == lc.RELEASED_AUTO
    r = step.record
    assert r is not None
    assert (r.state, r.reason, r.ts_ms, r.history, r.job_id, r.evidence) == (
        "released",
        "validation",
        T0 + 20,
        (T0,),
        None,
        (),
    )
    assert r.validation is not None and r.validation.result == "pass"
    assert not r.validated  # released, not "validated and waiting"


def test_auto_release_never_releases_a_lemon() -> None:
    lp = replace(LP, auto_release=True)
    step = lc.take_result(validating(lemon=True), result(), lp)
    assert step.outcome == lc.LEMON_HELD
    assert step.record is not None and step.record.state == "quarantined"
    assert step.record.lemon and step.record.validated


def test_a_result_stamped_before_the_request_does_not_move_time_back() -> None:
    step = lc.take_result(validating(ts=T0 + 50), result(ts=T0 + 40), LP)
    assert step.record is not None and step.record.ts_ms == T0 + 50


@pytest.mark.parametrize(
    "current",
    [None, quarantined(), validating(rid="operator-0-2")],
    ids=["unknown", "never-validated", "another-request"],
)
def test_a_result_for_another_request_changes_nothing(current: QuarantineRecord | None) -> None:
    step = lc.take_result(current, result(rid="operator-0-1"), LP)
    assert (step.outcome, step.record, step.request) == (lc.STALE, None, None)


def test_a_redelivered_result_changes_nothing() -> None:
    first = lc.take_result(validating(), result(ok=False), LP).record
    step = lc.take_result(first, result(ok=True), LP)
    assert (step.outcome, step.record) == (lc.DUPLICATE, None)


def test_out_of_service_means_quarantined_or_validating() -> None:
    assert lc.is_out_of_service(quarantined())
    assert lc.is_out_of_service(validating())
    assert not lc.is_out_of_service(released(T0))
    assert not lc.is_out_of_service(None)


def test_the_shipped_policy_gives_the_documented_defaults() -> None:
    lp = LifecyclePolicy.from_policy(load_policy())
    assert lp == LifecyclePolicy(
        lemon_count=3,
        lemon_window_ms=7 * DAY,
        auto_release=False,
        validate_on_repair=False,
        max_validations_per_episode=3,
    )


# -- what each step says, and the request it closes ------------------------------------------
AUTO = replace(LP, auto_release=True)
REPAIR_ON = replace(LP, validate_on_repair=True)


def test_each_refusal_says_why() -> None:
    passed = lc.take_result(validating(), result(), LP).record
    cases = [
        (ask(None), "the node is not quarantined"),
        (ask(validating()), "request operator-0-1 was taken already"),
        (ask(validating(), rid="operator-0-2"), "validation operator-0-1 is still running"),
        (
            ask(quarantined(validations=3)),
            "3 validation(s) this episode, the cap (max_validations_per_episode); "
            "release or repair it by hand",
        ),
        (
            ask(quarantined(), rid="r", trigger="repair", ts=T0 + 1),
            "the policy does not validate on repair signals",
        ),
        (
            ask(passed, rid="r", trigger="repair", ts=T0 + 99, lp=REPAIR_ON),
            "already validated, awaiting an operator's release",
        ),
        (
            ask(quarantined(), rid="r", trigger="repair", ts=T0, lp=REPAIR_ON),
            "the signal is not newer than the node's state",
        ),
        (ask(quarantined()), "validation operator-0-1 requested (operator)"),
        (lc.take_result(None, result(), LP), "result for operator-0-1: not the node's validation"),
        (lc.take_result(passed, result(), LP), "result for operator-0-1 was taken already"),
    ]
    assert [s.detail for s, _ in cases] == [why for _, why in cases]


def test_a_busy_node_without_a_recorded_validation_says_so() -> None:
    odd = replace(quarantined(), state="validating")  # e.g. written by an older build
    assert ask(odd, rid="operator-0-2").detail == "validation ? is still running"


@pytest.mark.parametrize(
    ("ok", "lp", "lemon", "outcome", "why"),
    [
        (False, LP, False, lc.FAILED, "validation operator-0-1 failed (exit 2)"),
        (True, LP, False, lc.PASSED, "passed; auto_release is off: awaiting an operator's release"),
        (True, AUTO, True, lc.LEMON_HELD, "passed, but a lemon is released only by an operator"),
        (True, AUTO, False, lc.RELEASED_AUTO, "validation operator-0-1 passed"),
    ],
)
def test_every_result_closes_its_request_and_says_why(
    ok: bool, lp: LifecyclePolicy, lemon: bool, outcome: str, why: str
) -> None:
    step = lc.take_result(validating(lemon=lemon), result(ok=ok, ts=T0 + 20), lp)
    assert (step.outcome, step.detail) == (outcome, why)
    assert step.request == ValidationRequest("n1", "operator-0-1", "operator", "", False, T0 + 20)
    assert step.record is not None
    assert (step.record.ts_ms, step.record.validations) == (T0 + 20, 1)
