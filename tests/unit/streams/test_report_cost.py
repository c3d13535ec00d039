"""A termination on N nodes costs O(N) state, not O(N^2) (issue 12): node reports of one job
are packed per node-agent record, the job agent writes a job's state once per record, and a
report's membership and completeness checks are O(1)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from schemas.topics import TopicNames
from streams.engine.decide import Termination
from streams.engine.job_side import JobState, Pending
from streams.engine.node_side import NodeState, PartitionClock
from streams.glue import REPORTS_PER_RECORD, NodeGlue
from streams.job_glue import JobGlue
from streams.policy import load_policy
from streams.tables import CodecTable, WriteBack

NAMES = TopicNames("")
POLICY = load_policy()
T = 1_773_532_800_000


def term(nodes: list[str]) -> Termination:
    return Termination("j", 0, T, tuple(nodes), None, True, "on_demand", None)


def naive(p: Pending) -> int | None:
    if len(p.complete) < len(p.term.nodes) or None in p.complete.values():
        return None
    return min(c for c in p.complete.values() if c is not None)


@given(st.lists(st.tuples(st.integers(0, 5), st.one_of(st.none(), st.integers(0, 4))), max_size=40))
def test_complete_to_kept_by_counts_equals_the_minimum_over_nodes(
    updates: list[tuple[int, int | None]],
) -> None:
    nodes = [f"n{i}" for i in range(6)]
    p = Pending(term(nodes))
    for node, value in updates:
        p.set_complete(nodes[node], value)
        assert p.complete_to() == naive(p)
        restored = Pending.from_dict(orjson.loads(orjson.dumps(p.to_dict())))
        assert (restored.known, restored.unknown) == (p.known, p.unknown)
        assert restored.complete_to() == p.complete_to()


def test_set_complete_counts_each_node_once() -> None:
    p = Pending(term(["a", "b"]))
    p.set_complete("a", None)
    p.set_complete("a", 5)
    p.set_complete("b", 5)
    assert (p.known, p.unknown, p.complete_to()) == (Counter({5: 2}), 0, 5)
    p.set_complete("a", 9)
    assert (p.known, p.complete_to()) == (Counter({5: 1, 9: 1}), 5)
    p.set_complete("b", 9)
    assert (p.known, p.complete_to()) == (Counter({9: 2}), 9)
    p.set_complete("b", None)
    assert (p.unknown, p.complete_to()) == (1, None)


# -- the write-back mapping ------------------------------------------------------------------


class Recording(dict[str, Any]):
    def __init__(self) -> None:
        super().__init__()
        self.writes: list[str] = []

    def __setitem__(self, key: str, value: Any) -> None:
        self.writes.append(key)
        super().__setitem__(key, value)


def test_write_back_writes_each_changed_key_once_at_flush() -> None:
    table = Recording()
    table["old"] = 1
    wb: WriteBack[int] = WriteBack(table)
    assert wb.get("old") == 1 and wb["old"] == 1 and wb.get("none", 7) == 7
    for i in range(3):
        wb["k"] = i
    del wb["old"]
    assert table.writes == ["old"] and "old" in table  # nothing written yet
    assert wb.get("k") == 2 and wb.get("old") is None
    with pytest.raises(KeyError):
        wb["old"]
    with pytest.raises(KeyError):
        del wb["old"]
    wb.flush()
    assert table == {"k": 2} and table.writes == ["old", "k"]
    wb["k"] = 5
    wb.discard()
    assert table == {"k": 2} and wb["k"] == 2  # dropped, and read again from the table
    wb["z"] = 1
    assert len(wb) == 2 and sorted(wb) == ["k", "z"]  # iterating writes back first


# -- glue: packed reports ---------------------------------------------------------------------


def fan_out(n: int) -> tuple[NodeGlue, list[Any]]:
    """A termination of one job on `n` nodes of partition 0, as the node agent answers it."""
    glue = NodeGlue(POLICY, NAMES, {}, {})
    items = [
        {"termination": {"job_id": "big", "attempt": 0, "node": f"n{i}", "terminated_ts_ms": T}}
        for i in range(n)
    ]
    out = glue.handle(NAMES.node_signals, 0, 0, None, orjson.dumps({"signals": items}))
    return glue, out


def test_the_node_agent_packs_one_jobs_reports_per_record() -> None:
    _, out = fan_out(REPORTS_PER_RECORD + 1)
    bodies = [orjson.loads(o.value) for o in out]
    assert [len(b["reports"]) for b in bodies] == [REPORTS_PER_RECORD, 1]
    assert {o.key for o in out} == {b"big"}
    nodes = [r["node"] for b in bodies for r in b["reports"]]
    assert nodes == [f"n{i}" for i in range(REPORTS_PER_RECORD + 1)]  # in order


def test_a_single_report_keeps_the_one_report_format() -> None:
    _, [out] = fan_out(1)
    assert orjson.loads(out.value)["node"] == "n0"


def job_glue(jobs: Any) -> JobGlue:
    return JobGlue(POLICY, NAMES, jobs, {}, {}, idle_after_ms=5_000)


class CountingTable(dict[str, dict[str, Any]]):
    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    def __setitem__(self, key: str, value: dict[str, Any]) -> None:
        self.writes += 1
        super().__setitem__(key, value)


def test_a_thousand_node_termination_writes_its_state_per_record_not_per_report() -> None:
    n = 1_000
    raw = CountingTable()
    jobs = job_glue(CodecTable(raw, JobState.from_dict, JobState.to_dict))
    nodes = [f"n{i}" for i in range(n)]
    event = {"job_id": "big", "attempt": 0, "type": "terminated", "ts_ms": T, "nodes": nodes}
    jobs.handle(NAMES.jobs_events, 0, 0, b"big", orjson.dumps(event))
    node_glue, out = fan_out(n)
    out += node_glue.handle(NAMES.node_signals, 0, 1, None, orjson.dumps({"watermark": T + 1}))
    out += node_glue.handle(
        NAMES.node_signals, 0, 2, None, orjson.dumps({"watermark": T + POLICY.grace_ms + 1})
    )
    decisions = [
        d
        for o in out
        for d in jobs.handle(NAMES.node_evidence, 0, 0, o.key, o.value)
        if d.topic == NAMES.failover_decisions
    ]
    assert len(decisions) == 1
    assert len(out) <= 3 * n // REPORTS_PER_RECORD + 3
    assert raw.writes <= len(out) + 1  # one write per record (and the termination's)


def test_a_packed_record_with_a_bad_report_is_dead_lettered_whole() -> None:
    raw = CountingTable()
    jobs = job_glue(CodecTable(raw, JobState.from_dict, JobState.to_dict))
    event = {"job_id": "j", "attempt": 0, "type": "terminated", "ts_ms": T, "nodes": ["a", "b"]}
    jobs.handle(NAMES.jobs_events, 0, 0, b"j", orjson.dumps(event))
    before = dict(raw)
    good = {"job_id": "j", "attempt": 0, "node": "a", "items": [], "initial": True,
            "closed": False, "complete_to": T}  # fmt: skip
    bad = {"job_id": "j", "attempt": 0, "node": "b"}  # no items
    writes = raw.writes
    outs = jobs.handle(NAMES.node_evidence, 0, 5, b"j", orjson.dumps({"reports": [good, bad]}))
    assert all(o.topic.endswith(".dlq") for o in outs)  # internal topic: logged, no DLQ
    assert raw.writes == writes and dict(raw) == before  # the good report was not written
    assert jobs.jobs["j"].pending[0].complete == {}


def test_an_exception_while_handling_writes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    raw = CountingTable()
    jobs = job_glue(CodecTable(raw, JobState.from_dict, JobState.to_dict))
    event = {"job_id": "j", "attempt": 0, "type": "terminated", "ts_ms": T, "nodes": ["a"]}

    def broken(*args: Any) -> Any:
        jobs.jobs["j"] = JobState()  # a change made before the failure
        raise RuntimeError("bug")

    monkeypatch.setattr(jobs.side(0), "on_job_event", broken)
    with pytest.raises(RuntimeError):
        jobs.handle(NAMES.jobs_events, 0, 0, b"j", orjson.dumps(event))
    assert raw == {} and jobs.jobs.get("j") is None


def test_node_states_and_clocks_are_untouched_by_packing() -> None:
    nodes: dict[str, NodeState] = {}
    clocks: dict[str, PartitionClock] = {}
    glue = NodeGlue(POLICY, NAMES, nodes, clocks)
    items = [{"termination": {"job_id": "j", "attempt": 0, "node": "a", "terminated_ts_ms": T}}]
    glue.handle(NAMES.node_signals, 0, 0, None, orjson.dumps({"signals": items}))
    assert nodes["a"].pending and clocks["p0"].closing


def test_the_key_partition_is_the_kafka_clients_default() -> None:
    from aiokafka.partitioner import DefaultPartitioner

    from streams.partitioner import key_partition

    for partitions in (1, 2, 4, 7, 16):
        every = list(range(partitions))
        for i in range(500):
            key = f"job-{i}".encode()
            assert key_partition(key, partitions) == DefaultPartitioner()(key, every, every)


def _decide(out: list[Any]) -> list[tuple[str, Any]]:
    """What a job agent that saw the 12 jobs start decides from the node agent's records."""
    jobs = job_glue(CodecTable({}, JobState.from_dict, JobState.to_dict))
    for j in range(12):
        nodes = [f"n{j}-{k}" for k in range(3)]
        event = {"job_id": f"j{j}", "attempt": 0, "type": "terminated", "ts_ms": T, "nodes": nodes}
        jobs.handle(NAMES.jobs_events, 0, 0, f"j{j}".encode(), orjson.dumps(event))
    decided = [d for o in out for d in jobs.handle(NAMES.node_evidence, 0, 0, o.key, o.value)]
    fields = ("job_id", "verdict", "action", "suspect_nodes", "rule")
    return sorted((d.topic, *(str(orjson.loads(d.value).get(f)) for f in fields)) for d in decided)


