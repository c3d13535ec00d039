from __future__ import annotations

import base64
import re
from pathlib import Path

from deploy.broker_config import (
    BrokerFiles,
    BrokerPorts,
    allocate_ports,
    log4j_properties,
    new_cluster_id,
    render_properties,
    server_properties,
    write_config,
)


def parse_properties(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        key, _, value = line.partition("=")
        out[key] = value.replace("\\\\", "\\")
    return out


def test_cluster_id_is_urlsafe_base64_of_16_bytes() -> None:
    ids = {new_cluster_id() for _ in range(200)}
    assert len(ids) == 200
    for cid in ids:
        assert re.fullmatch(r"[A-Za-z0-9_-]{22}", cid), cid
        assert not cid.startswith("-")
        assert len(base64.urlsafe_b64decode(cid + "==")) == 16


def test_server_properties_single_node_kraft(tmp_path: Path) -> None:
    props = server_properties(BrokerPorts(client=19092, controller=19093), tmp_path / "data")
    assert props["process.roles"] == "broker,controller"
    assert props["controller.quorum.voters"] == "1@127.0.0.1:19093"
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:19092,CONTROLLER://127.0.0.1:19093"
    assert props["advertised.listeners"] == "PLAINTEXT://127.0.0.1:19092"
    assert props["log.dirs"] == str(tmp_path / "data")
    assert props["auto.create.topics.enable"] == "false"
    for key in (
        "offsets.topic.replication.factor",
        "transaction.state.log.replication.factor",
        "transaction.state.log.min.isr",
        "offsets.topic.num.partitions",
        "transaction.state.log.num.partitions",
    ):
        assert props[key] == "1", key
    assert "controller.quorum.bootstrap.servers" not in props  # static quorum only


def test_render_properties_escapes_backslashes_and_newlines() -> None:
    text = render_properties({"a": "x\\y", "b": "line1\nline2"})
    assert text == "a=x\\\\y\nb=line1\\nline2\n"


def test_write_config_keeps_everything_in_the_run_dir(tmp_path: Path) -> None:
    files = BrokerFiles(tmp_path / "run")
    write_config(files, BrokerPorts(client=1, controller=2))

    server = parse_properties(files.server_properties.read_text())
    log4j = parse_properties(files.log4j_properties.read_text())
    assert server["log.dirs"] == str(files.data_dir)
    assert log4j["log4j.appender.file.File"] == str(files.server_log)
    assert log4j["log4j.rootLogger"].startswith("INFO")
    assert log4j == log4j_properties(files.server_log)


def test_allocated_ports_are_distinct_and_bootstrap_is_loopback() -> None:
    ports = allocate_ports()
    assert ports.client != ports.controller
    assert ports.bootstrap == f"127.0.0.1:{ports.client}"
