"""`decide` as a table: each verdict and job setting gives one action, status and rule name (the
rule is what operators and the job-status timeline show, so every row is pinned)."""

from __future__ import annotations

import pytest

from schemas.decisions import Evidence
from streams.engine.decide import Termination, decide
from streams.policy import load_policy

POLICY = load_policy()
T = 1_773_532_800_000
EVIDENCE = {
    "hardware": Evidence("node-a", 0, "xid", 79, T - 5_000, "hardware"),
    "software": Evidence("node-a", 0, "xid", 13, T - 5_000, "software"),
    "transient": Evidence(None, None, "reason", "NCCLTimeout", T, "transient"),
    "unknown": None,
}


def term(attempt: int = 0, *, failover: bool = True, spot: bool = False) -> Termination:
    training = "spot" if spot else "on_demand"
    return Termination("job-1", attempt, T, ("node-a",), None, failover, training, 2)


@pytest.mark.parametrize(
    ("verdict", "attempt", "action", "status", "rule", "next_attempt"),
    [
        ("hardware", 1, "failover", "Pending-failoverinprogress", "hardware.failover", 2),
        ("transient", 1, "retry", "Pending-failoverinprogress", "transient.retry", 2),
        ("hardware", 2, "give_up", "Pending-maxretriesexceeded", "hardware.budget_spent", None),
        ("transient", 2, "give_up", "Pending-maxretriesexceeded", "transient.budget_spent", None),
        ("software", 0, "reject", "Pending-internalerror", "software.reject", None),
        ("unknown", 0, "reject", "Pending-internalerror", "unknown.reject", None),
    ],
)
def test_verdict_and_budget_give_action_status_and_rule(
    verdict: str, attempt: int, action: str, status: str, rule: str, next_attempt: int | None
) -> None:
    item = EVIDENCE[verdict]
    d = decide(term(attempt), [] if item is None else [item], POLICY)
    assert (d.verdict, d.action, d.status, d.rule, d.next_attempt) == (
        verdict,
        action,
        status,
        rule,
        next_attempt,
    )


@pytest.mark.parametrize("verdict", ["hardware", "software", "transient", "unknown"])
@pytest.mark.parametrize(
    ("failover", "spot", "suffix"),
    [
        (False, False, "failover_disabled"),
        (True, True, "spot_job"),
        (False, True, "failover_disabled"),
    ],
)
def test_jobs_without_failover_fail_whatever_the_verdict(
    verdict: str, failover: bool, spot: bool, suffix: str
) -> None:
    item = EVIDENCE[verdict]
    d = decide(term(failover=failover, spot=spot), [] if item is None else [item], POLICY)
    assert (d.action, d.status, d.rule, d.next_attempt) == (
        "fail",
        "Failed",
        f"{verdict}.{suffix}",
        None,
    )
