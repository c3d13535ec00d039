"""The signal filter: what reaches the node agent, folding, time and idle markers, dead letters."""

from __future__ import annotations

import json
import random
from typing import Any

import orjson

from schemas.decisions import Evidence
from schemas.engine import NodeReport, NodeTermination
from schemas.event_time import EventTimeBounds
from schemas.topics import TopicNames
from schemas.xid import GpuXid
from streams.engine.node_side import NodeSide, NodeState, PartitionClock
from streams.glue import NodeGlue, Out
from streams.policy import load_policy
from streams.signal_filter import (
    DISORDER_MS,
    DRAINING_RECORDS,
    IDLE_EVERY_MS,
    PACK_MAX,
    WATERMARK_EVERY_MS,
    InputRecord,
    SignalFilter,
)

NAMES = TopicNames("")
POLICY = load_policy()
T0 = 1_700_000_000_000


def xid(node: str, code: int, ts: int, gpu: int = 0) -> dict[str, Any]:
    return {"node": node, "xid": code, "ts_ms": ts, "gpu_index": gpu}


def health(node: str, condition: str, ts: int, gpu: int = 0) -> dict[str, Any]:
    return {"node": node, "condition": condition, "ts_ms": ts, "gpu_index": gpu}


def rec(topic: str, body: dict[str, Any], partition: int = 0, offset: int = 0) -> InputRecord:
    return InputRecord(topic, partition, offset, str(body.get("node")).encode(), orjson.dumps(body))


def signals(out: list[Out]) -> list[dict[str, Any]]:
    """What reached the node agent, packed items unpacked."""
    found: list[dict[str, Any]] = []
    for o in out:
        if o.topic == NAMES.node_signals:
            body = orjson.loads(o.value)
            found.extend(body.get("signals", [body]))
    return found


def test_ignored_health_and_xids_are_not_forwarded_and_evidence_is_classified() -> None:
    f = SignalFilter(POLICY, NAMES, idle_after_ms=5_000)
    batch = [rec(NAMES.gpu_health, health(f"n{i}", "ok", T0 + i), offset=i) for i in range(1000)]
    batch.append(rec(NAMES.gpu_xid, xid("n7", 79, T0 + 2_000), offset=1000))
    batch.append(rec(NAMES.gpu_health, health("n8", "throttle", T0 + 2_001), offset=1001))
    out = f.reduce(batch, wall_ms=0)
    assert [s["evidence"]["code"] for s in signals(out)] == [79]
    assert signals(out)[0]["evidence"]["class"] == "hardware"
    assert [o.partition for o in out] == [0]
    assert f.conditions == {"ok": 1000, "throttle": 1}


def test_a_flood_of_repeats_becomes_one_record_with_its_count_and_span() -> None:
    f = SignalFilter(POLICY, NAMES, idle_after_ms=5_000)
    flood = [rec(NAMES.gpu_xid, xid("bad", 94, T0 + i * 10, gpu=3), offset=i) for i in range(5000)]
    (only,) = signals(f.reduce(flood, wall_ms=0))
    item = Evidence.from_dict(only["evidence"])
    assert (item.count, item.ts_ms, item.last_ts_ms, item.gpu_index) == (5000, T0, T0 + 49_990, 3)


