"""The whole pipeline on `broker start --secure`: every component with its own role's
credentials (the same scenario as tests/integration/test_pipeline.py), then an operator
release that the audit trail shows with its principal."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from deploy.broker import Broker
from schemas.topics import TopicNames
from tests.integration.kafka_io import Service, free_port, short_grace_policy
from tests.integration.secure.conftest import PARTITIONS, cli_as, produce_as, read_all, role_env

SERVICES = ("classifier", "quarantine", "requeue", "job-status")


def _now() -> int:
    return time.time_ns() // 1_000_000


def _job(job: str, kind: str, ts: int, nodes: list[str], **extra: object) -> dict[str, object]:
    return {"job_id": job, "attempt": 0, "type": kind, "ts_ms": ts, "nodes": nodes, **extra}


@pytest.fixture
def secure_pipeline(
    secure_broker: Broker, secure_names: TopicNames, tmp_path: Path
) -> Iterator[Service]:
    assert secure_broker.secure is not None
    env = {
        "GPUFAILOVER_POLICY": str(short_grace_policy(tmp_path, grace_s=2)),
        "GPUFAILOVER_CLASSIFIER_PORT": str(free_port()),
        "GPUFAILOVER_IDLE_AFTER_S": "0.5",
        "GPUFAILOVER_TICK_INTERVAL_S": "0.2",
        "GPUFAILOVER_FLEET_SIZE": "100",
        # The CA and protocol for all; each service its own user (gpufailover run maps them).
        **{k: v for k, v in role_env(secure_broker, "admin").items() if "SASL_" not in k},
        "GPUFAILOVER_SASL_MECHANISM": "SCRAM-SHA-512",
    }
    for service in SERVICES:
        upper = service.upper().replace("-", "_")
        env[f"GPUFAILOVER_{upper}_SASL_USERNAME"] = service
        env[f"GPUFAILOVER_{upper}_SASL_PASSWORD_FILE"] = str(
            secure_broker.secure.password_file(service)
        )
    args = [
        "run", "--no-create-topics", "--bootstrap", secure_broker.bootstrap,
        "--topic-prefix", secure_names.prefix, "--partitions", str(PARTITIONS),
    ]  # fmt: skip
    with Service(args, tmp_path / "run.log", env) as svc:
        yield svc
    assert svc.proc is not None and svc.proc.returncode == 0, svc.log_tail()
    log = (tmp_path / "run.log").read_text(errors="replace")
    for service in SERVICES:  # each ran as its own role
        assert f"Authenticated as {service} via SCRAM-SHA-512" in log, service
    assert "Authenticated as admin" not in log


async def wait_records(
    broker: Broker,
    topics: list[str],
    done: Callable[[list[tuple[str, str | None, Any]]], bool],
    timeout_s: float = 90.0,
) -> list[tuple[str, str | None, Any]]:
    """Read `topics` as admin until `done(records)` holds (polls the topics' ends)."""
    import asyncio

    deadline = time.monotonic() + timeout_s
    while True:
        seen = await read_all(broker.bootstrap, broker.security(), topics)
        if done(seen):
            return seen
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out; saw {seen[-20:]}")
        await asyncio.sleep(0.5)  # a poll interval with a deadline, not a fixed wait


async def test_the_whole_pipeline_runs_with_a_role_per_component(
    secure_pipeline: Service, secure_broker: Broker, secure_names: TopicNames
) -> None:
    b, n, t = secure_broker.bootstrap, secure_names, _now()
    nodes = ["gpu-a", "gpu-b", "gpu-c"]
    scheduler, agent = secure_broker.security("scheduler"), secure_broker.security("agent")
    await produce_as(b, scheduler, [
        (n.jobs_events, "job-1", _job("job-1", "started", t - 60_000, nodes, spec={"gpus": 24})),
        (n.jobs_events, "job-oom", _job("job-oom", "started", t - 60_000, ["gpu-d"])),
    ])  # fmt: skip
    await produce_as(
        b, agent, [(n.gpu_xid, "gpu-b", {"node": "gpu-b", "xid": 79, "ts_ms": t - 2_000})]
    )
    await produce_as(b, scheduler, [
        (n.jobs_events, "job-1", _job("job-1", "terminated", t, nodes, reason="WorkerLost")),
        (n.jobs_events, "job-oom", _job("job-oom", "terminated", t, ["gpu-d"], reason="OOMKilled")),
    ])  # fmt: skip

    def on(recs: list[tuple[str, str | None, Any]], topic: str) -> list[tuple[str | None, Any]]:
        return [(k, v) for tp, k, v in recs if tp == topic]

    topics = [n.failover_decisions, n.nodes_quarantine, n.jobs_requeue, n.jobs_status]
    recs = await wait_records(
        secure_broker,
        topics,
        lambda rs: (
            len(on(rs, n.failover_decisions)) == 2
            and len(on(rs, n.jobs_requeue)) >= 1
            and any(v.get("status") == "Pending-internalerror" for _, v in on(rs, n.jobs_status))
        ),
    )
    by_job = {k: v for k, v in on(recs, n.failover_decisions)}
    assert (by_job["job-1"]["verdict"], by_job["job-1"]["suspect_nodes"]) == ("hardware", ["gpu-b"])
    assert (by_job["job-oom"]["verdict"], by_job["job-oom"]["action"]) == ("software", "reject")
    assert [(k, v["state"]) for k, v in on(recs, n.nodes_quarantine)] == [("gpu-b", "quarantined")]
    [(key, requeue)] = on(recs, n.jobs_requeue)
    assert key == "job-1" and "gpu-b" in requeue["exclude_nodes"]

    # The operator releases the node; the audit trail names who and why.
    target = ("--bootstrap", b, "--prefix", n.prefix)
    operator = role_env(secure_broker, "operator")
    rc, _, err = await cli_as(
        operator, "quarantine", "release", "gpu-b", "--reason", "RMA", *target
    )
    assert rc == 0, err
    rc, out, err = await cli_as(operator, "status", "job-1", *target)
    assert rc == 0 and "Pending-failoverinprogress" in out, err
    rc, out, err = await cli_as(operator, "audit", *target)
    assert rc == 0, err
    [line] = out.splitlines()
    assert "operator" in line and "release" in line and "gpu-b" in line and "RMA" in line
    released = await wait_records(
        secure_broker, [n.nodes_quarantine], lambda rs: len(rs) == 2, timeout_s=30
    )
    assert released[-1][2]["state"] == "released" and released[-1][2]["operator"] == "operator"
