"""Training telemetry through the pipeline: hang alert, Hang verdict, requeue from the last
checkpoint, straggler alert — on the real broker."""

from __future__ import annotations

import time
from pathlib import Path

from schemas.topics import TopicNames
from tests.integration.kafka_io import classifier, produce, service, short_grace_policy, wait_for


def _now() -> int:
    return time.time_ns() // 1_000_000


def _tm(job: str, kind: str, ts: int, **extra: object) -> dict[str, object]:
    return {"job_id": job, "attempt": 0, "kind": kind, "ts_ms": ts, **extra}


async def test_silent_job_gets_a_hang_alert_then_a_transient_retry_resuming_from_checkpoint(
    kafka_bootstrap: str, topic_names: TopicNames, topic_partitions: int, tmp_path: Path
) -> None:
    n, t = topic_names, _now()
    job = "train-hangs"
    policy = short_grace_policy(tmp_path, grace_s=2, hang_after_s=3)
    with (
        classifier(kafka_bootstrap, n.prefix, topic_partitions, tmp_path, policy, idle_after_s=0.3),
        service("requeue", kafka_bootstrap, n.prefix, tmp_path),
    ):
        await produce(
            kafka_bootstrap,
            [
                (
                    n.jobs_events,
                    job,
                    {
                        "job_id": job,
                        "attempt": 0,
                        "type": "started",
                        "ts_ms": t,
                        "nodes": ["gpu-h1", "gpu-h2"],
                        "spec": {"image": "train:1"},
                    },
                ),
                (n.training_telemetry, job, _tm(job, "heartbeat", t + 500, step=10)),
                (
                    n.training_telemetry,
                    job,
                    _tm(job, "checkpoint", t + 800, step=10, uri="s3://ckpt/train-hangs/step-10"),
                ),
                (n.training_telemetry, job, _tm(job, "heartbeat", t + 1_000, step=11)),
            ],
        )
        # Nothing more from the job: the idle advance moves event time on until it is silent
        # longer than hang_after while still running.
        alerts = await wait_for(
            kafka_bootstrap,
            [n.failover_alerts],
            lambda rs: any(r.value["kind"] == "hang" for r in rs),
        )
        [hang] = [r.value for r in alerts if r.value["kind"] == "hang"]
        assert (hang["job_id"], hang["attempt"], hang["last_heartbeat_ts_ms"]) == (
            job,
            0,
            t + 1_000,
        )
        # The scheduler finally kills it, no reason given: the Hang signal decides.
        await produce(
            kafka_bootstrap,
            [
                (
                    n.jobs_events,
                    job,
                    {
                        "job_id": job,
                        "attempt": 0,
                        "type": "terminated",
                        "ts_ms": t + 30_000,
                        "nodes": ["gpu-h1", "gpu-h2"],
                    },
                ),
            ],
        )
        recs = await wait_for(
            kafka_bootstrap,
            [n.failover_decisions, n.jobs_requeue],
            lambda rs: {r.topic for r in rs} == {n.failover_decisions, n.jobs_requeue},
            settle_s=1.0,
        )
    [decision] = [r.value for r in recs if r.topic == n.failover_decisions]
    assert (decision["verdict"], decision["action"]) == ("transient", "retry")
    assert [e["code"] for e in decision["evidence"]] == ["Hang"]
    assert decision["suspect_nodes"] == []
    [requeue] = [r.value for r in recs if r.topic == n.jobs_requeue]
    assert requeue["next_attempt"] == 1 and requeue["spec"] == {"image": "train:1"}
    assert requeue["checkpoint"]["step"] == 10
    assert requeue["checkpoint"]["uri"] == "s3://ckpt/train-hangs/step-10"


async def test_throughput_collapse_is_a_straggler_alert_and_steady_jobs_raise_none(
    kafka_bootstrap: str, topic_names: TopicNames, topic_partitions: int, tmp_path: Path
) -> None:
    n, t = topic_names, _now()
    records: list[tuple[str, str | None, object]] = []
    for job, rates in (("steady", [100.0] * 8), ("slowing", [100.0] * 6 + [30.0])):
        records.append(
            (
                n.jobs_events,
                job,
                {
                    "job_id": job,
                    "attempt": 0,
                    "type": "started",
                    "ts_ms": t,
                    "nodes": [f"gpu-{job}"],
                },
            )
        )
        records += [
            (
                n.training_telemetry,
                job,
                _tm(job, "throughput", t + 1_000 * i, samples_per_s=rate, node="gpu-s3"),
            )
            for i, rate in enumerate(rates, start=1)
        ]
    with classifier(
        kafka_bootstrap, n.prefix, topic_partitions, tmp_path, short_grace_policy(tmp_path)
    ):
        await produce(kafka_bootstrap, records)
        recs = await wait_for(
            kafka_bootstrap,
            [n.failover_alerts],
            lambda rs: any(r.value["kind"] == "straggler" for r in rs),
            settle_s=2.0,
        )
    stragglers = [r.value for r in recs if r.value["kind"] == "straggler"]
    assert [s["job_id"] for s in stragglers] == ["slowing"]
    assert stragglers[0]["samples_per_s"] == 30.0 and stragglers[0]["node"] == "gpu-s3"
