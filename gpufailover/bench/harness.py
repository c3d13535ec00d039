"""Shared machinery of the pipeline benchmarks (`gpufailover bench`): topic sets, bulk producing,
classifier processes, a decision tail, a consumer-lag monitor, RSS, py-spy, percentiles.

Every wait here waits for a condition (a record seen, a lag reached) with a timeout; the only
timed loops are samplers (the lag monitor, the load generator's pacing).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import math
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.partitioner import murmur2

from deploy.kafka_admin import admin_client
from deploy.topics import create_topics
from gpufailover.bench.service import Service
from gpufailover.ports import free_port
from schemas.topics import TopicNames

REPO = Path(__file__).resolve().parents[2]
APP_ID = "gpufailover-classifier"
SHIPPED_POLICY = REPO / "streams" / "data" / "policy.json"

T = TypeVar("T")

# (real topic, key, value, partition or None: the default partitioner's choice)
Record = tuple[str, bytes | None, bytes, int | None]


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def partition_for(key: bytes, partitions: int) -> int:
    """The partition aiokafka's (and Java's) default partitioner picks for `key`."""
    h: int = murmur2(key)
    return (h & 0x7FFFFFFF) % partitions


@dataclass
class Env:
    """One benchmark run: the broker, a scratch folder and the sizes."""

    bootstrap: str
    tmp: Path
    partitions: int = 4
    quick: bool = False
    profile_dir: Path | None = None
    topic_sets: list[TopicNames] = field(default_factory=list)
    # extra environment of classifier processes, e.g. faust settings (PRODUCER_LINGER=0.005)
    classifier_env: dict[str, str] = field(default_factory=dict)
    log: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True)

    async def topic_set(self, label: str) -> TopicNames:
        names = TopicNames(f"bench-{label}-{uuid.uuid4().hex[:6]}.")
        await create_topics(self.bootstrap, partitions=self.partitions, prefix=names.prefix)
        self.topic_sets.append(names)
        return names

    def policy(self, grace_s: int | None = None) -> Path:
        """The shipped policy, or a copy with another grace (non-hardware decisions wait it)."""
        if grace_s is None:
            return SHIPPED_POLICY
        data = orjson.loads(SHIPPED_POLICY.read_bytes())
        data["grace_s"] = grace_s
        path = self.tmp / f"policy-grace-{grace_s}.json"
        path.write_bytes(orjson.dumps(data))
        return path

    async def delete_topic_sets(self) -> None:
        """Remove every topic (and the classifier's changelogs) this run created."""
        if not self.topic_sets:
            return
        async with admin_client(self.bootstrap) as admin:
            prefixes = tuple(n.prefix for n in self.topic_sets)
            mine = [t for t in await admin.list_topics() if t.startswith(prefixes)]
            if mine:
                await admin.delete_topics(mine)
        self.topic_sets.clear()


# -- producing --------------------------------------------------------------------------------


class BulkProducer:
    """Pipelined producing through aiokafka's batch API: no coroutine per record."""

    def __init__(self, bootstrap: str, partitions: int) -> None:
        self.partitions = partitions
        self.producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap, linger_ms=5, max_batch_size=256 * 1024, acks=1
        )
        self.sent = 0

    async def __aenter__(self) -> BulkProducer:
        await self.producer.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.producer.stop()

    async def send_all(self, records: Iterable[Record]) -> int:
        """Send every record; return when all are acknowledged. Keyed records go where the
        default partitioner would put them, so the classifier's co-partitioning holds."""
        builders: dict[tuple[str, int], Any] = {}
        inflight: list[asyncio.Future[Any]] = []
        n = 0
        for topic, key, value, partition in records:
            if partition is None:
                partition = partition_for(key, self.partitions) if key is not None else 0
            slot = (topic, partition)
            builder = builders.get(slot)
            if builder is None:
                builder = builders[slot] = self.producer.create_batch()
            if builder.append(timestamp=None, key=key, value=value) is None:
                inflight.append(await self.producer.send_batch(builder, topic, partition=partition))
                builder = builders[slot] = self.producer.create_batch()
                builder.append(timestamp=None, key=key, value=value)
            n += 1
            if len(inflight) > 256:
                await asyncio.gather(*inflight[:128])
                del inflight[:128]
        for (topic, partition), builder in builders.items():
            if builder.record_count():
                inflight.append(await self.producer.send_batch(builder, topic, partition=partition))
        await asyncio.gather(*inflight)
        self.sent += n
        return n

    async def send_one(self, topic: str, key: str, value: dict[str, Any]) -> None:
        """One keyed record, acknowledged before returning."""
        await self.producer.send_and_wait(topic, orjson.dumps(value), key=key.encode())


