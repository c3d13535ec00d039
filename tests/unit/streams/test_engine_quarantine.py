"""Rule 6: every hardware or precursor record quarantines its node, job or no job; software,
transient and ignored records never do; one quarantine record per node while it stays quarantined;
a released node is quarantined again by a new fault."""

from __future__ import annotations

import pytest
from failover_harness import (
    GRACE,
    POLICY,
    T0,
    Run,
    S,
    health,
    nodes,
    quarantines_of,
    run,
    terminated,
    xid,
)

from schemas.quarantine import QuarantineRecord

A, B, C = nodes(3)
T = T0 + 3600 * S

HARDWARE_XIDS = sorted(c for c, cls in POLICY.xid_class.items() if cls == "hardware")
PRECURSOR_XIDS = sorted(c for c, cls in POLICY.xid_class.items() if cls == "precursor")
NEVER_XIDS = sorted(c for c, cls in POLICY.xid_class.items() if cls in ("software", "ignore"))


@pytest.mark.parametrize("code", HARDWARE_XIDS)
def test_every_hardware_xid_quarantines_its_node_without_any_job(code: int) -> None:
    r = run(xid(A, code, T))
    (q,) = r.quarantines
    assert (q.node, q.reason, q.job_id, q.ts_ms) == (A, "hardware", None, T)
    assert (q.evidence.kind, q.evidence.code) == ("xid", code)


@pytest.mark.parametrize("code", PRECURSOR_XIDS)
def test_every_precursor_xid_quarantines_its_node(code: int) -> None:
    (q,) = run(xid(A, code, T)).quarantines
    assert (q.node, q.reason) == (A, "precursor")


@pytest.mark.parametrize(
    ("condition", "reason"),
    [
        (c, "hardware")
        for c in sorted(POLICY.condition_class)
        if POLICY.condition_class[c] == "hardware"
    ]
    + [("row_remap_pending", "precursor"), ("ecc_correctable_rate", "precursor")],
)
def test_hardware_and_precursor_conditions_quarantine_their_node(
    condition: str, reason: str
) -> None:
    (q,) = run(health(B, condition, T, gpu=6)).quarantines
    assert (q.node, q.reason, q.evidence.kind, q.evidence.code) == (B, reason, "health", condition)
    assert q.evidence.gpu_index == 6


def test_conditions_quarantining_are_exactly_those_of_the_issue() -> None:
    hw = {c for c, cls in POLICY.condition_class.items() if cls == "hardware"}
    assert hw == {
        "gpu_lost",
        "ecc_uncorrectable",
        "row_remap_failure",
        "thermal",
        "power",
        "pcie",
    } | {"nvlink"}


@pytest.mark.parametrize("code", NEVER_XIDS)
def test_software_and_ignored_xids_never_quarantine(code: int) -> None:
    r = run(xid(A, code, T), terminated("job-1", [A], T + S))
    assert r.quarantines == []


@pytest.mark.parametrize("condition", ["throttle", "ok"])
def test_observe_only_conditions_never_quarantine(condition: str) -> None:
    assert run(health(A, condition, T)).quarantines == []


def test_unknown_xid_codes_never_quarantine() -> None:
    assert run(xid(A, 999, T), xid(A, 4096, T, gpu=1)).quarantines == []


@pytest.mark.parametrize("reason", ["OOMKilled", "NCCLTimeout", "Hang", "WorkerLost", "Error"])
def test_termination_reasons_never_quarantine(reason: str) -> None:
    assert run(terminated("job-1", [A, B], T, reason=reason)).quarantines == []


def test_one_quarantine_record_per_node_while_quarantined() -> None:
    r = run(
        xid(A, 63, T),  # precursor first
        xid(A, 79, T + S),
        xid(A, 48, T + 2 * S, gpu=3),
        health(A, "gpu_lost", T + 3 * S),
        terminated("job-1", [A], T + 4 * S),
        xid(A, 94, T + 10 * 3600 * S),  # much later, still quarantined
    )
    (q,) = r.quarantines
    assert (q.node, q.reason, q.evidence.code) == (A, "precursor", 63)


def test_each_faulty_node_gets_its_own_quarantine_record() -> None:
    r = run(xid(A, 79, T), xid(B, 79, T + S), xid(A, 79, T + 2 * S), health(C, "pcie", T + 3 * S))
    assert r.quarantined_nodes() == [A, B, C]


