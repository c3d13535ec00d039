"""The classifier's settings: flag, then GPUFAILOVER_* env var, then default."""

from __future__ import annotations

import pytest

from gpufailover.cli import build_parser
from streams.config import ClassifierSettings


def settings(*argv: str) -> ClassifierSettings:
    return ClassifierSettings.from_args(build_parser().parse_args(["classifier", *argv]))


def test_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("PARTITIONS", "CLASSIFIER_PORT", "IDLE_AFTER_S", "METRICS_HOST", "TOPIC_PREFIX"):
        monkeypatch.delenv(f"GPUFAILOVER_{name}", raising=False)
    monkeypatch.setenv("GPUFAILOVER_BOOTSTRAP", "envhost:9092")
    got = settings()
    assert (got.bootstrap, got.partitions, got.web_port, got.idle_after_s) == (
        "envhost:9092",
        4,
        6066,
        5.0,
    )
    assert (got.app_id, got.metrics_host, got.topic_prefix) == (
        "gpufailover-classifier",
        "127.0.0.1",
        "",
    )


def test_flags_beat_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUFAILOVER_PARTITIONS", "8")
    monkeypatch.setenv("GPUFAILOVER_IDLE_AFTER_S", "2.5")
    monkeypatch.setenv("GPUFAILOVER_CLASSIFIER_PORT", "7000")
    from_env = settings()
    assert (from_env.partitions, from_env.idle_after_s, from_env.web_port) == (8, 2.5, 7000)
    flags = settings("--partitions", "2", "--idle-after", "1", "--bootstrap", "flag:1")
    assert (flags.partitions, flags.idle_after_s, flags.web_port) == (2, 1.0, 7000)
    assert flags.bootstrap == "flag:1"


def test_a_bad_env_value_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUFAILOVER_TICK_INTERVAL_S", "fast")
    with pytest.raises(SystemExit, match="GPUFAILOVER_TICK_INTERVAL_S='fast': expected a number"):
        settings()
