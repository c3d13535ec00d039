"""The broker's state file and CLI decisions, without a JVM: run directories are written by
hand (config + a meta.properties as Kafka's format leaves it)."""

from __future__ import annotations

import argparse
import json
import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from deploy.broker import Broker, BrokerError, PortInUseError
from deploy.broker_config import BrokerFiles, BrokerPorts, write_config
from deploy.broker_state import (
    BrokerStateError,
    clear_state,
    live_state_broker,
    load_state,
    running_bootstrap,
    runs_dir,
    save_state,
    state_path,
)
from gpufailover.cli import broker as broker_cli

CLUSTER_ID = "AAAAAAAAAAAAAAAAAAAAAA"


def formatted_run_dir(run_dir: Path, ports: BrokerPorts, cluster_id: str = CLUSTER_ID) -> Path:
    """A run directory as `Broker.create` leaves it, without running Kafka's formatter."""
    files = BrokerFiles(run_dir)
    write_config(files, ports)
    files.data_dir.mkdir()
    files.meta_properties.write_text(f"#\nnode.id=1\nversion=1\ncluster.id={cluster_id}\n")
    return run_dir


@pytest.fixture
def free_ports() -> Iterator[BrokerPorts]:
    """Two ports nobody listens on (the kernel's choice, released again)."""
    with socket.socket() as a, socket.socket() as b:
        a.bind(("127.0.0.1", 0))
        b.bind(("127.0.0.1", 0))
        ports = BrokerPorts(client=a.getsockname()[1], controller=b.getsockname()[1])
    yield ports


@pytest.fixture
def stopped_broker(tmp_path: Path, free_ports: BrokerPorts) -> Broker:
    """A recorded, stopped broker, as `gpufailover broker stop` leaves it."""
    broker = Broker.open(formatted_run_dir(runs_dir() / "broker-1", free_ports))
    save_state(broker)
    return broker


@pytest.fixture(autouse=True)
def isolated_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUFAILOVER_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("KAFKA_BOOTSTRAP", raising=False)


def start_args(**overrides: object) -> argparse.Namespace:
    return argparse.Namespace(**{"timeout": 1.0, "fresh": False, **overrides})


def stop_args(**overrides: object) -> argparse.Namespace:
    return argparse.Namespace(**{"kill": False, "grace": 1.0, "delete_data": False, **overrides})


def test_open_reads_ports_and_cluster_id_from_the_run_dir(tmp_path: Path) -> None:
    run_dir = formatted_run_dir(tmp_path / "run", BrokerPorts(client=19092, controller=19093))
    broker = Broker.open(run_dir)
    assert broker.bootstrap == "127.0.0.1:19092"
    assert broker.ports == BrokerPorts(client=19092, controller=19093)
    assert broker.cluster_id == CLUSTER_ID
    assert broker.pid is None
    assert not broker.is_running()


def test_open_refuses_a_run_dir_without_config_or_data(tmp_path: Path) -> None:
    with pytest.raises(BrokerError, match="no usable broker config"):
        Broker.open(tmp_path / "nothing")
    write_config(BrokerFiles(tmp_path / "unformatted"), BrokerPorts(client=1, controller=2))
    with pytest.raises(BrokerError, match="no formatted Kafka data"):
        Broker.open(tmp_path / "unformatted")


def test_create_refuses_a_run_dir_that_holds_something(tmp_path: Path) -> None:
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "server.properties").write_text("x=1\n")
    with pytest.raises(BrokerError, match="not empty"):
        Broker.create(tmp_path / "run")


def test_state_round_trip_keeps_the_stopped_broker(stopped_broker: Broker) -> None:
    assert state_path().parent.name == "state"
    loaded = load_state()
    assert loaded is not None
    assert (loaded.run_dir, loaded.ports, loaded.cluster_id) == (
        stopped_broker.run_dir,
        stopped_broker.ports,
        stopped_broker.cluster_id,
    )
    assert json.loads(state_path().read_text())["pid"] is None
    clear_state()
    assert load_state() is None


def test_an_unreadable_state_file_is_an_error_not_a_missing_broker() -> None:
    state_path().parent.mkdir(parents=True)
    state_path().write_text("{not json")
    with pytest.raises(BrokerStateError, match="unreadable"):
        load_state()
    assert live_state_broker() is None  # the default-bootstrap lookup never raises


