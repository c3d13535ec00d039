"""`gpufailover publish` as a subprocess: bad arguments exit non-zero with a clear message and
publish nothing (nothing even connects: a listening socket stands in for the broker)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator

import orjson
import pytest

OK = ["terminated", "--job-id", "job-7", "--attempt", "1", "--nodes", "gpu-[01-02]"]


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    """Something that would notice a connection attempt."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        s.setblocking(False)
        yield s


def publish(*args: str, bootstrap: str | None = None) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "gpufailover", "publish", *args]
    if bootstrap is not None:
        argv += ["--bootstrap", bootstrap, "--timeout", "5"]
    env = {k: v for k, v in os.environ.items() if k != "GPUFAILOVER_TOPIC_PREFIX"}
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env, check=False)


def connected(listener: socket.socket) -> bool:
    try:
        conn, _ = listener.accept()
    except BlockingIOError:
        return False
    conn.close()
    return True


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["started", "--job-id", "j", "--attempt", "0"], "--nodes: a started event needs"),
        (["terminated", "--job-id", "j", "--attempt", "0", "--nodes", "gpu-[3-1]"], "backwards"),
        ([*OK[:4], "-1", *OK[5:]], "--attempt: must be >= 0"),
        ([*OK[:4], "one", *OK[5:]], "--attempt: expected an integer"),
        ([*OK, "--exit-code", "1.5"], "--exit-code: expected an integer"),
        ([*OK, "--spec", "{not json"], "--spec: not valid JSON"),
        ([*OK, "--spec", "[1, 2]"], "--spec: expected a JSON object"),
        ([*OK, "--max-failovers", "-2"], "--max-failovers: must be >= 0"),
        ([*OK, "--ts-ms", "soon"], "--ts-ms: expected an integer"),
        ([*OK, "--reason", " "], "--reason: must not be empty"),
        (["succeeded", "--job-id", "j", "--attempt", "0", "--exit-code", "3"], "contradicts"),
        (["terminated", "--job-id", " ", "--attempt", "0", "--nodes", "a"], "--job-id"),
        ([*OK, "--topic-prefix", "bad prefix!"], "topic prefix"),
    ],
)
def test_bad_arguments_exit_2_with_a_message_and_publish_nothing(
    listener: socket.socket, args: list[str], message: str
) -> None:
    port = listener.getsockname()[1]
    result = publish(*args, bootstrap=f"127.0.0.1:{port}")
    assert result.returncode == 2, result.stderr
    assert message in result.stderr
    assert "nothing published" in result.stderr
    assert not connected(listener)


@pytest.mark.parametrize(
    "args",
    [
        ["terminated", "--attempt", "0", "--nodes", "a"],  # no --job-id
        ["exploded", "--job-id", "j", "--attempt", "0"],  # no such event type
    ],
)
def test_argparse_errors_also_exit_2(listener: socket.socket, args: list[str]) -> None:
    port = listener.getsockname()[1]
    result = publish(*args, bootstrap=f"127.0.0.1:{port}")
    assert result.returncode == 2
    assert "error:" in result.stderr
    assert not connected(listener)


def test_dry_run_prints_the_validated_record() -> None:
    result = publish(
        *OK,
        "--exit-code",
        "137",
        "--reason",
        "OOMKilled",
        "--spot",
        "--no-failover",
        "--max-failovers",
        "2",
        "--priority",
        "5",
        "--spec",
        '{"image": "trainer:1.2", "gpus": 16}',
        "--ts-ms",
        "1700000000000",
        "--dry-run",
    )
    assert result.returncode == 0, result.stderr
    out = orjson.loads(result.stdout)
    assert out == {
        "topic": "jobs.events",
        "value": {
            "schema_version": 1,
            "job_id": "job-7",
            "attempt": 1,
            "type": "terminated",
            "ts_ms": 1700000000000,
            "nodes": ["gpu-01", "gpu-02"],
            "exit_code": 137,
            "reason": "OOMKilled",
            "max_failovers": 2,
            "priority": 5,
            "spec": {"image": "trainer:1.2", "gpus": 16},
            "failover": False,
            "training_type": "spot",
        },
    }


def test_an_unreachable_broker_exits_3() -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = publish(*OK, bootstrap=f"127.0.0.1:{port}")
    assert result.returncode == 3
    assert f"cannot reach Kafka at 127.0.0.1:{port}" in result.stderr


def test_the_documented_publish_commands_are_valid() -> None:
    import re
    import shlex
    from pathlib import Path

    doc = Path(__file__).resolve().parents[3] / "docs" / "producers.md"
    section = doc.read_text().split("## Job events", 1)[1]
    block = re.search(r"```sh\n(.*?)```", section, re.S)
    assert block is not None
    commands = block.group(1).replace("\\\n", " ").splitlines()
    assert len(commands) >= 4
    for line in commands:
        argv = shlex.split(line, comments=True)
        assert argv[:2] == ["gpufailover", "publish"], line
        result = publish(*argv[2:], "--dry-run")
        assert result.returncode == 0, (line, result.stderr)
