"""Flood isolation in the node agent (`streams.deferred`): while a partition is behind, evidence
of nodes no termination waits on is held and applied later; no decision input changes."""

from __future__ import annotations

import random
from typing import Any

import orjson
import pytest

from schemas.decisions import Evidence
from schemas.topics import TopicNames
from streams.deferred import DEFER_BEHIND, DRAIN_CHUNK, HeldEvidence
from streams.engine.node_side import NodeState, PartitionClock
from streams.faust_patches import OffsetWatch
from streams.glue import NodeGlue, Out
from streams.policy import load_policy

NAMES = TopicNames("p.")
POLICY = load_policy()
T0 = 1_700_000_000_000
SIGNALS = NAMES.node_signals


def evidence(node: str, code: int, ts: int, cls: str = "hardware") -> dict[str, Any]:
    return {"evidence": Evidence(node, 0, "xid", code, ts, cls).to_dict()}  # type: ignore[arg-type]


def termination(job: str, node: str, ts: int) -> dict[str, Any]:
    return {"termination": {"job_id": job, "attempt": 0, "node": node, "terminated_ts_ms": ts}}


def pack(*items: dict[str, Any]) -> bytes:
    return orjson.dumps({"signals": list(items)})


def decoded(outs: list[Out]) -> list[tuple[str, Any]]:
    return [(o.topic, orjson.loads(o.value)) for o in outs]


class Behind:
    """A switchable `behind`: how many node-signals records are still to read."""

    def __init__(self, n: int = 0) -> None:
        self.n = n

    def __call__(self, partition: int) -> int:
        return self.n


def test_held_evidence_keeps_nodes_in_arrival_order_and_the_first_offset_still_held() -> None:
    held = HeldEvidence()
    held.hold("a", 5, ({"i": 1}, None))
    held.hold("b", 6, ({"i": 2}, 1))
    held.hold("a", 7, ({"i": 3}, 2))
    assert held.count == 3 and held.first_offset() == 5
    assert held.take("a") == [({"i": 1}, None), ({"i": 3}, 2)]
    assert held.first_offset() == 6  # a's entry is gone
    held.hold("a", 9, ({"i": 4}, 3))  # held again, later
    assert held.take_oldest(1) == [("b", [({"i": 2}, 1)])]
    assert held.first_offset() == 9
    assert held.take_oldest(10) == [("a", [({"i": 4}, 3)])]
    assert held.first_offset() is None and held.count == 0


def test_evidence_is_held_while_behind_and_applied_before_the_nodes_termination() -> None:
    behind = Behind(DEFER_BEHIND + 1)
    nodes: dict[str, NodeState] = {}
    glue = NodeGlue(POLICY, NAMES, nodes, {}, backlog=behind)
    xid79 = evidence("n1", 79, T0 - 1_000)
    assert glue.handle(SIGNALS, 0, 10, None, pack(xid79, evidence("n2", 79, T0))) == []
    assert nodes == {} and glue.holding() == [0]
    assert glue.caps() == [(0, 10)]  # commits stay at the first record held
    out = decoded(glue.handle(SIGNALS, 0, 11, None, pack(termination("j1", "n1", T0))))
    # n1's XID first (its quarantine request), then the answer that carries it.
    assert [topic for topic, _ in out] == [NAMES.quarantine_requests, NAMES.node_evidence]
    assert out[1][1]["items"] == [xid79["evidence"]]
    assert "n2" not in nodes  # not asked for: still held
    assert glue.caps() == [(0, 10)]  # n2's record
    behind.n = 0
    (request,) = decoded(glue.drain(0, 0.0))
    assert request[0] == NAMES.quarantine_requests and request[1]["node"] == "n2"
    assert glue.holding() == [] and glue.caps() == [(0, None)]
    assert glue.caps() == []  # said once


