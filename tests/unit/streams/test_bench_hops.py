"""The hop breakdown: each stage's time from the records' CreateTime, for whole journeys only."""

from __future__ import annotations

from gpufailover.bench.hops import Rec, stages, summary
from schemas.topics import TopicNames

NAMES = TopicNames("")
T = 1_800_000_000_000


def journey(job: str, start: int) -> list[Rec]:
    """A 2-node probe: termination at T, decided 100 ms after it was published at `start`."""
    term = {"job_id": job, "attempt": 0, "type": "terminated", "ts_ms": T, "nodes": ["a", "b"]}
    by_node = [{"job_id": job, "attempt": 0, "node": n, "terminated_ts_ms": T} for n in "ab"]
    return [
        Rec(NAMES.jobs_events, 0, 0, job, term, start),
        Rec(NAMES.term_by_node, 0, 0, None, by_node[0], start + 10),
        Rec(NAMES.term_by_node, 1, 0, None, by_node[1], start + 12),
        Rec(NAMES.node_signals, 0, 5, None, {"signals": [{"termination": by_node[0]}]}, start + 20),
        Rec(NAMES.node_signals, 1, 5, None, {"signals": [{"termination": by_node[1]}]}, start + 22),
        Rec(NAMES.node_signals, 0, 6, None, {"watermark": T}, start + 30),  # not past T
        Rec(NAMES.node_signals, 0, 7, None, {"watermark": T + 1}, start + 60),
        Rec(NAMES.node_signals, 1, 7, None, {"watermark": T + 5}, start + 50),
        Rec(NAMES.node_evidence, 0, 0, job, {"job_id": job}, start + 70),
        Rec(NAMES.node_evidence, 0, 1, job, {"job_id": job}, start + 80),
        Rec(NAMES.failover_decisions, 0, 0, job, {"job_id": job}, start + 100),
        Rec(NAMES.node_evidence, 0, 2, job, {"job_id": job}, start + 150),  # after: not counted
    ]


def test_each_stage_is_measured_between_its_records() -> None:
    got = stages(journey("p1", 1_000), NAMES, ["p1"])
    assert got == {
        "job agent: termination -> term-by-node": [12],
        "signal filter: term-by-node -> pack": [10],
        "event time passes T on every node's partition": [60],
        "node agent: pack and watermark -> report": [20],
        "job agent: last report -> decision": [20],
        "total: termination -> decision": [100],
    }


def test_a_journey_with_a_missing_record_is_left_out() -> None:
    records = journey("p1", 1_000) + journey("p2", 2_000)
    records = [r for r in records if not (r.topic == NAMES.failover_decisions and r.key == "p2")]
    got = stages(records, NAMES, ["p1", "p2"])
    assert [len(v) for v in got.values()] == [1] * 6
    (first, *_) = summary(got)
    assert first == ("job agent: termination -> term-by-node", 12, 12, 12, 1)
