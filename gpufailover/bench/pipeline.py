"""The pipeline benchmarks on a real broker: `gpufailover bench [SCENARIO ...] [--quick]`.

Scenarios (each on a fresh topic set, the classifier as a `gpufailover classifier` process):

  throughput  pre-load the replay benchmark's mix, time the classifier draining it (first
              committed offset -> last expected decision), beside a bare aiokafka consumer
              reading the same input topics on the same broker in the same run; CPU time per
              record of each (user + sys of its process over the same span)
  latency     steady health/XID noise from a separate process; probe jobs terminate with a
              hardware XID (timed to their decision) or without evidence (timed minus the grace)
  flood       500,000 identical XIDs from one GPU plus a fleet-wide wave, beside light noise
              and probe jobs: lag peak, catch-up time, probe latencies, RSS before/after
  memory      classifier RSS with 100,000 nodes' evidence in its tables
  scaleout    throughput's data drained by 1 worker, then by N (--workers) in one consumer
              group: decisions, rate, CPU time per record, then RSS per worker with --nodes
              nodes' evidence
  replay      gpufailover/bench/bench_replay.py: replay engine vs orjson parse-only
  realistic   a 10,000-node fleet's input rate (fleet.py) with a few probe jobs: the
              classifier's CPU share (CPU s / wall s) and decision latency at that rate

Prints one table; `--json FILE` also writes the rows. `--profile DIR` attaches py-spy to the
classifier during each scenario (raw collapsed stacks; summarise with gpufailover/bench/profile.py).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import logging
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, TopicPartition

from gpufailover.bench import SCENARIOS, bench_replay, hops
from gpufailover.bench.fleet import Fleet
from gpufailover.bench.harness import (
    APP_ID,
    REPO,
    BulkProducer,
    CpuClock,
    Env,
    LagMonitor,
    LagSample,
    PySpy,
    Row,
    Tail,
    alive,
    classifier,
    classifier_groups,
    first_record_monotonic,
    input_topics,
    now_ms,
    percentile,
    pid_of,
    record_counts,
    rss_mb,
    subprocess_env,
    table,
)
from gpufailover.bench.service import Service
from gpufailover.bench.workload import Preloaded, node_evidence, preloaded, termination, xid
from schemas.event_time import BOUNDS_OFF_ENV
from schemas.topics import Topic, TopicNames

GRACE_S = 2  # the short grace of the latency and flood runs (non-hardware decisions wait it)
PROBE_NODES = 4  # nodes per probe job
REPLAY_REPEAT = 5  # replay scenario: passes of parse-only then replay; the median ratio


class BenchError(RuntimeError):
    """A scenario could not complete (its rows say what is missing)."""


@dataclass
class Sizes:
    records: int  # throughput / scaleout pre-load
    rate: float  # latency background records/s
    latency_s: float  # latency measuring time
    flood: int  # identical XIDs
    wave: int  # nodes in the wave
    flood_rate: float  # background during the flood
    nodes: int  # memory: nodes with evidence
    replay: int  # replay benchmark records
    scaleout_workers: tuple[int, ...] = (2,)  # worker counts compared with 1 worker
    fleet_nodes: int = 10_000  # realistic: the fleet whose input rate is sent
    realistic_s: float = 60.0  # realistic: measuring time

    @staticmethod
    def for_run(quick: bool, records: int | None) -> Sizes:
        if quick:
            quick_sizes = (records or 5_000, 300.0, 6.0, 5_000, 500, 100.0, 1_000, 20_000)
            return Sizes(*quick_sizes, fleet_nodes=1_000, realistic_s=12.0)
        return Sizes(
            records or 300_000, 5_000.0, 60.0, 500_000, 100_000, 1_000.0, 100_000, 1_000_000
        )


@dataclass
class Context:
    env: Env
    sizes: Sizes
    rows: list[Row] = field(default_factory=list)
    data: Preloaded | None = None
    info: dict[str, Any] = field(default_factory=dict)
    samples: dict[str, list[float]] = field(default_factory=dict)  # raw latencies, for --json

    def row(
        self,
        scenario: str,
        metric: str,
        value: float | int | str | None,
        unit: str = "",
        target: str = "",
        ok: bool | None = None,
        note: str = "",
    ) -> None:
        self.rows.append(Row(scenario, metric, value, unit, target, ok, note))
        self.env.log(f"  {scenario}: {metric} = {value} {unit} {note}".rstrip())

    def preloaded(self) -> Preloaded:
        if self.data is None:
            self.env.log(f"generating {self.sizes.records:,} records (replay benchmark mix)")
            path = self.env.tmp / "preload.jsonl"
            self.data = preloaded(path, self.sizes.records, self.env.partitions, seed=20260315)
            path.unlink()
        return self.data


@contextlib.contextmanager
def profiled(env: Env, pid: int, name: str) -> Iterator[None]:
    if env.profile_dir is None:
        yield
        return
    env.profile_dir.mkdir(parents=True, exist_ok=True)
    out = env.profile_dir / f"{name}.txt"
    env.log(f"py-spy recording pid {pid} -> {out}")
    with PySpy(pid, out):
        yield


@contextlib.contextmanager
def workers(services: list[Service]) -> Iterator[list[Service]]:
    """Start the classifier processes; stop them all, whatever happens."""
    started: list[Service] = []
    try:
        for s in services:
            started.append(s.start())
        yield started
    finally:
        for s in started:
            try:
                s.stop()
            except AssertionError as exc:  # ignored SIGTERM: killed, but say so
                print(exc, file=sys.stderr)


def require_alive(services: list[Service]) -> None:
    for s in services:
        if not alive(s):
            raise BenchError(f"classifier exited early ({s.log_path}):\n{s.log_tail()}")


def dlq_topics(names: TopicNames) -> list[str]:
    return [names.dlq(t) for t in input_topics(names)]


def dead_letters(tail: Tail) -> list[Any]:
    """Dead letters the classifier wrote for the input topics (the harness sends none)."""
    return [a for a in tail.arrivals if a.topic.endswith(".dlq")]


def check_dead_letters(tail: Tail, where: str) -> None:
    dead = dead_letters(tail)
    if dead:
        first = dead[0].value or {}
        raise BenchError(
            f"{where}: the classifier dead-lettered {len(dead)} input record(s), first "
            f"{first.get('topic')}[{first.get('partition')}]@{first.get('offset')}: "
            f"{first.get('error')}"
        )


# -- throughput and scale-out ----------------------------------------------------------------


@dataclass
class Drain:
    workers: int
    records: int
    rate: float  # first forwarded signal -> last expected decision
    e2e_rate: float  # process start -> last expected decision
    startup_s: float  # process start -> first forwarded signal
    drain_s: float
    decisions: dict[tuple[str, int], tuple[str, str]]
    duplicates: int
    rss_mb: list[float]
    complete: bool
    cpu_s: float  # user + system CPU of all workers, first forwarded signal -> last decision
    evidence_rss_mb: list[float]  # per worker, once `evidence_nodes` nodes' evidence is stored

    @property
    def cpu_us(self) -> float:
        """CPU microseconds a record, all workers together."""
        return self.cpu_s / self.records * 1e6


async def load(env: Env, names: TopicNames, data: Preloaded) -> tuple[int, float]:
    t = time.monotonic()
    async with BulkProducer(env.bootstrap, env.partitions) as producer:
        n = await producer.send_all(data.on(names))
    return n, time.monotonic() - t


@dataclass(frozen=True)
class Read:
    """A baseline consumer's run: records, wall seconds and CPU seconds over the same span."""

    records: int
    seconds: float
    cpu_s: float

    @property
    def rate(self) -> float:
        return self.records / self.seconds

    @property
    def cpu_us(self) -> float:
        """CPU microseconds a record."""
        return self.cpu_s / self.records * 1e6