def test_a_node_a_termination_waits_on_is_never_held() -> None:
    glue = NodeGlue(POLICY, NAMES, {}, {}, backlog=Behind(DEFER_BEHIND + 1))
    glue.handle(SIGNALS, 0, 0, None, pack(termination("j1", "n1", T0)))
    late = evidence("n1", 13, T0 + 100, "software")
    (report,) = decoded(glue.handle(SIGNALS, 0, 1, None, pack(late)))
    assert report[0] == NAMES.node_evidence and report[1]["items"] == [late["evidence"]]
    assert glue.holding() == []


def test_a_release_applies_the_nodes_held_evidence_first() -> None:
    nodes: dict[str, NodeState] = {}
    glue = NodeGlue(POLICY, NAMES, nodes, {}, backlog=Behind(DEFER_BEHIND + 1))
    glue.handle(SIGNALS, 0, 0, None, pack(evidence("n1", 79, T0)))
    release = {"node": "n1", "state": "released", "ts_ms": T0 + 10, "reason": "operator"}
    out = glue.handle(NAMES.nodes_quarantine, 0, 0, b"n1", orjson.dumps(release))
    assert [o.topic for o in out] == [NAMES.quarantine_requests]  # the XID, before the release
    assert nodes["n1"].quarantined is False and nodes["n1"].releases == [T0 + 10]


def test_forgetting_a_partition_drops_its_held_evidence_and_lifts_the_cap() -> None:
    glue = NodeGlue(POLICY, NAMES, {}, {}, backlog=Behind(DEFER_BEHIND + 1))
    glue.handle(SIGNALS, 2, 40, None, pack(evidence("n1", 79, T0)))
    assert glue.caps() == [(2, 40)]
    glue.forget({2})
    assert glue.holding() == [] and glue.caps() == [(2, None)]


def _script(rng: random.Random) -> list[tuple[int, bytes]]:
    """Random node-signals records of one partition: evidence, terminations, watermarks."""
    nodes = [f"n{i}" for i in range(6)]
    records: list[tuple[int, bytes]] = []
    wm = T0
    for offset in range(60):
        roll = rng.random()
        if roll < 0.2:
            # Now and then a jump past the retention: held items must prune as if applied then.
            jump = POLICY.retention_ms if roll < 0.03 else 0
            wm += jump + rng.randint(0, 2 * POLICY.grace_ms)
            records.append((offset, orjson.dumps({"watermark": wm})))
            continue
        items = []
        for _ in range(rng.randint(1, 4)):
            node = rng.choice(nodes)
            ts = wm + rng.randint(-POLICY.grace_ms, POLICY.grace_ms)
            if rng.random() < 0.2:
                items.append(termination(f"j{offset}-{node}", node, ts))
            else:
                code, cls = rng.choice([(79, "hardware"), (13, "software"), (31, "software")])
                items.append(evidence(node, code, ts, cls))
        records.append((offset, pack(*items)))
    return records


def _run(records: list[tuple[int, bytes]], behind_at: list[int]) -> tuple[Any, Any]:
    behind = Behind()
    nodes: dict[str, NodeState] = {}
    clocks: dict[str, PartitionClock] = {}
    glue = NodeGlue(POLICY, NAMES, nodes, clocks, backlog=behind)
    outs: list[Out] = []
    for (offset, value), n in zip(records, behind_at, strict=True):
        behind.n = n
        outs += glue.handle(SIGNALS, 0, offset, None, value)
        if n % 3 == 0:  # a batch ended: some held evidence is applied
            outs += glue.drain(0, 0.0)
    behind.n = 0
    while glue.holding():
        outs += glue.drain(0, 0.0)
    out = [(t == NAMES.node_evidence, orjson.dumps(v).decode()) for t, v in decoded(outs)]
    reports = sorted(v for report, v in out if report)
    requests = sorted(v for report, v in out if not report)
    states = {k: v.to_dict() for k, v in nodes.items()}
    return (reports, requests), states


@pytest.mark.parametrize("seed", range(40))
def test_holding_evidence_changes_no_report_no_request_and_no_final_state(seed: int) -> None:
    rng = random.Random(seed)
    records = _script(rng)
    in_order = _run(records, [0] * len(records))
    behind_at = [rng.choice([0, DEFER_BEHIND + 1, 500]) for _ in records]
    assert sum(1 for n in behind_at if n > DEFER_BEHIND) > 0
    assert _run(records, behind_at) == in_order


