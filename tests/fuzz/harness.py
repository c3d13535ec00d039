"""Hostile records through every decoder that reads them (issue 12, item 8).

Four targets, each driven the way production drives it, each checked the same way:
- `replay`: JSONL lines of every input topic, unknown topics and broken bytes, through
  `gpufailover replay`'s Replayer (future bound against NOW_MS);
- `signal-filter`: gpu.xid and gpu.health in batches through the signal filter (live bounds
  at NOW_MS), and everything it forwards through the node agent's glue;
- `job-agent`: jobs.events and training.telemetry through the job agent's glue (live bounds);
- `consumers`: decisions and quarantine requests through the quarantine, requeue and
  job-status services' per-record step (`TransactionalLoop._handle`), and job events through
  the job-status service.

Checked for every record: nothing raises out of the component (a crash), a record the
component could not use is dead-lettered exactly once with a reason, and where a topic's
acceptance is defined by its decoder and the bounds (`expected_reject`) the dead-lettered
records are exactly the ones it rejects.
"""

from __future__ import annotations

import asyncio
import logging
import resource
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

import orjson
from prometheus_client import CollectorRegistry

from consumers.jobstatus.logic import JobStatusProcessor, StatusTable
from consumers.jobstatus.metrics import JobStatusMetrics
from consumers.quarantine.actuator import LogActuator
from consumers.quarantine.breaker import BreakerConfig
from consumers.quarantine.logic import QuarantineProcessor
from consumers.quarantine.metrics import QuarantineMetrics
from consumers.quarantine.table import QuarantineTable
from consumers.requeue.logic import RequeueProcessor
from consumers.requeue.metrics import RequeueMetrics
from consumers.requeue.state import JobSpecs, Requeued
from consumers.runtime.loop import LoopConfig, Processor, TransactionalLoop
from consumers.runtime.metrics import LoopMetrics
from consumers.runtime.records import InRecord
from schemas.codec import decode, loads
from schemas.event_time import EventTimeBounds
from schemas.topics import TopicNames
from streams.glue import NodeGlue
from streams.job_glue import JobGlue
from streams.policy import Policy, load_policy
from streams.replay import MAX_LINE_BYTES, Replayer
from streams.signal_filter import InputRecord, SignalFilter
from tests.fuzz.mutate import (
    CONSUMER_TOPICS,
    NOW_MS,
    PIPELINE_TOPICS,
    UNKNOWN_TOPICS,
    Hostile,
    records,
)

NAMES = TopicNames("")
LIVE = EventTimeBounds.from_env(live=True)
REPLAY = EventTimeBounds.from_env(live=False)
CHUNK = 10_000  # records per timing sample (linear time: every chunk costs about the same)
BATCH = 500  # signal filter batch


@dataclass
class Result:
    target: str
    records: int = 0
    dead_lettered: int = 0
    crashes: int = 0
    wrong: int = 0  # dead-lettered twice, or accepted/rejected against `expected_reject`
    seconds: float = 0.0
    chunk_rates: list[float] = field(default_factory=list)  # records/s per CHUNK
    kinds: Counter[str] = field(default_factory=Counter)  # dead letters by error_kind
    examples: list[str] = field(default_factory=list)

    def fail(self, what: str) -> None:
        self.wrong += 1
        if len(self.examples) < 10:
            self.examples.append(what)

    def row(self) -> str:
        rates = self.chunk_rates or [0.0]
        return (
            f"{self.target:<14} {self.records:>9,} records  {self.dead_lettered:>9,} dead-lettered"
            f"  crashes {self.crashes}  wrong {self.wrong}  {self.seconds:7.1f} s"
            f"  chunk rate min/max {min(rates):,.0f}/{max(rates):,.0f} rec/s"
        )


def max_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def expected_reject(topic: str, raw: bytes | None, bounds: EventTimeBounds) -> str | None:
    """Why a record of logical `topic` must be refused (decode or time bounds), or None."""
    try:
        record = decode(topic, loads(raw if raw is not None else b"null"))
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return bounds.violation(record.ts_ms, NOW_MS)


def _timed(result: Result, items: Iterable[Any]) -> Iterator[Any]:
    start = chunk_start = time.perf_counter()
    for n, item in enumerate(items, start=1):
        yield item
        if n % CHUNK == 0:
            now = time.perf_counter()
            result.chunk_rates.append(CHUNK / max(now - chunk_start, 1e-9))
            chunk_start = now
    result.seconds = time.perf_counter() - start


# -- replay --------------------------------------------------------------------------------


def replay_line(h: Hostile) -> bytes:
    value = b"null" if h.value is None else h.value
    key = b"null" if h.key is None else orjson.dumps(h.key.decode("utf-8", "replace"))
    return b'{"topic":' + orjson.dumps(h.topic) + b',"key":' + key + b',"value":' + value + b"}"