# -- reading ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Arrival:
    topic: str
    key: str | None
    value: Any
    t: float  # time.monotonic() when the tail saw it


class Tail:
    """Reads topics from the start in the background and records what arrives, and when."""

    def __init__(self, bootstrap: str, topics: Sequence[str]) -> None:
        self.consumer = AIOKafkaConsumer(
            *topics,
            bootstrap_servers=bootstrap,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            fetch_max_wait_ms=100,
        )
        self.arrivals: list[Arrival] = []
        # topic -> key -> first arrival (later ones with the same key are duplicates)
        self.first: dict[str, dict[str | None, Arrival]] = {t: {} for t in topics}
        self.duplicates: dict[str, int] = dict.fromkeys(topics, 0)
        self._changed = asyncio.Condition()
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Tail:
        await self.consumer.start()
        self._task = asyncio.create_task(self._run())
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.consumer.stop()

    async def _run(self) -> None:
        while True:
            batch = await self.consumer.getmany(timeout_ms=500)
            t = time.monotonic()
            if not batch:
                continue
            for tp, messages in batch.items():
                for m in messages:
                    value = orjson.loads(m.value) if m.value else None
                    key = m.key.decode() if m.key is not None else None
                    arrival = Arrival(tp.topic, key, value, t)
                    self.arrivals.append(arrival)
                    seen = self.first[tp.topic]
                    if key in seen:
                        self.duplicates[tp.topic] += 1
                    else:
                        seen[key] = arrival
            async with self._changed:
                self._changed.notify_all()

    async def wait(self, done: Callable[[Tail], bool], timeout_s: float) -> bool:
        """Until `done(self)` holds (True) or the timeout passes (False)."""
        try:
            async with asyncio.timeout(timeout_s), self._changed:
                await self._changed.wait_for(lambda: done(self))
        except TimeoutError:
            return False
        return True

    def on(self, topic: str) -> list[Arrival]:
        return [a for a in self.arrivals if a.topic == topic]


def decision_key(value: dict[str, Any]) -> tuple[str, int]:
    return (str(value["job_id"]), int(value["attempt"]))


# -- consumer lag -----------------------------------------------------------------------------


@dataclass(frozen=True)
class LagSample:
    t: float  # time.monotonic()
    committed: dict[str, int]  # per topic, summed over partitions
    end: dict[str, int]

    def lag(self, topics: Iterable[str] | None = None) -> int:
        names = self.end if topics is None else topics
        return sum(max(0, self.end.get(t, 0) - self.committed.get(t, 0)) for t in names)

    def done(self, topics: Iterable[str] | None = None) -> int:
        names = self.end if topics is None else topics
        return sum(self.committed.get(t, 0) for t in names)


RETRIABLE_WAIT_S = 60.0  # how long a retriable broker error is waited out


async def retrying(
    what: str,
    call: Callable[[], Awaitable[T]],
    timeout_s: float = RETRIABLE_WAIT_S,
    log: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True),
) -> T:
    """`call()`, again while the broker answers with a retriable error (aiokafka's `retriable`:
    a group coordinator or partition leader that does not exist yet on a fresh broker, a
    connection being set up), for up to `timeout_s`; then that error is raised. Other errors
    are raised at once. Says once what it waits for."""
    from aiokafka.errors import KafkaError

    deadline = time.monotonic() + timeout_s
    delay = 0.05
    waiting = False
    while True:
        try:
            result = await call()
        except KafkaError as exc:
            if not exc.retriable or time.monotonic() + delay > deadline:
                raise
            if not waiting:
                log(f"  waiting for the broker ({what}): {type(exc).__name__}, retriable; "
                    f"retrying for up to {timeout_s:.0f} s")  # fmt: skip
                waiting = True
            await asyncio.sleep(delay)  # back-off between retries of a retriable broker error
            delay = min(1.0, delay * 2)
            continue
        if waiting:
            log(f"  broker ready ({what})")
        return result


