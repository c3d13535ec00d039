from __future__ import annotations

import argparse
import os
from pathlib import Path

import pytest

from deploy import broker_cli
from deploy.broker import RunningBroker, is_running, running_bootstrap
from deploy.broker_state import clear_state, load_state, save_state, state_path


def fake_broker(tmp_path: Path, pid: int) -> RunningBroker:
    return RunningBroker(
        bootstrap="127.0.0.1:1",
        pid=pid,
        run_dir=tmp_path / "run",
        data_dir=tmp_path / "run" / "data",
        log_path=tmp_path / "run" / "server.log",
        console_path=tmp_path / "run" / "console.log",
        cluster_id="AAAAAAAAAAAAAAAAAAAAAA",
    )


@pytest.fixture(autouse=True)
def isolated_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUFAILOVER_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("KAFKA_BOOTSTRAP", raising=False)


def test_state_round_trip(tmp_path: Path) -> None:
    broker = fake_broker(tmp_path, 12345)
    assert load_state() is None
    path = save_state(broker)
    assert path == state_path() == tmp_path / "state" / "broker.json"
    assert load_state() == broker
    clear_state()
    assert load_state() is None


def test_unreadable_state_is_ignored(tmp_path: Path) -> None:
    state_path().parent.mkdir(parents=True)
    state_path().write_text("{not json")
    assert load_state() is None


def test_a_reused_pid_is_not_mistaken_for_the_broker(tmp_path: Path) -> None:
    # Our own pid is alive but is not a JVM running this run dir's server.properties.
    broker = fake_broker(tmp_path, os.getpid())
    assert not is_running(broker)
    save_state(broker)
    assert running_bootstrap() is None


def test_cli_start_is_a_no_op_with_kafka_bootstrap(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("KAFKA_BOOTSTRAP", "kafka.example:9092")
    assert broker_cli.cmd_start(argparse.Namespace(timeout=1.0)) == 0
    out, err = capsys.readouterr()
    assert out.strip() == "kafka.example:9092"
    assert "KAFKA_BOOTSTRAP is set" in err
    assert broker_cli.cmd_stop(argparse.Namespace(keep_files=False)) == 0
    assert load_state() is None


def test_cli_status_and_stop_without_a_broker(capsys: pytest.CaptureFixture[str]) -> None:
    assert broker_cli.cmd_status(argparse.Namespace()) == 1
    assert "not running" in capsys.readouterr().err
    assert broker_cli.cmd_stop(argparse.Namespace(keep_files=False)) == 0
