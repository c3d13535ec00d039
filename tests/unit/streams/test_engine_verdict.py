"""Rule 2: verdict by precedence hardware > software > transient > unknown; suspects are the nodes
with hardware evidence, and empty for any other verdict."""

from __future__ import annotations

from typing import Any

import pytest
from failover_harness import POLICY, T0, S, health, nodes, run, terminated, xid

A, B, C = nodes(3)
T = T0 + 3600 * S

HARDWARE_XIDS = [48, 64, 74, 79, 94, 95, 119, 120]
HARDWARE_CONDITIONS = ["gpu_lost", "ecc_uncorrectable", "row_remap_failure", "thermal", "power"]
HARDWARE_CONDITIONS += ["pcie", "nvlink"]


@pytest.mark.parametrize("code", HARDWARE_XIDS)
def test_hardware_xid_gives_hardware_verdict(code: int) -> None:
    d = run(xid(A, code, T - S), terminated("job-1", [A, B], T)).decision("job-1")
    assert (d.verdict, d.suspect_nodes) == ("hardware", (A,))


@pytest.mark.parametrize("condition", HARDWARE_CONDITIONS)
def test_hardware_condition_gives_hardware_verdict(condition: str) -> None:
    d = run(health(B, condition, T - S), terminated("job-1", [A, B], T)).decision("job-1")
    assert (d.verdict, d.suspect_nodes) == ("hardware", (B,))


@pytest.mark.parametrize("code", [13, 31, 43])
def test_software_xid_gives_software_verdict(code: int) -> None:
    d = run(xid(A, code, T - S), terminated("job-1", [A], T)).decision("job-1")
    assert (d.verdict, d.suspect_nodes) == ("software", ())


def test_oom_reason_gives_software_verdict() -> None:
    d = run(terminated("job-1", [A], T, reason="OOMKilled")).decision("job-1")
    assert (d.verdict, d.suspect_nodes) == ("software", ())


@pytest.mark.parametrize("reason", ["NCCLTimeout", "Hang", "WorkerLost"])
def test_transient_reason_gives_transient_verdict(reason: str) -> None:
    d = run(terminated("job-1", [A], T, reason=reason)).decision("job-1")
    assert (d.verdict, d.suspect_nodes) == ("transient", ())


def test_no_evidence_gives_unknown_verdict() -> None:
    d = run(terminated("job-1", [A], T)).decision("job-1")
    assert (d.verdict, d.suspect_nodes, d.evidence) == ("unknown", (), ())


@pytest.mark.parametrize(
    "record",
    [
        xid(A, 45, T - S),
        health(A, "throttle", T - S),
        health(A, "ok", T - S),
        xid(A, 63, T - S),
        xid(A, 92, T - S),
        health(A, "row_remap_pending", T - S),
        health(A, "ecc_correctable_rate", T - S),
    ],
    ids=["xid45", "throttle", "ok", "xid63", "xid92", "row_remap_pending", "ecc_correctable_rate"],
)
def test_ignored_and_precursor_records_alone_give_unknown(record: Any) -> None:
    d = run(record, terminated("job-1", [A], T)).decision("job-1")
    assert (d.verdict, d.suspect_nodes) == ("unknown", ())


def test_unknown_xid_code_is_never_hardware_and_is_counted() -> None:
    assert not POLICY.is_known_xid(999)
    r = run(xid(A, 999, T - S), xid(A, 0, T - S, gpu=1), terminated("job-1", [A], T))
    d = r.decision("job-1")
    assert (d.verdict, d.suspect_nodes, d.evidence) == ("unknown", (), ())
    assert r.pipeline.node_side.unknown_xids == 2
    assert r.quarantines == []


def test_hardware_beats_software_on_one_node() -> None:
    d = run(
        xid(A, 13, T - 20 * S),
        xid(A, 31, T - 10 * S, gpu=1),
        xid(A, 79, T - 5 * S, gpu=2),
        terminated("job-1", [A], T, reason="OOMKilled"),
    ).decision("job-1")
    assert (d.verdict, d.suspect_nodes) == ("hardware", (A,))
    assert {e.cls for e in d.evidence} == {"hardware", "software"}


def test_software_beats_transient_reason() -> None:
    d = run(xid(B, 31, T - S), terminated("job-1", [A, B], T, reason="NCCLTimeout")).decision(
        "job-1"
    )
    assert (d.verdict, d.suspect_nodes) == ("software", ())


def test_precursor_does_not_beat_transient_reason() -> None:
    d = run(xid(B, 63, T - S), terminated("job-1", [A, B], T, reason="Hang")).decision("job-1")
    assert d.verdict == "transient"


def test_suspects_are_every_node_with_hardware_evidence_sorted() -> None:
    job_nodes = nodes(4)
    d = run(
        xid(job_nodes[3], 79, T - 3 * S),
        health(job_nodes[0], "pcie", T - 2 * S),
        xid(job_nodes[1], 13, T - S),
        terminated("job-1", job_nodes, T),
    ).decision("job-1")
    assert d.suspect_nodes == (job_nodes[0], job_nodes[3])


def test_nccl_timeout_cascade_only_the_node_with_the_hardware_signal_is_suspect() -> None:
    job_nodes = nodes(8, first=17)
    bad = job_nodes[5]
    records = [health(n, "ok", T - 60 * S + i, gpu=i) for i, n in enumerate(job_nodes)]
    records += [xid(bad, 48, T - 40 * S, gpu=3), xid(bad, 94, T - 39 * S, gpu=3)]
    # the healthy peers only show noise: a throttle and an XID 45 (ignored)
    records += [health(n, "throttle", T - 20 * S) for n in job_nodes if n != bad]
    records += [xid(job_nodes[0], 45, T - 10 * S)]
    records += [terminated("job-cascade", job_nodes, T, reason="NCCLTimeout")]
    r = run(*records)
    d = r.decision("job-cascade")
    assert d.verdict == "hardware"
    assert d.action == "failover"
    assert d.suspect_nodes == (bad,)
    assert r.quarantined_nodes() == [bad]


def test_nccl_timeout_cascade_without_hardware_signal_is_transient_with_no_suspect() -> None:
    job_nodes = nodes(8, first=17)
    r = run(terminated("job-cascade", job_nodes, T, reason="NCCLTimeout"))
    d = r.decision("job-cascade")
    assert (d.verdict, d.action, d.suspect_nodes) == ("transient", "retry", ())
    assert r.quarantines == []
