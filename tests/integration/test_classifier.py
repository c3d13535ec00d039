"""The faust classifier on a real broker: decisions, quarantine requests, DLQ, restarts."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from schemas.topics import TopicNames
from tests.integration.kafka_io import Rec, classifier, produce, short_grace_policy, wait_for


def _now() -> int:
    return time.time_ns() // 1_000_000


def _term(
    job: str, ts: int, nodes: list[str], attempt: int = 0, **extra: object
) -> dict[str, object]:
    return {
        "job_id": job,
        "attempt": attempt,
        "type": "terminated",
        "ts_ms": ts,
        "nodes": nodes,
        **extra,
    }


def _decisions(recs: list[Rec], names: TopicNames) -> list[Rec]:
    return [r for r in recs if r.topic == names.failover_decisions]


async def test_xid79_on_one_node_gives_one_hardware_decision_and_quarantine_for_that_node(
    kafka_bootstrap: str, topic_names: TopicNames, topic_partitions: int, tmp_path: Path
) -> None:
    n, t = topic_names, _now()
    await produce(
        kafka_bootstrap,
        [
            (n.gpu_xid, "gpu-b", {"node": "gpu-b", "xid": 79, "ts_ms": t - 5_000, "gpu_index": 2}),
            (n.jobs_events, "job-1", _term("job-1", t, ["gpu-a", "gpu-b", "gpu-c"])),
        ],
    )
    with classifier(
        kafka_bootstrap, n.prefix, topic_partitions, tmp_path, short_grace_policy(tmp_path)
    ):
        recs = await wait_for(
            kafka_bootstrap,
            [n.failover_decisions, n.quarantine_requests],
            lambda rs: len(_decisions(rs, n)) >= 1,
            settle_s=2.0,
        )
    decisions = _decisions(recs, n)
    assert len(decisions) == 1
    d = decisions[0].value
    assert (d["verdict"], d["action"], d["suspect_nodes"]) == ("hardware", "failover", ["gpu-b"])
    assert d["next_attempt"] == 1 and d["status"] == "Pending-failoverinprogress"
    quarantines = [r for r in recs if r.topic == n.quarantine_requests]
    assert [q.key for q in quarantines] == ["gpu-b"]


async def test_oom_is_rejected_and_quarantines_nothing(
    kafka_bootstrap: str, topic_names: TopicNames, topic_partitions: int, tmp_path: Path
) -> None:
    n, t = topic_names, _now()
    await produce(
        kafka_bootstrap,
        [
            (n.jobs_events, "job-oom", _term("job-oom", t, ["gpu-a", "gpu-b"], reason="OOMKilled")),
        ],
    )
    with classifier(
        kafka_bootstrap, n.prefix, topic_partitions, tmp_path, short_grace_policy(tmp_path)
    ):
        recs = await wait_for(
            kafka_bootstrap,
            [n.failover_decisions, n.quarantine_requests],
            lambda rs: len(_decisions(rs, n)) >= 1,
            settle_s=1.0,
        )
    [d] = [r.value for r in _decisions(recs, n)]
    assert (d["verdict"], d["action"], d["status"]) == (
        "software",
        "reject",
        "Pending-internalerror",
    )
    assert not [r for r in recs if r.topic == n.quarantine_requests]


async def test_late_xid_inside_grace_flips_verdict_and_one_past_grace_does_not(
    kafka_bootstrap: str, topic_names: TopicNames, topic_partitions: int, tmp_path: Path
) -> None:
    n, t = topic_names, _now()
    with classifier(
        kafka_bootstrap,
        n.prefix,
        topic_partitions,
        tmp_path,
        short_grace_policy(tmp_path, grace_s=3),
    ):
        await produce(
            kafka_bootstrap,
            [
                (n.jobs_events, "late-in", _term("late-in", t, ["gpu-l1"], reason="NCCLTimeout")),
                (n.jobs_events, "late-out", _term("late-out", t, ["gpu-l2"], reason="NCCLTimeout")),
                # Event time says when it happened: inside the 3 s grace, and just past it.
                (n.gpu_xid, "gpu-l1", {"node": "gpu-l1", "xid": 48, "ts_ms": t + 2_000}),
                (n.gpu_xid, "gpu-l2", {"node": "gpu-l2", "xid": 48, "ts_ms": t + 3_001}),
            ],
        )
        recs = await wait_for(
            kafka_bootstrap, [n.failover_decisions], lambda rs: len(rs) >= 2, settle_s=1.0
        )
    by_job = {r.key: r.value for r in recs}
    assert len(recs) == 2
    assert by_job["late-in"]["verdict"] == "hardware"
    assert by_job["late-in"]["suspect_nodes"] == ["gpu-l1"]
    assert by_job["late-out"]["verdict"] == "transient"
    assert by_job["late-out"]["action"] == "retry"


def _offset(dead_letter: Any) -> int:
    offset: int = dead_letter["offset"]
    return offset


async def test_malformed_records_are_dead_lettered_while_good_ones_are_decided(
    kafka_bootstrap: str, topic_names: TopicNames, topic_partitions: int, tmp_path: Path
) -> None:
    n, t = topic_names, _now()
    await produce(
        kafka_bootstrap,
        [
            (n.gpu_xid, "gpu-x", b"not json at all"),
            (n.gpu_xid, "gpu-x", {"node": "gpu-x", "xid": "seventy-nine", "ts_ms": t}),
            (n.jobs_events, "job-bad", {"job_id": "job-bad", "type": "terminated", "ts_ms": t}),
            (n.gpu_xid, "gpu-y", {"node": "gpu-y", "xid": 79, "ts_ms": t - 1_000}),
            (n.jobs_events, "job-good", _term("job-good", t, ["gpu-y"])),
        ],
    )
    with classifier(
        kafka_bootstrap, n.prefix, topic_partitions, tmp_path, short_grace_policy(tmp_path)
    ) as svc:
        recs = await wait_for(
            kafka_bootstrap,
            [n.failover_decisions, n.dlq(n.gpu_xid), n.dlq(n.jobs_events)],
            lambda rs: len(rs) >= 4,
            settle_s=1.0,
        )
        assert svc.proc is not None and svc.proc.poll() is None, "a bad record crashed the worker"
    # Keyed by coordinates, dead letters spread over the DLQ's partitions: order by offset.
    dlq_xid = sorted((r.value for r in recs if r.topic == n.dlq(n.gpu_xid)), key=_offset)
    dlq_jobs = [r.value for r in recs if r.topic == n.dlq(n.jobs_events)]
    assert len(dlq_xid) == 2 and len(dlq_jobs) == 1
    assert "not valid JSON" in dlq_xid[0]["error"] and dlq_xid[0]["raw"] == "not json at all"
    assert dlq_xid[1]["error"].startswith("xid:")
    assert dlq_jobs[0]["error"].startswith("attempt:")
    assert {(v["topic"], v["partition"]) for v in dlq_xid} == {(n.gpu_xid, dlq_xid[0]["partition"])}
    assert all(isinstance(v["offset"], int) for v in dlq_xid + dlq_jobs)
    assert {v["component"] for v in dlq_xid} == {"signal-filter"}
    assert {v["component"] for v in dlq_jobs} == {"job-agent"}
    [good] = _decisions(recs, n)
    assert good.key == "job-good" and good.value["verdict"] == "hardware"


async def test_restarting_the_worker_mid_stream_loses_and_duplicates_no_decision(
    kafka_bootstrap: str, topic_names: TopicNames, topic_partitions: int, tmp_path: Path
) -> None:
    n, t = topic_names, _now()
    policy = short_grace_policy(tmp_path, grace_s=4)
    first = [f"before-{i}" for i in range(20)]
    second = [f"after-{i}" for i in range(20)]

    def batch(jobs: list[str], ts: int) -> list[tuple[str, str | None, object]]:
        out: list[tuple[str, str | None, object]] = []
        for i, job in enumerate(jobs):
            node = f"node-{job}"
            if i % 2 == 0:  # hardware: decided at once
                out.append((n.gpu_xid, node, {"node": node, "xid": 79, "ts_ms": ts - 1_000}))
                out.append((n.jobs_events, job, _term(job, ts, [node])))
            else:  # software: decided when the window closes, possibly after the restart
                out.append((n.jobs_events, job, _term(job, ts, [node], reason="OOMKilled")))
        return out

    worker = classifier(kafka_bootstrap, n.prefix, topic_partitions, tmp_path, policy)
    with worker:
        await produce(kafka_bootstrap, batch(first, t))
        # Stop once part of the first batch is decided: the rest is pending in the tables.
        await wait_for(kafka_bootstrap, [n.failover_decisions], lambda rs: len(rs) >= 5)
    with classifier(kafka_bootstrap, n.prefix, topic_partitions, tmp_path, policy) as again:
        # Known faust 0.15.3 race (see the README): records already waiting while a restarted
        # worker recovers its tables were, once in three runs, skipped. Publish once it is
        # ready; what the first worker left pending is still decided from restored state.
        await again.wait_for_log("Worker ready")
        await produce(kafka_bootstrap, batch(second, t + 1_000))
        recs = await wait_for(
            kafka_bootstrap,
            [n.failover_decisions],
            lambda rs: len(rs) >= 40,
            timeout_s=90,
            settle_s=3.0,
        )
    keys = [(r.key, r.value["attempt"]) for r in recs]
    assert len(keys) == len(set(keys)) == 40
    assert {k for k, _ in keys} == set(first + second)
    verdicts = {r.key: r.value["verdict"] for r in recs}
    assert all(
        verdicts[j] == ("hardware" if i % 2 == 0 else "software")
        for jobs in (first, second)
        for i, j in enumerate(jobs)
    )
