"""The Slurm quarantine actuator against the real cluster (no broker needed: it only talks to
slurmctld; the pipeline tests drive it from Kafka)."""

from __future__ import annotations

import pytest

from consumers.quarantine.actions import QUARANTINE, RELEASE
from consumers.quarantine.actuator_slurm import SlurmActuator
from schemas.decisions import Evidence
from schemas.quarantine import QuarantineRecord
from tests.integration.slurm_cluster import SlurmCluster, wait_for

XID79 = Evidence("gpu-2", 3, "xid", 79, 1_000, "hardware")


def record(node: str, state: str = "quarantined") -> QuarantineRecord:
    return QuarantineRecord(node, state, "hardware", (XID79,), "42", 1_000)


@pytest.fixture
def actuator(slurm: SlurmCluster, monkeypatch: pytest.MonkeyPatch) -> SlurmActuator:
    monkeypatch.setenv("SLURM_CONF", str(slurm.conf))
    return SlurmActuator()


async def test_quarantine_drains_with_our_reason_under_a_running_job_and_release_resumes(
    slurm: SlurmCluster, actuator: SlurmActuator
) -> None:
    job = slurm.sbatch("-N", "2", "-w", "gpu-[1-2]", "--wrap", "sleep 300")
    slurm.wait_job(job, "running", lambda j: j.get("JobState") == "RUNNING")
    await actuator.apply(QUARANTINE, record("gpu-2"))
    await actuator.apply(QUARANTINE, record("gpu-2"))  # redelivered: a no-op, no error
    node = slurm.node("gpu-2")
    assert node["State"] == "MIXED+DRAIN"
    assert node["Reason"].startswith("gpufailover: hardware xid 79 gpu 3 job 42")
    assert slurm.job(job)["JobState"] == "RUNNING"  # draining does not kill the job
    await actuator.apply(RELEASE, record("gpu-2", "released"))
    # RESUME shows the node not responding for about a second, then back in service.
    assert "DRAIN" not in slurm.node_state("gpu-2") and "Reason" not in slurm.node("gpu-2")
    await actuator.apply(RELEASE, record("gpu-2", "released"))  # again: nothing to do
    wait_for("gpu-2 back in service", lambda: slurm.node_state("gpu-2") == "MIXED")


async def test_an_operator_drain_is_left_alone_and_outlives_our_release(
    slurm: SlurmCluster, actuator: SlurmActuator
) -> None:
    slurm.run("scontrol", "update", "NodeName=gpu-3", "State=DRAIN", "Reason=bad fan, ticket 7")
    await actuator.apply(QUARANTINE, record("gpu-3"))
    assert actuator.foreign == {"gpu-3": slurm.node("gpu-3")["Reason"]}
    await actuator.apply(RELEASE, record("gpu-3", "released"))
    node = slurm.node("gpu-3")
    assert "DRAIN" in node["State"] and node["Reason"].startswith("bad fan, ticket 7")


async def test_reconcile_drains_what_slurm_forgot_and_resumes_what_was_released(
    slurm: SlurmCluster, actuator: SlurmActuator
) -> None:
    # While the service was away: someone resumed gpu-1 (still quarantined for us), and gpu-4,
    # drained by us, was released on nodes.quarantine. gpu-3's operator drain is not ours.
    await actuator.apply(QUARANTINE, record("gpu-4"))
    slurm.run("scontrol", "update", "NodeName=gpu-3", "State=DRAIN", "Reason=operator")
    desired = {
        "gpu-1": record("gpu-1"),
        "gpu-3": record("gpu-3", "released"),
        "gpu-4": record("gpu-4", "released"),
    }
    changed = await SlurmActuator().reconcile(desired.get)
    assert changed == 2
    assert slurm.node("gpu-1")["Reason"].startswith("gpufailover: hardware")
    assert "DRAIN" in slurm.node_state("gpu-1")
    wait_for("gpu-4 idle", lambda: slurm.node_state("gpu-4") == "IDLE")
    assert "DRAIN" in slurm.node_state("gpu-3") and slurm.node_state("gpu-2") == "IDLE"
    assert await SlurmActuator().reconcile(desired.get) == 0  # now in agreement
