"""Issue 12's Done-when: real incidents with far-future, zero and overflowing records mixed in
decide exactly as without them, in replay (exit 0) and in the stream (real broker, classifier).

The hostile records: health and hardware XIDs stamped in the year 2100 (an agent with a broken
clock: before the bounds, one moved a partition's watermark for good), times of 0, negative and
in seconds, a count of 2^64 (a float to orjson), terminations stamped 0 and 2^64-1; and,
accepted, each hardware XID redelivered twice with a count of 2^64-1 (the sum saturates;
decisions are compared without evidence counts).
"""

from __future__ import annotations

import random
import time
import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest

from deploy.topics import create_topics
from schemas.event_time import EVENT_AGE_ENV, FUTURE_SKEW_ENV, EventTimeBounds
from schemas.topics import TopicNames
from streams.policy import load_policy
from streams.replay import Replayer
from tests.integration.incident_mix import Mix, compared, end_marker, incident_mix
from tests.integration.kafka_io import classifier, cli, produce, wait_for

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
YEAR_2100 = 4_102_444_800_000
U64_MAX = 2**64 - 1
BOUNDS_ON = {FUTURE_SKEW_ENV: "300", EVENT_AGE_ENV: "172800"}
PARTITIONS = 4
Line = tuple[str, str | None, Any]  # (logical topic, key, value)


def hostile(records: list[Line]) -> tuple[list[Line], int]:
    """Hostile records for the nodes and jobs of `records`; and how many must be refused."""
    nodes = sorted({v["node"] for t, _, v in records if t in ("gpu.xid", "gpu.health")})
    jobs = sorted(
        {(v["job_id"], (v.get("nodes") or ["n"])[0]) for t, _, v in records if t == "jobs.events"}
    )
    out: list[Line] = []
    for node in nodes:
        out += [
            ("gpu.health", node, {"node": node, "ts_ms": YEAR_2100, "condition": "ok"}),
            ("gpu.xid", node, {"node": node, "xid": 79, "ts_ms": YEAR_2100, "gpu_index": 0}),
            ("gpu.health", node, {"node": node, "ts_ms": 0, "condition": "ok"}),
            ("gpu.health", node, {"node": node, "ts_ms": -5, "condition": "gpu_lost"}),
            ("gpu.xid", node, {"node": node, "xid": 48, "ts_ms": 1_773_532_800, "gpu_index": 0}),
            ("gpu.xid", node, {"node": node, "xid": 79, "ts_ms": YEAR_2100 - 1, "count": 2.0**64}),
        ]
    refused = len(out)
    for job, node in jobs:
        for ts in (0, U64_MAX):
            term = {"job_id": job, "attempt": 0, "type": "terminated", "ts_ms": ts, "nodes": [node]}
            out.append(("jobs.events", job, term))
            refused += 1
    return out, refused


def repeated(records: list[Line]) -> list[Line]:
    """Accepted hostile input: each hardware XID of `records` redelivered right after itself
    with the largest count, twice (the sum saturates). Right after: a record stamped later
    than its partition's other records moves event time, which is input, not hostility."""
    out: list[Line] = []
    for topic, key, value in records:
        out.append((topic, key, value))
        if topic == "gpu.xid" and value.get("xid") in (79, 48, 119):
            out += [(topic, key, {**value, "count": U64_MAX})] * 2
    return out


def mixed_in(records: list[Line], extra: list[Line], seed: int) -> list[Line]:
    """`records` with its XIDs repeated (`repeated`) and `extra` spread through them."""
    rng = random.Random(seed)
    out = repeated(records)
    for rec in extra:
        out.insert(rng.randrange(len(out) + 1), rec)
    return out


def lines(records: list[Line]) -> list[bytes]:
    return [orjson.dumps({"topic": t, "key": k, "value": v}) for t, k, v in records]


def replay_decisions(raw: list[bytes]) -> tuple[dict[tuple[str, int], Any], int]:
    replayer = Replayer(load_policy(), bounds=EventTimeBounds())
    out = [orjson.loads(x) for x in replayer.run(iter(raw))]
    decisions = {
        (r["key"], r["value"]["attempt"]): compared(r["value"])
        for r in out
        if r["topic"] == "failover.decisions"
    }
    return decisions, sum(replayer.stats.dead_letters.values())


