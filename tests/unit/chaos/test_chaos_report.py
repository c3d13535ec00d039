"""The chaos table and JSON: a row per round plus the total, findings tied to their faults."""

from __future__ import annotations

from gpufailover.chaos import check as c
from gpufailover.chaos.report import FaultDone, RoundInfo, findings_text, table, to_json

ROUNDS = [RoundInfo(0, 100, 3, 0.0), RoundInfo(1, 120, 4, 4.0), RoundInfo(2, 90, 3, 8.0)]
FAULTS = [
    FaultDone(1, 5.0, "kill-classifier", "classifier-2 pid 11", "done", 1_000_000),
    FaultDone(2, 9.0, "broker-restart", "broker", "skipped: no restart()", 1_004_000),
]
RESULT = c.Result(
    findings=[
        c.Finding(c.DECISIONS_DIFFERENT, 2, "job-1/0", "kafka x | replay y"),
        c.Finding(c.DEAD_LETTERS_DUPLICATED, 2, "t[0]@1", "2x"),
        c.Finding(c.REDELIVERED, 1, "job-2/0", "same"),
    ]
)


def test_the_table_has_a_row_per_round_and_a_total() -> None:
    lines = table(RESULT, ROUNDS, FAULTS).splitlines()
    assert [ln.split()[0] for ln in lines] == ["round", "0", "1", "2", "total"]
    head = lines[0].split()
    total = dict(zip(head, lines[-1].split(), strict=False))
    assert total["records"] == "310" and total["terms"] == "10"
    assert total["d.diff"] == "1" and total["dl.dup"] == "1" and total["redeliv"] == "1"
    assert "broker-restart (skipped)" in lines[3]


def test_a_finding_names_the_fault_before_it() -> None:
    text = findings_text(RESULT, FAULTS)
    assert "job-1/0" in text and "kill-classifier classifier-2 pid 11" in text
    assert "redelivered" not in text  # information, not a violation


def test_json_counts_only_violations() -> None:
    data = to_json(RESULT, ROUNDS, FAULTS, {"seed": 1}, 12.0)
    assert data["violations"] == 2
    assert data["rounds"][2]["decisions different"] == 1
    assert data["findings"][0]["after"].startswith("r1 +5.0s kill-classifier")


def test_an_output_written_after_a_fault_names_that_fault() -> None:
    dup = c.Finding(c.DEAD_LETTERS_DUPLICATED, 0, "t[0]@1", "2x", wall_ms=1_002_500)
    result = c.Result(findings=[dup])
    assert "kill-classifier classifier-2 pid 11 (2.5 s before it was written)" in findings_text(
        result, FAULTS
    )
    early = c.Finding(c.DEAD_LETTERS_DUPLICATED, 0, "t[0]@1", "2x", wall_ms=999_000)
    assert "no fault before" in findings_text(c.Result(findings=[early]), FAULTS)
