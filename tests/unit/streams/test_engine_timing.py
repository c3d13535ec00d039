"""Rules 4 and 5: when a decision is made, and that each (job, attempt) gets exactly one.

The completeness rule: a decision at `decided_ts_ms` (hardware: max(T, first hardware signal),
else T + grace) is made once the evidence watermark (largest ts_ms of gpu.xid/gpu.health seen)
has passed it, or at end of input, from the evidence stamped at or before it. Later records
change nothing. Duplicates are ignored; succeeded and cancelled decide nothing.
"""

from __future__ import annotations

import pytest
from failover_harness import (
    GRACE,
    T0,
    Run,
    S,
    decisions_of,
    health,
    job_event,
    nodes,
    quarantines_of,
    run,
    terminated,
    xid,
)

A, B, C, D = nodes(4)
T = T0 + 3600 * S


# -- immediate decisions on hardware ---------------------------------------------------------


def test_hardware_already_stored_decides_once_the_watermark_passes_the_termination() -> None:
    r = Run()
    r.feed(xid(A, 79, T - 5 * S))
    assert r.feed(terminated("job-1", [A, B], T)) == []
    assert r.feed(health(C, "ok", T)) == []  # a signal stamped T may still come: not complete
    (d,) = decisions_of(r.feed(health(C, "ok", T + 1)))
    assert (d.verdict, d.decided_ts_ms, d.terminated_ts_ms) == ("hardware", T, T)


def test_late_hardware_record_inside_grace_decides_once_the_watermark_passes_it() -> None:
    r = Run()
    assert r.feed(terminated("job-1", [A, B], T)) == []
    assert decisions_of(r.feed(xid(B, 94, T + 60 * S))) == []
    (d,) = decisions_of(r.feed(health(C, "ok", T + 60 * S + 1)))
    assert d.verdict == "hardware"
    assert d.suspect_nodes == (B,)
    assert d.decided_ts_ms == T + 60 * S


def test_evidence_stamped_after_the_decision_time_is_not_used() -> None:
    """Read already, but live it would not have been: it does not enter the decision."""
    r = Run()
    r.feed(xid(A, 64, T + 3 * S), health(C, "power", T + 51 * S), health(B, "thermal", T + 81 * S))
    r.feed(terminated("job-1", [A, B, C], T))
    r.finish()
    (d,) = r.decisions
    assert (d.verdict, d.suspect_nodes, d.decided_ts_ms) == ("hardware", (A,), T + 3 * S)
    assert [e.code for e in d.evidence] == [64]
    # They still quarantine their own nodes.
    assert sorted(r.quarantined_nodes()) == [A, B, C]


def test_software_evidence_does_not_decide_before_the_grace_ends() -> None:
    """Software can still be overruled by late hardware, so it waits for the watermark."""
    r = Run()
    r.feed(xid(A, 31, T - 5 * S))
    assert r.feed(terminated("job-1", [A, B], T)) == []
    assert decisions_of(r.feed(xid(B, 79, T + 90 * S))) == []
    (d,) = decisions_of(r.feed(health(C, "ok", T + 91 * S)))
    assert (d.verdict, d.suspect_nodes) == ("hardware", (B,))


# -- waiting for the watermark --------------------------------------------------------------


def test_watermark_exactly_at_grace_end_does_not_close_the_window() -> None:
    r = Run()
    r.feed(terminated("job-1", [A], T, reason="OOMKilled"))
    assert r.feed(health(C, "ok", T + GRACE)) == []
    assert r.decisions == []


def test_watermark_one_ms_past_grace_end_decides() -> None:
    r = Run()
    r.feed(terminated("job-1", [A], T, reason="OOMKilled"))
    r.feed(health(C, "ok", T + GRACE))
    (d,) = decisions_of(r.feed(health(C, "ok", T + GRACE + 1)))
    assert (d.verdict, d.action, d.decided_ts_ms) == ("software", "reject", T + GRACE)


