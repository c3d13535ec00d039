"""Rule 1: evidence = records on the job's nodes with T - lookback <= ts_ms <= T + grace, plus the
termination's own reason."""

from __future__ import annotations

from failover_harness import GRACE, LOOKBACK, T0, S, health, nodes, run, terminated, xid

A, B, C = nodes(3)
T = T0 + 3600 * S


def test_hardware_xid_exactly_at_lookback_start_is_evidence() -> None:
    r = run(xid(A, 79, T - LOOKBACK), terminated("job-1", [A, B], T))
    d = r.decision("job-1")
    assert d.verdict == "hardware"
    assert d.suspect_nodes == (A,)
    assert [(e.node, e.code, e.ts_ms) for e in d.evidence] == [(A, 79, T - LOOKBACK)]


def test_evidence_one_ms_before_lookback_is_excluded() -> None:
    r = run(xid(A, 79, T - LOOKBACK - 1), terminated("job-1", [A, B], T))
    d = r.decision("job-1")
    assert d.verdict == "unknown"
    assert d.suspect_nodes == ()
    assert d.evidence == ()


def test_software_evidence_before_lookback_is_excluded() -> None:
    r = run(xid(A, 31, T - LOOKBACK - 1), terminated("job-1", [A], T, reason="NCCLTimeout"))
    d = r.decision("job-1")
    assert d.verdict == "transient"
    assert [e.kind for e in d.evidence] == ["reason"]


def test_late_hardware_xid_inside_grace_is_evidence() -> None:
    r = run(terminated("job-1", [A, B], T), xid(B, 48, T + 60 * S))
    d = r.decision("job-1")
    assert d.verdict == "hardware"
    assert d.suspect_nodes == (B,)


def test_late_hardware_xid_exactly_at_grace_end_is_evidence() -> None:
    r = run(terminated("job-1", [A, B], T), xid(B, 48, T + GRACE))
    assert r.decision("job-1").verdict == "hardware"


def test_late_hardware_xid_one_ms_after_grace_is_not_evidence() -> None:
    r = run(terminated("job-1", [A, B], T), xid(B, 48, T + GRACE + 1))
    d = r.decision("job-1")
    assert d.verdict == "unknown"
    assert d.evidence == ()
    # not evidence for the job, but still a hardware record: its node is quarantined (rule 6)
    assert r.quarantined_nodes() == [B]


def test_late_health_condition_inside_grace_is_evidence() -> None:
    r = run(terminated("job-1", [A], T), health(A, "gpu_lost", T + 30 * S))
    d = r.decision("job-1")
    assert d.verdict == "hardware"
    assert [(e.kind, e.code) for e in d.evidence] == [("health", "gpu_lost")]


def test_xid_on_node_outside_the_job_is_not_evidence() -> None:
    r = run(xid(C, 79, T - 5 * S), terminated("job-1", [A, B], T, reason="OOMKilled"))
    d = r.decision("job-1")
    assert d.verdict == "software"
    assert d.suspect_nodes == ()
    assert all(e.node != C for e in d.evidence)
    # the outside node is still quarantined for its own fault
    assert r.quarantined_nodes() == [C]


def test_late_xid_on_node_outside_the_job_is_not_evidence() -> None:
    r = run(terminated("job-1", [A, B], T), xid(C, 79, T + 5 * S))
    d = r.decision("job-1")
    assert d.verdict == "unknown"
    assert d.evidence == ()


def test_termination_reason_is_evidence_of_kind_reason() -> None:
    r = run(terminated("job-1", [A], T, reason="OOMKilled"))
    (ev,) = r.decision("job-1").evidence
    assert (ev.node, ev.kind, ev.code, ev.cls, ev.ts_ms) == (
        None,
        "reason",
        "OOMKilled",
        "software",
        T,
    )


def test_unclassified_reason_is_no_evidence() -> None:
    r = run(terminated("job-1", [A], T, reason="Error"))
    d = r.decision("job-1")
    assert d.verdict == "unknown"
    assert d.evidence == ()


def test_evidence_lists_node_gpu_kind_code_time_and_class() -> None:
    r = run(xid(A, 94, T - 2 * S, gpu=5), terminated("job-1", [A], T))
    (ev,) = r.decision("job-1").evidence
    assert ev.to_dict() == {
        "node": A,
        "gpu_index": 5,
        "kind": "xid",
        "code": 94,
        "ts_ms": T - 2 * S,
        "class": "hardware",
        "count": 1,
        "last_ts_ms": T - 2 * S,
    }


def test_evidence_is_sorted_by_time_then_node() -> None:
    r = run(
        xid(B, 13, T - 1 * S),
        xid(A, 31, T - 9 * S),
        xid(A, 13, T - 1 * S),
        terminated("job-1", [A, B], T),
    )
    got = [(e.ts_ms, e.node) for e in r.decision("job-1").evidence]
    assert got == [(T - 9 * S, A), (T - 1 * S, A), (T - 1 * S, B)]
