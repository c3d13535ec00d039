"""The loop's per-record error handling, without a broker: dead-letter, count, go on."""

from __future__ import annotations

from collections.abc import Sequence

import orjson
from consumer_fakes import NAMES, rec
from prometheus_client import CollectorRegistry

from consumers.runtime.loop import Ack, LoopConfig, TransactionalLoop
from consumers.runtime.metrics import LoopMetrics
from consumers.runtime.records import InRecord, Output
from schemas.errors import SchemaError


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


def test_failures_become_dead_letters_and_good_records_pass() -> None:
    registry = CollectorRegistry()
    cfg = LoopConfig("b:1", "grp", "grp-x", (NAMES.jobs_events,), NAMES)
    loop = TransactionalLoop(cfg, Picky(), LoopMetrics.create(registry, "test"))
    outputs = [
        out
        for value in (b"ok", b"bad", b"bug")
        for out in loop._handle(rec(NAMES.jobs_events, "j", value))
    ]
    assert [o.topic for o in outputs] == [NAMES.jobs_status, *[NAMES.dlq(NAMES.jobs_events)] * 2]
    letters = [orjson.loads(o.value) for o in outputs[1:]]
    assert [(x["error_kind"], x["error"]) for x in letters] == [
        ("decode", "SchemaError: value: bad"),
        ("process", "ZeroDivisionError: bug"),
    ]

    def count(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(f"gpufailover_test_{name}", labels)

    assert count("records_consumed_total", topic="jobs.events") == 3
    assert count("dead_lettered_total", topic="jobs.events", error="decode") == 1
    assert count("dead_lettered_total", topic="jobs.events", error="process") == 1
