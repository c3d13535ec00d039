"""Records and collaborators for broker-free tests of the consumer services' logic."""

from __future__ import annotations

from typing import Any

import orjson

from consumers.runtime.loop import Ack
from consumers.runtime.records import InRecord, Output
from schemas.decisions import Decision, Evidence
from schemas.topics import TopicNames

NAMES = TopicNames("t.")
_offsets: dict[str, int] = {}


def rec(topic: str, key: str | None, value: Any, partition: int = 0) -> InRecord:
    """The next record on `topic` (offsets count up per topic)."""
    offset = _offsets.get(topic, 0)
    _offsets[topic] = offset + 1
    raw = value if isinstance(value, bytes) or value is None else orjson.dumps(value)
    return InRecord(topic, partition, offset, None if key is None else key.encode(), raw)


def acks(outputs: list[Output]) -> list[Ack]:
    """Acknowledge outputs as the broker would: one partition, increasing offsets."""
    out = []
    for out_rec in outputs:
        offset = _offsets.get(out_rec.topic, 0)
        _offsets[out_rec.topic] = offset + 1
        out.append(Ack(out_rec, 0, offset))
    return out


def value(output: Output) -> Any:
    return orjson.loads(output.value)


def decision(
    job: str,
    attempt: int = 0,
    *,
    verdict: str = "hardware",
    action: str = "failover",
    suspects: tuple[str, ...] = ("n1",),
    ts: int = 1_000_000,
    rule: str | None = None,
) -> dict[str, Any]:
    evidence = tuple(Evidence(n, 0, "xid", 79, ts - 10, "hardware") for n in suspects)
    return Decision(
        job_id=job,
        attempt=attempt,
        verdict=verdict,
        action=action,
        status="Pending-failoverinprogress" if action in ("failover", "retry") else "Failed",
        suspect_nodes=suspects,
        next_attempt=attempt + 1 if action in ("failover", "retry") else None,
        evidence=evidence,
        rule=rule or f"{verdict}.{action}",
        terminated_ts_ms=ts - 5,
        decided_ts_ms=ts,
    ).to_dict()


def request(node: str, ts: int, reason: str = "hardware") -> dict[str, Any]:
    return {
        "schema_version": 1,
        "node": node,
        "state": "quarantined",
        "reason": reason,
        "evidence": [],
        "job_id": "job-x",
        "ts_ms": ts,
    }