async def bare_read(env: Env, names: TopicNames, total: int, decode: bool) -> Read:
    """A bare aiokafka consumer reading the input topics from the start, from the first fetch
    request to the last record: wall time, and this process's CPU time (nothing else runs in
    the harness meanwhile)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=env.bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        tps = [TopicPartition(t, p) for t in input_topics(names) for p in range(env.partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        loads = orjson.loads
        n = 0
        start, cpu_start = time.monotonic(), time.process_time()
        while n < total:
            batch = await consumer.getmany(timeout_ms=10_000)
            if not batch:
                raise BenchError(f"bare consumer stalled at {n:,} of {total:,} records")
            for messages in batch.values():
                n += len(messages)
                if decode:
                    for m in messages:
                        loads(m.value)
        return Read(n, time.monotonic() - start, time.process_time() - cpu_start)
    finally:
        await consumer.stop()


async def faust_noop(env: Env, names: TopicNames, total: int, mode: str) -> Read:
    """gpufailover/bench/faust_noop.py (a faust agent doing nothing) over the inputs, from its
    first record to its last: wall and its process's CPU time."""
    args = [
        sys.executable, "-m", "gpufailover.bench.faust_noop", "--bootstrap", env.bootstrap,
        "--prefix", names.prefix, "--partitions", str(env.partitions),
        "--total", str(total), "--mode", mode,
    ]  # fmt: skip
    log_path = env.tmp / f"{names.prefix}faust-noop-{mode}.log"
    with log_path.open("ab") as log:
        proc = await asyncio.create_subprocess_exec(
            *args, stdout=asyncio.subprocess.PIPE, stderr=log, env=subprocess_env(), cwd=REPO
        )
    try:
        assert proc.stdout is not None
        with profiled(env, proc.pid, f"faust-noop-{mode}"):
            async with asyncio.timeout(120 + total / 500):
                while b'{"event":"done"' not in (line := await proc.stdout.readline()):
                    if not line:
                        raise BenchError(f"faust no-op ({mode}) exited: see {log_path}")
        done = orjson.loads(line[line.index(b"{") :])
        return Read(int(done["n"]), done["last"] - done["first"], float(done["cpu_s"]))
    except TimeoutError:
        raise BenchError(f"faust no-op ({mode}) did not finish: see {log_path}") from None
    finally:
        if proc.returncode is None:
            proc.terminate()
            try:
                async with asyncio.timeout(30):
                    await proc.wait()
            except TimeoutError:
                proc.kill()
                await proc.wait()


async def drain(
    ctx: Context, names: TopicNames, count: int, label: str, evidence_nodes: int = 0
) -> Drain:
    """Start `count` classifier workers on pre-loaded topics; time them to the last decision
    and take their CPU time over that span. With `evidence_nodes`, then store that many nodes'
    evidence (the memory scenario's records) and take each worker's RSS."""
    env, data = ctx.env, ctx.preloaded()
    expected = len(data.decisions)
    total = sum(data.counts.values())
    group = f"{names.prefix}{APP_ID}"
    inputs = input_topics(names)
    # The pre-loaded mix is stamped at a fixed date (2026-03-15, replay's benchmark): the
    # live event-time bounds would dead-letter it as older than the retention horizon.
    services = [
        classifier(env, names, idle_after_s=1e6, tag=f"{label}-{i}", extra_env=BOUNDS_OFF_ENV)
        for i in range(count)
    ]
    timeout = 120 + total / 500
    async with (
        Tail(env.bootstrap, [names.failover_decisions, *dlq_topics(names)]) as tail,
        LagMonitor(env.bootstrap, classifier_groups(names, group), env.partitions, 0.25) as lag,
    ):
        spawn = time.monotonic()
        evidence_rss: list[float] = []
        with workers(services):
            async with CpuClock([pid_of(s) for s in services]) as cpu:
                first = await lag.wait(lambda s: s.done(inputs) > 0, 120)
                require_alive(services)
                if first is None:
                    raise BenchError(f"no committed offset within 120 s ({services[0].log_path})")
                rss: list[float] = []
                with profiled(env, pid_of(services[0]), label):
                    complete = await tail.wait(
                        lambda t: (
                            len(t.first[names.failover_decisions]) >= expected
                            or bool(dead_letters(t))
                        ),
                        timeout,
                    )
                    check_dead_letters(tail, label)
                    for s in services:
                        rss.append(rss_mb(pid_of(s))[0] if alive(s) else float("nan"))
                got = tail.first[names.failover_decisions]
                end = max((a.t for a in got.values()), default=time.monotonic())
                settled = await lag.wait(lambda s: s.lag(inputs) == 0, 30)
                if settled is None:
                    env.log(f"  {label}: input lag not 0 within 30 s of the last decision")
            require_alive(services)
            if evidence_nodes:
                evidence_rss = await store_evidence(ctx, names, services, lag, evidence_nodes)
    decisions = {
        (a.value["job_id"], a.value["attempt"]): (a.value["verdict"], a.value["action"])
        for a in got.values()
    }
    # The drain starts when the signal filter forwards its first batch (its first record on
    # failover.node-signals): faust's first commit can come after the whole drain now.
    began = await first_record_monotonic(env.bootstrap, names.node_signals, env.partitions)
    if began is None or began >= end:
        raise BenchError(f"{label}: no record on {names.node_signals} before the last decision")
    return Drain(
        workers=count,
        records=total,
        rate=total / (end - began),
        e2e_rate=total / (end - spawn),
        startup_s=began - spawn,
        drain_s=end - began,
        decisions=decisions,
        duplicates=tail.duplicates[names.failover_decisions],
        rss_mb=rss,
        complete=complete,
        cpu_s=cpu.between(began, end),
        evidence_rss_mb=evidence_rss,
    )