def example(path: Path) -> list[Line]:
    rows = map(orjson.loads, path.read_bytes().splitlines())
    return [(d["topic"], d.get("key"), d["value"]) for d in rows]


@pytest.mark.parametrize("name", ["xid79-fell-off-bus", "nccl-timeout-cascade", "late-xid"])
async def test_replay_of_an_incident_with_hostile_records_decides_the_same_and_exits_0(
    name: str, tmp_path: Path
) -> None:
    records = example(EXAMPLES / f"{name}.jsonl")
    clean, clean_dead = replay_decisions(lines(records))
    assert clean, "the incident decides something"
    extra, refused = hostile([r for r in records if isinstance(r[2], dict)])
    dirty_file = tmp_path / f"{name}-hostile.jsonl"
    dirty_file.write_bytes(b"\n".join(lines(mixed_in(records, extra, seed=1))) + b"\n")
    dirty, dead = replay_decisions(dirty_file.read_bytes().splitlines())
    assert dirty == clean
    assert dead == clean_dead + refused
    code, out, err = await cli("replay", str(dirty_file), env=BOUNDS_ON)
    assert code == 0, err
    decided = {
        (d["key"], d["value"]["attempt"]): compared(d["value"])
        for d in map(orjson.loads, out.splitlines())
        if d["topic"] == "failover.decisions"
    }
    assert decided == clean
    assert f"rejected lines (dead-lettered): {dead}" in err


def _mix() -> Mix:
    start = time.time_ns() // 1_000_000 - 3_600_000  # an hour ago: within every bound
    return incident_mix(5, jobs=8, start_ts=start, policy=load_policy())


async def test_replay_of_a_mix_with_hostile_records_decides_the_same() -> None:
    mix = _mix()
    end = [("gpu.health", None, end_marker(mix.end_ts))]
    clean, _ = replay_decisions(lines(mix.records + end))
    assert clean == {k: compared(v) for k, v in mix.expected.items()}
    extra, _ = hostile(mix.records)
    dirty, _ = replay_decisions(lines(mixed_in(mix.records, extra, seed=2) + end))
    assert dirty == clean


@pytest.mark.timeout(600)
async def test_the_stream_with_hostile_records_decides_like_replay_without_them(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    prefix = f"t-hostile-{uuid.uuid4().hex[:8]}."
    await create_topics(kafka_bootstrap, partitions=PARTITIONS, prefix=prefix)
    n, mix = TopicNames(prefix), _mix()
    extra, refused = hostile(mix.records)
    # The hostile records first: a far-future one read before the real ones would have moved
    # its partition's watermark past all of them.
    published = [(n.name(t), k, v) for t, k, v in extra + repeated(mix.records)]
    worker = classifier(kafka_bootstrap, prefix, PARTITIONS, tmp_path, idle_after_s=600)
    worker.env.update(BOUNDS_ON)
    worker.start()
    try:
        await produce(kafka_bootstrap, published)
        for partition in range(PARTITIONS):
            marker = [(n.gpu_health, None, end_marker(mix.end_ts))]
            await produce(kafka_bootstrap, marker, partition=partition)
        expected = {k: compared(v) for k, v in mix.expected.items()}
        dlqs = [n.dlq(n.gpu_xid), n.dlq(n.gpu_health), n.dlq(n.jobs_events)]
        try:
            recs = await wait_for(
                kafka_bootstrap,
                [n.failover_decisions, n.quarantine_requests, *dlqs],
                lambda rs: (
                    {(r.key, r.value["attempt"]) for r in rs if r.topic == n.failover_decisions}
                    >= expected.keys()
                    and len({r.key for r in rs if r.topic in dlqs}) >= refused
                ),
                timeout_s=300,
                settle_s=3.0,
            )
        except AssertionError as exc:
            raise AssertionError(f"{exc}\nworker log:\n{worker.log_tail()}") from None
    finally:
        worker.stop()
    got: dict[tuple[str, int], set[Any]] = {}
    for r in recs:
        if r.topic == n.failover_decisions:
            got.setdefault((r.key or "", r.value["attempt"]), set()).add(compared(r.value))
    assert got == {k: {v} for k, v in expected.items()}
    assert {r.key for r in recs if r.topic == n.quarantine_requests} == mix.expected_quarantined
    letters = [r.value for r in recs if r.topic in dlqs]
    assert len({(v["topic"], v["partition"], v["offset"]) for v in letters}) == refused
    assert all(v["error"] for v in letters)
