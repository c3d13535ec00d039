"""The explain timeline over records: each reason a signal did not count, as the engine
decided it (the decisions come from replaying the same records), and the records' kinds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from streams.explain import Explanation, SourceRecord, explain
from streams.explain_dump import records_from_dump
from streams.explain_render import to_text
from streams.policy import load_policy, policy_from_dict

T = 1_773_580_000_000  # the termination of the job under test (2026-03-15)
NOW_MS = 1_800_000_000_000
POLICY = load_policy()
SHIPPED = orjson.loads(
    (Path(__file__).resolve().parents[3] / "streams/data/policy.json").read_bytes()
)


def line(topic: str, key: str, value: dict[str, Any]) -> bytes:
    return orjson.dumps({"topic": topic, "key": key, "value": {"schema_version": 1, **value}})


def xid(node: str, code: int, ts: int, gpu: int = 0) -> bytes:
    return line("gpu.xid", node, {"node": node, "xid": code, "ts_ms": ts, "gpu_index": gpu})


def job(kind: str, ts: int, nodes: list[str], attempt: int = 0, **extra: Any) -> bytes:
    value = {"job_id": "j", "attempt": attempt, "type": kind, "ts_ms": ts, "nodes": nodes}
    return line("jobs.events", "j", value | extra)


def end(ts: int) -> bytes:
    """A health sample far later on another node: it closes every window (as a live one)."""
    return line("gpu.health", "other", {"node": "other", "ts_ms": ts, "condition": "ok"})


def run(
    lines: list[bytes], extra: tuple[SourceRecord, ...] = (), attempt: int | None = None
) -> Explanation:
    records = records_from_dump(lines, POLICY, NOW_MS) + list(extra)
    x = explain("j", records, POLICY, attempt)
    assert x is not None
    return x


def whys(x: Explanation, attempt: int = 0) -> dict[tuple[str | None, object], str | None]:
    (a,) = [a for a in x.attempts if a.attempt == attempt]
    return {(s.node, s.code): s.why for s in a.not_counted}


def test_a_software_fault_before_the_attempt_started_belongs_to_the_previous_tenant() -> None:
    x = run(
        [
            xid("n1", 31, T - 60_000),
            job("started", T - 50_000, ["n1"]),
            job("terminated", T, ["n1"]),
            end(T + 900_000),
        ]
    )
    assert x.attempts[0].decision is not None and x.attempts[0].decision.verdict == "unknown"
    assert whys(x)[("n1", 31)].startswith("previous tenant")


def test_a_fault_before_the_nodes_release_is_the_repaired_one() -> None:
    release = line(
        "nodes.quarantine",
        "n1",
        {
            "node": "n1",
            "state": "released",
            "reason": "operator",
            "ts_ms": T - 200_000,
            "evidence": [],
            "job_id": None,
        },
    )
    x = run(
        [
            xid("n1", 79, T - 300_000),
            release,
            job("started", T - 100_000, ["n1"]),
            job("terminated", T, ["n1"], reason="OOMKilled"),
            end(T + 900_000),
        ]
    )
    assert x.attempts[0].decision is not None and x.attempts[0].decision.verdict == "software"
    assert whys(x)[("n1", 79)].startswith("before the node's release")
    assert any(e.what == "quarantine" and "node released" in e.text for e in x.timeline)


def test_a_signal_after_a_hardware_decision_time_does_not_count() -> None:
    x = run(
        [
            job("started", T - 100_000, ["n1", "n2"]),
            xid("n1", 79, T - 5_000),
            job("terminated", T, ["n1", "n2"]),
            xid("n2", 31, T + 10_000),
            end(T + 900_000),
        ]
    )
    d = x.attempts[0].decision
    assert d is not None and (d.verdict, d.suspect_nodes) == ("hardware", ("n1",))
    assert whys(x)[("n2", 31)].startswith("after the decision time")
    assert [(s.node, s.code) for s in x.attempts[0].counted] == [("n1", 79)]


def test_outside_the_lookback_and_unknown_codes_and_ignored_classes() -> None:
    assert not POLICY.is_known_xid(500)
    x = run(
        [
            job("started", T - 2_000_000, ["n1"]),
            xid("n1", 31, T - 700_000),
            xid("n1", 500, T - 1_000),
            xid("n1", 45, T - 2_000, gpu=1),
            job("terminated", T, ["n1"], reason="NCCLTimeout"),
            end(T + 900_000),
        ]
    )
    reasons = whys(x)
    assert reasons[("n1", 31)].startswith("outside the window: 700 s before")
    assert reasons[("n1", 500)].startswith("ignored: an XID code the policy has no row for")
    assert reasons[("n1", 45)].startswith("ignored class")


def test_repeats_with_one_reason_are_one_entry_with_their_count() -> None:
    flood = [xid("n1", 45, T - 10_000 + i) for i in range(5)]
    x = run(
        [
            job("started", T - 100_000, ["n1"]),
            *flood,
            job("terminated", T, ["n1"]),
            end(T + 900_000),
        ]
    )
    (s,) = x.attempts[0].not_counted
    assert (s.count, s.first_ts_ms, s.last_ts_ms) == (5, T - 10_000, T - 9_996)


def test_attempt_filter_unknown_job_and_pending_decision() -> None:
    lines = [
        job("started", T - 100_000, ["n1"]),
        job("terminated", T, ["n1"]),
        job("started", T + 1_000, ["n2"], attempt=1),
    ]
    x = run(lines, attempt=1)
    assert [a.attempt for a in x.attempts] == [1]
    assert x.attempts[0].decision is None and x.attempts[0].terminated_ts_ms is None
    records = records_from_dump(lines, POLICY, NOW_MS)
    assert explain("nobody", records, POLICY) is None
    assert explain("j", records, POLICY, attempt=7) is None


def test_other_records_states_printed_as_they_are_and_unreadable_ones_reported() -> None:
    lemon = SourceRecord(
        "nodes.quarantine",
        "n1",
        {"node": "n1", "state": "lemon", "reason": "operator", "ts_ms": T + 5_000, "evidence": []},
        "nodes.quarantine[0]@9",
    )
    requeue = SourceRecord(
        "jobs.requeue",
        "j",
        {
            "job_id": "j",
            "attempt": 0,
            "next_attempt": 1,
            "priority": 100,
            "exclude_nodes": ["n1"],
            "ts_ms": T + 6_000,
        },
    )
    alert = SourceRecord(
        "failover.alerts",
        "j",
        {"kind": "hang", "job_id": "j", "attempt": 0, "ts_ms": T - 1_000, "silent_s": 700},
    )
    broken = SourceRecord("failover.decisions", "j", {"job_id": "j"}, "failover.decisions[1]@3")
    x = run(
        [
            job("started", T - 100_000, ["n1"]),
            xid("n1", 79, T - 1_000),
            job("terminated", T, ["n1"]),
            end(T + 900_000),
        ],
        [lemon, requeue, alert, broken],
    )
    texts = [(e.what, e.text) for e in x.timeline]
    assert ("quarantine", "node lemon (operator), names no job") in texts
    assert ("requeue", "requeue asked: attempt 1 at priority 100, excluding n1") in texts
    assert ("alert", "alert hang (silent_s 700)") in texts
    assert x.unreadable and x.unreadable[0].startswith("failover.decisions[1]@3: ")
    assert "unreadable records skipped (1)" in to_text(x)


def test_a_decision_made_under_another_policy_is_flagged() -> None:
    lines = [
        job("started", T - 100_000, ["n1"]),
        xid("n1", 31, T - 1_000),
        job("terminated", T, ["n1"]),
        end(T + 900_000),
    ]
    records = records_from_dump(lines, POLICY, NOW_MS)
    data = orjson.loads(orjson.dumps(SHIPPED))
    data["xid"]["31"] = "hardware"
    other = policy_from_dict(data, "other.json")
    x = explain("j", records, other)
    assert x is not None
    assert x.attempts[0].policy_mismatches == (
        "xid 31 was counted as software; other.json classes it hardware",
    )
    assert "the classifier ran another policy" in to_text(x)
    assert run(lines).attempts[0].policy_mismatches == ()
