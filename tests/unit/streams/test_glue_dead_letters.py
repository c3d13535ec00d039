"""The classifier's dead letters: the one `DeadLetter` format, keyed by coordinates, written by
the owner of each input topic (signal filter, node agent, job agent)."""

from __future__ import annotations

import orjson
import pytest

from schemas.dead_letter import DeadLetter, owner
from schemas.topics import TopicNames
from streams.glue import NodeGlue, Out
from streams.job_glue import JobGlue
from streams.policy import load_policy
from streams.signal_filter import InputRecord, SignalFilter

NAMES = TopicNames("p.")
POLICY = load_policy()


def letter_of(out: Out) -> DeadLetter:
    letter = DeadLetter.from_dict(orjson.loads(out.value))
    assert out.key == letter.kafka_key()
    assert out.topic == NAMES.dlq(letter.topic or "")
    assert letter.component == owner(NAMES.logical(letter.topic or ""))
    return letter


def test_the_signal_filter_writes_the_one_format() -> None:
    f = SignalFilter(POLICY, NAMES, idle_after_ms=5_000)
    [out] = f.reduce([InputRecord(NAMES.gpu_xid, 1, 7, b"n1", b"not json")], wall_ms=0)
    letter = letter_of(out)
    assert (letter.topic, letter.partition, letter.offset) == (NAMES.gpu_xid, 1, 7)
    assert (letter.key, letter.raw_bytes(), letter.error_kind) == ("n1", b"not json", "decode")
    assert "not valid JSON" in letter.error and letter.dead_lettered_ts_ms is not None


@pytest.mark.parametrize(
    ("topic", "value"),
    [
        ("jobs_events", {"job_id": "j1", "type": "terminated", "ts_ms": 1}),  # no attempt
        ("training_telemetry", {"job_id": "j1", "kind": "heartbeat"}),
        ("jobs_events", None),  # a tombstone
    ],
)
def test_the_job_agent_writes_the_one_format(topic: str, value: object) -> None:
    glue = JobGlue(POLICY, NAMES, {}, {}, {}, idle_after_ms=5_000)
    real = getattr(NAMES, topic)
    raw = None if value is None else orjson.dumps(value)
    [out] = glue.handle(real, 0, 12, b"j1", raw)
    letter = letter_of(out)
    assert (letter.topic, letter.offset, letter.raw_bytes()) == (real, 12, raw)


def test_the_node_agent_writes_the_one_format() -> None:
    glue = NodeGlue(POLICY, NAMES, {}, {})
    raw = orjson.dumps({"node": "n1", "state": "drained", "reason": "operator", "ts_ms": 1})
    [out] = glue.handle(NAMES.nodes_quarantine, 3, 5, b"n1", raw)
    letter = letter_of(out)
    assert (letter.component, letter.error_kind) == ("node-agent", "decode")
    assert "state" in letter.error
