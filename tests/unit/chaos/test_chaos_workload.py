"""The chaos workload: seeded, the simulator's mix, retries up to the budget, bad records, and
replay decides every termination of it."""

from __future__ import annotations

from collections import Counter

import orjson
import pytest

from gpufailover.chaos.oracle import replay
from gpufailover.chaos.workload import (
    ROUND_SPAN_MS,
    START_MS,
    WorkloadConfig,
    build,
    close_markers,
)
from streams.policy import load_policy

CFG = WorkloadConfig(seed=5, rounds=10, jobs_per_round=6, bad_per_round=2)


def test_the_same_seed_gives_the_same_records() -> None:
    assert build(CFG).rounds == build(CFG).rounds
    other = build(WorkloadConfig(seed=6, rounds=10, jobs_per_round=6, bad_per_round=2))
    assert other.rounds != build(CFG).rounds


def test_each_round_lies_in_its_own_slice_of_event_time() -> None:
    w = build(CFG)
    for rnd, records in enumerate(w.rounds):
        for rec in records:
            value = orjson.loads(rec.value) if rec.bad is None else None
            if value is not None:
                assert START_MS + rnd * ROUND_SPAN_MS <= value["ts_ms"]
                assert value["ts_ms"] < START_MS + (rnd + 1) * ROUND_SPAN_MS - 10 * 60_000


def test_jobs_come_back_until_the_budget_is_spent() -> None:
    w = build(CFG)
    attempts = Counter(job for job, _ in w.terminations)
    assert max(attempts.values()) == CFG.max_failovers + 1
    for job, n in attempts.items():
        assert {a for j, a in w.terminations if j == job} == set(range(n))


def test_the_mix_has_hardware_software_and_hard_cases() -> None:
    w = build(WorkloadConfig(seed=1, rounds=20))
    names = set(w.scenarios.values())
    assert {"gpu_xid", "ecc_xid", "oom"} <= names
    xids = [orjson.loads(r.value) for r in w.records() if r.topic == "gpu.xid" and r.bad is None]
    assert any(x["xid"] == 45 for x in xids)  # a cascade's healthy peers
    by_key = Counter((x["node"], x["xid"], x["ts_ms"] // 60_000) for x in xids)
    assert max(by_key.values()) > 10  # a flood


def test_bad_records_are_spread_over_the_input_topics() -> None:
    bad = build(CFG).bad_records()
    assert len(bad) == CFG.rounds * CFG.bad_per_round
    assert {r.topic for r in bad} == {"gpu.xid", "gpu.health", "jobs.events", "training.telemetry"}


def test_replay_decides_every_termination_and_rejects_every_bad_record() -> None:
    policy = load_policy()
    w = build(CFG)
    markers = close_markers(w.max_ts_ms(), policy.lookback_ms, policy.grace_ms, 4)
    answer = replay([*w.records(), *markers], policy)
    assert set(answer.decisions) == set(w.terminations)
    assert answer.dead_letters == len(w.bad_records())
    actions = Counter(d["action"] for d in answer.decisions.values())
    assert {"failover", "give_up", "reject"} <= set(actions)
    assert answer.quarantines
    assert answer.quarantine_rounds.keys() == answer.quarantines.keys()
    for node, rnd in answer.quarantine_rounds.items():  # the round with that node's signal
        signals = [
            r
            for r in w.rounds[rnd]
            if r.key == node and r.topic in ("gpu.xid", "gpu.health") and r.bad is None
        ]
        assert any(orjson.loads(r.value).get("condition") != "ok" for r in signals)


def test_markers_close_every_partition_after_the_last_record() -> None:
    markers = close_markers(1_000, 600_000, 120_000, 3)
    assert [m.partition for m in markers] == [0, 1, 2]
    assert {orjson.loads(m.value)["ts_ms"] for m in markers} == {1_000 + 720_000 + 1}


def test_too_small_a_fleet_is_refused() -> None:
    with pytest.raises(ValueError, match="nodes=10"):
        WorkloadConfig(nodes=10, jobs_per_round=6)
