"""The loop's per-record error handling, without a broker: dead-letter, count, go on."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import orjson
import pytest
from consumer_fakes import NAMES, rec
from prometheus_client import CollectorRegistry

from consumers.runtime.loop import Ack, LoopConfig, TransactionalLoop
from consumers.runtime.metrics import LoopMetrics
from consumers.runtime.records import InRecord, Output
from schemas.dead_letter import DeadLetter
from schemas.errors import SchemaError

Count = Callable[..., float | None]


class Picky:
    """Fails on some records the way a processor can."""

    async def prepare(self, records: Sequence[InRecord]) -> None:
        return None

    def begin(self) -> None:
        return None

    def handle(self, r: InRecord) -> list[Output]:
        if r.value == b"bad":
            raise SchemaError("value", "bad")
        if r.value == b"bug":
            raise ZeroDivisionError("bug")
        return [Output(NAMES.jobs_status, r.key, r.value or b"")]

    def rollback(self) -> None:
        return None

    async def committed(self, acks: Sequence[Ack]) -> None:
        return None

    async def on_assigned(self) -> None:
        return None

    async def idle(self) -> None:
        return None

    def due(self, ready: frozenset[tuple[str, int]]) -> list[Output]:
        return []


def handle_all(component: str, topic: str, values: list[bytes]) -> tuple[list[Output], Count]:
    registry = CollectorRegistry()
    cfg = LoopConfig("b:1", "grp", "grp-x", (topic,), NAMES)
    loop = TransactionalLoop(cfg, Picky(), LoopMetrics.create(registry, component))
    outputs = [out for value in values for out in loop._handle(rec(topic, "j", value))]

    def count(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(f"gpufailover_{component}_{name}", labels)

    return outputs, count


def test_failures_become_dead_letters_and_good_records_pass() -> None:
    # The job status service owns failover.decisions' dead letters.
    outputs, count = handle_all("jobstatus", NAMES.failover_decisions, [b"ok", b"bad", b"bug"])
    dlq = NAMES.dlq(NAMES.failover_decisions)
    assert [o.topic for o in outputs] == [NAMES.jobs_status, dlq, dlq]
    letters = [DeadLetter.from_dict(orjson.loads(o.value)) for o in outputs[1:]]
    assert [(x.error_kind, x.error, x.component, x.group) for x in letters] == [
        ("decode", "SchemaError: value: bad", "jobstatus", "grp"),
        ("process", "ZeroDivisionError: bug", "jobstatus", "grp"),
    ]
    assert [o.key for o in outputs[1:]] == [x.kafka_key() for x in letters]
    assert count("records_consumed_total", topic="failover.decisions") == 3
    assert count("dead_lettered_total", topic="failover.decisions", error="decode") == 1
    assert count("dead_lettered_total", topic="failover.decisions", error="process") == 1
    assert count("bad_records_skipped_total", topic="failover.decisions") is None


def test_a_malformed_record_another_component_owns_is_counted_not_dead_lettered() -> None:
    # jobs.events is the classifier's job agent's: it dead-letters the malformed record. A
    # record the job status service fails to process is its own failure: dead-lettered.
    outputs, count = handle_all("jobstatus", NAMES.jobs_events, [b"bad", b"ok", b"bug"])
    assert [o.topic for o in outputs] == [NAMES.jobs_status, NAMES.dlq(NAMES.jobs_events)]
    (letter,) = [DeadLetter.from_dict(orjson.loads(o.value)) for o in outputs[1:]]
    assert (letter.error_kind, letter.raw_bytes()) == ("process", b"bug")
    assert count("bad_records_skipped_total", topic="jobs.events") == 1
    assert count("dead_lettered_total", topic="jobs.events", error="decode") is None
    assert count("dead_lettered_total", topic="jobs.events", error="process") == 1


def test_a_service_unknown_to_the_dead_letter_schema_fails_at_startup() -> None:
    cfg = LoopConfig("b:1", "grp", "grp-x", (NAMES.jobs_events,), NAMES)
    with pytest.raises(ValueError, match="not a component"):
        TransactionalLoop(cfg, Picky(), LoopMetrics.create(CollectorRegistry(), "nobody"))