def test_released_node_is_quarantined_again_by_a_new_fault() -> None:
    r = Run()
    r.feed(xid(A, 79, T))
    r.release(A)
    (q,) = quarantines_of(r.feed(xid(A, 48, T + 3600 * S)))
    assert (q.node, q.evidence.code) == (A, 48)
    assert r.quarantined_nodes() == [A, A]


def test_release_alone_emits_nothing_and_clean_records_do_not_requarantine() -> None:
    r = Run()
    r.feed(xid(A, 79, T))
    r.release(A)
    r.release(A)  # a second release is harmless
    r.feed(health(A, "ok", T + S), xid(A, 13, T + 2 * S))
    assert r.quarantined_nodes() == [A]


def test_release_of_a_node_never_quarantined_is_harmless() -> None:
    r = Run()
    r.release(C)
    r.feed(xid(C, 79, T))
    assert r.quarantined_nodes() == [C]


def test_quarantine_names_the_job_waiting_on_the_node() -> None:
    r = run(terminated("job-1", [A, B], T), xid(B, 79, T + 20 * S))
    (q,) = r.quarantines
    assert (q.node, q.job_id) == (B, "job-1")


def test_quarantine_before_any_termination_names_no_job() -> None:
    r = run(xid(A, 79, T - S), terminated("job-1", [A], T))
    (q,) = r.quarantines
    assert q.job_id is None


def test_quarantine_does_not_name_a_job_whose_window_the_record_is_outside() -> None:
    """A fault stamped after the job's grace is not that job's evidence, so not its quarantine."""
    r = run(terminated("job-1", [A], T), xid(A, 79, T + GRACE + 1))
    (q,) = r.quarantines
    assert q.job_id is None


def test_quarantine_output_is_a_valid_nodes_quarantine_record() -> None:
    (q,) = run(xid(A, 119, T, gpu=2)).quarantines
    rec = QuarantineRecord.from_dict(q.to_dict())
    assert (rec.node, rec.state, rec.reason, rec.job_id, rec.ts_ms) == (
        A,
        "quarantined",
        "hardware",
        None,
        T,
    )
    assert rec.evidence[0].code == 119


def test_hardware_verdict_suspects_are_always_quarantined() -> None:
    job_nodes = nodes(8)
    r = run(
        xid(job_nodes[2], 79, T - S),
        health(job_nodes[6], "nvlink", T - S),
        terminated("job-1", job_nodes, T, failover=False),
        health(job_nodes[7], "power", T + S),  # after the decision: quarantined, not a suspect
    )
    d = r.decision("job-1")
    assert d.suspect_nodes == (job_nodes[2], job_nodes[6])
    assert r.quarantined_nodes() == [job_nodes[2], job_nodes[6], job_nodes[7]]


def test_a_release_forgets_the_repaired_fault_but_not_what_came_after() -> None:
    # The node failed, was repaired and released; a job placed on it later dies of a
    # transient NCCL timeout. The repaired XID 79 is not evidence against the node any more;
    # a fault after the release is.
    r = Run()
    r.feed(xid(A, 79, T), xid(B, 79, T))
    r.release(A, T + 120 * S)
    r.release(B, T - S)  # released before its fault: the fault still counts
    r.feed(terminated("job-2", [A], T + 300 * S, reason="NCCLTimeout"))
    r.feed(terminated("job-3", [B], T + 300 * S, reason="NCCLTimeout"))
    r.finish()
    assert (r.decision("job-2").verdict, r.decision("job-2").suspect_nodes) == ("transient", ())
    assert (r.decision("job-3").verdict, r.decision("job-3").suspect_nodes) == ("hardware", (B,))


def test_a_release_counts_by_its_time_whatever_order_it_arrives_in() -> None:
    # On Kafka the release (nodes.quarantine) and the XID (gpu.xid) come on different topics in
    # no fixed order: the release may be read before the older XID it repaired.
    r = Run()
    r.release(A, T + 120 * S)
    r.feed(xid(A, 79, T))
    r.feed(terminated("job-4", [A], T + 300 * S, reason="NCCLTimeout"))
    r.feed(terminated("job-5", [A], T + 60 * S, reason="NCCLTimeout"))  # ended before repair
    r.finish()
    assert r.decision("job-4").verdict == "transient"
    assert (r.decision("job-5").verdict, r.decision("job-5").suspect_nodes) == ("hardware", (A,))
