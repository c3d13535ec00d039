"""Codecs: plain functions over orjson, with the topic in hand (logical topic names)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from schemas.bounds import MAX_VALUE_BYTES
from schemas.errors import SchemaError
from schemas.health import GpuHealth
from schemas.jobs import JobEvent
from schemas.telemetry import TrainingTelemetry
from schemas.topics import Topic
from schemas.xid import GpuXid

InputRecord = GpuXid | GpuHealth | JobEvent | TrainingTelemetry

DECODERS: dict[str, Callable[[Any], InputRecord]] = {
    Topic.GPU_XID: GpuXid.from_dict,
    Topic.GPU_HEALTH: GpuHealth.from_dict,
    Topic.JOBS_EVENTS: JobEvent.from_dict,
    Topic.TRAINING_TELEMETRY: TrainingTelemetry.from_dict,
}


def loads(raw: bytes | str) -> Any:
    """Parse one record's value; a value over MAX_VALUE_BYTES is refused unread."""
    if len(raw) > MAX_VALUE_BYTES:
        raise SchemaError("value", f"{len(raw)} bytes, over the limit of {MAX_VALUE_BYTES}")
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise SchemaError("value", f"not valid JSON: {exc}") from None


def dumps(value: Any) -> bytes:
    return orjson.dumps(value)


def decode(topic: str, value: Any) -> InputRecord:
    """Decode an already-parsed JSON value read from the logical input `topic`."""
    decoder = DECODERS.get(topic)
    if decoder is None:
        raise SchemaError("topic", f"unknown input topic {topic!r}")
    return decoder(value)
