from __future__ import annotations

import base64
import errno
import random
import re
import socket
from pathlib import Path

import pytest

from deploy.broker_config import (
    BrokerFiles,
    BrokerPorts,
    allocate_ports,
    ephemeral_port_range,
    formatted_cluster_id,
    log4j_properties,
    new_cluster_id,
    pick_port,
    port_is_free,
    ports_of,
    read_ports,
    render_properties,
    server_properties,
    write_config,
)
from deploy.broker_config import parse_properties as config_parse_properties


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


# Restarts reuse a run directory: what is read back from it must be what was written.

# As Kafka 3.9's StorageTool writes it (java.util.Properties: a date comment, then key=value).
KAFKA_META_PROPERTIES = """#
#Tue Dec 01 09:36:42 UTC 2026
node.id=1
directory.id=r8W3kSJNQ5mFZ0n1b9a3Tw
version=1
cluster.id=YuXJJLdPjinagXrj2mVpfg
"""


def test_parse_properties_reads_back_what_render_properties_writes() -> None:
    props = {"listeners": "PLAINTEXT://127.0.0.1:1", "odd": "back\\slash\nnew\rline=eq"}
    assert config_parse_properties(render_properties(props)) == props


def test_parse_properties_skips_comments_and_rejects_garbage() -> None:
    assert config_parse_properties("# c\n! c\n\n a = b\n") == {"a": "b"}
    with pytest.raises(ValueError, match="not a key=value line"):
        config_parse_properties("just words\n")


def test_ports_are_read_back_from_the_written_server_properties(tmp_path: Path) -> None:
    files = BrokerFiles(tmp_path / "run")
    write_config(files, BrokerPorts(client=19092, controller=19093))
    assert read_ports(files) == BrokerPorts(client=19092, controller=19093)


def test_ports_of_names_what_is_missing() -> None:
    with pytest.raises(ValueError, match="no `listeners`"):
        ports_of({})
    with pytest.raises(ValueError, match="CONTROLLER"):
        ports_of({"listeners": "PLAINTEXT://127.0.0.1:1"})


def test_formatted_cluster_id_reads_kafkas_meta_properties(tmp_path: Path) -> None:
    files = BrokerFiles(tmp_path / "run")
    assert formatted_cluster_id(files) is None  # not formatted
    files.data_dir.mkdir(parents=True)
    files.meta_properties.write_text(KAFKA_META_PROPERTIES)
    assert formatted_cluster_id(files) == "YuXJJLdPjinagXrj2mVpfg"


def test_a_listening_port_is_not_free() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        assert not port_is_free(port)
    assert port_is_free(port)


def test_a_port_left_in_time_wait_by_a_stopped_server_is_free() -> None:
    # The server side closes first, so its end stays in TIME_WAIT on the port after the
    # listener is gone: what a stopped broker leaves behind. The JVM's listeners use
    # SO_REUSEADDR (so do their TIME_WAIT ends) and it gets the port; port_is_free must agree.
    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        client = socket.create_connection(("127.0.0.1", port))
        served, _ = listener.accept()
        served.close()
    client.close()
    with socket.socket() as plain, pytest.raises(OSError) as taken:
        plain.bind(("127.0.0.1", port))  # proves the TIME_WAIT socket is there
    assert taken.value.errno == errno.EADDRINUSE
    assert port_is_free(port)


def test_ephemeral_port_range_reads_the_kernel_file_or_falls_back(tmp_path: Path) -> None:
    path = tmp_path / "ip_local_port_range"
    path.write_text("40000\t50000\n")
    assert ephemeral_port_range(path) == (40000, 50000)
    path.write_text("garbage")
    assert ephemeral_port_range(path) == (32768, 60999)
    assert ephemeral_port_range(tmp_path / "missing") == (32768, 60999)


def test_picked_ports_are_free_and_below_the_ephemeral_range() -> None:
    low, _ = ephemeral_port_range()
    rng = random.Random(7)
    for _ in range(20):
        port = pick_port(rng=rng)
        assert 10000 <= port < max(low, 11000)
        assert port_is_free(port)
    ports = allocate_ports()
    assert ports.client < max(low, 11000) and ports.controller < max(low, 11000)


def test_pick_port_skips_taken_ports() -> None:
    first = pick_port(rng=random.Random(3))
    second = pick_port(taken=frozenset({first}), rng=random.Random(3))  # same draws
    assert second != first