def test_commits_stay_at_the_cap_until_it_is_lifted() -> None:
    watch = OffsetWatch()
    assert watch.cap("tp", 40) is None  # the cap replaced: none
    assert watch.commit_limit("tp", 100) == 40
    assert watch.commit_limit("tp", 30) == 30
    watch.hold("tp", 35)
    assert watch.commit_limit("tp", 100) == 35
    watch.sought("tp", 35)  # the hole heals on a seek; the cap is the glue's to lift
    assert watch.commit_limit("tp", 100) == 40
    assert watch.cap("tp", None) == 40  # lifted: the worker commits at once (CommitSoon)
    assert watch.commit_limit("tp", 100) == 100


def test_held_evidence_prunes_from_the_watermark_it_was_read_at() -> None:
    # n1's old XID is kept by the next signal as read (its watermark is still early), so a
    # late termination finds it; applied later, it must prune from then, not from now.
    r = POLICY.retention_ms
    records = [
        (0, pack(evidence("n1", 79, T0))),
        (1, orjson.dumps({"watermark": T0 + r - 10})),
        (2, pack(evidence("n1", 13, T0 + r + 1_000, "software"))),
        (3, orjson.dumps({"watermark": T0 + r + 5_000})),
        (4, pack(termination("late", "n1", T0 + 100))),
    ]
    in_order = _run(records, [0, 0, 0, 0, 0])
    assert '"code":79' in "".join(in_order[0][0])  # the late termination's answer has it
    assert _run(records, [0, 0, 500, 500, 0]) == in_order  # held from 2 to 4


def test_a_turn_applies_a_chunk_when_caught_up_and_one_node_while_behind() -> None:
    behind = Behind(DEFER_BEHIND + 1)
    nodes: dict[str, NodeState] = {}
    glue = NodeGlue(POLICY, NAMES, nodes, {}, backlog=behind)
    for i in range(4):  # 4 packs of 50 nodes
        items = [evidence(f"n{i}-{j}", 13, T0, "software") for j in range(50)]
        glue.handle(SIGNALS, 0, i, None, pack(*items))
    glue.drain(0, 0.0)
    assert len(nodes) == 1  # behind: one node a turn
    behind.n = 0
    glue.drain(0, 0.0)
    assert len(nodes) == 1 + DRAIN_CHUNK  # caught up, no time left: one chunk
    glue.drain(0, 60.0)
    assert len(nodes) == 200 and glue.holding() == []


def test_a_record_that_fails_after_applying_held_evidence_holds_it_again() -> None:
    # The driver rolls back the failed record's writes; what it took of the held evidence
    # must come back, ahead of the node's newer items, or nothing would ever apply it.
    glue = NodeGlue(POLICY, NAMES, {}, {}, backlog=Behind(DEFER_BEHIND + 1))
    first, later = evidence("n1", 79, T0), evidence("n1", 13, T0 + 5, "software")
    glue.handle(SIGNALS, 0, 3, None, pack(evidence("n0", 13, T0, "software")))
    glue.handle(SIGNALS, 0, 4, None, pack(first))

    class Boom(Exception):
        pass

    side = glue.side(0)
    original = side.on_termination

    def failing(msg: Any) -> Any:
        raise Boom

    side.on_termination = failing  # type: ignore[method-assign]
    with pytest.raises(Boom):
        glue.handle(SIGNALS, 0, 5, None, pack(termination("j1", "n1", T0)))
    side.on_termination = original  # type: ignore[method-assign]
    glue.handle(SIGNALS, 0, 6, None, pack(later))
    assert glue.caps() == [(0, 3)]
    held = glue.held[0]
    assert held.first_offset_of("n1") == 4
    assert [raw for raw, _ in held.take("n1")] == [first["evidence"], later["evidence"]]
