"""Settings from flags and GPUFAILOVER_* env vars; the commands' parsers; dead letters."""

from __future__ import annotations

import argparse

import orjson
import pytest

from consumers.jobstatus.config import JobStatusSettings
from consumers.quarantine.config import QuarantineSettings
from consumers.requeue.config import RequeueSettings
from consumers.runtime.records import InRecord, dead_letter, dead_letter_topic
from gpufailover.cli import build_parser
from schemas.dead_letter import DeadLetter
from schemas.topics import TopicNames


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(list(argv))


def test_env_then_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUFAILOVER_BOOTSTRAP", "envhost:9092")
    monkeypatch.setenv("GPUFAILOVER_TOPIC_PREFIX", "prod.")
    monkeypatch.setenv("GPUFAILOVER_QUARANTINE_BREAKER_MAX_SHARE", "0.1")
    monkeypatch.setenv("GPUFAILOVER_QUARANTINE_DRY_RUN", "true")
    monkeypatch.setenv("GPUFAILOVER_FLEET_SIZE", "400")
    from_env = QuarantineSettings.from_env_and_args(None)
    assert from_env.common.bootstrap == "envhost:9092"
    assert from_env.common.group_id == "prod.gpufailover-quarantine"
    assert from_env.breaker.max_share == 0.1 and from_env.breaker.fleet_size == 400
    assert from_env.dry_run is True
    args = parse(
        "quarantine",
        "--bootstrap",
        "flaghost:1",
        "--breaker-max-share",
        "0.3",
        "--breaker-window-s",
        "60",
        "--scheduler",
        "kubernetes",
    )
    flags = QuarantineSettings.from_env_and_args(args)
    assert flags.common.bootstrap == "flaghost:1"
    assert flags.breaker.max_share == 0.3 and flags.breaker.window_ms == 60_000
    assert flags.scheduler == "kubernetes" and flags.dry_run is True  # env kept where no flag


def test_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("GPUFAILOVER_TOPIC_PREFIX", "GPUFAILOVER_INSTANCE_ID"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GPUFAILOVER_BOOTSTRAP", "h:1")
    q = QuarantineSettings.from_env_and_args()
    assert (q.breaker.window_ms, q.breaker.max_share, q.breaker.max_nodes) == (600_000, 0.2, 50)
    assert q.dry_run is False and q.actuator == "log" and q.common.metrics_port == 0
    r = RequeueSettings.from_env_and_args(parse("requeue", "--instance-id", "a"))
    assert (r.priority_boost, r.retry_priority_boost) == (100, 0)
    assert r.common.transactional_id == "gpufailover-requeue-a"
    s = JobStatusSettings.from_env_and_args(parse("job-status", "--history-max", "5"))
    assert s.history_max == 5 and s.common.group_id == "gpufailover-job-status"


def test_bad_values_exit_with_a_message(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUFAILOVER_QUARANTINE_BREAKER_MAX_SHARE", "2")
    with pytest.raises(SystemExit, match="max share"):
        QuarantineSettings.from_env_and_args()


def test_operator_command_parsers() -> None:
    release = parse("quarantine", "release", "gpu-1", "--reason", "RMA", "--prefix", "p.")
    assert (release.node, release.reason, release.prefix, release.force) == (
        "gpu-1",
        "RMA",
        "p.",
        False,
    )
    reset = parse("quarantine", "--bootstrap", "b:1", "reset-breaker", "--reason", "checked")
    assert (reset.bootstrap, reset.reason) == ("b:1", "checked")
    assert parse("status", "job-1", "--json").json is True
    with pytest.raises(SystemExit):
        parse("quarantine", "release", "gpu-1")  # --reason is required
    with pytest.raises(SystemExit):
        parse("quarantine", "reset-breaker")  # for a reset too: it goes to the audit trail


def test_dead_letters_keep_coordinates_and_fall_back_to_alerts() -> None:
    names = TopicNames("p.")
    assert dead_letter_topic(names, names.jobs_events) == "p.jobs.events.dlq"
    assert dead_letter_topic(names, names.nodes_quarantine) == "p.nodes.quarantine.dlq"
    # A topic without a declared .dlq never sends to an undeclared topic.
    assert dead_letter_topic(names, "p.failover.ticks") == names.failover_alerts
    rec = InRecord(names.jobs_events, 1, 42, b"job-1", b"\xffnot json", 7)
    out = dead_letter(names, rec, "decode", ValueError("bad"), "jobstatus", "grp")
    letter = DeadLetter.from_dict(orjson.loads(out.value))
    # Keyed by coordinates: a dead letter written again for the same record replaces it.
    assert out.key == b"p.jobs.events[1]@42" and out.topic == "p.jobs.events.dlq"
    assert (letter.topic, letter.partition, letter.offset) == (names.jobs_events, 1, 42)
    assert letter.error == "ValueError: bad" and letter.error_kind == "decode"
    assert (letter.component, letter.group, letter.key) == ("jobstatus", "grp", "job-1")
    assert letter.raw_bytes() == b"\xffnot json" and letter.record_ts_ms == 7