def fuzz_replay(per_topic: int, seed: int, policy: Policy) -> Result:
    result = Result("replay")
    replayer = Replayer(policy, now_ms=NOW_MS, bounds=REPLAY)
    expected: dict[int, str | None] = {}

    def lines() -> Iterator[bytes]:
        hostile = _timed(result, records(PIPELINE_TOPICS, per_topic, seed))
        for lineno, h in enumerate(hostile, start=1):
            result.records += 1
            line = replay_line(h)
            if h.topic in UNKNOWN_TOPICS:
                expected[lineno] = "unknown topic"
            elif len(line) > MAX_LINE_BYTES:  # the key counts too (a 1 MB node id, say)
                expected[lineno] = "line over the limit"
            else:
                expected[lineno] = expected_reject(h.topic, h.value, REPLAY)
            yield line

    seen: set[int] = set()
    try:
        for out in replayer.run(lines()):
            body = orjson.loads(out)
            if not body["topic"].endswith(".dlq"):
                continue
            letter = body["value"]
            line = letter["line"]
            result.dead_lettered += 1
            result.kinds[letter["error_kind"]] += 1
            if letter["error_kind"] == "process":
                result.crashes += 1
            if line in seen:
                result.fail(f"line {line} dead-lettered twice")
            seen.add(line)
            if expected.get(line) is None:
                result.fail(f"line {line} dead-lettered but decodes: {letter['error']}")
    except Exception as exc:
        result.crashes += 1
        result.examples.append(f"replay raised {type(exc).__name__}: {exc}")
    for line, why in expected.items():
        if why is not None and line not in seen:
            result.fail(f"line {line} accepted but should be refused: {why}")
    return result


# -- the classifier's decoders ---------------------------------------------------------------


def known(stream: Iterable[Hostile]) -> Iterator[Hostile]:
    """The records of declared topics: a consumer never reads a topic it does not subscribe."""
    return (h for h in stream if h.topic not in UNKNOWN_TOPICS)


def _real(topic: str) -> str:
    return topic if topic in UNKNOWN_TOPICS else NAMES.name(topic)


def fuzz_signal_filter(per_topic: int, seed: int, policy: Policy) -> Result:
    result = Result("signal-filter")
    flt = SignalFilter(policy, NAMES, 5_000, bounds=LIVE)
    node_glue = NodeGlue(policy, NAMES, {}, {}, bounds=LIVE, clock=lambda: NOW_MS)
    offset = 0
    # Only its own topics reach the filter (its consumer subscribes to them).
    stream = known(records(("gpu.xid", "gpu.health"), per_topic, seed))
    start = time.perf_counter()
    chunk_start, done = start, 0
    while True:
        chunk = list(islice(stream, BATCH))
        if not chunk:
            break
        batch = []
        expected: dict[int, str | None] = {}
        for h in chunk:
            expected[offset] = expected_reject(h.topic, h.value, LIVE)
            batch.append(InputRecord(NAMES.name(h.topic), 0, offset, h.key, h.value))
            offset += 1
        try:
            outputs = flt.reduce(batch, NOW_MS)
        except Exception as exc:
            result.crashes += 1
            result.examples.append(f"reduce raised {type(exc).__name__}: {exc}")
            continue
        seen: set[int] = set()
        for out in outputs:
            if out.topic == NAMES.node_signals:
                _node_agent(result, node_glue, out.value)
                continue
            letter = orjson.loads(out.value)
            result.dead_lettered += 1
            result.kinds[letter["error_kind"]] += 1
            result.crashes += letter["error_kind"] == "process"
            if letter["offset"] in seen:
                result.fail(f"offset {letter['offset']} dead-lettered twice")
            seen.add(letter["offset"])
            if expected.get(letter["offset"]) is None:
                result.fail(f"offset {letter['offset']} dead-lettered but valid: {letter['error']}")
        for off, why in expected.items():
            if why is not None and off not in seen:
                result.fail(f"offset {off} accepted but should be refused: {why}")
        for out in flt.watermarks(NOW_MS + offset * 1000):
            _node_agent(result, node_glue, out.value)
        result.records += len(chunk)
        done += len(chunk)
        if done >= CHUNK:
            now = time.perf_counter()
            result.chunk_rates.append(done / max(now - chunk_start, 1e-9))
            chunk_start, done = now, 0
    result.seconds = time.perf_counter() - start
    return result


def _node_agent(result: Result, glue: NodeGlue, value: bytes) -> None:
    """What the filter forwards is our own output: the node agent must take all of it."""
    try:
        outs = glue.handle(NAMES.node_signals, 0, 0, None, value)
    except Exception as exc:
        result.crashes += 1
        result.examples.append(f"node agent raised {type(exc).__name__}: {exc}")
        return
    for out in outs:
        if out.topic.endswith(".dlq"):
            result.fail(f"node agent dead-lettered the filter's own output: {out.value[:200]!r}")