def test_folded_batches_leave_the_node_state_a_record_at_a_time_leaves() -> None:
    rng = random.Random(7)
    records: list[InputRecord] = []
    ts = {key: T0 for key in range(6)}
    for offset in range(3000):
        key = rng.randrange(6)
        ts[key] += rng.choice((5, 200, 30_000, 90_000))  # within and beyond coalesce_s
        node, code = f"n{key % 3}", (79, 48, 13)[key // 2]
        records.append(rec(NAMES.gpu_xid, xid(node, code, ts[key], gpu=key % 2), offset=offset))

    one_by_one: dict[str, NodeState] = {}
    side = NodeSide(POLICY, one_by_one, PartitionClock(), follow_records=False)
    for r in records:
        side.on_signal(GpuXid.from_dict(orjson.loads(r.value or b"")))
    f = SignalFilter(POLICY, NAMES, idle_after_ms=5_000)
    folded: dict[str, NodeState] = {}
    side = NodeSide(POLICY, folded, PartitionClock(), follow_records=False)
    start = 0
    while start < len(records):
        end = start + rng.randrange(1, 400)
        for s in signals(f.reduce(records[start:end], wall_ms=0)):
            side.on_evidence(Evidence.from_dict(s["evidence"]))
        start = end

    def evidence(states: dict[str, NodeState]) -> dict[str, list[tuple[Any, ...]]]:
        # last_ts_ms None and last_ts_ms == ts_ms say the same (the wire form writes it out).
        return {
            node: sorted(
                (e.gpu_index, e.code, e.ts_ms, e.last_ts_ms or e.ts_ms, e.count, e.cls)
                for e in s.evidence
            )
            for node, s in states.items()
        }

    assert evidence(folded) == evidence(one_by_one)


def test_malformed_inputs_go_to_their_dead_letter_topic_with_coordinates() -> None:
    f = SignalFilter(POLICY, NAMES, idle_after_ms=5_000)
    bad_term = {"job_id": "j1", "attempt": 0, "node": "n1", "terminated_ts_ms": str(T0)}
    out = f.reduce(
        [
            InputRecord(NAMES.gpu_health, 2, 41, b"n1", b'{"node": "n1"}'),
            InputRecord(NAMES.gpu_xid, 2, 42, b"n1", b"not json"),
            InputRecord(NAMES.term_by_node, 2, 43, b"n1", b"[]"),  # internal: no DLQ
            # A time that is not an integer: refused at decoding, never in the wake-up heap.
            InputRecord(NAMES.term_by_node, 2, 44, b"n1", orjson.dumps(bad_term)),
        ],
        wall_ms=0,
    )
    dead = [(o.topic, orjson.loads(o.value)) for o in out]
    assert [(t, d["offset"], d["partition"]) for t, d in dead] == [
        (NAMES.dlq(NAMES.gpu_health), 41, 2),
        (NAMES.dlq(NAMES.gpu_xid), 42, 2),
    ]
    assert f.forgotten == {NAMES.term_by_node: 2}
    assert f.wake_ms == {}
    assert f.watermarks(wall_ms=10_000) == []  # bad records do not move time


def test_terminations_pass_through_unchanged_on_their_partition() -> None:
    f = SignalFilter(POLICY, NAMES, idle_after_ms=5_000)
    term = {"job_id": "j1", "attempt": 0, "node": "n1", "terminated_ts_ms": T0}
    out = f.reduce([rec(NAMES.term_by_node, term, partition=3)], wall_ms=0)
    assert signals(out) == [{"termination": term}]
    assert out[0].partition == 3


def test_a_wave_of_distinct_signals_is_packed_in_bounded_records_in_input_order() -> None:
    f = SignalFilter(POLICY, NAMES, idle_after_ms=5_000)
    n = 2 * PACK_MAX + 7
    wave = [rec(NAMES.gpu_xid, xid(f"w{i:05}", 13, T0 + i), offset=i) for i in range(n)]
    out = f.reduce(wave, wall_ms=0)
    assert [len(orjson.loads(o.value)["signals"]) for o in out] == [PACK_MAX, PACK_MAX, 7]
    assert [s["evidence"]["node"] for s in signals(out)] == [f"w{i:05}" for i in range(n)]


def test_the_watermark_waits_for_an_input_with_unread_records() -> None:
    lagging: set[tuple[str, int]] = {(NAMES.gpu_xid, 0)}
    f = SignalFilter(POLICY, NAMES, 5_000, lambda t, p: (t, p) in lagging)
    f.reduce(
        [
            rec(NAMES.gpu_xid, xid("n1", 13, T0)),
            rec(NAMES.gpu_health, health("n1", "ok", T0 + 60_000)),
        ],
        wall_ms=0,
    )
    assert signals(f.watermarks(wall_ms=1_000)) == [{"watermark": T0}]
    lagging.clear()
    assert f.watermarks(wall_ms=1_000 + WATERMARK_EVERY_MS - 1) == []  # not yet
    assert signals(f.watermarks(wall_ms=1_000 + WATERMARK_EVERY_MS)) == [{"watermark": T0 + 60_000}]
    assert f.watermarks(wall_ms=5_000) == []  # nothing new


def test_a_watermark_passing_a_time_the_node_side_waits_for_is_sent_before_the_cadence() -> None:
    f = SignalFilter(POLICY, NAMES, idle_after_ms=5_000)
    f.reduce([rec(NAMES.gpu_health, health("n1", "ok", T0))], wall_ms=0)
    assert signals(f.watermarks(wall_ms=1_000)) == [{"watermark": T0}]
    term = {"job_id": "j1", "attempt": 0, "node": "n1", "terminated_ts_ms": T0 + 50}
    f.reduce([rec(NAMES.term_by_node, term)], wall_ms=1_001)
    f.reduce([rec(NAMES.gpu_health, health("n1", "ok", T0 + 50))], wall_ms=1_001)
    f.reduce([rec(NAMES.gpu_health, health("n1", "ok", T0 + 51))], wall_ms=1_002)
    # T0 + 50 has settled, T0 + 51 not yet: not past the termination, and not the cadence.
    assert f.watermarks(wall_ms=1_002 + DISORDER_MS - 1) == []
    now = 1_002 + DISORDER_MS
    assert signals(f.watermarks(wall_ms=now)) == [{"watermark": T0 + 51}]  # past it: at once
    assert now - 1_000 < WATERMARK_EVERY_MS
    f.reduce([rec(NAMES.gpu_health, health("n1", "ok", T0 + 60))], wall_ms=now)
    assert f.watermarks(wall_ms=now + DISORDER_MS) == []  # next waited for: the end of grace
    end = T0 + 50 + POLICY.grace_ms
    f.reduce([rec(NAMES.gpu_health, health("n1", "ok", end + 1))], wall_ms=now + 1)
    assert signals(f.watermarks(wall_ms=now + 1 + DISORDER_MS)) == [{"watermark": end + 1}]
    f.reduce([rec(NAMES.gpu_health, health("n1", "ok", end + 2))], wall_ms=now + 2)
    assert f.watermarks(wall_ms=now + 2 + DISORDER_MS) == []  # none waited for: the cadence
    assert f.wake_ms == {0: []}


def test_a_requested_time_is_waited_for_and_other_partitions_keep_the_cadence() -> None:
    f = SignalFilter(POLICY, NAMES, idle_after_ms=5_000)
    f.reduce([rec(NAMES.gpu_health, health("n1", "ok", T0), p) for p in (0, 1)], wall_ms=0)
    assert len(f.watermarks(wall_ms=1_000)) == 2
    request = {
        "job_id": "j1",
        "attempt": 0,
        "node": "n1",
        "terminated_ts_ms": T0 - 5_000,
        "until_ms": T0 + 20,
    }
    f.reduce([rec(NAMES.term_by_node, request, partition=1)], wall_ms=1_001)
    later = [rec(NAMES.gpu_health, health("n1", "ok", T0 + 30), p) for p in (0, 1)]
    f.reduce(later, wall_ms=1_002)
    (sent,) = f.watermarks(wall_ms=1_002 + DISORDER_MS)
    assert (sent.partition, orjson.loads(sent.value)) == (1, {"watermark": T0 + 30})
    f.forget([1])
    assert 1 not in f.wake_ms and 1 not in f.reads


def test_no_early_watermark_while_a_backlog_drains() -> None:
    backlog = {(NAMES.gpu_health, 0): DRAINING_RECORDS + 1}
    f = SignalFilter(POLICY, NAMES, 5_000, backlog=lambda t, p: backlog.get((t, p), 0))
    f.reduce([rec(NAMES.gpu_health, health("n1", "ok", T0))], wall_ms=0)
    assert signals(f.watermarks(wall_ms=1_000)) == [{"watermark": T0}]
    term = {"job_id": "j1", "attempt": 0, "node": "n1", "terminated_ts_ms": T0}
    later = rec(NAMES.gpu_health, health("n1", "ok", T0 + 1))
    f.reduce([rec(NAMES.term_by_node, term), later], 1_001)
    assert f.watermarks(wall_ms=1_001 + DISORDER_MS) == []  # draining: the cadence decides
    backlog.clear()
    assert signals(f.watermarks(wall_ms=1_001 + DISORDER_MS)) == [{"watermark": T0 + 1}]


def test_an_xid_appended_after_a_later_health_sample_is_not_passed_by_the_watermark() -> None:
    """Kafka orders a partition, not a topic pair: the health sample stamped later can be read
    first. A read counts for the watermark only after DISORDER_MS, and only while no input
    shows unread records, so the XID appended meanwhile holds it back."""
    lagging: set[tuple[str, int]] = set()
    f = SignalFilter(POLICY, NAMES, 5_000, lambda t, p: (t, p) in lagging)
    f.reduce([rec(NAMES.gpu_xid, xid("n1", 13, T0))], wall_ms=0)
    f.reduce([rec(NAMES.gpu_health, health("n1", "ok", T0 + 60_000))], wall_ms=200)
    assert signals(f.watermarks(wall_ms=200 + DISORDER_MS - 1)) == [{"watermark": T0}]
    lagging.add((NAMES.gpu_xid, 0))  # the XID stamped T0 + 1 was appended since
    assert f.watermarks(wall_ms=200 + DISORDER_MS) == []  # held at the XID topic's time
    lagging.clear()
    out = f.reduce([rec(NAMES.gpu_xid, xid("n1", 79, T0 + 1))], wall_ms=260)
    assert [s["evidence"]["code"] for s in signals(out)] == [79]
    assert signals(f.watermarks(wall_ms=400)) == [{"watermark": T0 + 60_000}]


def test_idle_markers_only_for_quiet_caught_up_partitions() -> None:
    lagging: set[tuple[str, int]] = set()
    f = SignalFilter(POLICY, NAMES, 5_000, lambda t, p: (t, p) in lagging)
    f.reduce([rec(NAMES.gpu_health, health("n1", "ok", T0), partition=1)], wall_ms=0)
    assert f.idle_markers(4_999, [1]) == []
    lagging.add((NAMES.gpu_health, 1))
    assert f.idle_markers(6_000, [1]) == []  # quiet but behind: not idle
    lagging.clear()
    assert signals(f.idle_markers(6_000, [1])) == [{"idle_ms": 6_000}]
    assert f.idle_markers(6_000 + IDLE_EVERY_MS - 1, [1]) == []
    assert signals(f.idle_markers(6_000 + IDLE_EVERY_MS, [1])) == [{"idle_ms": 7_000}]
    f.reduce([rec(NAMES.gpu_health, health("n1", "ok", T0 + 1), partition=1)], wall_ms=8_000)
    assert f.idle_markers(9_000, [1]) == []


def test_node_agent_decides_from_filtered_signals_and_closes_on_the_filter_watermark() -> None:
    f = SignalFilter(POLICY, NAMES, idle_after_ms=5_000)
    glue = NodeGlue(POLICY, NAMES, {}, {})
    term = {"job_id": "j1", "attempt": 0, "node": "n1", "terminated_ts_ms": T0}
    batch = [
        rec(NAMES.term_by_node, term),
        rec(NAMES.gpu_xid, xid("n1", 13, T0 - 1_000)),  # software, in the window
        rec(NAMES.gpu_health, health("n2", "ok", T0 + POLICY.grace_ms + 1)),
    ]
    forwarded = f.reduce(batch, wall_ms=0) + f.watermarks(wall_ms=1_000)
    reports = [
        report
        for i, s in enumerate(forwarded)
        for o in glue.handle(s.topic, s.partition or 0, i, s.key, s.value)
        if o.topic == NAMES.node_evidence
        for report in orjson.loads(o.value).get("reports", [orjson.loads(o.value)])
    ]
    assert [(r["initial"], r["closed"], len(r["items"])) for r in reports] == [
        (True, False, 0),  # the termination came first in this batch
        (False, False, 1),  # the XID joins its open window
        (False, True, 0),  # the filter's watermark passed the grace
    ]


def test_idle_marker_moves_the_node_agent_from_the_last_filter_watermark() -> None:
    glue = NodeGlue(POLICY, NAMES, {}, {})
    topic = NAMES.node_signals
    glue.handle(topic, 0, 0, None, orjson.dumps({"watermark": T0}))
    glue.handle(topic, 0, 1, None, orjson.dumps({"idle_ms": 5_000}))
    glue.handle(topic, 0, 2, None, orjson.dumps({"idle_ms": 6_000}))
    assert glue.sides[0].clock.watermark == T0 + 6_000  # not cumulative


def test_a_watermark_far_ahead_of_the_job_side_keeps_what_a_late_termination_needs() -> None:
    # The filter can run the node side's time far past terminations the job agent has not
    # fanned out yet (backfill, 2-worker rebalance): a later signal on the node must not prune
    # the evidence those terminations will ask for.
    side = NodeSide(POLICY, {}, PartitionClock(), follow_records=False)
    hardware = Evidence("n1", 0, "xid", 79, T0 - 10_000, "hardware")
    side.on_evidence(hardware)
    side.advance(T0 + 100 * POLICY.retention_ms)
    side.on_evidence(Evidence("n1", 1, "xid", 13, T0 - 5_000, "software"))
    (report,) = side.on_termination(
        NodeTermination("j1", 0, "n1", T0)  # arrives after the watermark passed its window
    )
    assert isinstance(report, NodeReport) and report.closed
    assert hardware in report.items


def test_terminations_do_not_move_the_watermark() -> None:
    """The watermark is the time of the evidence: a termination read early says nothing about
    which signals of its partition have been read."""
    f = SignalFilter(POLICY, NAMES, idle_after_ms=5_000)
    term = {"job_id": "j1", "attempt": 0, "node": "n1", "terminated_ts_ms": T0 + 60_000}
    f.reduce([rec(NAMES.gpu_health, health("n1", "ok", T0)), rec(NAMES.term_by_node, term)], 0)
    (wm,) = f.watermarks(wall_ms=1_000)
    assert orjson.loads(wm.value) == {"watermark": T0}


def test_idle_advance_starts_from_the_latest_termination_on_a_partition_without_signals() -> None:
    glue = NodeGlue(POLICY, NAMES, {}, {})
    topic = NAMES.node_signals
    term = {"job_id": "j1", "attempt": 0, "node": "n1", "terminated_ts_ms": T0}
    (initial,) = glue.handle(topic, 0, 0, None, orjson.dumps({"signals": [{"termination": term}]}))
    assert orjson.loads(initial.value)["complete_to"] is None
    (progress,) = glue.handle(topic, 0, 1, None, orjson.dumps({"idle_ms": 5_000}))
    assert orjson.loads(progress.value)["complete_to"] == T0 + 5_000


def test_node_glue_persists_the_clock_whenever_the_watermark_moves() -> None:
    clocks: dict[str, PartitionClock] = {}
    glue = NodeGlue(POLICY, NAMES, {}, clocks)
    for i in range(3):
        glue.handle(NAMES.node_signals, 0, i, None, orjson.dumps({"watermark": T0 + i}))
        assert clocks["p0"].watermark == T0 + i


def test_a_revoked_partition_reloads_its_clock_from_the_table_when_it_comes_back() -> None:
    nodes: dict[str, NodeState] = {}
    clocks: dict[str, PartitionClock] = {}
    mine, theirs = NodeGlue(POLICY, NAMES, nodes, clocks), NodeGlue(POLICY, NAMES, nodes, clocks)
    mine.handle(NAMES.node_signals, 0, 0, None, orjson.dumps({"watermark": T0}))
    mine.forget({0})  # revoked; another worker moves the partition on
    theirs.handle(NAMES.node_signals, 0, 1, None, orjson.dumps({"watermark": T0 + 9_000}))
    clocks["p0"] = PartitionClock.from_dict(theirs.sides[0].clock.to_dict())  # as a restore
    mine.handle(NAMES.node_signals, 0, 2, None, orjson.dumps({"idle_ms": 0}))
    assert mine.side(0).clock.watermark == T0 + 9_000


def test_byte_identical_xid_repeats_reduce_as_if_each_were_parsed() -> None:
    """A repeat of the previous XID record's bytes reuses its parse: same forwarded signals,
    same dead letters (a repeat of a bad record is dead-lettered again), same counts as the
    same records spelled differently (spaces: no byte repeats, every one parsed)."""
    rng = random.Random(11)
    bodies: list[tuple[str, Any]] = [
        (NAMES.gpu_xid, xid("bad", 79, T0, gpu=3)),
        (NAMES.gpu_xid, xid("bad", 79, T0 + 1)),
        (NAMES.gpu_xid, xid("soft", 13, T0 + 2)),
        (NAMES.gpu_xid, xid("far", 79, T0 + 10**12)),  # past the future bound: dead letter
        (NAMES.gpu_xid, {"node": "bad", "xid": "79", "ts_ms": T0}),  # not an int: dead letter
        (NAMES.gpu_health, health("bad", "ok", T0 + 3)),
        (NAMES.gpu_health, health("bad", "ecc_uncorrectable", T0 + 4)),
    ]
    picks: list[tuple[int, int]] = []  # (body, partition), runs of repeats
    while len(picks) < 2000:
        body, partition = rng.randrange(len(bodies)), rng.randrange(2)
        picks += [(body, partition)] * rng.choice((1, 1, 2, 50))

    def run(spell: Any) -> tuple[list[dict[str, Any]], list[Any], Any, Any]:
        f = SignalFilter(POLICY, NAMES, idle_after_ms=5_000, bounds=EventTimeBounds(300_000))
        batch = [
            InputRecord(bodies[b][0], p, i, b"k", spell(bodies[b][1]))
            for i, (b, p) in enumerate(picks)
        ]
        out = f.reduce(batch, wall_ms=T0)
        dead = [
            (o.topic, d["partition"], d["offset"], d["error"])
            for o in out
            if o.topic != NAMES.node_signals
            for d in [orjson.loads(o.value)]
        ]
        return signals(out), dead, f.xids, f.conditions

    repeated = run(orjson.dumps)
    spelled = run(lambda body: json.dumps(body, indent=1).encode())
    assert repeated == spelled
    forwarded, dead, xids, _ = repeated
    assert len(dead) == sum(1 for b, _ in picks if b in (3, 4))  # each repeat, again
    assert sum(xids.values()) == sum(1 for b, _ in picks if b < 4)
    assert forwarded  # the test is about something
