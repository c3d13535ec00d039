"""Rule 7: state stays bounded under floods; repeats coalesce; old evidence is dropped."""

from __future__ import annotations

from failover_harness import (
    GRACE,
    LOOKBACK,
    POLICY,
    T0,
    Run,
    S,
    decisions_of,
    health,
    nodes,
    run,
    terminated,
    xid,
)

A, B, C = nodes(3)
T = T0 + 3600 * S
FLOOD = 100_000
RETENTION = POLICY.retention_ms


def test_flood_of_identical_xids_coalesces_into_one_counted_item() -> None:
    r = Run()
    for i in range(FLOOD):  # 100,000 XID 31 on one GPU, one per ms over 100 s
        r.feed(xid(A, 31, T - 100 * S + i, gpu=4))
    (item,) = r.pipeline.node_states[A].evidence
    assert (item.code, item.count) == (31, FLOOD)
    assert (item.ts_ms, item.last_ts_ms) == (T - 100 * S, T - 100 * S + FLOOD - 1)
    r.feed(terminated("job-1", [A, B], T))
    r.finish()
    (ev,) = r.decision("job-1").evidence
    assert (ev.node, ev.gpu_index, ev.code, ev.count) == (A, 4, 31, FLOOD)


def test_flood_after_the_termination_reaches_the_job_once() -> None:
    r = Run()
    r.feed(terminated("job-1", [A, B], T))
    for i in range(FLOOD):  # within the grace: each repeat would be evidence
        r.feed(xid(B, 13, T + i))
    pending = r.pipeline.job_states["job-1"].pending[0]
    assert len(pending.items) == 1
    assert r.pipeline.job_side.stale_reports == 0
    r.finish()
    d = r.decision("job-1")
    assert d.verdict == "software"
    assert len(d.evidence) == 1


def test_flood_of_hardware_xids_gives_one_decision_and_one_quarantine() -> None:
    r = Run()
    r.feed(terminated("job-1", [A], T))
    for i in range(10_000):
        r.feed(xid(A, 79, T + i))
    r.finish()
    assert len(r.decisions) == 1
    assert r.quarantined_nodes() == [A]
    assert len(r.pipeline.node_states[A].evidence) == 1


def test_repeats_on_different_gpus_or_codes_do_not_coalesce() -> None:
    r = run(xid(A, 31, T, gpu=0), xid(A, 31, T, gpu=1), xid(A, 13, T, gpu=0), finish=False)
    assert sorted((e.gpu_index, e.code) for e in r.pipeline.node_states[A].evidence) == [
        (0, 13),
        (0, 31),
        (1, 31),
    ]


def test_repeats_further_apart_than_the_coalesce_window_stay_separate() -> None:
    gap = POLICY.coalesce_ms
    r = run(xid(A, 31, T), xid(A, 31, T + gap), xid(A, 31, T + 2 * gap + 1), finish=False)
    got = [(e.ts_ms, e.count) for e in r.pipeline.node_states[A].evidence]
    assert got == [(T, 2), (T + 2 * gap + 1, 1)]


def test_many_distinct_codes_are_capped_per_node() -> None:
    r = Run()
    stored = [c for c, cls in POLICY.xid_class.items() if cls != "ignore"]
    for gpu in range(8):
        for code in stored:
            r.feed(xid(A, code, T + gpu, gpu=gpu))
    assert len(stored) * 8 > POLICY.max_evidence_per_node
    assert len(r.pipeline.node_states[A].evidence) == POLICY.max_evidence_per_node
    r.feed(terminated("job-1", [A], T + 10 * S))
    r.finish()
    assert len(r.decision("job-1").evidence) <= POLICY.max_evidence_per_node


def test_cap_forgets_the_least_recently_seen_item() -> None:
    cap = POLICY.max_evidence_per_node
    codes = [c for c, cls in sorted(POLICY.xid_class.items()) if cls != "ignore"][: cap + 1]
    r = Run()
    for i, code in enumerate(codes):
        r.feed(xid(A, code, T + i))
    kept = {e.code for e in r.pipeline.node_states[A].evidence}
    assert kept == set(codes[1:])


def test_evidence_older_than_the_retention_behind_the_watermark_is_dropped() -> None:
    r = Run()
    r.feed(xid(A, 31, T), health(C, "ok", T + RETENTION + 1))
    r.feed(xid(A, 13, T + RETENTION + 1))
    assert [e.code for e in r.pipeline.node_states[A].evidence] == [13]


def test_evidence_exactly_at_the_retention_horizon_is_kept() -> None:
    r = Run()
    r.feed(xid(A, 31, T), health(C, "ok", T + RETENTION))
    r.feed(xid(A, 13, T + RETENTION))
    assert sorted(e.code for e in r.pipeline.node_states[A].evidence) == [13, 31]


def test_retention_covers_a_termination_a_full_grace_behind_the_watermark() -> None:
    """Evidence at T - lookback must survive until the window of T closes."""
    r = Run()
    r.feed(xid(A, 79, T - LOOKBACK), health(C, "ok", T + GRACE), xid(A, 13, T + GRACE))
    (d,) = decisions_of(r.feed(terminated("job-1", [A], T)))
    assert (d.verdict, d.suspect_nodes) == ("hardware", (A,))


def test_a_long_flood_keeps_one_item_whose_last_occurrence_moves_on() -> None:
    r = Run()
    for i in range(3 * 3600):  # one XID 31 per second for three hours
        r.feed(xid(A, 31, T + i * S))
    (item,) = r.pipeline.node_states[A].evidence
    assert (item.count, item.last_ts_ms) == (3 * 3600, T + (3 * 3600 - 1) * S)


def test_flood_of_unknown_codes_keeps_no_evidence_but_is_counted() -> None:
    r = Run()
    for i in range(FLOOD):
        r.feed(xid(A, 999, T + i))
    assert A not in r.pipeline.node_states
    assert r.pipeline.node_side.unknown_xids == FLOOD


def test_node_and_job_state_is_released_once_windows_close() -> None:
    job_nodes = nodes(8)
    r = Run()
    r.feed(terminated("job-1", job_nodes, T, reason="NCCLTimeout"))
    assert set(r.pipeline.node_states) == set(job_nodes)
    r.feed(health(C, "ok", T + GRACE + 1))
    assert r.decision("job-1").action == "retry"
    assert r.pipeline.node_states == {}
    assert r.pipeline.job_states["job-1"].pending == {}
    assert r.pipeline.node_side.clock.closing == []