async def store_evidence(
    ctx: Context, names: TopicNames, services: list[Service], lag: LagMonitor, nodes: int
) -> list[float]:
    """Send `nodes` nodes' evidence (2 software XIDs each) to running workers; once they have
    stored it (no lag on the inputs nor on node-signals), each worker's RSS in MB."""
    drained = [*input_topics(names), names.node_signals]
    async with BulkProducer(ctx.env.bootstrap, ctx.env.partitions) as producer:
        n = await producer.send_all(node_evidence(names, nodes))
    done = await lag.wait(lambda s: s.lag(drained) == 0, 120 + n / 500)
    require_alive(services)
    if done is None:
        raise BenchError(f"the workers did not store {nodes:,} nodes' evidence ({n:,} records)")
    return [rss_mb(pid_of(s))[0] for s in services]


async def scenario_throughput(ctx: Context) -> None:
    env, data, sc = ctx.env, ctx.preloaded(), "throughput"
    names = await env.topic_set(sc)
    n, secs = await load(env, names, data)
    ctx.row(sc, "records pre-loaded", n, note=f"load {n / secs:,.0f} rec/s (bulk producer)")
    total = sum(data.counts[t] for t in (Topic.GPU_XID, Topic.GPU_HEALTH, Topic.JOBS_EVENTS))
    env.log("bare aiokafka consumer: read only, then read + orjson.loads")
    raw = await bare_read(env, names, total, decode=False)
    dec = await bare_read(env, names, total, decode=True)
    bare = raw.rate
    ctx.row(sc, "bare aiokafka read", bare, "rec/s", note="same topics, same broker, same run")
    ctx.row(sc, "bare aiokafka read + orjson.loads", dec.rate, "rec/s")
    noop: dict[str, Read] = {}
    for mode in ("events", "take"):
        env.log(f"faust no-op agent ({mode})")
        noop[mode] = await faust_noop(env, names, total, mode)
    ctx.row(
        sc,
        "faust no-op agent, stream.events()",
        noop["events"].rate,
        "rec/s",
        note="faust's own per-record cost, same settings as the classifier",
    )
    ctx.row(sc, "faust no-op agent, stream.take(1000)", noop["take"].rate, "rec/s")
    env.log("classifier: 1 worker")
    d = await drain(ctx, names, 1, "throughput")
    cpu_note = "user+sys of the consumer's process over its first to last record"
    ctx.row(sc, "CPU per record: bare aiokafka read", raw.cpu_us, "us", note=cpu_note)
    ctx.row(sc, "CPU per record: bare aiokafka read + orjson.loads", dec.cpu_us, "us")
    ctx.row(sc, "CPU per record: faust no-op, stream.events()", noop["events"].cpu_us, "us")
    ctx.row(sc, "CPU per record: faust no-op, stream.take(1000)", noop["take"].cpu_us, "us")
    ctx.row(
        sc,
        "CPU per record: classifier",
        d.cpu_us,
        "us",
        note=f"{d.cpu_s:.2f} CPU s over the {d.drain_s:.1f} s drain (worker + filter process)",
    )
    ctx.row(sc, "CPU per record: classifier / bare aiokafka", d.cpu_us / raw.cpu_us)
    ctx.row(
        sc,
        "classifier drain",
        d.rate,
        "rec/s",
        ">= 20,000",
        d.rate >= 20_000,
        f"first forwarded batch -> last decision, {d.drain_s:.1f} s",
    )
    ratio = d.rate / bare
    ctx.row(sc, "classifier / bare aiokafka", ratio, "", ">= 0.3", ratio >= 0.3)
    ctx.row(sc, "classifier / faust no-op (events)", d.rate / noop["events"].rate)
    ctx.row(
        sc,
        "classifier incl. startup",
        d.e2e_rate,
        "rec/s",
        note=f"startup to first forwarded batch {d.startup_s:.1f} s",
    )
    expected = len(data.decisions)
    ok = d.complete and len(d.decisions) == expected
    ctx.row(
        sc,
        "decisions",
        f"{len(d.decisions)}/{expected}",
        "",
        "all",
        ok,
        f"{d.duplicates} duplicates",
    )
    agree = sum(1 for k, v in d.decisions.items() if data.decisions.get(k) == v)
    ctx.row(sc, "same verdict+action as replay", f"{agree}/{expected}")
    ctx.row(sc, "classifier RSS after drain", d.rss_mb[0], "MB")
    await changelog_rows(ctx, sc, names, total)


