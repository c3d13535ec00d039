"""Explain from a JSONL dump instead of the topics: replay it, then read input and output as
the topics would hold them (`gpufailover explain JOB --file DUMP`, and the examples' tests)."""

from __future__ import annotations

from collections.abc import Iterable

import orjson

from schemas.topics import Topic
from streams.explain import SourceRecord
from streams.policy import Policy
from streams.replay import QUARANTINE_TOPIC, Replayer


def records_from_dump(
    lines: Iterable[bytes], policy: Policy, now_ms: int | None = None
) -> list[SourceRecord]:
    """The dump's records, then what replaying it publishes. Replay's quarantine outputs are
    the classifier's requests (`failover.quarantine-requests`); the dump's own
    `nodes.quarantine` records (releases) stay states."""
    lines = list(lines)
    out: list[SourceRecord] = []
    for lineno, raw in enumerate(lines, start=1):
        rec = _record(raw, f"line {lineno}")
        if rec is not None:
            out.append(rec)
    replayer = Replayer(policy, now_ms)
    for raw in replayer.run(lines):
        rec = _record(raw, "replay")
        if rec is None:
            continue
        if rec.topic == QUARANTINE_TOPIC:
            rec = SourceRecord(Topic.QUARANTINE_REQUESTS, rec.key, rec.value, rec.where)
        out.append(rec)
    return out


def _record(raw: bytes, where: str) -> SourceRecord | None:
    """A line as a record; None for what is not one (replay dead-letters those)."""
    try:
        env = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(env, dict) or not isinstance(env.get("topic"), str):
        return None
    key = env.get("key")
    return SourceRecord(
        env["topic"], key if isinstance(key, str) else None, env.get("value"), where
    )
