"""The same input gives the same decisions on Kafka as `gpufailover replay`.

Each bundled incident is published to its own topic set in file order; then one `ok` health
record per partition, far in the future, closes every window (as end of input does in replay).
The same markers are appended to replay's input so both see the same records.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest

from deploy.topics import create_topics
from schemas.topics import TopicNames
from streams.policy import load_policy
from streams.replay import Replayer
from tests.integration.kafka_io import classifier, produce, wait_for

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples").glob("*.jsonl"))
INPUTS = ("gpu.xid", "gpu.health", "jobs.events", "nodes.quarantine")


def _normalize(decision: dict[str, Any]) -> dict[str, Any]:
    # Counts of coalesced repeats are a snapshot taken when the evidence was gathered, which
    # depends on how partitions interleave; which signals were seen does not.
    d = dict(decision)
    d["evidence"] = sorted(
        (
            e["node"] or "",
            -1 if e["gpu_index"] is None else e["gpu_index"],
            e["kind"],
            str(e["code"]),
            e["ts_ms"],
            e["class"],
        )
        for e in decision["evidence"]
    )
    return d


def test_there_are_bundled_incidents() -> None:
    assert len(EXAMPLES) >= 4


@pytest.mark.parametrize("example", EXAMPLES, ids=[p.stem for p in EXAMPLES])
async def test_kafka_decides_like_replay(
    example: Path, kafka_bootstrap: str, topic_partitions: int, tmp_path: Path
) -> None:
    prefix = f"t-agree-{example.stem[:20]}-{uuid.uuid4().hex[:8]}."
    await create_topics(kafka_bootstrap, partitions=topic_partitions, prefix=prefix)
    names = TopicNames(prefix)
    lines = [ln for ln in example.read_bytes().splitlines() if ln.strip()]  # noqa: ASYNC240
    records: list[tuple[str, str | None, Any]] = []
    max_ts = 0
    for raw in lines:
        try:
            env = orjson.loads(raw)
        except orjson.JSONDecodeError:
            continue  # replay dead-letters it; nothing to publish
        if not isinstance(env, dict) or env.get("topic") not in INPUTS:
            continue
        value = env.get("value")
        if isinstance(value, dict) and isinstance(value.get("ts_ms"), int):
            max_ts = max(max_ts, value["ts_ms"])
        records.append((names.name(env["topic"]), env.get("key"), value))
    policy = load_policy()
    close_ts = max_ts + policy.lookback_ms + policy.grace_ms + 1
    marker = {"node": "end-of-input", "ts_ms": close_ts, "condition": "ok"}

    replayer = Replayer(policy)
    replay_lines = [
        *lines,
        *(orjson.dumps({"topic": "gpu.health", "value": marker}) for _ in range(topic_partitions)),
    ]
    replayed = [orjson.loads(x) for x in replayer.run(iter(replay_lines))]
    expected = {
        (r["key"], r["value"]["attempt"]): _normalize(r["value"])
        for r in replayed
        if r["topic"] == "failover.decisions"
    }
    expected_quarantined = sorted(r["key"] for r in replayed if r["topic"] == "nodes.quarantine")
    assert expected, f"{example.name} has no decision to compare"

    await produce(kafka_bootstrap, records)
    for partition in range(topic_partitions):
        await produce(kafka_bootstrap, [(names.gpu_health, None, marker)], partition=partition)
    # A long idle threshold: windows close on event time only, exactly as in replay.
    with classifier(kafka_bootstrap, prefix, topic_partitions, tmp_path, idle_after_s=600):
        recs = await wait_for(
            kafka_bootstrap,
            [names.failover_decisions, names.quarantine_requests],
            lambda rs: sum(r.topic == names.failover_decisions for r in rs) >= len(expected),
            timeout_s=90,
            settle_s=2.0,
        )
    got = {
        (r.key, r.value["attempt"]): _normalize(r.value)
        for r in recs
        if r.topic == names.failover_decisions
    }
    assert sum(r.topic == names.failover_decisions for r in recs) == len(expected)
    assert got == expected
    # A node released and faulty again is quarantined again; how often depends on when the
    # release (another topic) lands relative to the evidence, so compare which nodes.
    quarantined = {r.key for r in recs if r.topic == names.quarantine_requests}
    assert quarantined == set(expected_quarantined)