async def scenario_scaleout(ctx: Context) -> None:
    """1 worker, then each of `scaleout_workers`, on a fresh copy of the throughput data each;
    after each drain, `nodes` nodes' evidence is stored and each worker's RSS taken."""
    env, data, sc, nodes = ctx.env, ctx.preloaded(), "scaleout", ctx.sizes.nodes
    ctx.row(sc, "partitions", env.partitions)
    runs: dict[int, Drain] = {}
    for count in (1, *ctx.sizes.scaleout_workers):
        names = await env.topic_set(f"scaleout{count}")
        await load(env, names, data)
        env.log(f"classifier: {count} worker(s), one consumer group; then {nodes:,} nodes")
        runs[count] = await drain(ctx, names, count, f"scaleout-{count}", evidence_nodes=nodes)
        _scaleout_rows(ctx, sc, runs[1], runs[count], count, nodes)


def _scaleout_rows(ctx: Context, sc: str, one: Drain, many: Drain, count: int, nodes: int) -> None:
    w = f"{count} worker" + ("s" if count > 1 else "")
    ctx.row(sc, w, many.rate, "rec/s", note=f"startup {many.startup_s:.1f} s")
    ctx.row(
        sc,
        f"CPU per record ({w})",
        many.cpu_us,
        "us",
        note=f"user+sys of all {w}, {many.cpu_s:.2f} CPU s over the {many.drain_s:.1f} s drain",
    )
    rss = ", ".join(f"{r:,.0f}" for r in many.evidence_rss_mb)
    ctx.row(
        sc,
        f"RSS per worker with {nodes:,} nodes ({w})",
        max(many.evidence_rss_mb),
        "MB",
        note=f"each: {rss} MB; after the drain: "
        + ", ".join(f"{r:,.0f}" for r in many.rss_mb)
        + " MB",
    )
    if count == 1:
        return
    ctx.row(sc, f"{count} / 1 workers", many.rate / one.rate, note="wall-clock rate")
    ctx.row(
        sc,
        f"CPU per record {count} / 1 workers",
        many.cpu_us / one.cpu_us,
        note="comparable on a shared machine where the wall-clock rate is not",
    )
    same = many.decisions == one.decisions
    diff = len(set(many.decisions.items()) ^ set(one.decisions.items()))
    ctx.row(
        sc,
        f"same decisions as 1 worker ({w})",
        "yes" if same else f"no ({diff} differ)",
        target="same",
        ok=same and many.complete,
        note=f"{len(many.decisions)} decisions, {many.duplicates} duplicates"
        + "".join(
            f"; {job}/{attempt}: 1 worker {one.decisions.get((job, attempt))},"
            f" {w} {many.decisions.get((job, attempt))},"
            f" replay {ctx.preloaded().decisions.get((job, attempt))}"
            for job, attempt in sorted(
                {
                    k
                    for k in one.decisions.keys() | many.decisions.keys()
                    if one.decisions.get(k) != many.decisions.get(k)
                }
            )[:5]
        ),
    )


# -- probes: timed jobs ------------------------------------------------------------------------


class Prober:
    """Probe jobs on their own nodes: 'hardware' ones follow an XID 79 on one of their nodes
    (decided as soon as every node answered), 'other' ones have no evidence (decided when the
    grace has passed on every node's partition)."""

    def __init__(self, producer: BulkProducer, names: TopicNames, tail: Tail, tag: str) -> None:
        self.producer = producer
        self.names = names
        self.tail = tail
        self.tag = tag
        self.k = 0
        self.sent: dict[str, tuple[str, float]] = {}  # job -> (kind, monotonic send time)

    async def probe(self, kind: str) -> str:
        self.k += 1
        job = f"{self.tag}-{kind}-{self.k:05d}"
        nodes = [f"{job}-n{j}" for j in range(PROBE_NODES)]
        if kind == "hardware":
            await self.producer.send_one(self.names.gpu_xid, nodes[0], xid(nodes[0], 79, now_ms()))
        reason = None if kind == "hardware" else "NCCLTimeout"
        t0 = time.monotonic()
        self.sent[job] = (kind, t0)
        value = termination(job, nodes, now_ms(), reason)
        await self.producer.send_one(self.names.jobs_events, job, value)
        return job

    async def run(self, stop: asyncio.Event, per_s: float = 3.0) -> None:
        """Probes at `per_s` a second, two hardware for each other, until `stop` is set."""
        start, i = time.monotonic(), 0
        while not stop.is_set():
            await self.probe("other" if i % 3 == 2 else "hardware")
            i += 1
            delay = start + i / per_s - time.monotonic()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), max(0.0, delay))  # pacing

    def done(self, tail: Tail) -> bool:
        got = tail.first[self.names.failover_decisions]
        return all(job in got for job in self.sent)

    def jobs(self, kind: str, since: float = 0.0, until: float = float("inf")) -> list[str]:
        """The probe jobs of `kind` sent between `since` and `until` (monotonic)."""
        return [job for job, (k, t0) in self.sent.items() if k == kind and since <= t0 <= until]

    def latencies(self, kind: str, since: float = 0.0, until: float = float("inf")) -> list[float]:
        """Seconds from sending each probe to its decision (minus the grace for 'other')."""
        got = self.tail.first[self.names.failover_decisions]
        minus = GRACE_S if kind == "other" else 0.0
        return [
            got[job].t - t0 - minus
            for job, (k, t0) in self.sent.items()
            if k == kind and job in got and since <= t0 <= until
        ]

    def verdicts(self) -> dict[str, int]:
        got = self.tail.first[self.names.failover_decisions]
        out: dict[str, int] = {}
        for job, (kind, _) in self.sent.items():
            if job in got:
                label = f"{kind}->{got[job].value['verdict']}"
                out[label] = out.get(label, 0) + 1
        return out


async def warm_up(prober: Prober, timeout_s: float = 120.0) -> float:
    """One hardware probe through a fresh classifier: it is up, assigned and deciding."""
    t = time.monotonic()
    await prober.probe("hardware")
    done = await prober.tail.wait(lambda t: prober.done(t) or bool(dead_letters(t)), timeout_s)
    check_dead_letters(prober.tail, "warm-up")
    if not done:
        raise BenchError(f"no decision for the warm-up probe within {timeout_s:.0f} s")
    prober.sent.clear()
    return time.monotonic() - t


