"""Every Kafka-talking command against an address nothing listens on: one line saying how to
get a broker, exit 3, no traceback, within seconds."""

from __future__ import annotations

import argparse
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpufailover.cli.errors import explain
from gpufailover.errors import (
    EXIT_BROKER_UNREACHABLE,
    EXIT_NOT_AUTHORIZED,
    EXIT_TOPICS_MISSING,
    TopicsMissing,
)
from tests.cli_errors_cases import KAFKA_COMMANDS, PUBLISH_TIMEOUT_S, one_line, run_cli


@pytest.fixture(scope="module")
def dead_address() -> str:
    with socket.socket() as s:  # bound, never listening: connections are refused
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


@pytest.mark.parametrize("name", sorted(KAFKA_COMMANDS))
def test_no_broker_is_one_line_and_exit_3(name: str, dead_address: str, tmp_path: Path) -> None:
    argv = KAFKA_COMMANDS[name]
    started = time.monotonic()
    failure = run_cli(argv, dead_address, "p.", str(tmp_path))
    assert time.monotonic() - started < PUBLISH_TIMEOUT_S / 2
    assert failure.code == EXIT_BROKER_UNREACHABLE, failure.stderr
    line = one_line(failure, argv[0])
    assert f"cannot reach Kafka at {dead_address}" in line
    assert "gpufailover broker start" in line


def test_an_authorization_failure_wrapped_by_another_error_is_still_exit_5() -> None:
    from aiokafka.errors import SaslAuthenticationFailed

    from deploy.kafka_admin import KafkaUnavailableError

    try:
        try:
            raise SaslAuthenticationFailed("bad password")
        except SaslAuthenticationFailed as cause:
            raise KafkaUnavailableError("cannot reach Kafka") from cause
    except KafkaUnavailableError as exc:
        explained = explain(exc, "b:9093")
    assert explained is not None
    code, message = explained
    assert code == EXIT_NOT_AUTHORIZED
    assert message.startswith("not authorized on b:9093: ") and "acls show" in message


def test_a_long_missing_topic_list_stays_short() -> None:
    exc = TopicsMissing("b:9092", [f"t{i}" for i in range(20)])
    assert exc.exit_code == EXIT_TOPICS_MISSING
    assert "t0, t1, t2 and 17 more" in str(exc) and "gpufailover topics create" in str(exc)


def test_a_bug_is_not_explained_away() -> None:
    assert explain(KeyError("oops"), "b:9092") is None


# Commands that start a broker of their own when none is named: their help says that instead.
STARTS_ITS_OWN_BROKER = {"bench", "chaos", "demo"}


def _bootstrap_helps(parser: argparse.ArgumentParser, path: str = "") -> Iterator[tuple[str, str]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _bootstrap_helps(sub, f"{path} {name}".strip())
        elif "--bootstrap" in action.option_strings:
            yield path, action.help or ""


def test_every_bootstrap_help_says_the_real_default() -> None:
    from gpufailover.cli import build_parser
    from gpufailover.settings import BOOTSTRAP_HELP

    helps = dict(_bootstrap_helps(build_parser()))
    assert {"publish", "status", "topics list", "quarantine release", "agent"} <= set(helps)
    for command, text in helps.items():
        if command.split()[0] in STARTS_ITS_OWN_BROKER:
            assert "KAFKA_BOOTSTRAP" in text and "start" in text, (command, text)
        else:
            assert text == BOOTSTRAP_HELP, (command, text)
