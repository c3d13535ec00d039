"""A seeded mix of incidents for the membership and crash tests: records in time order, and
what `gpufailover replay` decides for exactly those records.

Each job runs on its own few nodes; around its termination its nodes show hardware, software,
precursor or ignored signals (before and after the termination, some past the decision time),
and every node reports `ok` health now and then, so event time moves on every partition.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import orjson

from schemas.topics import TopicNames
from streams.policy import Policy
from streams.replay import Replayer

S = 1_000
SIGNALS: list[tuple[str, int | str]] = [
    ("xid", 79),
    ("xid", 48),
    ("xid", 13),
    ("xid", 31),
    ("xid", 63),
    ("xid", 45),
    ("health", "ecc_uncorrectable"),
    ("health", "power"),
    ("health", "row_remap_pending"),
]
REASONS = [None, "OOMKilled", "WorkerLost", "NCCLTimeout"]
DecisionKey = tuple[str, int]


@dataclass
class Mix:
    records: list[tuple[str, str, dict[str, Any]]]  # (logical topic, key, value), in time order
    expected: dict[DecisionKey, dict[str, Any]]  # replay's decisions
    expected_quarantined: set[str]
    end_ts: int  # one `ok` record per partition stamped here closes every window

    def published(self, names: TopicNames) -> list[tuple[str, str | None, Any]]:
        return [(names.name(topic), key, value) for topic, key, value in self.records]


def compared(decision: dict[str, Any]) -> tuple[Any, ...]:
    """What must be equal between Kafka and replay (evidence counts are snapshots)."""
    return (
        decision["verdict"],
        decision["action"],
        tuple(decision["suspect_nodes"]),
        decision["next_attempt"],
        decision["rule"],
        decision["decided_ts_ms"],
    )


def incident_mix(seed: int, jobs: int, start_ts: int, policy: Policy) -> Mix:
    rng = random.Random(seed)
    records: list[tuple[int, str, str, dict[str, Any]]] = []
    for j in range(jobs):
        t = start_ts + j * 20 * S
        job = f"job-{seed}-{j:03d}"
        nodes = [f"n-{seed}-{j:03d}-{k}" for k in range(rng.randint(1, 4))]
        for node in nodes:
            for _ in range(rng.randint(0, 3)):
                kind, code = rng.choice(SIGNALS)
                ts = t + rng.randint(-300, 100) * S + rng.randint(0, 999)
                value: dict[str, Any] = {"node": node, "ts_ms": ts, "gpu_index": rng.randint(0, 1)}
                if kind == "xid":
                    records.append((ts, "gpu.xid", node, {**value, "xid": code}))
                else:
                    records.append((ts, "gpu.health", node, {**value, "condition": code}))
            for k in range(-10, 10):  # background samples: event time moves on
                ts = t + k * 30 * S + rng.randint(0, 999)
                ok = {"node": node, "ts_ms": ts, "condition": "ok"}
                records.append((ts, "gpu.health", node, ok))
        term: dict[str, Any] = {
            "job_id": job,
            "attempt": 0,
            "type": "terminated",
            "ts_ms": t,
            "nodes": nodes,
            "exit_code": 1,
        }
        if (reason := rng.choice(REASONS)) is not None:
            term["reason"] = reason
        records.append((t, "jobs.events", job, term))
    records.sort(key=lambda r: r[0])
    ordered = [(topic, key, value) for _, topic, key, value in records]
    end_ts = records[-1][0] + policy.lookback_ms + policy.grace_ms + 1
    replayer = Replayer(policy)
    lines = [orjson.dumps({"topic": t, "key": k, "value": v}) for t, k, v in ordered]
    lines.append(orjson.dumps({"topic": "gpu.health", "value": end_marker(end_ts)}))
    out = [orjson.loads(x) for x in replayer.run(iter(lines))]
    expected = {
        (r["key"], r["value"]["attempt"]): r["value"]
        for r in out
        if r["topic"] == "failover.decisions"
    }
    quarantined = {r["key"] for r in out if r["topic"] == "nodes.quarantine"}
    return Mix(ordered, expected, quarantined, end_ts)


def end_marker(ts_ms: int) -> dict[str, Any]:
    return {"node": "end-of-input", "ts_ms": ts_ms, "condition": "ok"}