def latency_rows(
    ctx: Context, sc: str, name: str, values: list[float], target_s: float | None, note: str = ""
) -> None:
    ctx.samples[f"{sc}/{name}"] = [round(v * 1000, 1) for v in values]  # ms, in send order
    if not values:
        ctx.row(sc, f"{name} latency", None, note="no samples", ok=False if target_s else None)
        return
    p50, p99, mx = percentile(values, 50), percentile(values, 99), max(values)
    ctx.row(sc, f"{name} p50", p50 * 1000, "ms", note=f"{len(values)} samples")
    target = f"<= {target_s * 1000:,.0f} ms" if target_s is not None else ""
    ok = p99 <= target_s if target_s is not None else None
    ctx.row(sc, f"{name} p99", p99 * 1000, "ms", target, ok, note)
    ctx.row(sc, f"{name} max", mx * 1000, "ms")


class LoadGen:
    """gpufailover/bench/loadgen.py as a process (noise at a rate; a flood on request)."""

    def __init__(
        self,
        env: Env,
        names: TopicNames,
        rate: float,
        flood: int = 0,
        wave: int = 0,
        fleet_nodes: int = 0,
    ) -> None:
        self.args = [
            sys.executable, "-m", "gpufailover.bench.loadgen",
            "--bootstrap", env.bootstrap, "--prefix", names.prefix,
            "--partitions", str(env.partitions), "--rate", str(rate),
            "--flood-count", str(flood), "--wave-nodes", str(wave),
            "--fleet-nodes", str(fleet_nodes),
        ]  # fmt: skip
        self.log_path = env.tmp / f"{names.prefix}loadgen.log"
        self.proc: asyncio.subprocess.Process | None = None
        self.events: dict[str, dict[str, Any]] = {}

    async def __aenter__(self) -> LoadGen:
        with self.log_path.open("ab") as log:
            self.proc = await asyncio.create_subprocess_exec(
                *self.args,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=log,
                env=subprocess_env(),
                cwd=REPO,
            )
        await self.expect("started", 60)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.kill()
            await self.proc.wait()

    async def expect(self, event: str, timeout_s: float) -> dict[str, Any]:
        assert self.proc is not None and self.proc.stdout is not None
        try:
            async with asyncio.timeout(timeout_s):
                while event not in self.events:
                    line = await self.proc.stdout.readline()
                    if not line:
                        raise BenchError(f"load generator exited: see {self.log_path}")
                    msg = orjson.loads(line)
                    self.events[msg["event"]] = msg
        except TimeoutError:
            raise BenchError(f"load generator: no {event!r} in {timeout_s:.0f} s") from None
        return self.events[event]

    async def flood(self) -> None:
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.write(b"flood\n")
        await self.proc.stdin.drain()

    async def stop(self) -> dict[str, Any]:
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.close()
        summary = await self.expect("stopped", 60)
        await self.proc.wait()
        return summary


def mono_of(wall: float) -> float:
    """A wall-clock time (from another process) on this process's monotonic clock."""
    return time.monotonic() - (time.time() - wall)


# -- latency ---------------------------------------------------------------------------------


async def scenario_latency(ctx: Context) -> None:
    env, sizes, sc = ctx.env, ctx.sizes, "latency"
    names = await env.topic_set(sc)
    group = f"{names.prefix}{APP_ID}"
    inputs = input_topics(names)
    svc = classifier(env, names, policy=env.policy(GRACE_S), tag=sc)
    async with (
        Tail(env.bootstrap, [names.failover_decisions, *dlq_topics(names)]) as tail,
        BulkProducer(env.bootstrap, env.partitions) as producer,
        LagMonitor(env.bootstrap, classifier_groups(names, group), env.partitions, 0.5) as lag,
    ):
        prober = Prober(producer, names, tail, "lat")
        with workers([svc]):
            await warm_up(prober)
            async with LoadGen(env, names, sizes.rate) as gen:
                # Measure once the classifier has committed 2 s worth of background.
                base = lag.samples[-1].done(inputs)
                steady = await lag.wait(lambda s: s.done(inputs) >= base + 2 * sizes.rate, 60)
                if steady is None:
                    raise BenchError("the classifier made no progress on the background load")
                stop = asyncio.Event()
                t0 = time.monotonic()
                with profiled(env, pid_of(svc), sc):
                    asyncio.get_running_loop().call_later(sizes.latency_s, stop.set)
                    await prober.run(stop)
                    t1 = time.monotonic()
                    # The background keeps running until the last probe is decided: its
                    # records are what moves event time past the probes' grace.
                    complete = await tail.wait(prober.done, 60 + GRACE_S)
                    summary = await gen.stop()
            require_alive([svc])
            rss = rss_mb(pid_of(svc))[0]
    during = [s for s in lag.samples if t0 <= s.t <= t1]
    ctx.row(
        sc,
        "background load",
        summary["rate"],
        "rec/s",
        note=f"target {sizes.rate:,.0f} rec/s, health/XID noise, own process",
    )
    latency_rows(
        ctx,
        sc,
        "hardware decision",
        prober.latencies("hardware"),
        0.15,
        "termination sent -> decision read",
    )
    latency_rows(
        ctx,
        sc,
        "non-hardware minus grace",
        prober.latencies("other"),
        None,
        f"grace {GRACE_S} s subtracted",
    )
    ctx.row(
        sc,
        "probe decisions",
        "all" if complete else "MISSING",
        ok=complete,
        note=str(prober.verdicts()),
    )
    ctx.row(
        sc,
        "consumer lag max",
        max((s.lag() for s in during), default=None),
        "records",
        note="committed offsets, sampled 2/s",
    )
    ctx.row(sc, "classifier RSS", rss, "MB")
    await hop_rows(ctx, sc, names, prober.jobs("hardware"))


async def hop_rows(ctx: Context, sc: str, names: TopicNames, jobs: list[str]) -> None:
    """Where the hardware probes' time went, stage by stage (`gpufailover/bench/hops.py`)."""
    topics = (
        names.jobs_events,
        names.term_by_node,
        names.node_signals,
        names.node_evidence,
        names.failover_decisions,
    )
    records = [r for t in topics for r in await hops.read_topic(ctx.env.bootstrap, t)]
    for name, p50, p90, p99, n in hops.summary(hops.stages(records, names, jobs)):
        note = f"p90 {p90:.0f}, p99 {p99:.0f} ms, {n} probes (CreateTime)"
        ctx.row(sc, f"hop: {name}", p50, "ms", note=note)