def test_a_recorded_broker_whose_files_are_gone_is_an_error(stopped_broker: Broker) -> None:
    stopped_broker.remove_files()
    with pytest.raises(BrokerStateError, match="unusable"):
        load_state()


def test_a_reformatted_data_dir_is_not_the_recorded_cluster(stopped_broker: Broker) -> None:
    meta = stopped_broker.files.meta_properties
    meta.write_text(meta.read_text().replace(CLUSTER_ID, "BBBBBBBBBBBBBBBBBBBBBB"))
    with pytest.raises(BrokerStateError, match="BBBBBBBBBBBBBBBBBBBBBB"):
        load_state()


def test_a_reused_pid_is_not_mistaken_for_the_broker(stopped_broker: Broker) -> None:
    # Our own pid is alive but is not a JVM running this run dir's server.properties.
    record = json.loads(state_path().read_text())
    state_path().write_text(json.dumps({**record, "pid": os.getpid()}))
    loaded = load_state()
    assert loaded is not None
    assert not loaded.is_running()
    assert running_bootstrap() is None


def test_start_refuses_a_port_held_by_another_process(stopped_broker: Broker) -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", stopped_broker.ports.client))
        squatter.listen()
        with pytest.raises(PortInUseError, match=f"port {stopped_broker.ports.client} "):
            stopped_broker.start()
    assert not stopped_broker.is_running()


def test_cli_start_on_a_taken_port_exits_1_and_keeps_the_broker(
    stopped_broker: Broker, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", stopped_broker.ports.controller))
        squatter.listen()
        assert broker_cli.cmd_start(start_args()) == 1
    out, err = capsys.readouterr()
    assert out == ""  # no bootstrap printed: nothing for a script to use
    assert f"port {stopped_broker.ports.controller} (controller port" in err
    assert "--fresh" in err
    assert sorted(runs_dir().iterdir()) == [stopped_broker.run_dir]  # no new cluster made
    loaded = load_state()
    assert loaded is not None and loaded.run_dir == stopped_broker.run_dir


def test_cli_start_with_a_damaged_record_exits_1_without_a_new_cluster(
    stopped_broker: Broker, capsys: pytest.CaptureFixture[str]
) -> None:
    stopped_broker.remove_files()
    assert broker_cli.cmd_start(start_args()) == 1
    assert "--fresh" in capsys.readouterr().err
    assert list(runs_dir().iterdir()) == []
    assert broker_cli.cmd_restart(start_args(kill=False, grace=1.0)) == 1
    assert list(runs_dir().iterdir()) == []


def test_cli_status_of_a_stopped_broker_names_its_address(
    stopped_broker: Broker, capsys: pytest.CaptureFixture[str]
) -> None:
    assert broker_cli.cmd_status(argparse.Namespace()) == 1
    err = capsys.readouterr().err
    assert "stopped" in err
    assert stopped_broker.bootstrap in err


def test_cli_stop_keeps_the_data_unless_told_to_delete_it(
    stopped_broker: Broker, capsys: pytest.CaptureFixture[str]
) -> None:
    assert broker_cli.cmd_stop(stop_args()) == 0
    assert "data kept" in capsys.readouterr().err
    assert stopped_broker.files.meta_properties.exists()
    assert load_state() is not None

    assert broker_cli.cmd_stop(stop_args(delete_data=True)) == 0
    assert "deleted cluster" in capsys.readouterr().err
    assert not stopped_broker.run_dir.exists()
    assert load_state() is None


def test_cli_is_a_no_op_with_kafka_bootstrap(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("KAFKA_BOOTSTRAP", "kafka.example:9092")
    assert broker_cli.cmd_start(start_args()) == 0
    out, err = capsys.readouterr()
    assert out.strip() == "kafka.example:9092"
    assert "KAFKA_BOOTSTRAP is set" in err
    assert broker_cli.cmd_stop(stop_args()) == 0
    assert broker_cli.cmd_restart(start_args(kill=False, grace=1.0)) == 1
    assert load_state() is None


def test_cli_status_and_stop_without_a_broker(capsys: pytest.CaptureFixture[str]) -> None:
    assert broker_cli.cmd_status(argparse.Namespace()) == 1
    assert "not running" in capsys.readouterr().err
    assert broker_cli.cmd_stop(stop_args()) == 0
