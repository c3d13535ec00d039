"""The chaos invariants on hand-made outputs: each kind of violation is found, and only it."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

import pytest

from gpufailover.chaos import check as c
from gpufailover.chaos.check import BadRecord, Expected, Observed


def decision(job: str, attempt: int = 0, **over: Any) -> dict[str, Any]:
    d: dict[str, Any] = {
        "job_id": job,
        "attempt": attempt,
        "verdict": "hardware",
        "action": "failover",
        "suspect_nodes": ["n1"],
        "next_attempt": attempt + 1,
        "rule": "hardware.failover",
        "evidence": [],
    }
    return d | over


BAD = BadRecord("p.jobs.events", 2, 8, '{"type": "exploded"}', 1, "unknown event type")
EXPECTED = Expected(
    decisions={
        ("j1", 0): decision("j1"),
        ("j2", 0): decision(
            "j2",
            verdict="software",
            action="reject",
            suspect_nodes=[],
            next_attempt=None,
            rule="software.reject",
        ),
    },
    quarantines=Counter({"n1": 1}),
    terminations={("j1", 0): 0, ("j2", 0): 1},
    bad=(BAD,),
)


def clean() -> dict[str, list[Mapping[str, Any]]]:
    return {
        "decisions": [dict(v) for v in EXPECTED.decisions.values()],
        "quarantine_requests": [{"node": "n1", "ts_ms": 0, "job_id": "j1"}],
        "quarantines": [{"node": "n1", "state": "quarantined", "ts_ms": 0, "job_id": "j1"}],
        "requeues": [{"job_id": "j1", "attempt": 0, "next_attempt": 1}],
        "dead_letters": [{"topic": "p.jobs.events", "partition": 2, "offset": 8, "raw": "x"}],
    }


def run(**changes: list[Mapping[str, Any]]) -> c.Result:
    return c.check(EXPECTED, Observed(**(clean() | changes)), lambda ts: 0)


def columns(result: c.Result) -> Counter[str]:
    return Counter(f.column for f in result.findings)


def test_the_clean_run_has_no_finding() -> None:
    result = run()
    assert result.findings == []
    assert result.expected_decisions == result.observed_decisions == 2


def test_a_missing_decision_is_missing_and_overdue() -> None:
    result = run(decisions=[decision("j1")])
    assert columns(result) == Counter({c.DECISIONS_MISSING: 1, c.OVERDUE: 1})
    missing = next(f for f in result.findings if f.column == c.DECISIONS_MISSING)
    assert (missing.subject, missing.round) == ("j2/0", 1)


def test_an_identical_redelivery_is_not_a_duplicate() -> None:
    again = decision("j1", evidence=[{"x": 1}], **{c.WALL_MS: 1234})
    result = run(decisions=[*clean()["decisions"], again])
    assert columns(result) == Counter({c.REDELIVERED: 1})
    assert result.violations() == []
    assert result.findings[0].wall_ms == 1234  # the copy's time, to name the fault before it


def test_two_different_decisions_for_one_attempt_are_a_duplicate() -> None:
    second = decision("j1", verdict="transient", action="retry", suspect_nodes=[],
                      rule="transient.retry")  # fmt: skip
    result = run(decisions=[*clean()["decisions"], second])
    assert columns(result) == Counter({c.DECISIONS_DUPLICATED: 1, c.DECISIONS_DIFFERENT: 1})


@pytest.mark.parametrize(
    "field,value",
    [
        ("verdict", "transient"),
        ("action", "retry"),
        ("suspect_nodes", ["n1", "n2"]),
        ("next_attempt", 2),
        ("rule", "hardware.other"),
    ],
)
def test_each_compared_field_makes_a_decision_different(field: str, value: Any) -> None:
    result = run(decisions=[decision("j1", **{field: value}), clean()["decisions"][1]])
    assert columns(result) == Counter({c.DECISIONS_DIFFERENT: 1})


def test_suspect_order_and_evidence_do_not_matter() -> None:
    expected = Expected(
        {("j1", 0): decision("j1", suspect_nodes=["n1", "n2"])}, Counter(), {("j1", 0): 0}, ()
    )
    got = decision("j1", suspect_nodes=["n2", "n1"], evidence=[{"other": True}])
    observed = Observed([got], [], [], [{"job_id": "j1", "attempt": 0}], [])
    assert c.check(expected, observed, lambda ts: 0).findings == []


def test_a_decision_replay_never_made_is_different() -> None:
    result = run(decisions=[*clean()["decisions"], decision("j9", action="reject")])
    assert columns(result) == Counter({c.DECISIONS_DIFFERENT: 1})


def test_quarantine_missing_false_and_duplicated() -> None:
    assert columns(run(quarantines=[])) == Counter({c.QUARANTINES_MISSING: 1})
    extra = {"node": "n7", "state": "quarantined", "ts_ms": 0, "job_id": "j2"}
    assert columns(run(quarantines=[*clean()["quarantines"], extra])) == Counter(
        {c.QUARANTINES_FALSE: 1}
    )
    twice = clean()["quarantines"] * 2
    assert columns(run(quarantines=twice)) == Counter({c.QUARANTINES_DUPLICATED: 1})


def test_a_missing_quarantine_is_in_the_round_replay_made_it() -> None:
    expected = Expected(
        EXPECTED.decisions, EXPECTED.quarantines, EXPECTED.terminations, EXPECTED.bad, {"n1": 1}
    )
    observed = Observed(**(clean() | {"quarantines": [], "quarantine_requests": []}))
    (missing,) = c.check(expected, observed, lambda ts: 0).findings
    assert (missing.column, missing.round) == (c.QUARANTINES_MISSING, 1)


def test_a_false_request_alone_is_a_false_quarantine() -> None:
    requests = [*clean()["quarantine_requests"], {"node": "n8", "ts_ms": 0}]
    result = run(quarantine_requests=requests)
    assert columns(result) == Counter({c.QUARANTINES_FALSE: 1})


def test_requeue_missing_duplicated_and_false() -> None:
    assert columns(run(requeues=[])) == Counter({c.REQUEUES_MISSING: 1})
    twice = clean()["requeues"] * 2
    assert columns(run(requeues=twice)) == Counter({c.REQUEUES_DUPLICATED: 1})
    wrong = [*clean()["requeues"], {"job_id": "j2", "attempt": 0}]
    assert columns(run(requeues=wrong)) == Counter({c.REQUEUES_FALSE: 1})


def test_dead_letters_missing_duplicated_and_false() -> None:
    assert columns(run(dead_letters=[])) == Counter({c.DEAD_LETTERS_MISSING: 1})
    # The second copy is in the consumers' format (`value`, no coordinates match needed).
    other = {"topic": "p.jobs.events", "partition": None, "value": BAD.raw}
    both = [*clean()["dead_letters"], other]
    assert columns(run(dead_letters=both)) == Counter({c.DEAD_LETTERS_DUPLICATED: 1})
    good = {"topic": "p.gpu.xid", "partition": 0, "offset": 3, "raw": "{}", "error": "?"}
    stray = [*clean()["dead_letters"], good]
    assert columns(run(dead_letters=stray)) == Counter({c.DEAD_LETTERS_FALSE: 1})


def test_an_identical_dead_letter_written_again_is_a_redelivery_not_a_duplicate() -> None:
    """Exactly once by key: an at-least-once writer re-sends the same letter after a crash;
    only its write time differs."""
    (letter,) = clean()["dead_letters"]
    # The harness adds each record's Kafka write time (WALL_MS): it differs too.
    again = {**letter, "dead_lettered_ts_ms": 123, c.WALL_MS: 5}
    result = run(dead_letters=[{**letter, "dead_lettered_ts_ms": 100, c.WALL_MS: 4}, again])
    assert columns(result) == Counter({c.DEAD_LETTERS_REDELIVERED: 1})
    assert c.DEAD_LETTERS_REDELIVERED in c.INFORMATION  # counted, not a violation


def test_a_partition_left_behind_is_stalled() -> None:
    lag = {"gpufailover-classifier": {"training.telemetry[1]": 177}}
    result = c.check(EXPECTED, Observed(**clean(), lag=lag), lambda ts: 0)
    (stalled,) = result.findings
    assert stalled.column == c.STALLED
    assert stalled.subject == "gpufailover-classifier training.telemetry[1]"


def test_every_violation_kind_has_a_test_above() -> None:
    covered = {
        c.DECISIONS_MISSING, c.DECISIONS_DUPLICATED, c.DECISIONS_DIFFERENT, c.QUARANTINES_MISSING,
        c.QUARANTINES_FALSE, c.QUARANTINES_DUPLICATED, c.REQUEUES_MISSING, c.REQUEUES_DUPLICATED,
        c.REQUEUES_FALSE, c.DEAD_LETTERS_MISSING, c.DEAD_LETTERS_DUPLICATED, c.DEAD_LETTERS_FALSE,
        c.OVERDUE, c.STALLED,
    }  # fmt: skip
    assert covered == set(c.VIOLATIONS)


def test_a_requeue_superseded_by_a_later_attempt_is_not_missing() -> None:
    later = decision("j1", 1)
    decisions = [*clean()["decisions"], later]
    expected = Expected(
        {**EXPECTED.decisions, ("j1", 1): later}, EXPECTED.quarantines,
        {**EXPECTED.terminations, ("j1", 1): 2}, EXPECTED.bad,
    )  # fmt: skip
    requeues = [{"job_id": "j1", "attempt": 1}]
    observed = Observed(**(clean() | {"decisions": decisions, "requeues": requeues}))
    result = c.check(expected, observed, lambda ts: 0)
    (superseded,) = result.findings
    assert superseded.column == c.REQUEUES_SUPERSEDED and superseded.subject == "j1/0"
    assert result.violations() == []