# -- flood -----------------------------------------------------------------------------------


async def scenario_flood(ctx: Context) -> None:
    env, sizes, sc = ctx.env, ctx.sizes, "flood"
    names = await env.topic_set(sc)
    group = f"{names.prefix}{APP_ID}"
    inputs = input_topics(names)
    # The backlog also holds what the signal filter forwarded and the node agent has not read
    # yet; node-signals records are packs of up to 50 items, so it gets its own threshold.
    signals = [names.node_signals]
    svc = classifier(env, names, policy=env.policy(GRACE_S), tag=sc)
    async with (
        Tail(env.bootstrap, [names.failover_decisions, *dlq_topics(names)]) as tail,
        BulkProducer(env.bootstrap, env.partitions) as producer,
        LagMonitor(env.bootstrap, classifier_groups(names, group), env.partitions, 0.25) as lag,
    ):
        prober = Prober(producer, names, tail, "flood")
        with workers([svc]):
            await warm_up(prober)
            pid = pid_of(svc)
            async with LoadGen(env, names, sizes.flood_rate, sizes.flood, sizes.wave) as gen:
                # Baseline lag under the background alone (faust commits every 1,000 records
                # or 2.8 s, so even a classifier that keeps up shows some).
                t_ref = time.monotonic()
                await lag.wait(lambda s: s.t >= t_ref + 5, 10)
                base = max(s.lag(inputs) for s in lag.samples[-12:])
                signals_base = max(200, 2 * max(s.lag(signals) for s in lag.samples[-12:]))
                rss_before = rss_mb(pid)[0]
                caught_up_at = max(1_000 + 4 * sizes.flood_rate, 2 * base)
                stop = asyncio.Event()
                probes = asyncio.create_task(prober.run(stop))
                with profiled(env, pid, sc):
                    await gen.flood()
                    start = mono_of((await gen.expect("flood-start", 30))["t"])
                    end_ev = await gen.expect("flood-end", 600)
                    end = mono_of(end_ev["t"])
                    caught = await lag.wait(
                        lambda s: (
                            s.t > end
                            and s.lag(inputs) <= caught_up_at
                            and s.lag(signals) <= signals_base
                        ),
                        600,
                    )
                stop.set()
                await probes
                complete = await tail.wait(prober.done, 60 + GRACE_S)
                summary = await gen.stop()
            require_alive([svc])
            rss_after, rss_peak = rss_mb(pid)
    peak = max(s.lag(inputs) for s in lag.samples if s.t >= start)
    ctx.row(
        sc,
        "flood records",
        end_ev["count"],
        note=f"{sizes.flood:,} identical XIDs from "
        f"one GPU + {sizes.wave:,} wave nodes, produced in {end - start:.1f} s",
    )
    ctx.row(sc, "background load", summary["rate"], "rec/s")
    ctx.row(sc, "lag peak", peak, "records", note=f"before the flood <= {base:,}")
    if caught is None:
        ctx.row(sc, "catch-up after flood end", None, "s", "<= 10 s", False, "not within 600 s")
    else:
        ctx.row(
            sc,
            "catch-up after flood end",
            caught.t - end,
            "s",
            "<= 10 s",
            caught.t - end <= 10,
            f"lag <= {caught_up_at:,.0f} inputs + {signals_base:,.0f} node-signals packs"
            " (committed offsets)",
        )
        ctx.row(sc, "catch-up from flood start", caught.t - start, "s")
        # The two halves: the signal filter's inputs read, then the node agent's held
        # evidence applied (its node-signals commits wait for it: streams/deferred.py).
        read = next((x.t for x in lag.samples if x.t > end and x.lag(inputs) <= caught_up_at), None)
        if read is not None:
            ctx.row(sc, "inputs read after flood end", read - end, "s", note="committed offsets")
        raw = input_topics(names)
        rate = (caught.done(raw) - _done_at(lag.samples, start, raw)) / (caught.t - start)
        ctx.row(sc, "classifier rate during flood", rate, "rec/s", note="committed offsets")
    until = caught.t if caught is not None else float("inf")
    hw = prober.latencies("hardware", start, until)
    latency_rows(ctx, sc, "unrelated hardware decision", hw, 2.0, "probes sent during the flood")
    other = prober.latencies("other", start, until)
    latency_rows(ctx, sc, "unrelated non-hardware minus grace", other, 2.0)
    ctx.row(
        sc,
        "probe decisions",
        "all" if complete else "MISSING",
        ok=complete,
        note=str(prober.verdicts()),
    )
    await hop_rows(ctx, sc, names, prober.jobs("hardware", start, until))
    await changelog_rows(ctx, sc, names, sum(caught.end[t] for t in inputs) if caught else 0)
    ctx.row(sc, "RSS before flood", rss_before, "MB")
    ctx.row(
        sc,
        "RSS after catch-up",
        rss_after,
        "MB",
        "<= 500 MB",
        rss_after <= 500,
        f"peak (VmHWM) {rss_peak:,.0f} MB",
    )


async def changelog_rows(ctx: Context, sc: str, names: TopicNames, inputs: int) -> None:
    """How many changelog (table) records the classifier wrote, against the records it read."""
    counts = await record_counts(ctx.env.bootstrap, f"{names.prefix}{APP_ID}-", "-changelog")
    total = sum(counts.values())
    detail = ", ".join(
        f"{name.removesuffix('-changelog')} {n:,}" for name, n in sorted(counts.items())
    )
    ctx.row(
        sc, "table changelog records written", total, note=f"{detail}; {inputs:,} input records"
    )


def _done_at(samples: list[LagSample], t: float, topics: list[str]) -> int:
    before = [s for s in samples if s.t <= t]
    return before[-1].done(topics) if before else 0


# -- memory ----------------------------------------------------------------------------------


