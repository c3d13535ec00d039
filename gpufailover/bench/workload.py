"""What the pipeline benchmarks send: the replay benchmark's record mix (pre-loaded), live noise
with event time = now (steady load), XID floods, and probe jobs whose decisions are timed."""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from deploy.topics import TopicNames
from gpufailover.bench.bench_replay import CONDITIONS, GPUS_PER_NODE, XIDS, generate
from gpufailover.bench.harness import Record, now_ms
from streams.policy import load_policy
from streams.replay import Replayer

NOISE_NODES = [f"node-{i:05d}" for i in range(4096)]
FLOOD_NODE = "flood-node-0000"
FLOOD_GPU = 3
FLOOD_XID = 94  # contained memory error, printed on every access: hardware, coalesced
WAVE_XIDS = (13, 31, 43, 119)  # a driver regression: application faults and GSP timeouts


def xid(node: str, code: int, ts_ms: int, gpu: int = 0) -> dict[str, Any]:
    return {
        "node": node,
        "xid": code,
        "ts_ms": ts_ms,
        "gpu_index": gpu,
        "source": "nvml",
        "message": f"NVRM: Xid (PCI:0000:3b:00): {code}, pid=4242, simulated",
    }


def health(node: str, condition: str, ts_ms: int, gpu: int = 0) -> dict[str, Any]:
    return {
        "node": node,
        "ts_ms": ts_ms,
        "condition": condition,
        "gpu_index": gpu,
        "severity": "info",
        "metrics": {"temp_c": 61, "power_w": 412},
    }


def termination(
    job_id: str, nodes: list[str], ts_ms: int, reason: str | None = None
) -> dict[str, Any]:
    value: dict[str, Any] = {
        "job_id": job_id,
        "attempt": 0,
        "type": "terminated",
        "ts_ms": ts_ms,
        "nodes": nodes,
        "exit_code": 1,
    }
    if reason is not None:
        value["reason"] = reason
    return value


class Noise:
    """Health samples and XIDs from a fleet, event time = now: the steady background."""

    def __init__(self, names: TopicNames, seed: int = 7) -> None:
        self.names = names
        self.rng = random.Random(seed)

    def records(self, n: int) -> Iterator[tuple[str, bytes, bytes]]:
        rng, names, ts = self.rng, self.names, now_ms()
        for _ in range(n):
            node = rng.choice(NOISE_NODES)
            gpu = rng.randrange(GPUS_PER_NODE)
            if rng.random() < 0.02:
                yield (
                    names.gpu_xid,
                    node.encode(),
                    orjson.dumps(xid(node, rng.choice(XIDS), ts, gpu)),
                )
            else:
                value = health(node, rng.choice(CONDITIONS), ts, gpu)
                yield names.gpu_health, node.encode(), orjson.dumps(value)


def flood(names: TopicNames, count: int, wave_nodes: int) -> Iterator[Record]:
    """`count` identical XIDs from one GPU, with a wave of one XID from each of `wave_nodes`
    other nodes spread through it (event time = now, read every 1,000 records)."""
    every = max(1, count // wave_nodes) if wave_nodes else 0
    key = FLOOD_NODE.encode()
    wave = 0
    ts = now_ms()
    for i in range(count):
        if i % 1000 == 0:
            ts = now_ms()
        yield names.gpu_xid, key, orjson.dumps(xid(FLOOD_NODE, FLOOD_XID, ts, FLOOD_GPU)), None
        if every and i % every == 0 and wave < wave_nodes:
            node = f"wave-{wave:06d}"
            code = WAVE_XIDS[wave % len(WAVE_XIDS)]
            value = orjson.dumps(xid(node, code, ts, wave % GPUS_PER_NODE))
            yield names.gpu_xid, node.encode(), value, None
            wave += 1


def node_evidence(names: TopicNames, nodes: int, per_node: int = 2) -> Iterator[Record]:
    """Software XIDs (stored as evidence, no quarantine) on `per_node` GPUs of each node."""
    ts = now_ms()
    for i in range(nodes):
        node = f"mem-{i:06d}"
        for gpu in range(per_node):
            code = WAVE_XIDS[gpu % 2]  # 13, 31: software
            yield names.gpu_xid, node.encode(), orjson.dumps(xid(node, code, ts, gpu)), None


@dataclass
class Preloaded:
    """The replay benchmark's mix, on Kafka topics, with what replay decides for it."""

    records: list[Record]  # with logical topic names: see `on`
    counts: dict[str, int]  # per logical input topic
    decisions: dict[tuple[str, int], tuple[str, str]]  # (job, attempt) -> (verdict, action)

    def on(self, names: TopicNames) -> Iterator[Record]:
        """The records with the real topic names of a topic set."""
        name = names.name
        for logical, key, value, partition in self.records:
            yield name(logical), key, value, partition


def preloaded(path: Path, n: int, partitions: int, seed: int) -> Preloaded:
    """`n` records of bench_replay's mix; then one far-future `ok` health sample on every
    partition so every window closes on event time (the classifier runs with a large
    --idle-after, so nothing closes on the wall clock)."""
    generate(path, n, seed)
    records: list[Record] = []
    counts: dict[str, int] = {}
    last_ts = 0
    with path.open("rb") as f:
        for line in f:
            env = orjson.loads(line)
            logical, key, value = env["topic"], env["key"], env["value"]
            counts[logical] = counts.get(logical, 0) + 1
            last_ts = max(last_ts, int(value["ts_ms"]))
            records.append((logical, key.encode(), orjson.dumps(value), None))
    policy = load_policy()
    close_ts = last_ts + policy.lookback_ms + policy.grace_ms + 60_000
    for p in range(partitions):
        value = orjson.dumps(health(f"bench-close-{p}", "ok", close_ts))
        records.append(("gpu.health", f"bench-close-{p}".encode(), value, p))
    counts["gpu.health"] = counts.get("gpu.health", 0) + partitions
    replayer = Replayer(policy)
    decisions: dict[tuple[str, int], tuple[str, str]] = {}
    with path.open("rb") as f:
        for out in replayer.run(f):
            rec = orjson.loads(out)
            if rec["topic"] == "failover.decisions":
                v = rec["value"]
                decisions[(v["job_id"], v["attempt"])] = (v["verdict"], v["action"])
    return Preloaded(records, counts, decisions)
