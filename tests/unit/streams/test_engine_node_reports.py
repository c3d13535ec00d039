"""The node side's reports, field by field, and its state on a table that hands out copies
(as faust's does): what the completeness rule and a restart rely on."""

from __future__ import annotations

from failover_harness import GRACE, POLICY, T0, S, health, xid

from schemas.decisions import Evidence
from schemas.engine import NodeReport, NodeTermination, QuarantineRequest
from streams.engine.node_side import NodeSide, NodeState, PartitionClock
from streams.tables import CodecTable

T = T0 + 3600 * S
A = "gpu-node-001"


def _side(watermark: int | None = None) -> tuple[NodeSide, dict[str, dict[str, object]]]:
    raw: dict[str, dict[str, object]] = {}
    nodes = CodecTable(raw, NodeState.from_dict, NodeState.to_dict)  # type: ignore[arg-type]
    return NodeSide(POLICY, nodes, PartitionClock(watermark=watermark)), raw


def _reports(out: list[NodeReport | QuarantineRequest]) -> list[NodeReport]:
    return [o for o in out if isinstance(o, NodeReport)]


def test_a_progress_request_past_the_watermark_is_answered_at_once_with_its_fields() -> None:
    side, _ = _side(watermark=T + GRACE + 1)
    (r,) = side.on_termination(NodeTermination("j", 0, A, T, until_ms=T + 5 * S))
    assert (r.job_id, r.attempt, r.node, r.items) == ("j", 0, A, ())
    assert (r.initial, r.closed, r.complete_to) == (False, True, T + GRACE + 1)


def test_a_progress_request_inside_the_grace_is_not_closed() -> None:
    side, _ = _side(watermark=T + 6 * S)
    (r,) = side.on_termination(NodeTermination("j", 0, A, T, until_ms=T + 5 * S))
    assert (r.closed, r.complete_to) == (False, T + 6 * S)


def test_a_progress_request_without_any_watermark_is_answered_not_closed() -> None:
    side, _ = _side()
    (r,) = side.on_termination(NodeTermination("j", 0, A, T, until_ms=T + 5 * S))
    assert (r.closed, r.complete_to) == (False, None)


def test_a_progress_request_for_a_pending_window_waits_for_the_watermark() -> None:
    side, _ = _side(watermark=T - S)
    side.on_termination(NodeTermination("j", 0, A, T))
    assert side.on_termination(NodeTermination("j", 0, A, T, until_ms=T + 5 * S)) == []
    # Passing T wakes the termination's own entry; passing the requested time, the request's.
    assert side.advance(T + 5 * S) == [NodeReport("j", 0, A, (), False, False, T + 5 * S)]
    assert side.advance(T + 5 * S + 1) == [NodeReport("j", 0, A, (), False, False, T + 5 * S + 1)]


def test_a_watermark_exactly_at_the_termination_still_wakes_it_when_it_passes() -> None:
    side, _ = _side(watermark=T)
    (initial,) = side.on_termination(NodeTermination("j", 0, A, T))
    assert initial.complete_to == T  # not complete past T yet
    (woken,) = _reports(side.advance(T + 1))
    assert (woken.complete_to, woken.closed) == (T + 1, False)


def test_a_termination_read_twice_is_pending_once_on_a_copying_table() -> None:
    side, raw = _side(watermark=T - S)
    side.on_termination(NodeTermination("j", 0, A, T))
    side.on_termination(NodeTermination("j", 0, A, T))
    side.on_termination(NodeTermination("j", 1, A, T))  # another attempt is another window
    assert raw[A]["pending"] == [["j", 0, T], ["j", 1, T]]


def test_evidence_joining_an_open_window_is_forwarded_with_the_watermark() -> None:
    side, _ = _side(watermark=T + S)
    side.on_termination(NodeTermination("j", 0, A, T))
    (r,) = _reports(side.on_evidence(Evidence(A, 0, "xid", 79, T + 2 * S, "hardware")))
    assert (r.initial, r.closed, r.complete_to, [e.code for e in r.items]) == (
        False,
        False,
        T + S,
        [79],
    )


def test_a_release_lets_a_new_fault_quarantine_the_node_again() -> None:
    side, raw = _side(watermark=T)
    side.on_evidence(Evidence(A, 0, "xid", 79, T, "hardware"))
    side.on_release(A, T + S)
    assert raw[A]["quarantined"] is False
    out = side.on_evidence(Evidence(A, 0, "xid", 48, T + 2 * S, "hardware"))
    assert [o.node for o in out if isinstance(o, QuarantineRequest)] == [A]


def test_an_unknown_health_condition_is_not_evidence() -> None:
    side, raw = _side()
    assert side.on_signal(health(A, "no-such-condition", T)) == []
    assert raw == {}


def test_end_of_input_closes_every_window_just_past_its_grace() -> None:
    side, _ = _side(watermark=T)
    side.on_termination(NodeTermination("j", 0, A, T))
    (r,) = _reports(side.close_all())
    assert (r.closed, r.complete_to) == (True, T + GRACE + 1)


def test_a_repeat_long_after_the_last_is_written_back_to_a_copying_table() -> None:
    side, raw = _side()
    side.on_signal(xid(A, 94, T))
    side.on_signal(xid(A, 94, T + 1))  # a flood's next repeat: the write is skipped
    assert raw[A]["evidence"][0]["count"] == 1  # type: ignore[index]
    side.on_signal(xid(A, 94, T + 6 * S))  # past REPERSIST_REPEATS_MS: written back
    (item,) = raw[A]["evidence"]  # type: ignore[misc]
    # The skipped repeat's count is lost on a copying table (counts are approximate under
    # floods, README); its span is not: the last occurrence moved on.
    assert (item["count"], item["last_ts_ms"]) == (2, T + 6 * S)


def test_a_repeat_that_prunes_old_evidence_is_written_back() -> None:
    side, raw = _side(watermark=T)
    side.on_signal(xid(A, 13, T - POLICY.retention_ms - S))  # old, still kept
    side.on_signal(xid(A, 94, T))
    side.on_signal(xid(A, 94, T + 1))  # a minor repeat, but it prunes the old item
    assert [e["code"] for e in raw[A]["evidence"]] == [94]  # type: ignore[union-attr]


def test_releases_older_than_the_retention_are_forgotten() -> None:
    side, raw = _side(watermark=T)
    side.on_release(A, T - POLICY.retention_ms - S)
    side.on_release(A, T - POLICY.retention_ms)  # exactly at the horizon: kept
    side.on_signal(xid(A, 13, T))
    assert raw[A]["releases"] == [T - POLICY.retention_ms]
