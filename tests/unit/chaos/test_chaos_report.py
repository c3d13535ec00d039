"""The chaos table and JSON: a row per round plus the total, findings tied to their faults."""

from __future__ import annotations

from gpufailover.chaos import check as c
from gpufailover.chaos.report import FaultDone, RoundInfo, findings_text, table, to_json

ROUNDS = [
    RoundInfo(0, 100, 3, 0.0, 996_000),
    RoundInfo(1, 120, 4, 4.0, 1_000_000),
    RoundInfo(2, 90, 3, 8.0, 1_004_000),
]
FAULTS = [
    FaultDone(1, 5.0, "kill-classifier", "classifier-2 pid 11", "done", 1_001_000),
    FaultDone(2, 9.0, "broker-restart", "broker", "skipped: no restart()", 1_005_000),
    FaultDone(2, 9.5, "kill-requeue", "requeue pid 12", "done", 1_005_500),
]
RESULT = c.Result(
    findings=[
        c.Finding(c.DECISIONS_DIFFERENT, 2, "job-1/0", "kafka x | replay y", 1_006_000),
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


def test_a_written_output_names_the_faults_until_it_was_written() -> None:
    text = findings_text(RESULT, FAULTS, ROUNDS).splitlines()
    assert text[0].startswith("  decisions different: r2 job-1/0")
    assert text[1] == (
        "    written 2.0 s after its round began; after: r1 +5.0s kill-classifier classifier-2 "
        "pid 11; r2 +9.5s kill-requeue requeue pid 12"
    )


def test_an_absent_output_names_the_faults_of_its_round() -> None:
    text = findings_text(RESULT, FAULTS, ROUNDS).splitlines()
    assert text[3].startswith("    never written; after: r1 +5.0s kill-classifier")
    assert "broker-restart" in text[3]
    assert not any("job-2/0" in line for line in text)  # a redelivery is not a violation


def test_json_counts_only_violations() -> None:
    data = to_json(RESULT, ROUNDS, FAULTS, {"seed": 1}, 12.0)
    assert data["violations"] == 2
    assert data["rounds"][2]["decisions different"] == 1
    assert data["findings"][0]["after"].startswith("written 2.0 s")
