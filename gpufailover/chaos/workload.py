"""The chaos workload: a finite, seeded list of input records in rounds (pure, no I/O).

Each round is a slice of simulated time in which every job of the round runs one attempt and
dies of an incident drawn from the simulator's scenario mix (`producers.sim.scenarios`: GPU
faults, ECC, OOM, app XIDs, NCCL cascades, hangs, late XIDs, floods, precursors, decoys), laid
out on the wire by the simulator's own `faults.plan`. A job that failed over or was retried
comes back in the next round with its next attempt, until the retry budget is spent, so every
budget outcome occurs. Rounds are far enough apart in event time that one round's evidence
never falls in the next round's windows. A few malformed records per round must each be
dead-lettered exactly once.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson

from producers.sim.faults import Timing, plan
from producers.sim.records import Out, job_out, ok_out, signal_out, telemetry_out
from producers.sim.scenarios import BY_NAME, SCENARIOS, Draw, Modifiers, draw
from schemas.jobs import JobEvent
from schemas.telemetry import TrainingTelemetry
from schemas.topics import Topic

MINUTE_MS = 60_000
START_MS = 1_798_761_600_000  # 2027-01-01T00:00Z: event time, unrelated to the wall clock
ROUND_SPAN_MS = 60 * MINUTE_MS  # > a round's records (~40 min) + the policy's lookback
JOB_START_SPREAD_MS = 5 * MINUTE_MS
HEALTH_EVERY_MS = 5 * MINUTE_MS
HEALTH_UNTIL_MS = 45 * MINUTE_MS
HEARTBEAT_MS = MINUTE_MS
JOB_SIZES = (1, 1, 2, 2, 4)
# A smaller flood than the demo's 2,000 records: a round must stay a few seconds long.
TIMING = Timing(flood_records=300, flood_span_s=30.0)
JOB_SCENARIOS = tuple(s for s in SCENARIOS if s.target == "job")
NODE_SCENARIOS = tuple(s for s in SCENARIOS if s.target == "node")
CONTINUES = frozenset({"hardware", "transient"})  # the sim's truth: the job gets another attempt


@dataclass(frozen=True, slots=True)
class Record:
    """One record to publish. `topic` is the logical name; `partition` None lets the default
    partitioner place it by key. `bad` names what is wrong with a malformed record."""

    topic: str
    key: str | None
    value: bytes
    round: int
    partition: int | None = None
    bad: str | None = None

    def replay_line(self) -> bytes:
        """The record as `gpufailover replay` reads it. A value that is not JSON becomes a line
        replay dead-letters as well."""
        try:
            value = orjson.loads(self.value)
        except orjson.JSONDecodeError:
            return b'{"topic": "' + self.topic.encode() + b'", "value": ' + self.value + b"}"
        return orjson.dumps({"topic": self.topic, "key": self.key, "value": value})


@dataclass(frozen=True)
class WorkloadConfig:
    seed: int = 1
    rounds: int = 5
    jobs_per_round: int = 6
    nodes: int = 48
    bad_per_round: int = 1
    max_failovers: int = 3  # the policy's retry budget: attempts 0..budget, then give_up

    def __post_init__(self) -> None:
        if self.rounds < 1 or self.jobs_per_round < 1:
            raise ValueError("rounds and jobs_per_round must be >= 1")
        if self.nodes < 4 * self.jobs_per_round + 4:
            raise ValueError(
                f"nodes={self.nodes}: need at least 4 per job plus 4 idle ones "
                f"({4 * self.jobs_per_round + 4} for {self.jobs_per_round} jobs a round)"
            )


@dataclass
class Workload:
    rounds: list[list[Record]]
    terminations: dict[tuple[str, int], int] = field(default_factory=dict)  # -> round
    scenarios: dict[tuple[str, int], str] = field(default_factory=dict)  # -> scenario name

    def records(self) -> Iterator[Record]:
        for batch in self.rounds:
            yield from batch

    def bad_records(self) -> list[Record]:
        return [r for r in self.records() if r.bad is not None]

    def max_ts_ms(self) -> int:
        return max(_ts_of(r) for r in self.records())


def _ts_of(rec: Record) -> int:
    try:
        value = orjson.loads(rec.value)
    except orjson.JSONDecodeError:
        return 0
    ts = value.get("ts_ms") if isinstance(value, dict) else None
    return ts if isinstance(ts, int) else 0


def close_markers(max_ts_ms: int, lookback_ms: int, grace_ms: int, partitions: int) -> list[Record]:
    """One far-future `ok` sample per partition of gpu.health: it closes every window, as the
    end of input does in replay."""
    value = orjson.dumps(
        {"node": "end-of-input", "ts_ms": max_ts_ms + lookback_ms + grace_ms + 1, "condition": "ok"}
    )
    return [Record(Topic.GPU_HEALTH, None, value, -1, partition=p) for p in range(partitions)]


@dataclass
class _Job:
    job_id: str
    attempt: int
    size: int


def build(cfg: WorkloadConfig) -> Workload:
    rng = random.Random(f"chaos/{cfg.seed}")  # noqa: S311 - a workload's dice, not secrets
    mods = Modifiers()
    fleet = [f"gpu-node-{i:03d}" for i in range(1, cfg.nodes + 1)]
    workload = Workload(rounds=[])
    carried: list[_Job] = []
    ids = iter(range(1, 1_000_000))
    for rnd in range(cfg.rounds):
        base = START_MS + rnd * ROUND_SPAN_MS
        jobs = carried + [
            _Job(f"chaos-{next(ids):04d}", 0, rng.choice(JOB_SIZES))
            for _ in range(cfg.jobs_per_round - len(carried))
        ]
        free = rng.sample(fleet, len(fleet))
        outs: list[Out] = []
        for node in fleet:  # periodic samples move every partition's event time
            t0 = base + rng.randrange(HEALTH_EVERY_MS)
            outs.extend(ok_out(node, t) for t in range(t0, base + HEALTH_UNTIL_MS, HEALTH_EVERY_MS))
        carried = []
        for job in jobs:
            nodes = tuple(sorted(free.pop() for _ in range(job.size)))
            scenario, job_outs = _attempt(rng, mods, job, nodes, free[-1], base)
            outs.extend(job_outs)
            workload.terminations[(job.job_id, job.attempt)] = rnd
            workload.scenarios[(job.job_id, job.attempt)] = scenario
            if BY_NAME[scenario].true_class in CONTINUES and job.attempt < cfg.max_failovers:
                carried.append(_Job(job.job_id, job.attempt + 1, job.size))
        outs.extend(_node_incident(rng, mods, free.pop(), base))
        outs.sort(key=lambda o: int(o.value["ts_ms"]))
        batch = [Record(o.topic, o.key, orjson.dumps(o.value), rnd) for o in outs]
        for bad in _bad_records(rng, rnd, cfg.bad_per_round, fleet, base):
            batch.insert(rng.randrange(len(batch) + 1), bad)
        workload.rounds.append(batch)
    return workload


def _attempt(
    rng: random.Random, mods: Modifiers, job: _Job, nodes: tuple[str, ...], decoy: str, base: int
) -> tuple[str, list[Out]]:
    """One attempt of a job on `nodes`: started, heartbeats, its incident's signals, terminated."""
    start = base + rng.randrange(JOB_START_SPREAD_MS)
    outs: list[Out] = []
    if job.attempt == 0:
        outs.append(job_out(JobEvent(job.job_id, 0, "submitted", start - 1_000)))
    outs.append(job_out(JobEvent(job.job_id, job.attempt, "started", start, nodes=nodes)))
    d = _job_draw(rng, mods, start + rng.randrange(MINUTE_MS, 10 * MINUTE_MS))
    p = plan(d, rng, TIMING, job_nodes=nodes, node=rng.choice(nodes), decoy_node=decoy)
    assert p.term_ms is not None  # a job scenario always ends the job
    outs.extend(signal_out(s) for s in p.signals)
    for step, ts in enumerate(range(start + HEARTBEAT_MS, p.onset_ms, HEARTBEAT_MS), start=1):
        t = TrainingTelemetry(job.job_id, job.attempt, "heartbeat", ts, step=step, node=nodes[0])
        outs.append(telemetry_out(t))
    term = JobEvent(
        job.job_id, job.attempt, "terminated", p.term_ms, nodes=nodes,
        exit_code=p.exit_code, reason=p.reason,
    )  # fmt: skip
    outs.append(job_out(term))
    return d.scenario, outs