async def scenario_memory(ctx: Context) -> None:
    env, sizes, sc = ctx.env, ctx.sizes, "memory"
    names = await env.topic_set(sc)
    group = f"{names.prefix}{APP_ID}"
    # Drained = the node agent has read what the signal filter forwarded, too.
    inputs = [*input_topics(names), names.node_signals]
    svc = classifier(env, names, tag=sc)
    async with (
        Tail(env.bootstrap, [names.failover_decisions, *dlq_topics(names)]) as tail,
        BulkProducer(env.bootstrap, env.partitions) as producer,
        LagMonitor(env.bootstrap, classifier_groups(names, group), env.partitions, 0.5) as lag,
    ):
        prober = Prober(producer, names, tail, "mem")
        with workers([svc]):
            await warm_up(prober)
            pid = pid_of(svc)
            idle = rss_mb(pid)[0]
            t = time.monotonic()
            with profiled(env, pid, sc):
                n = await producer.send_all(node_evidence(names, sizes.nodes))
                done = await lag.wait(lambda s: s.lag(inputs) == 0, 120 + n / 500)
            require_alive([svc])
            rss, peak = rss_mb(pid)
    if done is None:
        raise BenchError(f"memory: the classifier did not drain {n:,} records")
    ctx.row(
        sc,
        "nodes with evidence",
        sizes.nodes,
        note=f"{n:,} software XIDs, 2 GPUs each, drained in {done.t - t:.1f} s",
    )
    ctx.row(sc, "RSS idle (after warm-up)", idle, "MB")
    ctx.row(
        sc,
        f"RSS with {sizes.nodes:,} nodes",
        rss,
        "MB",
        "<= 500 MB",
        rss <= 500,
        f"peak (VmHWM) {peak:,.0f} MB",
    )
    ctx.row(sc, "RSS per node", (rss - idle) * 1024 / sizes.nodes, "KB")
    await changelog_rows(ctx, sc, names, n)


# -- realistic load --------------------------------------------------------------------------


async def scenario_realistic(ctx: Context) -> None:
    """A real fleet's input rate (fleet.py) for `realistic_s`, with a few probe jobs: the
    classifier's CPU share (CPU seconds / wall seconds) at that rate and its decision latency."""
    env, sizes, sc = ctx.env, ctx.sizes, "realistic"
    fleet = Fleet(nodes=sizes.fleet_nodes)
    names = await env.topic_set(sc)
    group = f"{names.prefix}{APP_ID}"
    inputs = input_topics(names)
    svc = classifier(env, names, policy=env.policy(GRACE_S), tag=sc)
    async with (
        Tail(env.bootstrap, [names.failover_decisions, *dlq_topics(names)]) as tail,
        BulkProducer(env.bootstrap, env.partitions) as producer,
        LagMonitor(env.bootstrap, classifier_groups(names, group), env.partitions, 0.5) as lag,
    ):
        prober = Prober(producer, names, tail, "real")
        with workers([svc]):
            await warm_up(prober)
            pid = pid_of(svc)
            async with CpuClock([pid]) as cpu:
                # The classifier's own cost with no input (ticks, polls, metrics), to tell the
                # fixed part of its CPU share from the part that grows with the rate.
                idle0 = time.monotonic()
                await asyncio.sleep(sizes.realistic_s / 4)  # a measuring window, not a wait
                idle1 = time.monotonic()
                async with LoadGen(env, names, fleet.rate, fleet_nodes=fleet.nodes) as gen:
                    base = lag.samples[-1].done(inputs)
                    steady = await lag.wait(lambda s: s.done(inputs) >= base + 2 * fleet.rate, 60)
                    if steady is None:
                        raise BenchError("the classifier made no progress on the fleet's load")
                    stop = asyncio.Event()
                    t0, done0 = time.monotonic(), lag.samples[-1].done(inputs)
                    with profiled(env, pid, sc):
                        asyncio.get_running_loop().call_later(sizes.realistic_s, stop.set)
                        await prober.run(stop, per_s=0.5)  # a few terminations meanwhile
                        t1, done1 = time.monotonic(), lag.samples[-1].done(inputs)
                        complete = await tail.wait(prober.done, 60 + GRACE_S)
                        summary = await gen.stop()
            check_dead_letters(tail, sc)
            require_alive([svc])
            rss = rss_mb(pid)[0]
    cpu_used = cpu.between(t0, t1)
    ctx.row(sc, "fleet input rate", fleet.rate, "rec/s", note=fleet.describe())
    ctx.row(
        sc,
        "fleet input rate, changes only",
        fleet.published_rate,
        "rec/s",
        note="what agents publish while no GPU changes condition (heartbeats + XIDs); the "
        "load above sends every health sample, an upper bound",
    )
    ctx.row(sc, "load sent", summary["rate"], "rec/s", note="own process, event time = now")
    idle_share = cpu.between(idle0, idle1) / (idle1 - idle0)
    ctx.row(
        sc,
        "classifier CPU share, idle",
        idle_share,
        "CPU s / s",
        note=f"no input for {idle1 - idle0:.0f} s before the load (ticks, polls, metrics)",
    )
    ctx.row(
        sc,
        "classifier CPU share",
        cpu_used / (t1 - t0),
        "CPU s / s",
        note=f"{cpu_used:.1f} CPU s over {t1 - t0:.1f} s (user+sys, worker + filter process); "
        "1.0 = one core",
    )
    if done1 > done0:
        ctx.row(
            sc,
            "classifier CPU per record",
            cpu_used / (done1 - done0) * 1e6,
            "us",
            note=f"{done1 - done0:,} input records committed meanwhile",
        )
    latency_rows(ctx, sc, "hardware decision", prober.latencies("hardware"), 0.5)
    latency_rows(
        ctx, sc, "non-hardware minus grace", prober.latencies("other"), None, f"grace {GRACE_S} s"
    )
    ctx.row(
        sc,
        "probe decisions",
        "all" if complete else "MISSING",
        ok=complete,
        note=str(prober.verdicts()),
    )
    ctx.row(sc, "classifier RSS", rss, "MB")


# -- replay ----------------------------------------------------------------------------------


