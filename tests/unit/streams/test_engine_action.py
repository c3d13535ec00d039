"""Rule 3: the action and status from the verdict, the job's failover flags and its retry budget."""

from __future__ import annotations

from typing import Any

import pytest
from failover_harness import T0, S, nodes, run, terminated, xid

from schemas.decisions import Decision

A, B = nodes(2)
T = T0 + 3600 * S


def hardware_decision(attempt: int = 0, **kw: Any) -> Decision:
    r = run(xid(A, 79, T - S), terminated("job-1", [A, B], T, attempt=attempt, **kw))
    return r.decision("job-1", attempt)


def transient_decision(attempt: int = 0, **kw: Any) -> Decision:
    r = run(terminated("job-1", [A, B], T, attempt=attempt, reason="NCCLTimeout", **kw))
    return r.decision("job-1", attempt)


def test_hardware_first_attempt_fails_over() -> None:
    d = hardware_decision()
    assert (d.action, d.status, d.next_attempt) == ("failover", "Pending-failoverinprogress", 1)
    assert d.rule == "hardware.failover"


def test_hardware_attempt_2_of_3_still_fails_over() -> None:
    d = hardware_decision(attempt=2)
    assert (d.action, d.status, d.next_attempt) == ("failover", "Pending-failoverinprogress", 3)


def test_hardware_attempt_3_of_3_gives_up() -> None:
    d = hardware_decision(attempt=3)
    assert (d.action, d.status, d.next_attempt) == ("give_up", "Pending-maxretriesexceeded", None)
    assert d.verdict == "hardware"
    assert d.suspect_nodes == (A,)


def test_transient_attempt_2_of_3_retries() -> None:
    d = transient_decision(attempt=2)
    assert (d.action, d.status, d.next_attempt) == ("retry", "Pending-failoverinprogress", 3)
    assert d.rule == "transient.retry"


def test_transient_attempt_3_of_3_gives_up() -> None:
    d = transient_decision(attempt=3)
    assert (d.action, d.status, d.next_attempt) == ("give_up", "Pending-maxretriesexceeded", None)


def test_attempt_beyond_budget_gives_up() -> None:
    assert hardware_decision(attempt=7).action == "give_up"


@pytest.mark.parametrize(
    ("max_failovers", "attempt", "action"),
    [
        (1, 0, "failover"),
        (1, 1, "give_up"),
        (0, 0, "give_up"),
        (5, 4, "failover"),
        (5, 5, "give_up"),
    ],
)
def test_per_job_max_failovers_overrides_the_policy_default(
    max_failovers: int, attempt: int, action: str
) -> None:
    assert hardware_decision(attempt=attempt, max_failovers=max_failovers).action == action
    expected = "retry" if action == "failover" else action
    assert transient_decision(attempt=attempt, max_failovers=max_failovers).action == expected


@pytest.mark.parametrize("reason", ["OOMKilled", None])
def test_software_and_unknown_reject_whatever_the_attempt(reason: str | None) -> None:
    for attempt in (0, 3, 9):
        d = run(terminated("job-1", [A], T, attempt=attempt, reason=reason)).decision(
            "job-1", attempt
        )
        assert (d.action, d.status, d.next_attempt) == ("reject", "Pending-internalerror", None)


def test_failover_disabled_fails_on_hardware() -> None:
    d = hardware_decision(failover=False)
    assert (d.verdict, d.action, d.status, d.next_attempt) == ("hardware", "fail", "Failed", None)
    assert d.suspect_nodes == (A,)
    assert d.rule == "hardware.failover_disabled"


def test_spot_job_fails_on_hardware() -> None:
    d = hardware_decision(training_type="spot")
    assert (d.verdict, d.action, d.status, d.next_attempt) == ("hardware", "fail", "Failed", None)
    assert d.rule == "hardware.spot_job"


@pytest.mark.parametrize(
    "flags", [{"failover": False}, {"training_type": "spot"}], ids=["disabled", "spot"]
)
@pytest.mark.parametrize("reason", ["OOMKilled", "NCCLTimeout", None])
def test_failover_disabled_or_spot_fails_for_every_verdict(
    flags: dict[str, Any], reason: str | None
) -> None:
    d = run(terminated("job-1", [A], T, reason=reason, **flags)).decision("job-1")
    assert (d.action, d.status, d.next_attempt) == ("fail", "Failed", None)


def test_spot_job_with_spent_budget_still_fails_rather_than_gives_up() -> None:
    assert hardware_decision(attempt=3, training_type="spot").action == "fail"


@pytest.mark.parametrize(
    "kw",
    [{"failover": False}, {"training_type": "spot"}, {"attempt": 3}],
    ids=["disabled", "spot", "budget-spent"],
)
def test_hardware_suspects_are_quarantined_whatever_the_action(kw: dict[str, Any]) -> None:
    r = run(xid(A, 79, T - S), terminated("job-1", [A, B], T, **kw))
    assert r.decision("job-1", int(kw.get("attempt", 0))).suspect_nodes == (A,)
    assert r.quarantined_nodes() == [A]
