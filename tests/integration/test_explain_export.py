"""`export` and `explain` on the real broker: the pipeline decides a range of input, `export`
dumps that range, and replaying the dump gives the pipeline's decisions; `explain` reads the
topics and says what replay's explanation of the same records says."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import orjson
from aiokafka import AIOKafkaProducer

from schemas.topics import TopicNames
from streams.explain import explain
from streams.explain_dump import records_from_dump
from streams.policy import load_policy
from streams.replay import Replayer
from tests.integration.kafka_io import classifier, cli, produce, wait_for

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
INPUTS = ("gpu.xid", "gpu.health", "jobs.events", "nodes.quarantine")


def example_records(
    names: TopicNames, *dumps: str
) -> tuple[list[tuple[str, str | None, Any]], int]:
    records: list[tuple[str, str | None, Any]] = []
    max_ts = 0
    for dump in dumps:
        for raw in (EXAMPLES / dump).read_bytes().splitlines():
            try:
                env = orjson.loads(raw)
            except orjson.JSONDecodeError:
                continue  # the flood example's broken lines: nothing a producer could send
            if isinstance(env, dict) and env.get("topic") in INPUTS:
                max_ts = max(max_ts, env["value"]["ts_ms"])
                records.append((names.name(env["topic"]), env.get("key"), env["value"]))
    return records, max_ts


def decisions_of(values: list[Any]) -> dict[tuple[str, int], Any]:
    """Decisions by (job, attempt), evidence as a set (the order of equal-time items and the
    count of coalesced repeats depend on how partitions interleave; which signals, not)."""
    out = {}
    for v in values:
        d = dict(v)
        d["evidence"] = sorted(
            (e["node"] or "", e["kind"], str(e["code"]), e["ts_ms"], e["class"])
            for e in v["evidence"]
        )
        out[(v["job_id"], v["attempt"])] = d
    return out


async def test_export_replays_to_the_pipelines_decisions_and_explain_reads_the_topics(
    kafka_bootstrap: str, topic_prefix: str, topic_partitions: int, tmp_path: Path
) -> None:
    names = TopicNames(topic_prefix)
    started_ms = int(time.time() * 1000)
    # Late evidence, software windows, releases (retry-budget) and an XID flood mixed with
    # records the classifier dead-letters (flood-and-garbage): 9 decisions.
    records, max_ts = example_records(
        names,
        "late-xid.jsonl",
        "oom-software.jsonl",
        "retry-budget.jsonl",
        "flood-and-garbage.jsonl",
    )
    policy = load_policy()
    # One `ok` sample per partition past every window closes them on event time, as the end
    # of input does in replay (see test_replay_agreement).
    marker = {
        "node": "end-of-input",
        "ts_ms": max_ts + policy.lookback_ms + policy.grace_ms + 1,
        "condition": "ok",
    }
    await produce(kafka_bootstrap, records)
    for partition in range(topic_partitions):
        await produce(kafka_bootstrap, [(names.gpu_health, None, marker)], partition=partition)
    with classifier(kafka_bootstrap, topic_prefix, topic_partitions, tmp_path, idle_after_s=600):
        recs = await wait_for(
            kafka_bootstrap,
            [names.failover_decisions],
            lambda rs: len(rs) >= 9,
            timeout_s=120,
            settle_s=1.0,
        )
    pipeline = decisions_of([r.value for r in recs])
    assert len(pipeline) == len(recs) == 9

    target = ("--bootstrap", kafka_bootstrap, "--prefix", topic_prefix)
    code, out, err = await cli("export", "--since", str(started_ms - 60_000), *target)
    assert code == 0, err
    assert err.splitlines()[-1].startswith(
        f"gpufailover export: {len(records) + topic_partitions} records"
    )
    exported = [ln.encode() for ln in out.splitlines()]
    assert len(exported) == len(records) + topic_partitions
    replayed = [orjson.loads(x) for x in Replayer(policy).run(exported)]
    assert (
        decisions_of([r["value"] for r in replayed if r["topic"] == "failover.decisions"])
        == pipeline
    )

    # explain off the topics says what explain over the exported range, replayed, says.
    code, out, err = await cli("explain", "llm-pretrain-13b-0315", "--json", *target)
    assert code == 0, err
    from_topics = orjson.loads(out)
    offline = explain("llm-pretrain-13b-0315", records_from_dump(exported, policy), policy)
    assert offline is not None
    assert from_topics == orjson.loads(orjson.dumps(offline.to_dict()))
    (attempt,) = from_topics["attempts"]
    assert attempt["decision"]["verdict"] == "transient"
    (late,) = attempt["not_counted"]
    assert (late["code"], late["why"].split(":")[0]) == (48, "outside the window")
    requested = [e for e in from_topics["timeline"] if e["what"] == "quarantine-request"]
    assert [e["node"] for e in requested] == ["gpu-node-051"]

    # --since bounds the read of the job's topics; the whole test ran within the hour.
    code, out, err = await cli(
        "explain", "llm-pretrain-13b-0315", "--json", "--since", "1h", *target
    )
    assert code == 0, err
    assert orjson.loads(out) == from_topics

    code, _, err = await cli("explain", "no-such-job", *target)
    assert code == 6
    (line,) = err.strip().splitlines()  # a quick scan prints no progress: one line
    assert line.startswith("gpufailover explain: unknown job 'no-such-job'")


async def test_export_takes_the_range_by_kafka_timestamp(
    kafka_bootstrap: str, topic_prefix: str
) -> None:
    names = TopicNames(topic_prefix)
    now = int(time.time() * 1000)
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap)
    await producer.start()
    try:
        for label, ago_min in (("old", 180), ("mid", 90), ("new", 10)):
            value = {
                "schema_version": 1,
                "node": label,
                "ts_ms": now - ago_min * 60_000,
                "condition": "ok",
            }
            await producer.send_and_wait(
                names.gpu_health,
                orjson.dumps(value),
                key=label.encode(),
                timestamp_ms=now - ago_min * 60_000,
            )
    finally:
        await producer.stop()
    target = ("--bootstrap", kafka_bootstrap, "--prefix", topic_prefix)
    code, out, err = await cli("export", "--since", "2h", "--until", "30m", *target)
    assert code == 0, err
    assert [orjson.loads(x)["key"] for x in out.splitlines()] == ["mid"]
    code, out, _ = await cli("export", "--since", "2h", *target)
    assert [orjson.loads(x)["key"] for x in out.splitlines()] == ["mid", "new"]
    code, _, err = await cli("export", "--since", "1h", "--until", "2h", *target)
    assert code == 2 and "must be after --since" in err
