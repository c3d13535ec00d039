"""`<topic>.dlq` (key: the bad record's coordinates): the one dead-letter record.

Every component that gives up on an input record (the classifier's signal filter and agents,
the quarantine, requeue and job-status services, `gpufailover replay`) writes this record, so
one reader understands every dead-letter topic. It carries the error, where the record was
(topic/partition/offset, or the line of a replayed dump), its key and raw value (cut to
MAX_RAW_BYTES with the original size, so a dead letter always fits in the producer's 1 MiB
request limit) and who gave up on it.

One bad record, one dead letter: each input topic has one owner that dead-letters its
malformed records (OWNERS); every other reader of the topic counts and skips them. The Kafka
key is the record's coordinates, so a dead letter written again after a crash (the classifier
is at-least-once) has the same key: one record per key in a compacted view. docs/dead-letters.md
"""

from __future__ import annotations

import base64
import binascii
import codecs
from dataclasses import dataclass
from typing import Any, overload

from schemas import _fields as f
from schemas.codec import dumps
from schemas.errors import SchemaError
from schemas.topics import Topic, TopicNames, dlq_of

# decode: the record does not match its topic's schema (the record's fault);
# process: a well-formed record made the component fail (the component's fault).
ERROR_KINDS = frozenset({"decode", "process"})
# The classifier's parts are named apart: each reads its own topics.
COMPONENTS = frozenset(
    {"signal-filter", "node-agent", "job-agent", "quarantine", "requeue", "jobstatus", "replay"}
)
ENCODINGS = frozenset({"utf-8", "base64"})
KIND = "dead-letter"  # tells it apart on a shared topic (failover.alerts: no .dlq of its own)

# Who dead-letters a malformed record of each input topic (logical names). A topic read by
# one component only is listed too, so the table is the whole answer.
OWNERS: dict[str, str] = {
    Topic.GPU_XID: "signal-filter",
    Topic.GPU_HEALTH: "signal-filter",
    Topic.JOBS_EVENTS: "job-agent",  # also read by jobstatus (and the requeue service's tail)
    Topic.TRAINING_TELEMETRY: "job-agent",
    Topic.NODES_QUARANTINE: "node-agent",  # also read by the services' tails (never dead-lettered)
    Topic.FAILOVER_DECISIONS: "jobstatus",  # also read by quarantine and requeue
    Topic.QUARANTINE_REQUESTS: "quarantine",
    Topic.FAILOVER_ALERTS: "quarantine",
    Topic.VALIDATION_RESULTS: "quarantine",
}

# Size bounds. orjson writes at most 6 bytes per byte of text (a control character becomes
# \u00XX), so the raw value, key and error stay under 6 * (128 + 1) KiB + 6 * 4096 chars:
# about 800 KiB, under the producer's 1 MiB max_request_size with room for the rest.
MAX_RAW_BYTES = 128 * 1024
MAX_KEY_BYTES = 1024
MAX_ERROR_CHARS = 4096
MAX_RECORD_BYTES = 1024 * 1024


def owner(logical_topic: str) -> str | None:
    """The component that dead-letters malformed records of `logical_topic` (None: any reader,
    e.g. a topic only the classifier writes and reads)."""
    return OWNERS.get(logical_topic)


def dead_letter_topic(logical_topic: str | None) -> str:
    """The logical dead-letter topic of an input topic; `replay.dlq` for a line with none."""
    return dlq_of(logical_topic) if logical_topic is not None else "replay.dlq"


@overload
def kafka_dead_letter_topic(names: TopicNames, real: str, *, fallback: str) -> str: ...
@overload
def kafka_dead_letter_topic(names: TopicNames, real: str, *, fallback: None) -> str | None: ...
def kafka_dead_letter_topic(names: TopicNames, real: str, *, fallback: str | None) -> str | None:
    """The real dead-letter topic of the real topic `real`: its `.dlq`, else `fallback` (None:
    nowhere, e.g. a topic only the classifier writes). Never an undeclared topic: the broker
    does not auto-create, and a send to a missing topic would stall."""
    try:
        return names.dlq(real)
    except KeyError:
        return fallback


def routed(letter: DeadLetter, topic: str) -> tuple[str, bytes, bytes]:
    """The (topic, key, value) to send `letter` as: keyed by the bad record's coordinates."""
    return topic, letter.kafka_key(), letter.encode()


