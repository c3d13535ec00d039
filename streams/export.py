"""`gpufailover export`: input records read off the topics as replay's JSONL lines. Pure.

Lines are `{"topic": <logical>, "key": ..., "value": {...}}`, the format `gpufailover replay`
reads. They are ordered by event time (`ts_ms`), then Kafka timestamp, topic, partition, offset:
the order in which every node's partition watermark would pass them, so replay's one watermark
closes each window where the stream's per-partition watermarks did, whatever order the
partitions were read in. A value that is not JSON is kept as a string, so that replay
dead-letters it as the classifier did; tombstones (compacted `nodes.quarantine`) are skipped.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson

from consumers.runtime.records import InRecord
from schemas.topics import Topic

# What replay reads (`streams/replay.py`): the pipeline's inputs and the quarantine states
# (releases reset a node's window); the outputs it recomputes are left out.
EXPORTED_TOPICS: tuple[str, ...] = (
    Topic.JOBS_EVENTS,
    Topic.GPU_XID,
    Topic.GPU_HEALTH,
    Topic.TRAINING_TELEMETRY,
    Topic.NODES_QUARANTINE,
)
_UNITS_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000}
_DURATION = re.compile(r"(\d+)([smhdw])")


def parse_time(raw: str, now_ms: int, flag: str) -> int:
    """`--since`/`--until` as epoch ms: a duration before now (`24h`, `90m`, `7d`), epoch ms,
    or an ISO 8601 time with its zone. ValueError names the flag and what is wrong."""
    raw = raw.strip()
    duration = _DURATION.fullmatch(raw)
    if duration is not None:
        return now_ms - int(duration.group(1)) * _UNITS_MS[duration.group(2)]
    if raw.isdigit():
        return int(raw)
    try:
        when = datetime.fromisoformat(raw)
    except ValueError:
        raise ValueError(
            f"{flag} {raw!r}: expected a duration (24h, 90m, 7d), epoch ms or an ISO 8601 time"
        ) from None
    if when.tzinfo is None:
        raise ValueError(f"{flag} {raw!r}: give a time zone (e.g. Z or +00:00)")
    return int(when.timestamp() * 1000)


@dataclass(frozen=True, slots=True)
class ExportStats:
    lines: int
    tombstones: int
    not_json: int


class LineSorter:
    """Collects replay lines as records arrive (`add`, one batch at a time, each parsed once
    and kept only as its line) and hands them back in event-time order (`lines`)."""

    def __init__(self, logical: dict[str, str]) -> None:
        self.logical = logical  # real topic -> logical name
        self._order = {t: i for i, t in enumerate(EXPORTED_TOPICS)}
        self._keyed: list[tuple[int, int, int, int, int, bytes]] = []
        self.tombstones = 0
        self.not_json = 0

    def add(self, records: Iterable[InRecord]) -> None:
        for rec in records:
            if rec.value is None:
                self.tombstones += 1
                continue
            topic = self.logical[rec.topic]
            value: Any
            body = rec.value  # the value as sent, when it is JSON on one line
            try:
                value = orjson.loads(body)
            except orjson.JSONDecodeError:
                value = body.decode("utf-8", "replace")
                self.not_json += 1
                body = orjson.dumps(value)
            if b"\n" in body or b"\r" in body:
                body = orjson.dumps(value)
            ts = value.get("ts_ms") if isinstance(value, dict) else None
            event_ms = ts if isinstance(ts, int) and not isinstance(ts, bool) else rec.timestamp_ms
            # Joined, not one orjson.dumps: its result keeps a 4 KiB buffer (orjson 3.x), which
            # for every line of a large export is most of the memory.
            key = orjson.dumps(rec.key_str())
            line = b"".join(
                (b'{"topic":', orjson.dumps(topic), b',"key":', key, b',"value":', body, b"}")
            )
            rank = self._order.get(topic, len(self._order))
            self._keyed.append((event_ms, rec.timestamp_ms, rank, rec.partition, rec.offset, line))

    def lines(self) -> tuple[list[bytes], ExportStats]:
        """The lines so far, sorted (the offsets make every key distinct: lines never
        compare)."""
        self._keyed.sort()
        lines = [k[5] for k in self._keyed]
        return lines, ExportStats(len(lines), self.tombstones, self.not_json)


def export_lines(
    records: Iterable[InRecord], logical: dict[str, str]
) -> tuple[list[bytes], ExportStats]:
    """Replay's lines for `records` (real topic -> logical name in `logical`), in event-time
    order, and what was skipped or kept as unreadable."""
    sorter = LineSorter(logical)
    sorter.add(records)
    return sorter.lines()
