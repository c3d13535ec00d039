"""The whole pipeline as `gpufailover run` starts it, on the real broker."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from schemas.topics import TopicNames
from tests.integration.kafka_io import (
    Rec,
    Service,
    cli,
    free_port,
    produce,
    short_grace_policy,
    wait_for,
)


def _now() -> int:
    return time.time_ns() // 1_000_000


def _job(
    job: str, kind: str, ts: int, nodes: list[str], attempt: int = 0, **extra: object
) -> dict[str, object]:
    return {"job_id": job, "attempt": attempt, "type": kind, "ts_ms": ts, "nodes": nodes, **extra}


@pytest.fixture
def pipeline(
    kafka_bootstrap: str, topic_names: TopicNames, topic_partitions: int, tmp_path: Path
) -> Iterator[Service]:
    env = {
        "GPUFAILOVER_POLICY": str(short_grace_policy(tmp_path, grace_s=2)),
        "GPUFAILOVER_CLASSIFIER_PORT": str(free_port()),
        "GPUFAILOVER_IDLE_AFTER_S": "0.5",
        "GPUFAILOVER_TICK_INTERVAL_S": "0.2",
        "GPUFAILOVER_QUARANTINE_BREAKER_MAX_NODES": "5",
        "GPUFAILOVER_FLEET_SIZE": "100",
    }
    args = [
        "run",
        "--bootstrap",
        kafka_bootstrap,
        "--topic-prefix",
        topic_names.prefix,
        "--partitions",
        str(topic_partitions),
    ]
    with Service(args, tmp_path / "run.log", env) as svc:
        yield svc
    assert svc.proc is not None and svc.proc.returncode == 0, svc.log_tail()


def _on(recs: list[Rec], topic: str) -> list[Rec]:
    return [r for r in recs if r.topic == topic]


async def test_xid79_fails_over_quarantines_that_node_only_and_requeues_excluding_it(
    pipeline: Service, kafka_bootstrap: str, topic_names: TopicNames
) -> None:
    n, t = topic_names, _now()
    nodes = ["gpu-a", "gpu-b", "gpu-c"]
    await produce(
        kafka_bootstrap,
        [
            (
                n.jobs_events,
                "job-1",
                _job("job-1", "started", t - 60_000, nodes, spec={"gpus": 24}, priority=5),
            ),
            (n.gpu_xid, "gpu-b", {"node": "gpu-b", "xid": 79, "ts_ms": t - 2_000, "gpu_index": 4}),
            (n.jobs_events, "job-1", _job("job-1", "terminated", t, nodes, reason="WorkerLost")),
            (n.jobs_events, "job-oom", _job("job-oom", "started", t - 60_000, ["gpu-d"])),
            (
                n.jobs_events,
                "job-oom",
                _job("job-oom", "terminated", t, ["gpu-d"], reason="OOMKilled"),
            ),
        ],
    )
    topics = [n.failover_decisions, n.nodes_quarantine, n.jobs_requeue, n.jobs_status]
    recs = await wait_for(
        kafka_bootstrap,
        topics,
        lambda rs: (
            len(_on(rs, n.failover_decisions)) == 2
            and len(_on(rs, n.jobs_requeue)) >= 1
            and len(_on(rs, n.nodes_quarantine)) >= 1
        ),
        timeout_s=90,
        settle_s=3.0,
    )
    by_job = {r.key: r.value for r in _on(recs, n.failover_decisions)}
    assert (by_job["job-1"]["verdict"], by_job["job-1"]["suspect_nodes"]) == ("hardware", ["gpu-b"])
    assert (by_job["job-oom"]["verdict"], by_job["job-oom"]["action"]) == ("software", "reject")
    quarantine = _on(recs, n.nodes_quarantine)
    assert [(q.key, q.value["state"]) for q in quarantine] == [("gpu-b", "quarantined")]
    [requeue] = _on(recs, n.jobs_requeue)
    assert requeue.key == "job-1" and requeue.value["next_attempt"] == 1
    assert "gpu-b" in requeue.value["exclude_nodes"]
    assert requeue.value["spec"] == {"gpus": 24} and requeue.value["priority"] > 5
    # The scheduler places attempt 1 elsewhere: the job is Running again.
    await produce(
        kafka_bootstrap,
        [
            (
                n.jobs_events,
                "job-1",
                _job("job-1", "started", t + 5_000, ["gpu-a", "gpu-c", "gpu-e"], attempt=1),
            )
        ],
    )
    statuses = await wait_for(
        kafka_bootstrap,
        [n.jobs_status],
        lambda rs: any(
            r.key == "job-1" and r.value["attempt"] == 1 and r.value["status"] == "Running"
            for r in rs
        ),
    )
    flow = [r.value["status"] for r in statuses if r.key == "job-1"]
    assert "Pending-failoverinprogress" in flow and flow[-1] == "Running"
    oom = [r.value["status"] for r in statuses if r.key == "job-oom"]
    assert oom[-1] == "Pending-internalerror"
    rc, out, err = await cli(
        "status", "job-1", "--bootstrap", kafka_bootstrap, "--topic-prefix", n.prefix
    )
    assert rc == 0, err
    assert "Pending-failoverinprogress" in out and "Running" in out


async def test_fleet_wide_xid_wave_trips_the_breaker_and_the_operator_resets_it(
    pipeline: Service, kafka_bootstrap: str, topic_names: TopicNames
) -> None:
    n, t = topic_names, _now()
    wave = [
        (n.gpu_xid, f"gpu-{i:03d}", {"node": f"gpu-{i:03d}", "xid": 119, "ts_ms": t + i})
        for i in range(40)
    ]
    await produce(kafka_bootstrap, wave)
    recs = await wait_for(
        kafka_bootstrap,
        [n.failover_alerts, n.nodes_quarantine],
        lambda rs: any(r.key == "breaker" and r.value.get("state") == "tripped" for r in rs),
        timeout_s=90,
        settle_s=3.0,
    )
    quarantined = {
        r.key for r in _on(recs, n.nodes_quarantine) if r.value["state"] == "quarantined"
    }
    assert 0 < len(quarantined) <= 5, "the breaker must stop the wave at max_nodes"
    refused = [
        r for r in _on(recs, n.failover_alerts) if r.value.get("kind") == "quarantine-refused"
    ]
    assert len(quarantined) + len(refused) == 40
    rc, _, err = await cli(
        "quarantine",
        "reset-breaker",
        "--reason",
        "test",
        "--bootstrap",
        kafka_bootstrap,
        "--topic-prefix",
        n.prefix,
    )
    assert rc == 0, err
    after = await wait_for(
        kafka_bootstrap,
        [n.failover_alerts],
        lambda rs: any(r.key == "breaker" and r.value.get("state") == "closed" for r in rs),
    )
    # Records of one key are in order (one partition); across partitions there is no order.
    assert [r.value["state"] for r in after if r.key == "breaker"][-1] == "closed"
    refused_after = [r for r in after if r.value.get("kind") == "quarantine-refused"]
    assert len(refused_after) == len(refused)  # the reset itself refuses or quarantines nothing
