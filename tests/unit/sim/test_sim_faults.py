"""Fault plans: what each hard case puts on the wire, and when."""

from __future__ import annotations

import random

import pytest

from producers.sim.faults import Timing, plan
from producers.sim.scenarios import Draw

T = Timing()
NODES = ("n1", "n2", "n3", "n4")
AT = 1_000_000


def _plan(d: Draw, node: str = "n2", seed: int = 1):  # type: ignore[no-untyped-def]
    return plan(d, random.Random(seed), T, job_nodes=NODES, node=node, decoy_node="n9")


def test_gpu_fault_xid_on_the_faulty_node_then_the_termination() -> None:
    p = _plan(Draw(AT, "gpu_xid", 79))
    assert p.onset_ms == AT and p.faulty_node == "n2" and p.reason == "WorkerLost"
    (sig,) = p.signals
    assert (sig.node, sig.kind, sig.code, sig.cls, sig.ts_ms) == ("n2", "xid", 79, "hardware", AT)
    assert p.term_ms is not None and AT + 2_000 <= p.term_ms <= AT + 20_000


def test_late_xid_comes_after_the_termination_inside_the_grace() -> None:
    for seed in range(20):
        p = _plan(Draw(AT, "gpu_xid", 119, late_xid=True), seed=seed)
        (sig,) = p.signals
        assert p.term_ms is not None
        assert p.term_ms + 10_000 <= sig.ts_ms <= p.term_ms + 90_000 < p.term_ms + 120_000


def test_nccl_cascade_only_the_faulty_node_has_the_hardware_signal() -> None:
    p = _plan(Draw(AT, "ecc_xid", 94, cascade=True), node="n3")
    assert p.reason == "NCCLTimeout" and p.term_ms == AT + 300_000
    hardware = [s for s in p.signals if s.cls == "hardware"]
    assert [(s.node, s.code) for s in hardware] == [("n3", 94)]
    assert p.flags == ("cascade",)
    peers = sorted(s.node for s in p.signals if s.part == "peer")
    assert peers == ["n1", "n2", "n4"]
    assert all(s.code == 45 and s.cls == "ignore" and s.ts_ms >= p.term_ms for s in p.signals
               if s.part == "peer")  # fmt: skip


def test_single_node_job_has_no_cascade() -> None:
    p = plan(Draw(AT, "gpu_xid", 79, cascade=True), random.Random(1), T, job_nodes=("n1",),
             node="n1")  # fmt: skip
    assert p.reason == "WorkerLost" and not [s for s in p.signals if s.part == "peer"]
    assert "cascade" not in p.flags  # drawn, but a single node has no peers to time out


def test_flood_repeats_the_same_xid_on_the_same_gpu() -> None:
    p = _plan(Draw(AT, "app_xid", 31, flood=True))
    xids = [s for s in p.signals if s.kind == "xid"]
    assert len(xids) == T.flood_records
    assert {(s.node, s.code, s.gpu_index, s.cls) for s in xids} == {
        ("n2", 31, xids[0].gpu_index, "software")
    }
    assert xids[-1].ts_ms - xids[0].ts_ms <= T.flood_span_s * 1000
    assert p.flags == ("flood",)


def test_precursor_announces_the_ecc_fault_on_the_same_node_minutes_before() -> None:
    p = _plan(Draw(AT, "ecc_xid", 48, precursor=True))
    pre, fault = p.signals
    assert pre.part == "precursor" and pre.cls == "precursor" and pre.code in (63, 92)
    assert pre.ts_ms == AT and pre.node == fault.node == "n2"
    assert AT + 120_000 <= p.onset_ms == fault.ts_ms <= AT + 480_000


def test_false_evidence_is_an_unrelated_hardware_xid_before_a_software_failure() -> None:
    p = _plan(Draw(AT, "oom", None, false_evidence=True))
    (spurious,) = p.signals
    assert spurious.part == "spurious" and spurious.cls == "hardware" and spurious.node in NODES
    assert p.spurious_node == spurious.node and p.faulty_node is None
    assert p.reason == "OOMKilled" and p.exit_code == 137
    assert p.term_ms is not None and p.term_ms - 600_000 < spurious.ts_ms < p.onset_ms


def test_hang_has_no_signal_and_ends_after_the_hang_timeout() -> None:
    p = _plan(Draw(AT, "hang", None))
    assert p.signals == () and p.reason == "Hang" and p.term_ms == AT + 600_000


def test_decoy_is_on_the_node_outside_the_job() -> None:
    p = _plan(Draw(AT, "oom", None, decoy=True))
    (decoy,) = p.signals
    assert decoy.node == "n9" and decoy.cls == "software" and decoy.part == "decoy"


@pytest.mark.parametrize("scenario", ["precursor", "idle_fault", "other_tenant_xid"])
def test_node_scenarios_kill_no_job(scenario: str) -> None:
    p = plan(Draw(AT, scenario, None), random.Random(1), T, node="n7")
    assert p.term_ms is None and [s.node for s in p.signals] == ["n7"]
    assert p.faulty_node == (None if scenario == "other_tenant_xid" else "n7")


def test_no_record_is_stamped_before_the_plan_starts() -> None:
    rng = random.Random(11)
    names = ["gpu_xid", "ecc_xid", "app_xid", "nvlink", "oom", "hang", "ecc_health"]
    for i in range(500):
        d = Draw(AT, names[i % len(names)], None, late_xid=i % 3 == 0, cascade=i % 4 == 0,
                 precursor=i % 5 == 0, false_evidence=i % 2 == 0, decoy=True)  # fmt: skip
        p = plan(d, rng, T, job_nodes=NODES, node="n1", decoy_node="n9")
        assert all(s.ts_ms >= AT for s in p.signals)
        assert p.onset_ms >= AT