async def scenario_replay(ctx: Context) -> None:
    env, sc = ctx.env, "replay"
    path = env.tmp / "replay.jsonl"
    bench_replay.generate(path, ctx.sizes.replay)
    result = bench_replay.compare(path, REPLAY_REPEAT)
    path.unlink()
    n, rate, ratio = result.records, result.records / result.replay_s, result.ratio
    ctx.row(sc, "orjson parse only", n / result.orjson_s, "rec/s")
    ctx.row(sc, "replay engine", rate, "rec/s", ">= 100,000", rate >= 100_000, f"{n:,} records")
    spread = ", ".join(f"{r:.2f}" for r in result.ratios)
    note = f"median of {len(result.ratios)} passes (parse-only then replay): {spread}"
    ctx.row(sc, "replay / orjson", ratio, "", ">= 0.3", ratio >= 0.3, note)


RUNNERS: dict[str, Callable[[Context], Awaitable[None]]] = {
    "throughput": scenario_throughput,
    "latency": scenario_latency,
    "flood": scenario_flood,
    "memory": scenario_memory,
    "scaleout": scenario_scaleout,
    "replay": scenario_replay,
    "realistic": scenario_realistic,
}


# -- the run ---------------------------------------------------------------------------------


def machine() -> dict[str, Any]:
    mem_kb = 0
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_kb = int(line.split()[1])
    commit = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    dirty = subprocess.run(
        ["git", "-C", str(REPO), "status", "--porcelain", "--", "streams", "schemas"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    return {
        "cores": os.cpu_count(),
        "memory_gib": round(mem_kb / 1024 / 1024, 1),
        "python": platform.python_version(),
        "commit": commit + (" (streams/ or schemas/ modified)" if dirty else ""),
        "date": time.strftime("%Y-%m-%d %H:%M %Z"),
    }


async def run(
    scenarios: list[str],
    *,
    quick: bool,
    bootstrap: str,
    tmp: Path,
    partitions: int,
    records: int | None,
    profile_dir: Path | None,
    sizes: dict[str, Any] | None = None,
    classifier_env: dict[str, str] | None = None,
) -> Context:
    task, loop = asyncio.current_task(), asyncio.get_running_loop()
    signals = (signal.SIGTERM, signal.SIGINT)
    if task is not None:  # SIGTERM/SIGINT: cancel, so classifiers and the broker are stopped
        for sig in signals:
            loop.add_signal_handler(sig, task.cancel)
    env = Env(bootstrap, tmp, partitions, quick, profile_dir)
    env.classifier_env.update(classifier_env or {})
    chosen = Sizes.for_run(quick, records)
    for key, value in (sizes or {}).items():
        setattr(chosen, key, type(getattr(chosen, key))(value))
    ctx = Context(env, chosen)
    ctx.info = {
        **machine(),
        "bootstrap": bootstrap,
        "partitions": partitions,
        "quick": quick,
        "sizes": dataclasses.asdict(chosen),
        "classifier_env": env.classifier_env,
    }
    try:
        for name in scenarios:
            env.log(f"== {name}")
            t = time.monotonic()
            try:
                await RUNNERS[name](ctx)
            except Exception as exc:  # one failed scenario must not hide the others
                ctx.row(name, "ERROR", type(exc).__name__, ok=False, note=str(exc)[:300])
                env.log(f"{name} failed: {exc}")
            env.log(f"== {name} took {time.monotonic() - t:.0f} s")
    finally:
        for sig in signals:
            loop.remove_signal_handler(sig)
        with contextlib.suppress(Exception):
            await env.delete_topic_sets()
    return ctx


def run_from_args(args: argparse.Namespace) -> int:
    from deploy.broker import running_broker
    from deploy.broker_state import external_bootstrap

    for noisy in ("aiokafka", "kafka"):
        logging.getLogger(noisy).setLevel(logging.WARNING)

    chosen = [args.scenario] if isinstance(args.scenario, str) else list(args.scenario)
    names = list(SCENARIOS) if "all" in chosen else list(dict.fromkeys(chosen))
    bootstrap = args.bootstrap or external_bootstrap()
    with (
        tempfile.TemporaryDirectory(prefix="gpufailover-bench-") as tmp,
        contextlib.ExitStack() as stack,
    ):
        if bootstrap is None and any(n != "replay" for n in names):
            print("starting a Kafka broker for the benchmark...", file=sys.stderr)
            bootstrap = stack.enter_context(running_broker()).bootstrap
        try:
            ctx = asyncio.run(
                run(
                    names,
                    quick=args.quick,
                    bootstrap=bootstrap or "",
                    tmp=Path(tmp),
                    partitions=args.partitions,
                    records=args.records,
                    profile_dir=args.profile,
                    sizes={
                        k: v
                        for k in (
                            "rate",
                            "flood",
                            "wave",
                            "nodes",
                            "scaleout_workers",
                            "fleet_nodes",
                        )
                        if (v := getattr(args, k, None)) is not None
                    },
                    classifier_env=dict(kv.split("=", 1) for kv in args.classifier_env or []),
                )
            )
        except asyncio.CancelledError:
            print("gpufailover bench: interrupted", file=sys.stderr)
            return 130
    info = ctx.info
    print(
        f"gpufailover bench {' '.join(names)}{' --quick' if args.quick else ''}: "
        f"{info['date']}, {info['cores']} cores, {info['memory_gib']} GiB, "
        f"Python {info['python']}, commit {info['commit']}, {args.partitions} partitions"
        + "".join(f", classifier env {k}={v}" for k, v in info["classifier_env"].items())
    )
    print(table(ctx.rows))
    notes = [f"  {r.scenario}/{r.metric}: {r.note}" for r in ctx.rows if r.note]
    if notes:
        print("notes:")
        print("\n".join(notes))
    if args.json:
        args.json.write_bytes(
            orjson.dumps(
                {"info": info, "rows": [r.to_dict() for r in ctx.rows], "samples": ctx.samples},
                option=orjson.OPT_INDENT_2,
            )
        )
    errors = [r for r in ctx.rows if r.metric == "ERROR"]
    return 1 if errors else 0
