"""The issue's end-to-end cases: real Slurm cluster + real broker + `gpufailover run` (classifier,
quarantine with the Slurm actuator, requeue with the Slurm stage, job status) + slurmctld's own
hooks. Every wait polls Slurm or a topic with a deadline."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from schemas.topics import TopicNames
from tests.integration.kafka_io import Service, cli, free_port, produce, short_grace_policy
from tests.integration.kafka_io import wait_for as wait_for_records
from tests.integration.slurm_cluster import SlurmCluster, wait_for

DEADLINE_S = 90.0


@pytest.fixture
def pipeline(
    slurm: SlurmCluster,
    kafka_bootstrap: str,
    topic_names: TopicNames,
    topic_partitions: int,
    tmp_path: Path,
) -> Iterator[Service]:
    slurm.install_hooks(kafka_bootstrap, topic_names.prefix)
    env = {
        "SLURM_CONF": str(slurm.conf),
        "GPUFAILOVER_STATE_DIR": str(tmp_path / "state"),
        "GPUFAILOVER_QUARANTINE_ACTUATOR": "slurm",
        "GPUFAILOVER_REQUEUE_SCHEDULER": "slurm",
        "GPUFAILOVER_REQUEUE_PRIORITY_BOOST": "1000",
        "GPUFAILOVER_POLICY": str(short_grace_policy(tmp_path, grace_s=2)),
        "GPUFAILOVER_CLASSIFIER_PORT": str(free_port()),
        "GPUFAILOVER_IDLE_AFTER_S": "0.5",
        "GPUFAILOVER_TICK_INTERVAL_S": "0.2",
        "GPUFAILOVER_FLEET_SIZE": "100",
    }
    args = ["run", "--bootstrap", kafka_bootstrap, "--topic-prefix", topic_names.prefix,
            "--partitions", str(topic_partitions)]  # fmt: skip
    with Service(args, tmp_path / "run.log", env) as svc:
        yield svc
    assert svc.proc is not None and svc.proc.returncode == 0, svc.log_tail()


def killable_job(slurm: SlurmCluster, *args: str) -> str:
    """A job that runs until the test drops its kill file for the current restart, then exits 1
    (the way a training job dies under a GPU that fell off the bus)."""
    kill = f"{slurm.base}/kill-$SLURM_JOB_ID-${{SLURM_RESTART_COUNT:-0}}"  # unset on a first run
    script = f"while [ ! -e {kill} ]; do sleep 0.2; done; exit 1"
    return slurm.sbatch(*args, "--requeue", "--wrap", script)


def kill(slurm: SlurmCluster, job: str, restart: int) -> None:
    (slurm.base / f"kill-{job}-{restart}").touch()


def _now() -> int:
    return time.time_ns() // 1_000_000


async def test_xid79_drains_the_node_and_requeues_the_same_job_elsewhere_oom_is_rejected(
    slurm: SlurmCluster,
    pipeline: Service,
    kafka_bootstrap: str,
    topic_names: TopicNames,
) -> None:
    n = topic_names
    job = killable_job(slurm, "-N", "2", "--gres=gpu:8")
    slurm.wait_job(job, "running", lambda j: j.get("JobState") == "RUNNING")
    assert slurm.job(job)["NodeList"] == "gpu-[1-2]"
    priority_before = int(slurm.job(job)["Priority"])
    oom = slurm.sbatch("-w", "gpu-3", "--wrap", "exit 137")  # an OOM-killed process's exit

    await produce(kafka_bootstrap, [(n.gpu_xid, "gpu-2",
                  {"node": "gpu-2", "xid": 79, "ts_ms": _now(), "gpu_index": 3})])  # fmt: skip
    kill(slurm, job, 0)

    def requeued_elsewhere(j: dict[str, str]) -> bool:
        return j.get("Restarts") == "1" and j.get("JobState") == "RUNNING"

    try:
        wait_for(f"job {job} running again", lambda: requeued_elsewhere(slurm.job(job)), DEADLINE_S)
    except TimeoutError as exc:
        hooks = slurm.hook_log.read_text() if slurm.hook_log.exists() else ""
        raise AssertionError(
            f"{exc}: {slurm.job(job)}\nhooks:\n{hooks}\n{pipeline.log_tail(60)}"
        ) from None
    info = slurm.job(job)
    assert info["ExcNodeList"] == "gpu-2" and "gpu-2" not in info["NodeList"]
    assert info["NodeList"] in ("gpu-[3-4]", "gpu-[1,3]", "gpu-[1,4]")
    assert int(info["Priority"]) > priority_before
    node = slurm.node("gpu-2")
    assert "DRAIN" in node["State"] and node["Reason"].startswith("gpufailover: hardware xid 79")

    # The OOM-style failure: rejected, nothing drained, the job stays ended (Slurm 22.05 lets
    # no one comment a finished job: the stage logs why instead).
    await pipeline.wait_for_log(f"slurm: job {oom} left ended", timeout_s=60)
    decisions = await wait_for_records(
        kafka_bootstrap, [n.failover_decisions], lambda rs: any(r.key == oom for r in rs)
    )
    assert [r.value["action"] for r in decisions if r.key == oom] == ["reject"]
    assert slurm.job(oom)["JobState"] == "FAILED" and slurm.job(oom)["Restarts"] == "0"
    assert "DRAIN" not in slurm.node_state("gpu-3")

    # A redelivered decision and a repeated requeue command change nothing.
    recs = await wait_for_records(
        kafka_bootstrap, [n.failover_decisions, n.jobs_requeue],
        lambda rs: any(r.topic == n.jobs_requeue for r in rs))  # fmt: skip
    again = [(r.topic, r.key, r.value) for r in recs if r.key == job]
    await produce(kafka_bootstrap, again)
    await pipeline.wait_for_log(f"job {job} already requeued", timeout_s=60)
    assert slurm.job(job)["Restarts"] == "1"
    requeues = await wait_for_records(
        kafka_bootstrap, [n.jobs_requeue], lambda rs: len(rs) >= 2, settle_s=2.0
    )
    assert [r.key for r in requeues] == [job, job]  # ours once, and the test's copy
    assert requeues[0].value == requeues[1].value

    # Release: gpu-2 back in service.
    rc, _, err = await cli("quarantine", "release", "gpu-2", "--reason", "GPU reseated",
                           "--bootstrap", kafka_bootstrap, "--topic-prefix", n.prefix)  # fmt: skip
    assert rc == 0, err
    wait_for("gpu-2 idle again", lambda: slurm.node_state("gpu-2") == "IDLE", 60)
    assert "Reason" not in slurm.node("gpu-2")


async def test_an_operator_drain_outlives_our_release_and_reconcile_redrains_after_a_restart(
    slurm: SlurmCluster,
    kafka_bootstrap: str,
    topic_names: TopicNames,
    topic_partitions: int,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    n = topic_names
    slurm.run("scontrol", "update", "NodeName=gpu-4", "State=DRAIN", "Reason=operator: bad fan")
    svc = request.getfixturevalue("pipeline")
    t = _now()
    await produce(kafka_bootstrap, [
        (n.gpu_xid, "gpu-4", {"node": "gpu-4", "xid": 79, "ts_ms": t, "gpu_index": 0}),
        (n.gpu_xid, "gpu-1", {"node": "gpu-1", "xid": 79, "ts_ms": t, "gpu_index": 0}),
    ])  # fmt: skip
    wait_for("gpu-1 drained by us", lambda: "DRAIN" in slurm.node_state("gpu-1"), DEADLINE_S)
    await svc.wait_for_log("gpu-4 is already IDLE+DRAIN by someone else", timeout_s=60)
    rc, _, err = await cli("quarantine", "release", "gpu-4", "--reason", "not ours",
                           "--bootstrap", kafka_bootstrap, "--topic-prefix", n.prefix)  # fmt: skip
    assert rc == 0, err
    await svc.wait_for_log("gpu-4 is IDLE+DRAIN for a reason not ours", timeout_s=60)
    assert slurm.node("gpu-4")["Reason"].startswith("operator: bad fan")

    # While the pipeline is down someone resumes gpu-1, still quarantined for us: on restart
    # the Slurm actuator reconciles and drains it again.
    svc.stop()
    slurm.run("scontrol", "update", "NodeName=gpu-1", "State=RESUME")
    wait_for("gpu-1 resumed", lambda: "DRAIN" not in slurm.node_state("gpu-1"))
    restarted = Service(svc.args, tmp_path / "run-2.log", {k: v for k, v in svc.env.items()})
    with restarted:
        await restarted.wait_for_log("slurm reconcile: gpu-1 is quarantined", timeout_s=60)
        wait_for("gpu-1 drained again", lambda: "DRAIN" in slurm.node_state("gpu-1"), 30)
        assert slurm.node("gpu-1")["Reason"].startswith("gpufailover: hardware xid 79")
        assert "DRAIN" in slurm.node_state("gpu-4")
