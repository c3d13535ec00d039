"""Grading against ground truth: exactly-one decision, accuracy, false evidence, quarantines."""

from __future__ import annotations

from producers.sim.faults import Signal
from producers.sim.truth import (
    Incident,
    Mark,
    Seen,
    classify_quarantine,
    grade,
    percentile,
    visible_verdict,
)

T = 10_000_000
LOOK, GRACE = 600_000, 120_000


def _inc(i: int, cls: str, job: str, faulty: str | None = None, reason: str | None = None,
         nodes: tuple[str, ...] = ("a", "b")) -> Incident:  # fmt: skip
    return Incident(i, f"s{i}", cls, (), T - 5_000, job_id=job, attempt=0, nodes=nodes,
                    faulty_node=faulty, term_ms=T, reason=reason, term_wall_ms=1_000)  # fmt: skip


def _seen(job: str, verdict: str, suspects: tuple[str, ...] = (), wall: int = 1_050) -> Seen:
    return Seen(job, 0, verdict, "x", suspects, (), wall, T)


def _sig(node: str, cls: str, ts: int = T - 5_000) -> Signal:
    return Signal(ts, node, "xid", 0, 0, cls, "fault")


def test_correct_wrong_missing_duplicated() -> None:
    incs = [
        _inc(1, "hardware", "j1", faulty="b"),
        _inc(2, "software", "j2", reason="OOMKilled"),
        _inc(3, "transient", "j3", reason="NCCLTimeout"),
        _inc(4, "transient", "j4", reason="Hang"),
    ]
    signals = {"b": [_sig("b", "hardware")]}
    decisions = [
        _seen("j1", "hardware", ("b",), wall=1_020),
        _seen("j2", "software"),
        _seen("j2", "software"),  # a second decision for the same attempt
        _seen("j3", "unknown"),  # wrong
        _seen("zzz", "hardware"),  # a job the sim never failed
    ]
    # j1..j4 share nodes a/b: give each incident its own nodes so b's XID is j1's only.
    for inc, nodes in zip(incs, [("a", "b"), ("c",), ("d",), ("e",)], strict=True):
        inc.nodes = nodes
    g = grade(incs, decisions, signals, LOOK, GRACE)
    assert (g.job_incidents, g.decided, g.graded, g.correct) == (4, 3, 4, 2)
    assert g.missing == [4] and g.duplicated == [2] and g.stray_decisions == 1
    assert [w["incident"] for w in g.wrong] == [3, 4]
    assert g.accuracy == 0.5
    assert g.latencies_ms == {"hardware": [20], "software": [50], "unknown": [50]}
    assert g.by_scenario["s1"] == [1, 1]


def test_false_evidence_is_graded_apart() -> None:
    inc = _inc(1, "software", "j1", reason="OOMKilled")
    signals = {"a": [_sig("a", "hardware", T - 60_000)]}  # unrelated hardware XID in the window
    g = grade([inc], [_seen("j1", "hardware", ("a",))], signals, LOOK, GRACE)
    assert inc.visible == ("hardware", ("a",)) and inc.false_evidence
    assert g.graded == 0 and g.accuracy == 1.0 and len(g.false_evidence) == 1


def test_visible_verdict_reads_only_the_jobs_nodes_inside_the_window() -> None:
    inc = _inc(1, "transient", "j1", reason="NCCLTimeout")
    outside_node = _sig("zz", "hardware")
    too_early = _sig("a", "hardware", T - LOOK - 1)
    too_late = _sig("a", "software", T + GRACE + 1)
    assert visible_verdict(inc, [outside_node, too_early, too_late], LOOK, GRACE) == (
        "transient",
        (),
    )
    assert visible_verdict(inc, [_sig("a", "software", T + GRACE)], LOOK, GRACE)[0] == "software"


def test_unpublished_terminations_are_not_graded() -> None:
    inc = _inc(1, "hardware", "j1", faulty="a")
    inc.term_wall_ms = None  # the run stopped first
    assert grade([inc], [], {}, LOOK, GRACE).job_incidents == 0


def test_quarantine_classified_by_the_nodes_state_then() -> None:
    marks = [Mark(100, "broken"), Mark(500, "repaired"), Mark(900, "spurious")]
    assert classify_quarantine(marks, 200) == "justified"
    assert classify_quarantine(marks, 600) == "false"
    assert classify_quarantine(marks, 950) == "known_false_evidence"
    assert classify_quarantine([], 10) == "false"
    assert classify_quarantine([Mark(1_000, "degraded")], 1_000) == "justified"  # same instant
    assert classify_quarantine([Mark(1_500, "degraded")], 1_000, slack_ms=500) == "justified"


def test_percentile() -> None:
    assert percentile([], 50) is None
    assert percentile([5.0, 1.0, 3.0], 50) == 3.0
    assert percentile(list(range(1, 101)), 99) == 99