def _answers(evidence_partitions: int | None) -> list[Any]:
    """The node agent's records for 12 jobs terminated on 3 nodes each, answered at once."""
    glue = NodeGlue(POLICY, NAMES, {}, {}, evidence_partitions=evidence_partitions)
    items = [
        {
            "termination": {
                "job_id": f"j{j}",
                "attempt": 0,
                "node": f"n{j}-{k}",
                "terminated_ts_ms": T,
            }
        }
        for j in range(12)
        for k in range(3)
    ]
    out = glue.handle(NAMES.node_signals, 0, 0, None, orjson.dumps({"signals": items}))
    out += glue.handle(
        NAMES.node_signals, 0, 1, None, orjson.dumps({"watermark": T + POLICY.grace_ms + 1})
    )
    return out


def test_reports_of_several_jobs_bound_for_one_partition_share_a_record() -> None:
    from streams.partitioner import key_partition

    per_job, packed = _answers(None), _answers(4)
    assert len(packed) <= 2 * 4 < len(per_job)  # a record per partition a turn, not per job
    for o in packed:
        reports = orjson.loads(o.value).get("reports", [orjson.loads(o.value)])
        jobs = {r["job_id"] for r in reports}
        assert {key_partition(j.encode(), 4) for j in jobs} == {o.partition}  # co-partitioned
        assert o.key == (jobs.pop().encode() if len(jobs) == 1 else None)
    assert _decide(packed) == _decide(per_job)
    assert len(_decide(packed)) == 12