class LagMonitor:
    """Samples consumer groups' committed offsets and the topics' end offsets (the groups' lag
    as Kafka tools report it) every `interval_s`. `groups` maps each group to the topics it
    reads. faust commits every 1,000 records or 2.8 s, the signal filter every second, so a lag
    of 0 shows up to 2.8 s after the last record was processed."""

    def __init__(
        self,
        bootstrap: str,
        groups: Mapping[str, Sequence[str]],
        partitions: int,
        interval_s: float,
    ) -> None:
        self.bootstrap = bootstrap
        self.groups = {
            g: [TopicPartition(t, p) for t in topics for p in range(partitions)]
            for g, topics in groups.items()
        }
        self.topics = [t for topics in groups.values() for t in topics]
        self.tps = [tp for tps in self.groups.values() for tp in tps]
        self.interval_s = interval_s
        self.samples: list[LagSample] = []
        self._changed = asyncio.Condition()
        self._task: asyncio.Task[None] | None = None
        self._consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
        self._admin_cm: Any = None
        self._admin: Any = None

    async def __aenter__(self) -> LagMonitor:
        await self._consumer.start()
        self._admin_cm = admin_client(self.bootstrap)
        self._admin = await self._admin_cm.__aenter__()
        await self.sample()
        self._task = asyncio.create_task(self._run())
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self._admin_cm.__aexit__(None, None, None)
        await self._consumer.stop()

    def _offsets(self, group: str, tps: list[TopicPartition]) -> Callable[[], Awaitable[Any]]:
        return lambda: self._admin.list_consumer_group_offsets(group, partitions=tps)

    async def sample(self) -> LagSample:
        # On a fresh broker the group coordinator (and its __consumer_offsets topic) may not
        # exist yet when the first sample is taken: retriable, waited out (bounded).
        end = await retrying("end offsets", lambda: self._consumer.end_offsets(self.tps))
        committed: dict[TopicPartition, Any] = {}
        for group, tps in self.groups.items():
            committed.update(await retrying(f"offsets of group {group}", self._offsets(group, tps)))
        s = LagSample(
            time.monotonic(),
            {t: sum(max(0, committed[tp].offset) for tp in committed if tp.topic == t)
             for t in self.topics},
            {t: sum(off for tp, off in end.items() if tp.topic == t) for t in self.topics},
        )  # fmt: skip
        self.samples.append(s)
        async with self._changed:
            self._changed.notify_all()
        return s

    async def _run(self) -> None:
        next_t = time.monotonic()
        while True:
            next_t += self.interval_s
            await asyncio.sleep(max(0.0, next_t - time.monotonic()))  # sampling period
            await self.sample()

    async def wait(self, done: Callable[[LagSample], bool], timeout_s: float) -> LagSample | None:
        """The first new sample for which `done` holds, or None on timeout."""
        seen = len(self.samples)
        try:
            async with asyncio.timeout(timeout_s), self._changed:
                await self._changed.wait_for(lambda: any(done(s) for s in self.samples[seen:]))
        except TimeoutError:
            return None
        return next(s for s in self.samples[seen:] if done(s))


async def record_counts(bootstrap: str, prefix: str, suffix: str = "") -> dict[str, int]:
    """Records in each topic named `prefix...suffix` (end offsets: nothing is deleted here)."""
    async with admin_client(bootstrap) as admin:
        topics = [
            t for t in await admin.list_topics() if t.startswith(prefix) and t.endswith(suffix)
        ]
        described = await admin.describe_topics(topics) if topics else []
    tps = [TopicPartition(t["topic"], p["partition"]) for t in described for p in t["partitions"]]
    if not tps:
        return {}
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        end = await retrying(f"end offsets of {prefix}*", lambda: consumer.end_offsets(tps))
    finally:
        await consumer.stop()
    counts: dict[str, int] = {}
    for tp, offset in end.items():
        name = tp.topic[len(prefix) :]
        counts[name] = counts.get(name, 0) + offset
    return counts


