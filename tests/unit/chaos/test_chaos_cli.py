"""`gpufailover chaos` parses its options into the run's settings."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufailover.chaos.faults import KINDS
from gpufailover.chaos.run import ChaosSettings
from gpufailover.cli import build_parser
from gpufailover.cli.chaos import settings_from_args


def settings(*argv: str) -> ChaosSettings:
    return settings_from_args(build_parser().parse_args(["chaos", *argv]))


def test_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KAFKA_BOOTSTRAP", raising=False)
    s = settings()
    assert (s.rounds, s.workers, s.max_workers, s.partitions) == (10, 2, 4, 4)
    assert s.faults == KINDS and s.faults_per_round == (1, 2)
    assert s.bootstrap is None and s.idle_after_s == 600.0


def test_every_option_reaches_the_settings() -> None:
    s = settings(
        "--rounds", "50", "--workers", "3", "--max-workers", "5", "--seed", "9",
        "--partitions", "6", "--jobs-per-round", "8", "--bad-per-round", "2",
        "--round-seconds", "3", "--faults", "kill-requeue,add-worker",
        "--faults-per-round", "0-1", "--bootstrap", "k:9092", "--json", "out.json",
        "--idle-after", "5", "--quiesce-timeout", "60", "--settle", "2",
    )  # fmt: skip
    assert (s.rounds, s.workers, s.max_workers, s.seed, s.partitions) == (50, 3, 5, 9, 6)
    assert (s.jobs_per_round, s.bad_per_round, s.nodes, s.round_s) == (8, 2, 48, 3.0)
    assert s.faults == ("kill-requeue", "add-worker") and s.faults_per_round == (0, 1)
    assert (s.bootstrap, s.json_path) == ("k:9092", Path("out.json"))
    assert (s.idle_after_s, s.quiesce_timeout_s, s.settle_s) == (5.0, 60.0, 2.0)


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--faults", "kill-all"], "unknown fault kind"),
        (["--faults-per-round", "2-1"], "faults per round"),
        (["--workers", "0"], "must be >= 1"),
    ],
)
def test_bad_options_are_refused(argv: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        settings(*argv)