def test_watermark_is_advanced_by_evidence_topics_only() -> None:
    """The evidence watermark is the time of gpu.xid/gpu.health (as on Kafka, where job events
    are read on other partitions, at another pace)."""
    for clock in (xid(D, 45, T + GRACE + 1), health(D, "ok", T + GRACE + 1)):
        r = Run()
        r.feed(terminated("job-1", [A], T))
        assert len(decisions_of(r.feed(clock))) == 1, clock
    for event in (
        job_event("other-job", "started", T + GRACE + 1, nodes=[D]),
        job_event("other-job", "succeeded", T + GRACE + 1),
    ):
        r = Run()
        r.feed(terminated("job-1", [A], T))
        assert decisions_of(r.feed(event)) == [], event


def test_a_record_behind_the_watermark_does_not_move_it_back() -> None:
    r = Run()
    r.feed(terminated("job-1", [A], T, reason="Hang"))
    r.feed(health(C, "ok", T + GRACE))
    r.feed(health(C, "ok", T - 300 * S))  # old record: the watermark stays at T + grace
    assert r.decisions == []
    assert len(decisions_of(r.feed(health(C, "ok", T + GRACE + 1)))) == 1


def test_end_of_input_decides_every_pending_termination() -> None:
    r = Run()
    r.feed(terminated("job-1", [A], T, reason="Hang"), terminated("job-2", [B], T + 1))
    assert r.decisions == []
    got = {(d.job_id, d.verdict) for d in decisions_of(r.finish())}
    assert got == {("job-1", "transient"), ("job-2", "unknown")}


def test_non_hardware_decision_time_is_the_end_of_the_grace() -> None:
    d = run(terminated("job-1", [A], T, reason="Hang")).decision("job-1")
    assert (d.terminated_ts_ms, d.decided_ts_ms) == (T, T + GRACE)


# -- records after the decision -------------------------------------------------------------


def test_hardware_record_after_an_unknown_decision_changes_nothing() -> None:
    r = Run()
    r.feed(terminated("job-1", [A], T))
    (first,) = decisions_of(r.feed(health(C, "ok", T + GRACE + 1)))
    out = r.feed(xid(A, 79, T + 10 * S))  # inside the old window, but after the decision
    assert decisions_of(out) == []
    r.finish()
    assert r.decisions == [first]
    # the record still quarantines its node (rule 6)
    assert [q.node for q in quarantines_of(out)] == [A]


def test_records_after_a_hardware_decision_change_nothing() -> None:
    r = Run()
    r.feed(xid(A, 79, T - S), terminated("job-1", [A, B], T))
    (first,) = decisions_of(r.feed(xid(B, 48, T + S)))
    r.feed(xid(A, 13, T + 2 * S), health(B, "gpu_lost", T + 3 * S))
    r.finish()
    assert r.decisions == [first]
    assert first.suspect_nodes == (A,)


# -- out of order ---------------------------------------------------------------------------


def test_xid_before_or_after_the_termination_gives_the_same_decision() -> None:
    before = run(xid(A, 48, T + 30 * S), terminated("job-1", [A, B], T)).decision("job-1")
    after = run(terminated("job-1", [A, B], T), xid(A, 48, T + 30 * S)).decision("job-1")
    assert before == after
    assert before.verdict == "hardware"


def test_termination_arriving_after_its_xid_with_a_later_timestamp() -> None:
    """The XID is stamped inside the grace but arrives first: it is still evidence."""
    d = run(xid(A, 79, T + 30 * S), terminated("job-1", [A], T)).decision("job-1")
    assert d.verdict == "hardware"
    assert d.decided_ts_ms == T + 30 * S


def test_xid_arriving_out_of_order_before_its_window_closes_is_evidence() -> None:
    r = Run()
    r.feed(terminated("job-1", [A], T), health(C, "ok", T + 100 * S))
    (d,) = decisions_of(r.feed(xid(A, 79, T - 30 * S)))  # stamped before T, arrives late
    assert d.verdict == "hardware"


