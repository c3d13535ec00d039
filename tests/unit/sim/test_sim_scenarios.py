"""The failure mix: seeded, shaped like failure-data.md, modifiers only where they apply."""

from __future__ import annotations

import random
from collections import Counter

from producers.sim.scenarios import (
    BY_NAME,
    SCENARIOS,
    XID_CLASS,
    Modifiers,
    draw,
    draw_trace,
    verdict_of,
)

HOUR = 3_600_000


def test_the_same_seed_draws_the_same_trace_and_another_seed_another() -> None:
    a = draw_trace(random.Random(7), 0, 24 * HOUR, 10.0, Modifiers())
    b = draw_trace(random.Random(7), 0, 24 * HOUR, 10.0, Modifiers())
    c = draw_trace(random.Random(8), 0, 24 * HOUR, 10.0, Modifiers())
    assert a == b
    assert a != c


def test_trace_is_a_poisson_stream_inside_its_window_at_about_its_rate() -> None:
    trace = draw_trace(random.Random(1), HOUR, 201 * HOUR, 5.0, Modifiers())
    times = [d.at_ms for d in trace]
    assert times == sorted(times)
    assert all(HOUR <= t < 201 * HOUR for t in times)
    assert 900 <= len(trace) <= 1100  # 200 h x 5/h = 1000


def test_empty_trace_for_no_rate_or_no_time() -> None:
    assert draw_trace(random.Random(1), 0, HOUR, 0.0, Modifiers()) == []
    assert draw_trace(random.Random(1), HOUR, HOUR, 5.0, Modifiers()) == []


def test_class_shares_follow_the_table() -> None:
    rng = random.Random(3)
    counts = Counter(BY_NAME[draw(rng, 0, Modifiers()).scenario].true_class for _ in range(20_000))
    total_w = sum(s.weight for s in SCENARIOS)
    for cls in ("hardware", "software", "transient"):
        want = sum(s.weight for s in SCENARIOS if s.true_class == cls) / total_w
        assert abs(counts[cls] / 20_000 - want) < 0.015, cls


def test_modifiers_only_where_they_make_sense() -> None:
    rng = random.Random(5)
    mods = Modifiers(1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0)  # every modifier wherever it applies
    for _ in range(3_000):
        d = draw(rng, 0, mods)
        s = BY_NAME[d.scenario]
        hw_job = s.true_class == "hardware" and s.target == "job"
        assert d.late_xid == (hw_job and s.signal_kind == "xid")
        assert not (d.late_xid and d.cascade)
        assert d.cascade == (hw_job and not d.late_xid)
        assert d.flood == (s.signal_kind == "xid" and s.target == "job")
        assert d.precursor == (d.scenario in ("ecc_xid", "ecc_health"))
        assert d.false_evidence == (s.true_class == "software")
        assert d.lemon == hw_job
        assert d.decoy == (s.target == "job")
        if s.codes:
            assert d.code in s.codes


def test_every_xid_the_sim_emits_has_a_truth_class() -> None:
    for s in SCENARIOS:
        if s.signal_kind == "xid":
            assert all(int(c) in XID_CLASS for c in s.codes), s.name


def test_verdict_precedence_is_the_missions() -> None:
    assert verdict_of({"transient", "software", "hardware"}) == "hardware"
    assert verdict_of({"transient", "software"}) == "software"
    assert verdict_of({"transient", "precursor", "ignore"}) == "transient"
    assert verdict_of({"precursor", "ignore"}) == "unknown"
    assert verdict_of(set()) == "unknown"