async def first_record_monotonic(bootstrap: str, topic: str, partitions: int) -> float | None:
    """When the first record of `topic` was produced (its CreateTime, the producer's clock:
    same machine), on this process's `time.monotonic()` scale; None if the topic is empty."""
    # No seek_to_beginning(): after end_offsets() it left this consumer fetching nothing.
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest"
    )
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        ends = await retrying(f"end offsets of {topic}", lambda: consumer.end_offsets(tps))
        waiting = {tp for tp, end in ends.items() if end > 0}
        first: list[int] = []
        while waiting:
            # All partitions: aiokafka does not fetch more for the others while data it fetched
            # for a partition left out of getmany() waits to be returned.
            batch = await consumer.getmany(timeout_ms=1000)
            for tp, records in batch.items():
                if records and tp in waiting:
                    first.append(records[0].timestamp)
                    waiting.discard(tp)
    finally:
        await consumer.stop()
    if not first:
        return None
    return time.monotonic() - (time.time() - min(first) / 1000)


# -- the classifier as a process --------------------------------------------------------------


def classifier(
    env: Env,
    names: TopicNames,
    *,
    policy: Path | None = None,
    idle_after_s: float = 5.0,
    tick_interval_s: float = 1.0,
    tag: str = "classifier",
    extra_env: Mapping[str, str] | None = None,
) -> Service:
    """`gpufailover classifier` on the topic set, its faust data dir in the scratch folder."""
    args = [
        "classifier",
        "--bootstrap", env.bootstrap,
        "--topic-prefix", names.prefix,
        "--partitions", str(env.partitions),
        "--web-port", str(free_port()),
        "--idle-after", str(idle_after_s),
        "--tick-interval", str(tick_interval_s),
        "--policy", str(policy or SHIPPED_POLICY),
    ]  # fmt: skip
    log_path = env.tmp / f"{names.prefix}{tag}-{time.monotonic_ns()}.log"
    extra = {
        "GPUFAILOVER_STATE_DIR": str(env.tmp / "state"),
        **(extra_env or {}),
        **env.classifier_env,
    }
    return Service(args, log_path, extra)


def classifier_groups(names: TopicNames, group: str) -> dict[str, list[str]]:
    """The classifier's consumer groups and what each reads (its lag is the sum over these):
    the faust agents', and the signal filter's (`streams.signal_loop`)."""
    return {
        group: [
            names.jobs_events,
            names.training_telemetry,
            names.nodes_quarantine,
            names.node_signals,
            names.node_evidence,
            names.ticks,
        ],
        f"{group}-signals": [names.gpu_xid, names.gpu_health, names.term_by_node],
    }


def input_topics(names: TopicNames) -> list[str]:
    return [names.gpu_xid, names.gpu_health, names.jobs_events]


def family(pid: int) -> list[int]:
    """`pid` and its live descendants (the classifier worker and its signal filter's process),
    from /proc/<pid>/task/<tid>/children."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            tasks = list(Path(f"/proc/{p}/task").iterdir())
        except FileNotFoundError:
            continue
        for task in tasks:
            with contextlib.suppress(FileNotFoundError):
                todo += [int(c) for c in (task / "children").read_text().split()]
    return out


def rss_mb(pid: int) -> tuple[float, float]:
    """(VmRSS, VmHWM) in MB of a process and its children, summed, from /proc/<pid>/status."""
    fields: dict[str, float] = {"VmRSS": 0.0, "VmHWM": 0.0}
    for p in family(pid):
        try:
            lines = Path(f"/proc/{p}/status").read_text().splitlines()
        except FileNotFoundError:
            continue
        for line in lines:
            key, _, rest = line.partition(":")
            if key in fields:
                fields[key] += int(rest.split()[0]) / 1024
    return fields["VmRSS"], fields["VmHWM"]


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    """User + system CPU seconds a process has used so far (all its threads, not its
    children), from /proc/<pid>/stat (fields 14 and 15, in clock ticks)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()  # the name in parentheses may hold spaces
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