def test_termination_arriving_after_the_watermark_passed_its_grace_decides_at_once() -> None:
    r = Run()
    r.feed(xid(A, 31, T - 5 * S), health(C, "ok", T + 500 * S))
    (d,) = decisions_of(r.feed(terminated("job-1", [A], T)))
    assert (d.verdict, d.evidence[0].code) == ("software", 31)


def test_late_termination_still_sees_hardware_stored_before_it() -> None:
    r = Run()
    r.feed(xid(A, 79, T - 5 * S), health(C, "ok", T + 500 * S))
    (d,) = decisions_of(r.feed(terminated("job-1", [A], T)))
    assert (d.verdict, d.suspect_nodes) == ("hardware", (A,))


# -- one decision per (job, attempt) --------------------------------------------------------


def test_duplicate_termination_while_pending_is_ignored() -> None:
    r = Run()
    r.feed(terminated("job-1", [A], T, reason="Hang"))
    r.feed(terminated("job-1", [A], T + 5 * S, reason="OOMKilled"))  # redelivered, different
    r.finish()
    (d,) = r.decisions
    assert d.verdict == "transient"  # the first termination wins
    assert r.pipeline.job_side.duplicates == 1


def test_duplicate_termination_after_the_decision_is_ignored() -> None:
    r = Run()
    r.feed(xid(A, 79, T - S), terminated("job-1", [A], T), health(C, "ok", T + 1))
    assert len(r.decisions) == 1
    r.feed(terminated("job-1", [A], T), terminated("job-1", [A], T + 10 * GRACE))
    r.finish()
    assert len(r.decisions) == 1
    assert r.pipeline.job_side.duplicates == 2


def test_each_attempt_gets_its_own_decision() -> None:
    r = run(
        xid(A, 79, T - S),
        terminated("job-1", [A, B], T, attempt=0),
        xid(C, 48, T + 600 * S),
        terminated("job-1", [C, D], T + 601 * S, attempt=1),
        terminated("job-1", [B, D], T + 2000 * S, attempt=2, reason="OOMKilled"),
    )
    got = [(d.attempt, d.verdict, d.action, d.next_attempt) for d in r.decisions]
    assert got == [
        (0, "hardware", "failover", 1),
        (1, "hardware", "failover", 2),
        (2, "software", "reject", None),
    ]


def test_same_attempt_number_of_different_jobs_are_not_duplicates() -> None:
    r = run(terminated("job-1", [A], T), terminated("job-2", [A], T))
    assert sorted(d.job_id for d in r.decisions) == ["job-1", "job-2"]


@pytest.mark.parametrize("etype", ["submitted", "started", "succeeded", "cancelled"])
def test_non_terminal_or_clean_job_events_produce_no_decision(etype: str) -> None:
    r = run(xid(A, 79, T - S), job_event("job-1", etype, T, nodes=[A]))
    assert r.decisions == []


def test_succeeded_after_a_termination_does_not_cancel_its_decision() -> None:
    r = run(terminated("job-1", [A], T, reason="Hang"), job_event("job-1", "succeeded", T + S))
    assert r.decision("job-1").verdict == "transient"


def test_termination_listing_a_node_twice_is_one_node() -> None:
    r = run(xid(A, 79, T - S), terminated("job-1", [A, A, B], T))
    d = r.decision("job-1")
    assert d.suspect_nodes == (A,)
    assert len(d.evidence) == 1


def test_late_termination_with_the_watermark_exactly_at_its_grace_end_stays_open() -> None:
    r = Run()
    r.feed(health(C, "ok", T + GRACE))
    assert r.feed(terminated("job-1", [A], T)) == []
    (d,) = decisions_of(r.feed(xid(A, 79, T + 10 * S)))
    assert d.verdict == "hardware"
