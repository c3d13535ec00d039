"""The Slurm demo's fleet logic without Slurm or Kafka: what it reads from `scontrol`, which job
it breaks, what it schedules, and the report's checks."""

from __future__ import annotations

from producers.sim.faults import Signal
from producers.sim.slurm_fleet import GRACE_S, HOOK_SLACK_S, SLURM_SCENARIOS, Kill, SlurmFleet
from producers.sim.slurm_report import checks, render, summarize
from producers.sim.truth import Mark, Seen

NODES = ("gpu-1", "gpu-2", "gpu-3", "gpu-4")
T0 = 1_700_000_000_000


def job(
    job_id: str, state: str, nodes: str, restarts: int = 0, exc: str = "(null)"
) -> dict[str, str]:
    return {
        "JobId": job_id,
        "JobState": state,
        "NodeList": nodes,
        "Restarts": str(restarts),
        "ExcNodeList": exc,
    }


def fleet() -> SlurmFleet:
    return SlurmFleet(NODES, seed=1, start_ms=T0, mean_gap_s=5.0, repair_s=20.0)


def seen(job_id: str, attempt: int, verdict: str, action: str, suspects: tuple[str, ...]) -> Seen:
    return Seen(job_id, attempt, verdict, action, suspects, (), T0, T0)


def test_only_scenarios_slurm_reports_as_meant_are_drawn() -> None:
    names = {s.name for s in SLURM_SCENARIOS}
    assert {"gpu_xid", "app_xid", "unknown"} <= names
    assert not names & {"oom", "nccl_unknown", "hang", "idle_fault", "other_tenant_xid"}


def test_observe_expands_hostlists_and_keeps_the_latest_exclusion_of_a_requeue() -> None:
    f = fleet()
    drained = {"NodeName": "gpu-2", "State": "IDLE+DRAIN", "Reason": "gpufailover: hardware xid 79"}
    theirs = {"NodeName": "gpu-4", "State": "IDLE+DRAIN", "Reason": "operator: fan"}
    f.observe([job("7", "PENDING", "(null)", 1)], [drained, theirs])
    assert f.requeued[("7", 0)] == ()  # requeuehold seen before the ExcNodeList update
    f.observe([job("7", "RUNNING", "gpu-[1,3]", 1, "gpu-2")], [])
    assert f.jobs["7"].nodes == ("gpu-1", "gpu-3")
    assert f.requeued[("7", 0)] == ("gpu-2",) and f.ran_again[("7", 0)] == ("gpu-1", "gpu-3")
    assert f.drained_seen == f.drained_now == {"gpu-2"}  # the operator's drain is not ours
    f.observe([], [{"NodeName": "gpu-2", "State": "IDLE"}])
    assert f.drained_now == set() and f.drained_seen == {"gpu-2"}


def test_an_incident_breaks_one_running_job_once_per_attempt_and_schedules_its_kill() -> None:
    f = fleet()
    f.sizes = {"1": 2, "2": 1}
    f.observe([job("1", "RUNNING", "gpu-[1-2]"), job("2", "PENDING", "(null)")], [])
    now = f.next_incident_ms
    f.maybe_incident(now, accepting=True)
    assert [(i.job_id, i.attempt, i.nodes) for i in f.incidents] == [("1", 0, ("gpu-1", "gpu-2"))]
    inc = f.incidents[0]
    assert inc.term_ms is not None
    f.maybe_incident(f.next_incident_ms, accepting=True)
    assert len(f.incidents) == 1  # job 1's attempt 0 is already hit, job 2 is not running
    due = f.due(inc.term_ms)
    kills = [x for x in due if isinstance(x, Kill)]
    assert kills == [Kill("1", 0, 1)]
    assert all(x.node in inc.nodes or "decoy" in inc.flags for x in due if isinstance(x, Signal))
    f.killed(kills[0], T0)
    assert inc.term_wall_ms == T0 and f.outstanding() >= 1


def test_a_node_inside_the_last_dead_jobs_grace_is_not_broken_again() -> None:
    f = fleet()
    f.sizes = {"1": 2}
    f.observe([job("1", "RUNNING", "gpu-[1-2]")], [])
    f.maybe_incident(f.next_incident_ms, accepting=True)
    term = f.incidents[0].term_ms
    assert term is not None
    f.sizes["3"] = 1
    f.observe([job("3", "RUNNING", "gpu-2")], [])
    f.next_incident_ms = term
    settled = term + (GRACE_S + HOOK_SLACK_S) * 1000
    f.maybe_incident(settled, accepting=True)
    assert len(f.incidents) == 1
    f.maybe_incident(settled + 1, accepting=True)
    assert [i.job_id for i in f.incidents] == ["1", "3"]


def test_the_grading_window_ends_at_the_termination_the_hook_published() -> None:
    f = fleet()
    f.sizes = {"1": 1}
    f.observe([job("1", "RUNNING", "gpu-1")], [])
    f.maybe_incident(f.next_incident_ms, accepting=True)
    killed_at = f.incidents[0].term_ms
    assert killed_at is not None
    f.on_decision(seen("1", 0, "unknown", "reject", ()), killed_at + 2_500)
    assert f.incidents[0].term_ms == killed_at + 2_500


def test_a_rejected_job_frees_its_nodes_and_a_failover_does_not() -> None:
    f = fleet()
    f.sizes = {"1": 2, "2": 2}
    f.on_decision(seen("1", 0, "hardware", "failover", ("gpu-1",)))
    assert f.room() == 0
    f.on_decision(seen("2", 0, "software", "reject", ()))
    assert f.room() == 2


def test_quarantines_before_the_run_are_the_canary_and_count_for_nothing() -> None:
    f = fleet()
    assert f.on_quarantine("gpu-1", "quarantined", T0 - 3_600_000) is None
    assert f.on_quarantine("gpu-1", "released", T0 + 1) is None
    assert f.on_quarantine("gpu-1", "quarantined", T0 + 1) == 20.0
    assert f.quarantines == [("gpu-1", T0 + 1)]


def test_the_report_fails_when_slurm_did_not_do_what_the_pipeline_decided() -> None:
    f = fleet()
    f.on_quarantine("gpu-1", "quarantined", T0 + 1)
    f.on_decision(seen("1", 0, "hardware", "failover", ("gpu-1",)))
    stats = {"wall_s": 60.0, "drain_s": 1.0, "stopped": None, "seed": 1, "prefix": "p."}
    s = summarize(f, stats, 15_000, GRACE_S * 1000)
    failed = {text for text, ok in checks(s) if not ok}
    assert failed == {
        "the nodes drained in Slurm are the quarantined nodes",
        "every failover requeued in Slurm (same JobId) with its suspects excluded",
        "no healthy node quarantined (outside known false-evidence cases)",
    }
    f.drained_seen.add("gpu-1")
    f.observe([job("1", "RUNNING", "gpu-3", 1, "gpu-1")], [])
    f.marks["gpu-1"] = [Mark(T0, "broken")]
    s = summarize(f, stats, 15_000, GRACE_S * 1000)
    assert all(ok for _, ok in checks(s)), checks(s)
    text = render(s)
    assert "slurm requeued 1/1 failovers" in text and "(= the quarantined nodes)" in text