def fuzz_job_agent(per_topic: int, seed: int, policy: Policy) -> Result:
    result = Result("job-agent")
    glue = JobGlue(
        policy, NAMES, {}, {}, {}, idle_after_ms=5_000, bounds=LIVE, clock=lambda: NOW_MS
    )
    for offset, h in enumerate(
        _timed(result, known(records(("jobs.events", "training.telemetry"), per_topic, seed)))
    ):
        result.records += 1
        why = expected_reject(h.topic, h.value, LIVE)
        try:
            outputs = glue.handle(NAMES.name(h.topic), 0, offset, h.key, h.value)
        except Exception as exc:
            result.crashes += 1
            result.dead_lettered += 1
            result.examples.append(f"job agent raised {type(exc).__name__}: {exc}")
            continue
        dead = [o for o in outputs if o.topic.endswith(".dlq")]
        result.dead_lettered += len(dead)
        for out in dead:
            result.kinds[orjson.loads(out.value)["error_kind"]] += 1
        if len(dead) > 1:
            result.fail(f"offset {offset} dead-lettered {len(dead)} times")
        if (why is None) == bool(dead):
            result.fail(f"offset {offset}: expected {'refusal: ' + why if why else 'accepted'}")
    return result


# -- the consumers -------------------------------------------------------------------------


def _loop(processor: Processor, metrics: LoopMetrics, topics: tuple[str, ...]) -> Any:
    cfg = LoopConfig("unused:9092", "fuzz", "fuzz-tx", topics, NAMES)
    return TransactionalLoop(cfg, processor, metrics)


def consumer_loops() -> list[tuple[str, Any, Processor]]:
    q_metrics = QuarantineMetrics.create(CollectorRegistry())
    quarantine = QuarantineProcessor(
        NAMES,
        BreakerConfig(max_nodes=10**9),
        QuarantineTable(),
        LogActuator(),
        q_metrics,
        bounds=LIVE,
        clock=lambda: NOW_MS,
    )
    r_metrics = RequeueMetrics.create(CollectorRegistry())
    requeue = RequeueProcessor(
        NAMES,
        QuarantineTable(),
        JobSpecs(),
        Requeued(),
        r_metrics,
        bounds=LIVE,
        clock=lambda: NOW_MS,
    )
    j_metrics = JobStatusMetrics.create(CollectorRegistry())
    jobstatus = JobStatusProcessor(
        NAMES, StatusTable(), j_metrics, deadline_ms=300_000, clock=lambda: NOW_MS, bounds=LIVE
    )
    return [
        ("quarantine", _loop(quarantine, q_metrics.loop, ()), quarantine),
        ("requeue", _loop(requeue, r_metrics.loop, ()), requeue),
        ("jobstatus", _loop(jobstatus, j_metrics.loop, ()), jobstatus),
    ]


READS: dict[str, tuple[str, ...]] = {
    "quarantine": ("failover.decisions", "failover.quarantine-requests"),
    "requeue": ("failover.decisions",),
    "jobstatus": ("failover.decisions", "jobs.events"),
}


def fuzz_consumers(per_topic: int, seed: int) -> Result:
    result = Result("consumers")
    loops = consumer_loops()
    topics = (*CONSUMER_TOPICS, "jobs.events")
    letters: Counter[int] = Counter()
    events = asyncio.new_event_loop()
    for _, _, processor in loops:
        processor.begin()
    for offset, h in enumerate(_timed(result, records(topics, per_topic, seed))):
        result.records += 1
        rec = InRecord(_real(h.topic), 0, offset, h.key, h.value, NOW_MS)
        if offset % BATCH == 0:
            # A transaction's end: staged state moves on as after a real batch.
            for _, _, processor in loops:
                events.run_until_complete(processor.committed([]))
                processor.begin()
        for name, loop, _ in loops:
            if h.topic not in READS[name]:
                continue
            try:
                outputs = loop._handle(rec)
            except Exception as exc:
                result.crashes += 1
                result.examples.append(f"{name} raised {type(exc).__name__}: {exc}")
                continue
            for out in outputs:
                if out.topic.endswith(".dlq") or _is_dead_letter(out.value):
                    letter = orjson.loads(out.value)
                    result.kinds[letter["error_kind"]] += 1
                    result.crashes += letter["error_kind"] == "process"
                    letters[offset] += 1
    events.close()
    result.dead_lettered = len(letters)
    for offset, n in letters.items():
        if n > 1:
            result.fail(f"offset {offset} dead-lettered {n} times")
    return result


def _is_dead_letter(value: bytes) -> bool:
    return b'"kind":"dead-letter"' in value[:64]


TARGETS: dict[str, Callable[[int, int, Policy], Result]] = {
    "replay": fuzz_replay,
    "signal-filter": fuzz_signal_filter,
    "job-agent": fuzz_job_agent,
    "consumers": lambda n, seed, policy: fuzz_consumers(n, seed),
}


def run_all(per_topic: int, seed: int, targets: Iterable[str] = TARGETS) -> list[Result]:
    """Every target; warnings are off meanwhile (each bad record logs one)."""
    policy = load_policy()
    logging.disable(logging.WARNING)
    try:
        return [TARGETS[t](per_topic, seed, policy) for t in targets]
    finally:
        logging.disable(logging.NOTSET)