def _job_draw(rng: random.Random, mods: Modifiers, at_ms: int) -> Draw:
    """A draw from the simulator's mix, restricted to scenarios that kill a job."""
    while True:
        d = draw(rng, at_ms, mods)
        if BY_NAME[d.scenario].target == "job":
            return d


def _node_incident(rng: random.Random, mods: Modifiers, node: str, base: int) -> list[Out]:
    """One incident on an idle node (precursor, idle fault, another tenant's XID)."""
    s = rng.choices(NODE_SCENARIOS, weights=[x.weight for x in NODE_SCENARIOS])[0]
    at = base + rng.randrange(JOB_START_SPREAD_MS, 20 * MINUTE_MS)
    d = Draw(at, s.name, rng.choice(s.codes))
    return [signal_out(sig) for sig in plan(d, rng, TIMING, node=node).signals]


# What a malformed record looks like, per input topic: (what is wrong, key kind, value).
_BAD: tuple[tuple[str, str, str, Any], ...] = (
    (Topic.GPU_XID, "not JSON", "node", b'{"node": "gpu-node-001", "xid": 79,'),
    (Topic.GPU_HEALTH, "ts_ms not an integer", "node",
     {"node": "?", "ts_ms": "soon", "condition": "ok"}),
    (Topic.JOBS_EVENTS, "unknown event type", "job",
     {"job_id": "?", "attempt": 0, "type": "exploded", "ts_ms": 0, "schema_version": 1}),
    (Topic.TRAINING_TELEMETRY, "heartbeat without step", "job",
     {"job_id": "?", "attempt": 0, "kind": "heartbeat", "ts_ms": 0}),
)  # fmt: skip


def _bad_records(
    rng: random.Random, rnd: int, count: int, fleet: list[str], base: int
) -> list[Record]:
    out: list[Record] = []
    for i in range(count):
        topic, why, key_kind, value = _BAD[(rnd * count + i) % len(_BAD)]
        key = rng.choice(fleet) if key_kind == "node" else f"chaos-bad-{rnd:03d}-{i}"
        if isinstance(value, dict):
            value = {**value, **({"node": key} if key_kind == "node" else {"job_id": key})}
            if value.get("ts_ms") == 0:
                value["ts_ms"] = base + 1_000 * (i + 1)
            raw = orjson.dumps(value)
        else:
            raw = value
        out.append(Record(topic, key, raw, rnd, bad=why))
    return out