@dataclass(frozen=True, slots=True)
class DeadLetter:
    error: str
    error_kind: str
    topic: str | None  # as read (prefixed); None: a replayed line without a known topic
    partition: int | None  # None only for a replayed line
    offset: int | None
    line: int | None  # a replayed dump's line number (1-based); None on Kafka
    key: str | None  # the record's key as text (UTF-8, bad bytes replaced), cut to MAX_KEY_BYTES
    raw: str | None  # the value (None: a tombstone), cut to MAX_RAW_BYTES, in raw_encoding
    raw_encoding: str  # utf-8, or base64 when the value is not UTF-8 text
    raw_size: int  # bytes of the original value
    raw_truncated: bool
    component: str
    group: str | None  # the consumer group that read it, where the component knows it
    record_ts_ms: int | None  # the record's Kafka timestamp
    dead_lettered_ts_ms: int | None  # None in replay: its output is a function of its input

    def __post_init__(self) -> None:
        if self.error_kind not in ERROR_KINDS:
            raise SchemaError("error_kind", f"must be one of {sorted(ERROR_KINDS)}")
        if self.component not in COMPONENTS:
            raise SchemaError("component", f"must be one of {sorted(COMPONENTS)}")
        if self.raw_encoding not in ENCODINGS:
            raise SchemaError("raw_encoding", f"must be one of {sorted(ENCODINGS)}")
        if self.line is None:
            if self.topic is None or self.partition is None or self.offset is None:
                raise SchemaError("offset", "a Kafka record needs topic, partition and offset")
            if self.dead_lettered_ts_ms is None:
                raise SchemaError("dead_lettered_ts_ms", "required for a Kafka record")
        elif self.partition is not None or self.offset is not None:
            raise SchemaError("line", "a replayed line has no partition or offset")
        if self.raw is None and (self.raw_size or self.raw_truncated):
            raise SchemaError("raw", "a tombstone has no size")

    @staticmethod
    def of(
        *,
        error: str,
        error_kind: str,
        component: str,
        topic: str | None,
        partition: int | None = None,
        offset: int | None = None,
        line: int | None = None,
        key: bytes | None = None,
        value: bytes | None = None,
        group: str | None = None,
        record_ts_ms: int | None = None,
        now_ms: int | None = None,
    ) -> DeadLetter:
        """The dead letter of one record, its key, value and error cut to the size bounds."""
        raw, encoding = _raw_text(value)
        return DeadLetter(
            error=error if len(error) <= MAX_ERROR_CHARS else error[: MAX_ERROR_CHARS - 1] + "…",
            error_kind=error_kind,
            topic=topic,
            partition=partition,
            offset=offset,
            line=line,
            key=None if key is None else _text_head(key, MAX_KEY_BYTES),
            raw=raw,
            raw_encoding=encoding,
            raw_size=0 if value is None else len(value),
            raw_truncated=value is not None and len(value) > MAX_RAW_BYTES,
            component=component,
            group=group,
            record_ts_ms=record_ts_ms,
            dead_lettered_ts_ms=now_ms,
        )

    @property
    def where(self) -> str:
        """The record's coordinates, `topic[partition]@offset` (or `topic@line:N`): the key."""
        if self.line is not None:
            return f"{self.topic or '-'}@line:{self.line}"
        return f"{self.topic}[{self.partition}]@{self.offset}"

    def kafka_key(self) -> bytes:
        """One key per bad record: a dead letter written again (at-least-once) replaces it."""
        return self.where.encode()

    def raw_bytes(self) -> bytes | None:
        """The (possibly cut) original value as bytes."""
        if self.raw is None:
            return None
        return base64.b64decode(self.raw) if self.raw_encoding == "base64" else self.raw.encode()

    def encode(self) -> bytes:
        return dumps(self.to_dict())

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": f.SCHEMA_VERSION,
            "kind": KIND,
            "error": self.error,
            "error_kind": self.error_kind,
            "topic": self.topic,
            "partition": self.partition,
            "offset": self.offset,
            "line": self.line,
            "key": self.key,
            "raw": self.raw,
            "raw_encoding": self.raw_encoding,
            "raw_size": self.raw_size,
            "raw_truncated": self.raw_truncated,
            "component": self.component,
            "group": self.group,
            "record_ts_ms": self.record_ts_ms,
            "dead_lettered_ts_ms": self.dead_lettered_ts_ms,
        }

    @staticmethod
    def from_dict(value: Any) -> DeadLetter:
        d = f.as_object(value)
        f.check_version(d)
        encoding = f.opt_enum(d, "raw_encoding", ENCODINGS) or "utf-8"
        raw = f.opt_str(d, "raw", max_len=2 * MAX_RAW_BYTES)  # base64: 4/3 of the bytes
        if raw is not None and encoding == "base64":
            try:
                base64.b64decode(raw, validate=True)
            except binascii.Error as exc:
                raise SchemaError("raw", f"not base64: {exc}") from None
        return DeadLetter(
            error=f.req_str(d, "error"),
            error_kind=f.req_enum(d, "error_kind", ERROR_KINDS),
            topic=f.opt_str(d, "topic"),
            partition=f.opt_int(d, "partition", minimum=0),
            offset=f.opt_int(d, "offset", minimum=0),
            line=f.opt_int(d, "line", minimum=1),
            key=f.opt_str(d, "key"),
            raw=raw,
            raw_encoding=encoding,
            raw_size=f.opt_int(d, "raw_size", minimum=0) or 0,
            raw_truncated=f.opt_bool(d, "raw_truncated", False),
            component=f.req_enum(d, "component", COMPONENTS),
            group=f.opt_str(d, "group"),
            record_ts_ms=f.opt_int(d, "record_ts_ms"),
            dead_lettered_ts_ms=f.opt_int(d, "dead_lettered_ts_ms"),
        )


def _raw_text(value: bytes | None) -> tuple[str | None, str]:
    """The value's first MAX_RAW_BYTES as text: UTF-8 when they are UTF-8 (a character cut at
    the end is left out), else base64 so the bytes survive exactly."""
    if value is None:
        return None, "utf-8"
    head = value[:MAX_RAW_BYTES]
    cut = len(value) > MAX_RAW_BYTES
    try:
        # Not final when cut: a multi-byte character cut by the limit is left out, not an error.
        return codecs.getincrementaldecoder("utf-8")().decode(head, final=not cut), "utf-8"
    except UnicodeDecodeError:
        return base64.b64encode(head).decode("ascii"), "base64"


def _text_head(raw: bytes, limit: int) -> str:
    return codecs.getincrementaldecoder("utf-8")("replace").decode(raw[:limit], final=False)
