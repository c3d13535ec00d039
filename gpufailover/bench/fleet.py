"""The input of a real fleet, for the realistic-load benchmark (`gpufailover bench realistic`).

Rates come from the agent's defaults and from published XID rates, not from the stress mix:

- health: one sample per GPU every `sample_interval_s` (the agent's `--interval` default). The
  agent publishes only condition *changes* (producers/health.py), so sending every sample as a
  record is an upper bound: the load a fleet would send if each sample were published.
- heartbeats: one per node every `heartbeat_interval_s` (producers/heartbeat.py).
- XIDs: per-node mean time between errors of NCSA Delta (arXiv 2503.11901, in
  shared/reference/failure-data.md), 0.74 XIDs per node-hour, about 2 a second for 10,000 nodes.

Records are interleaved in proportion to their rates and cycle through the nodes in order, so
every node's heartbeat comes exactly once an interval (a node is never judged silent by
chance).
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Iterator
from dataclasses import dataclass

import orjson

from gpufailover.bench.harness import now_ms
from gpufailover.bench.workload import health, xid
from producers.agent_config import AgentSettings
from producers.heartbeat import DEFAULT_INTERVAL_S as DEFAULT_HEARTBEAT_S
from schemas.topics import TopicNames

# XID -> per-node mean time between errors in node-hours (NCSA Delta; failure-data.md)
XID_MTBE_NODE_HOURS = {95: 2.2, 31: 4.5, 74: 28.0, 119: 40.0, 63: 889.0, 64: 2_413.0, 48: 2_640.0}


def _agent_default(name: str) -> float:
    value = {f.name: f.default for f in dataclasses.fields(AgentSettings)}[name]
    assert isinstance(value, float), f"AgentSettings.{name} default is {value!r}"
    return value


@dataclass(frozen=True)
class Fleet:
    nodes: int = 10_000
    gpus_per_node: int = 8
    sample_interval_s: float = dataclasses.field(
        default_factory=lambda: _agent_default("sample_interval_s")
    )
    heartbeat_interval_s: float = DEFAULT_HEARTBEAT_S

    @property
    def health_rate(self) -> float:
        """Health samples a second, if every sample were published (an upper bound)."""
        return self.nodes * self.gpus_per_node / self.sample_interval_s

    @property
    def heartbeat_rate(self) -> float:
        return self.nodes / self.heartbeat_interval_s

    @property
    def xid_rate(self) -> float:
        per_node_hour = sum(1 / h for h in XID_MTBE_NODE_HOURS.values())
        return self.nodes * per_node_hour / 3600

    @property
    def rate(self) -> float:
        return self.health_rate + self.heartbeat_rate + self.xid_rate

    @property
    def published_rate(self) -> float:
        """What the agents really send when no GPU changes condition: heartbeats and XIDs."""
        return self.heartbeat_rate + self.xid_rate

    def describe(self) -> str:
        return (
            f"{self.nodes:,} nodes x {self.gpus_per_node} GPUs: health {self.health_rate:,.0f}/s"
            f" (a sample per GPU every {self.sample_interval_s:g} s), heartbeats "
            f"{self.heartbeat_rate:,.0f}/s (every {self.heartbeat_interval_s:g} s), XIDs "
            f"{self.xid_rate:.2f}/s (NCSA Delta rates)"
        )


class FleetNoise:
    """`records(n)` like workload.Noise: the fleet's mix, event time = now."""

    def __init__(self, names: TopicNames, fleet: Fleet, seed: int = 7) -> None:
        self.names = names
        self.fleet = fleet
        self.rng = random.Random(seed)
        self.shares = [fleet.health_rate / fleet.rate, fleet.heartbeat_rate / fleet.rate]
        self.shares.append(1.0 - sum(self.shares))
        self.credit = [0.0, 0.0, 0.0]  # deficit round robin over health, heartbeat, xid
        self.sent = [0, 0, 0]
        self.codes = list(XID_MTBE_NODE_HOURS)
        self.weights = [1 / h for h in XID_MTBE_NODE_HOURS.values()]

    def node(self, i: int) -> str:
        return f"fleet-{i % self.fleet.nodes:05d}"

    def records(self, n: int) -> Iterator[tuple[str, bytes, bytes]]:
        names, ts, gpus = self.names, now_ms(), self.fleet.gpus_per_node
        for _ in range(n):
            for k, share in enumerate(self.shares):
                self.credit[k] += share
            kind = max(range(3), key=self.credit.__getitem__)
            self.credit[kind] -= 1.0
            i = self.sent[kind]
            self.sent[kind] += 1
            if kind == 0:
                node = self.node(i // gpus)
                value = health(node, "ok", ts, i % gpus)
                yield names.gpu_health, node.encode(), orjson.dumps(value)
            elif kind == 1:
                node = self.node(i)
                beat = {"node": node, "ts_ms": ts, "condition": "heartbeat", "severity": "info"}
                beat["metrics"] = {"interval_s": self.fleet.heartbeat_interval_s}
                yield names.gpu_health, node.encode(), orjson.dumps(beat)
            else:
                node = self.node(self.rng.randrange(self.fleet.nodes))
                code = self.rng.choices(self.codes, self.weights)[0]
                value = xid(node, code, ts, self.rng.randrange(gpus))
                yield names.gpu_xid, node.encode(), orjson.dumps(value)
