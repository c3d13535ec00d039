"""Configuration files for a single-node KRaft broker (broker + controller in one process)."""

from __future__ import annotations

import base64
import secrets
import socket
from dataclasses import dataclass
from pathlib import Path

HOST = "127.0.0.1"
NODE_ID = 1


@dataclass(frozen=True)
class BrokerPorts:
    client: int
    controller: int

    @property
    def bootstrap(self) -> str:
        return f"{HOST}:{self.client}"


@dataclass(frozen=True)
class BrokerFiles:
    """Where one broker run keeps its files (all under one fresh run directory)."""

    run_dir: Path

    @property
    def server_properties(self) -> Path:
        return self.run_dir / "server.properties"

    @property
    def log4j_properties(self) -> Path:
        return self.run_dir / "log4j.properties"

    @property
    def data_dir(self) -> Path:
        return self.run_dir / "data"

    @property
    def server_log(self) -> Path:
        """The broker's own log (log4j file appender)."""
        return self.run_dir / "server.log"

    @property
    def console_log(self) -> Path:
        """JVM stdout/stderr: startup failures that happen before log4j is up."""
        return self.run_dir / "console.log"


def new_cluster_id() -> str:
    """A KRaft cluster id: URL-safe base64 of 16 random bytes without padding.

    Like Kafka's `Uuid.randomUuid()`, never starts with '-' (it would parse as a CLI flag).
    """
    while True:
        cid = base64.urlsafe_b64encode(secrets.token_bytes(16)).decode("ascii").rstrip("=")
        if not cid.startswith("-"):
            return cid


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the kernel picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


def allocate_ports() -> BrokerPorts:
    client = free_port()
    controller = free_port()
    while controller == client:
        controller = free_port()
    return BrokerPorts(client=client, controller=controller)


def server_properties(ports: BrokerPorts, data_dir: Path) -> dict[str, str]:
    return {
        "process.roles": "broker,controller",
        "node.id": str(NODE_ID),
        "controller.quorum.voters": f"{NODE_ID}@{HOST}:{ports.controller}",
        "listeners": f"PLAINTEXT://{HOST}:{ports.client},CONTROLLER://{HOST}:{ports.controller}",
        "advertised.listeners": f"PLAINTEXT://{HOST}:{ports.client}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": (
            "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,SSL:SSL"
        ),
        "log.dirs": str(data_dir),
        "num.partitions": "1",
        "offsets.topic.replication.factor": "1",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "offsets.topic.num.partitions": "1",
        "transaction.state.log.num.partitions": "1",
        "group.initial.rebalance.delay.ms": "0",
        "num.network.threads": "2",
        "num.io.threads": "2",
        "auto.create.topics.enable": "false",
    }


def log4j_properties(server_log: Path) -> dict[str, str]:
    return {
        "log4j.rootLogger": "INFO, file",
        "log4j.appender.file": "org.apache.log4j.FileAppender",
        "log4j.appender.file.File": str(server_log),
        "log4j.appender.file.Append": "true",
        "log4j.appender.file.layout": "org.apache.log4j.PatternLayout",
        "log4j.appender.file.layout.ConversionPattern": "[%d] %p %m (%c)%n",
        # The request logger and the state-change logger are noisy at INFO.
        "log4j.logger.kafka.request.logger": "WARN",
        "log4j.logger.state.change.logger": "WARN",
    }


def render_properties(props: dict[str, str]) -> str:
    """Java .properties text; keys are plain, values escape backslashes and line breaks."""

    def escape(value: str) -> str:
        return value.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")

    return "".join(f"{key}={escape(value)}\n" for key, value in props.items())


def write_config(files: BrokerFiles, ports: BrokerPorts) -> None:
    """Write server.properties and log4j.properties into a fresh run directory."""
    files.run_dir.mkdir(parents=True, exist_ok=True)
    files.server_properties.write_text(
        render_properties(server_properties(ports, files.data_dir)), encoding="utf-8"
    )
    files.log4j_properties.write_text(
        render_properties(log4j_properties(files.server_log)), encoding="utf-8"
    )
