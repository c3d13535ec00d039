"""Every Kafka-talking command against a real broker that has none of the prefix's topics:
one line naming a missing topic and `gpufailover topics create`, exit 4, no traceback. And the
refusals of a target in the wrong state (exit 7): a node that is not quarantined, a broker
without an authorizer."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest

from consumers.quarantine.commands import current_state
from deploy.topics import TopicNames
from gpufailover.errors import EXIT_TOPICS_MISSING, EXIT_WRONG_STATE
from tests.cli_errors_cases import KAFKA_COMMANDS, PUBLISH_TIMEOUT_S, one_line, run_cli

pytestmark = pytest.mark.integration

# `acls apply` names no topics: on a broker without an authorizer it is its own case.
TOPIC_COMMANDS = sorted(name for name, argv in KAFKA_COMMANDS.items() if argv[0] != "acls")


@pytest.mark.parametrize("name", TOPIC_COMMANDS)
def test_no_topics_is_one_line_and_exit_4(name: str, kafka_bootstrap: str, tmp_path: Path) -> None:
    argv = KAFKA_COMMANDS[name]
    prefix = f"t-nothing-{uuid.uuid4().hex[:8]}."  # no topic was ever created under it
    started = time.monotonic()
    failure = run_cli(argv, kafka_bootstrap, prefix, str(tmp_path))
    assert time.monotonic() - started < PUBLISH_TIMEOUT_S / 2  # fast, not when a send times out
    assert failure.code == EXIT_TOPICS_MISSING, failure.stderr
    line = one_line(failure, argv[0])
    assert f"topics missing (or not readable) on {kafka_bootstrap}: {prefix}" in line
    assert "gpufailover topics create" in line


async def test_status_of_an_unknown_job_is_one_line_and_exit_6(
    kafka_bootstrap: str, topic_names: TopicNames, tmp_path: Path
) -> None:
    failure = run_cli(("status", "no-such-job"), kafka_bootstrap, topic_names.prefix, str(tmp_path))
    assert failure.code == 6, failure.stderr
    assert "unknown job 'no-such-job'" in one_line(failure, "status")


async def test_releasing_a_node_that_is_not_quarantined_is_one_line_and_exit_7(
    kafka_bootstrap: str, topic_names: TopicNames, tmp_path: Path
) -> None:
    argv = ("quarantine", "release", "gpu-free", "--reason", "test")
    failure = run_cli(argv, kafka_bootstrap, topic_names.prefix, str(tmp_path))
    assert failure.code == EXIT_WRONG_STATE, failure.stderr
    line = one_line(failure, "quarantine")
    assert "gpu-free is not quarantined (state: unknown); nothing published" in line
    assert "--force" in line
    assert await current_state(kafka_bootstrap, topic_names, "gpu-free") is None


def test_acls_apply_on_a_broker_without_an_authorizer_is_one_line_and_exit_7(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    failure = run_cli(KAFKA_COMMANDS["acls-apply"], kafka_bootstrap, "", str(tmp_path))
    assert failure.code == EXIT_WRONG_STATE, failure.stderr
    line = one_line(failure, "acls")
    assert f"{kafka_bootstrap} has no authorizer, so it keeps no ACLs (SecurityDisabled)" in line
    assert "gpufailover broker start --secure" in line