class CpuClock:
    """The CPU seconds of some processes and their children, sampled every `interval_s` in the
    background, so the CPU they used between two moments known only afterwards (the first
    forwarded record, the last decision) can be read: `between(t0, t1)`, interpolated."""

    def __init__(self, pids: Sequence[int], interval_s: float = 0.1) -> None:
        self.pids = list(pids)
        self.interval_s = interval_s
        self.samples: list[tuple[float, float]] = []  # (monotonic, CPU seconds of all pids)
        self._last: dict[int, float] = dict.fromkeys(self.pids, 0.0)
        self._task: asyncio.Task[None] | None = None

    def sample(self) -> None:
        # Each process with its children (a worker's signal filter); one that exited keeps
        # its last value.
        for pid in {p for root in self.pids for p in family(root)}:
            with contextlib.suppress(OSError, ValueError, IndexError):
                self._last[pid] = cpu_s(pid)
        self.samples.append((time.monotonic(), sum(self._last.values())))

    async def __aenter__(self) -> CpuClock:
        self.sample()
        self._task = asyncio.create_task(self._run())
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self.sample()

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)  # sampling period
            self.sample()

    def at(self, t: float) -> float:
        """CPU seconds used up to monotonic time `t` (clamped to the sampled span)."""
        samples = self.samples
        if not samples:
            raise ValueError("no CPU sample taken")
        if t <= samples[0][0]:
            return samples[0][1]
        for (t0, c0), (t1, c1) in itertools.pairwise(samples):
            if t0 <= t <= t1:
                return c0 + (c1 - c0) * ((t - t0) / (t1 - t0) if t1 > t0 else 1.0)
        return samples[-1][1]

    def between(self, t0: float, t1: float) -> float:
        return self.at(t1) - self.at(t0)


def pid_of(service: Service) -> int:
    assert service.proc is not None
    return service.proc.pid


def alive(service: Service) -> bool:
    return service.proc is not None and service.proc.poll() is None


class PySpy:
    """`py-spy record` (raw collapsed stacks) against a running process, while in the block."""

    def __init__(self, pid: int, out: Path, rate: int = 100) -> None:
        self.out = out
        exe = Path(sys.executable).parent / "py-spy"
        self.args = [
            str(exe) if exe.exists() else "py-spy",
            "record", "--pid", str(pid), "--format", "raw", "--rate", str(rate),
            "--nonblocking", "--threads", "--output", str(out),
        ]  # fmt: skip
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> PySpy:
        log = self.out.with_suffix(".log").open("wb")
        self.proc = subprocess.Popen(self.args, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


# -- statistics and the table -----------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty sequence."""
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


@dataclass
class Row:
    scenario: str
    metric: str
    value: float | int | str | None
    unit: str = ""
    target: str = ""
    ok: bool | None = None  # None: no target
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario,
            "metric": self.metric,
            "value": self.value,
            "unit": self.unit,
            "target": self.target,
            "ok": self.ok,
            "note": self.note,
        }


def fmt_value(value: float | int | str | None) -> str:
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    if isinstance(value, int):
        return f"{value:,}"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.3g}"


def table(rows: Sequence[Row]) -> str:
    head = ("scenario", "metric", "value", "unit", "target", "met")
    body = [
        (
            r.scenario,
            r.metric,
            fmt_value(r.value),
            r.unit,
            r.target,
            "-" if r.ok is None else ("yes" if r.ok else "NO"),
        )
        for r in rows
    ]
    widths = [max(len(x[i]) for x in [head, *body]) for i in range(len(head))]
    line = "  ".join("{:<%d}" % w for w in widths)  # noqa: UP031 - widths are computed
    sep = "  ".join("-" * w for w in widths)
    out = [line.format(*head), sep]
    out += [line.format(*b) for b in body]
    return "\n".join(out)


def subprocess_env() -> dict[str, str]:
    """The environment for helper processes that import `gpufailover.bench` (the repository root on
    the path)."""
    path = os.environ.get("PYTHONPATH", "")
    return {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{path}" if path else str(REPO)}
