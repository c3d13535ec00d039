"""Event-time bounds in the stream and in replay (issue 12): a record stamped far ahead of the
wall clock, older than the retention horizon or below the floor is dead-lettered with the
reason and never moves a watermark; any exception on one record dead-letters that record."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import orjson
import pytest

from gpufailover.cli.replay import parse_now
from schemas import bounds as b
from schemas.dead_letter import DeadLetter
from schemas.decisions import Evidence
from schemas.event_time import EventTimeBounds
from schemas.topics import TopicNames
from streams import signal_filter as sf
from streams.engine.evidence import add
from streams.glue import NodeGlue
from streams.job_glue import JobGlue
from streams.policy import load_policy
from streams.replay import MAX_LINE_BYTES, Replayer
from streams.signal_filter import InputRecord, SignalFilter

NAMES = TopicNames("")
POLICY = load_policy()
NOW = 1_800_000_000_000
BOUNDS = EventTimeBounds(max_future_skew_ms=300_000, max_age_ms=172_800_000)


def xid(ts: int, node: str = "n1", code: int = 79, count: int = 1) -> bytes:
    return orjson.dumps({"node": node, "xid": code, "ts_ms": ts, "gpu_index": 0, "count": count})


def health(ts: int, node: str = "n1") -> bytes:
    return orjson.dumps({"node": node, "condition": "ok", "ts_ms": ts})


def letter(value: bytes) -> DeadLetter:
    return DeadLetter.from_dict(orjson.loads(value))


@pytest.mark.parametrize(
    ("ts", "why"),
    [
        (NOW + 300_001, "ahead of the clock"),
        (NOW - 172_800_001, "retention horizon"),
        (4_102_444_800_000, "ahead of the clock"),  # the year 2100
    ],
)
def test_the_signal_filter_dead_letters_out_of_bounds_records_and_keeps_its_watermark(
    ts: int, why: str
) -> None:
    f = SignalFilter(POLICY, NAMES, 5_000, bounds=BOUNDS)
    records = [
        InputRecord(NAMES.gpu_health, 0, 0, b"n1", health(NOW - 1_000)),
        InputRecord(NAMES.gpu_health, 0, 1, b"n1", health(ts)),
        InputRecord(NAMES.gpu_xid, 0, 2, b"n1", xid(ts)),
    ]
    out = f.reduce(records, wall_ms=NOW)
    dead = [letter(o.value) for o in out if o.topic.endswith(".dlq")]
    assert [(d.topic, d.offset) for d in dead] == [(NAMES.gpu_health, 1), (NAMES.gpu_xid, 2)]
    assert all(why in d.error and d.error_kind == "decode" for d in dead)
    assert not [o for o in out if o.topic == NAMES.node_signals]  # the XID went nowhere
    assert f.clock.effective(0) == NOW - 1_000


def test_the_signal_filter_accepts_the_bounds_themselves() -> None:
    f = SignalFilter(POLICY, NAMES, 5_000, bounds=BOUNDS)
    records = [
        InputRecord(NAMES.gpu_health, 0, 0, b"n1", health(NOW + 300_000)),
        InputRecord(NAMES.gpu_health, 0, 1, b"n1", health(NOW - 172_800_000)),
    ]
    assert f.reduce(records, wall_ms=NOW) == []
    assert f.clock.effective(0) == NOW + 300_000


def test_without_bounds_the_filter_takes_any_decodable_time() -> None:
    f = SignalFilter(POLICY, NAMES, 5_000)
    assert f.reduce([InputRecord(NAMES.gpu_health, 0, 0, b"n1", health(b.TS_CEIL_MS))], 0) == []
    assert f.clock.effective(0) == b.TS_CEIL_MS


def test_xid_counts_of_2_64_minus_1_fold_saturating() -> None:
    f = SignalFilter(POLICY, NAMES, 5_000)
    records = [
        InputRecord(NAMES.gpu_xid, 0, i, b"n1", xid(NOW + i, count=b.U64_MAX)) for i in range(2)
    ]
    [out] = f.reduce(records, wall_ms=NOW)
    [item] = orjson.loads(out.value)["signals"]
    assert item["evidence"]["count"] == b.U64_MAX


def test_any_exception_on_one_record_dead_letters_it_as_process(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken(value: Any) -> Any:
        raise OverflowError("boom")

    monkeypatch.setattr(sf.GpuXid, "peek", broken)
    f = SignalFilter(POLICY, NAMES, 5_000)
    out = f.reduce(
        [
            InputRecord(NAMES.gpu_xid, 0, 0, b"n1", xid(NOW)),
            InputRecord(NAMES.gpu_health, 0, 1, b"n1", health(NOW)),
        ],
        wall_ms=NOW,
    )
    [dead] = [letter(o.value) for o in out]
    assert (dead.offset, dead.error_kind, dead.error) == (0, "process", "OverflowError: boom")
    assert f.clock.effective(0) == NOW  # the next record went on


def job_event(ts: int) -> bytes:
    return orjson.dumps(
        {"job_id": "j", "attempt": 0, "type": "terminated", "ts_ms": ts, "nodes": ["n1"]}
    )


@pytest.mark.parametrize(
    ("topic", "value"),
    [
        (NAMES.jobs_events, job_event(4_102_444_800_000)),
        (
            NAMES.training_telemetry,
            orjson.dumps(
                {"job_id": "j", "attempt": 0, "kind": "heartbeat", "ts_ms": 1, "step": 1}
            ).replace(b'"ts_ms":1', b'"ts_ms":4102444800000'),
        ),
    ],
)
def test_the_job_agent_dead_letters_job_records_ahead_of_the_clock(
    topic: str, value: bytes
) -> None:
    glue = JobGlue(POLICY, NAMES, {}, {}, {}, idle_after_ms=5_000, bounds=BOUNDS)
    [out] = glue.handle(topic, 0, 7, b"j", value)
    dead = letter(out.value)
    assert "ahead of the clock" in dead.error and dead.offset == 7
    assert glue.jobs == {} and glue.time.effective(0) is None  # no clock moved


def test_the_job_agent_takes_records_within_the_bounds() -> None:
    glue = JobGlue(POLICY, NAMES, {}, {}, {}, idle_after_ms=5_000, bounds=EventTimeBounds())
    ts = 1_773_532_800_000  # replay-like bounds: no past bound
    outputs = glue.handle(NAMES.jobs_events, 0, 0, b"j", job_event(ts))
    assert [o.topic for o in outputs] == [NAMES.term_by_node]


def test_the_node_agent_dead_letters_a_release_stamped_far_ahead_only() -> None:
    glue = NodeGlue(POLICY, NAMES, {}, {}, bounds=BOUNDS)
    assert glue.bounds is not None and glue.bounds.max_age_ms is None  # old releases are fine
    release = {"node": "n1", "state": "released", "reason": "operator", "ts_ms": 0}
    for ts in (4_102_444_800_000, 0):
        [out] = glue.handle(
            NAMES.nodes_quarantine, 0, 3, b"n1", orjson.dumps(release | {"ts_ms": ts})
        )
        assert out.topic == NAMES.dlq(NAMES.nodes_quarantine)
    assert glue.nodes == {}
    old = release | {"ts_ms": 1_600_000_000_000}
    assert glue.handle(NAMES.nodes_quarantine, 0, 4, b"n1", orjson.dumps(old)) == []
    assert glue.nodes["n1"].releases == [1_600_000_000_000]


# -- replay ----------------------------------------------------------------------------------


def line(topic: str, value: Any) -> bytes:
    return orjson.dumps({"topic": topic, "key": None, "value": value})


def test_replay_dead_letters_only_the_future_bound_relative_to_now() -> None:
    r = Replayer(POLICY, now_ms=NOW)
    old = orjson.loads(health(NOW - 400 * 86_400_000))
    ahead = orjson.loads(health(NOW + 300_001))
    out = list(r.run([line("gpu.health", old), line("gpu.health", ahead)]))
    [dead] = [orjson.loads(o) for o in out]
    assert dead["topic"] == "gpu.health.dlq" and "ahead of the clock" in dead["value"]["error"]
    assert dead["value"]["line"] == 2


def test_replay_dead_letters_a_release_stamped_ahead() -> None:
    r = Replayer(POLICY, now_ms=NOW)
    release = {"node": "n1", "state": "released", "reason": "operator", "ts_ms": NOW + 10**9}
    [dead] = list(r.run([line("nodes.quarantine", release)]))
    assert b"nodes.quarantine.dlq" in dead


def test_replay_dead_letters_an_oversized_line_and_a_processing_failure(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    r = Replayer(POLICY, now_ms=NOW, bounds=EventTimeBounds())
    huge = b'{"topic": "gpu.xid", "value": "' + b"x" * MAX_LINE_BYTES + b'"}'

    def broken(record: Any) -> Any:
        raise RecursionError("deep")

    monkeypatch.setattr(r.pipeline, "feed", broken)
    monkeypatch.setattr(r.pipeline, "feed_ignored", broken)  # an `ok` sample's path
    out = [orjson.loads(o) for o in r.run([huge, line("gpu.health", orjson.loads(health(NOW)))])]
    assert [o["value"]["error_kind"] for o in out] == ["decode", "process"]
    assert "over the limit" in out[0]["value"]["error"]
    assert out[1]["value"]["error"] == "RecursionError: deep"
    assert r.stats.dead_letters == {"replay.dlq": 1, "gpu.health.dlq": 1}


def test_parse_now_takes_epoch_ms_or_iso_with_a_zone() -> None:
    assert parse_now(None) is None and parse_now("") is None
    assert parse_now("1800000000000") == NOW
    assert parse_now("2027-01-15T08:00:00Z") == NOW
    with pytest.raises(ValueError, match="time zone"):
        parse_now("2027-01-15T08:00:00")
    with pytest.raises(ValueError, match="epoch ms or an ISO 8601"):
        parse_now("tomorrow")


def test_the_node_side_adds_coalesced_counts_saturating() -> None:
    items: list[Evidence] = []
    top = Evidence("n1", 0, "xid", 79, NOW, "hardware", b.U64_MAX)
    add(items, top, coalesce_ms=60_000, cap=8)
    merged, before = add(items, replace(top, ts_ms=NOW + 1), coalesce_ms=60_000, cap=8)
    assert before == top and merged.count == b.U64_MAX and len(items) == 1
    small, _ = add(items, replace(top, ts_ms=NOW + 2, count=1), coalesce_ms=60_000, cap=8)
    assert small.count == b.U64_MAX
    few: list[Evidence] = []
    add(few, replace(top, count=2), coalesce_ms=60_000, cap=8)
    assert add(few, replace(top, count=3), coalesce_ms=60_000, cap=8)[0].count == 5
