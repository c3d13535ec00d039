"""Configuration files for a single-node KRaft broker (broker + controller in one process).

A run directory holds everything one broker needs across restarts: `server.properties` (its
ports), `data/` (its log dirs; `data/meta.properties` names the KRaft cluster id) and its logs.
Starting again from the same run directory is the same broker on the same address.
"""

from __future__ import annotations

import base64
import errno
import random
import secrets
import socket
from dataclasses import dataclass
from pathlib import Path

HOST = "127.0.0.1"
NODE_ID = 1
# Used when the kernel's ephemeral range cannot be read (Linux's default range).
_DEFAULT_EPHEMERAL = (32768, 60999)
_LOWEST_PICKED_PORT = 10000
_PICK_TRIES = 50


@dataclass(frozen=True)
class BrokerPorts:
    client: int
    controller: int

    @property
    def bootstrap(self) -> str:
        return f"{HOST}:{self.client}"


@dataclass(frozen=True)
class BrokerFiles:
    """Where one broker keeps its files, all under one run directory, across restarts."""

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
    def meta_properties(self) -> Path:
        """Written by Kafka's storage format: the cluster id and node id of the data."""
        return self.data_dir / "meta.properties"

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


def port_is_free(port: int) -> bool:
    """Whether a listener could bind 127.0.0.1:`port` now.

    Binds with SO_REUSEADDR, as the JVM's server sockets do on Linux, so that the sockets a
    stopped broker left in TIME_WAIT do not count as taken; a listening socket does.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((HOST, port))
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                return False
            raise
        return True


def ephemeral_port_range(
    path: Path = Path("/proc/sys/net/ipv4/ip_local_port_range"),
) -> tuple[int, int]:
    """The kernel's range for outgoing connections' local ports (Linux; a default elsewhere)."""
    try:
        low, high = (int(part) for part in path.read_text(encoding="ascii").split())
    except (OSError, ValueError):
        return _DEFAULT_EPHEMERAL
    return low, high


def pick_port(*, taken: frozenset[int] = frozenset(), rng: random.Random | None = None) -> int:
    """A free port below the kernel's ephemeral range.

    A stopped broker's port must still be free when it starts again. The kernel hands ports
    of its ephemeral range to every outgoing connection (clients retrying a stopped broker
    make many), so the broker's port is taken from below that range.
    """
    rng = rng or random.SystemRandom()
    low, _ = ephemeral_port_range()
    top = max(low, _LOWEST_PICKED_PORT + 1000)  # an odd kernel range: still pick from 10000 up
    for _ in range(_PICK_TRIES):
        port = rng.randrange(_LOWEST_PICKED_PORT, top)
        if port not in taken and port_is_free(port):
            return port
    raise OSError(f"no free port in {_LOWEST_PICKED_PORT}..{top - 1} after {_PICK_TRIES} tries")


def allocate_ports() -> BrokerPorts:
    client = pick_port()
    return BrokerPorts(client=client, controller=pick_port(taken=frozenset({client})))


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


def write_config(
    files: BrokerFiles, ports: BrokerPorts, overrides: dict[str, str] | None = None
) -> None:
    """Write server.properties (the plain broker's, with `overrides`) and log4j.properties
    into a fresh run directory."""
    files.run_dir.mkdir(parents=True, exist_ok=True)
    props = server_properties(ports, files.data_dir) | (overrides or {})
    # Owner-only: a secure broker's properties hold the admin password.
    files.server_properties.touch(mode=0o600)
    files.server_properties.write_text(render_properties(props), encoding="utf-8")
    files.log4j_properties.write_text(
        render_properties(log4j_properties(files.server_log)), encoding="utf-8"
    )


def parse_properties(text: str) -> dict[str, str]:
    """The key=value lines of a .properties file as `render_properties` writes them.

    Comments and blank lines are skipped; escapes are undone. (Kafka's own files, such as
    meta.properties, use the same subset.)
    """
    unescape = {"n": "\n", "r": "\r"}
    props: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.lstrip()  # as Java: leading blanks go, trailing ones belong to the value
        if not line or line[0] in "#!":
            continue
        key, sep, value = line.partition("=")
        if not sep:
            raise ValueError(f"not a key=value line: {raw!r}")
        out, chars = [], iter(value.lstrip())
        for char in chars:
            if char == "\\":
                char = next(chars, "")
                char = unescape.get(char, char)
            out.append(char)
        props[key.strip()] = "".join(out)
    return props


def ports_of(props: dict[str, str]) -> BrokerPorts:
    """The client and controller ports a server.properties listens on."""
    listeners = props.get("listeners")
    if not listeners:
        raise ValueError("no `listeners` in server.properties")
    found: dict[str, int] = {}
    for listener in listeners.split(","):
        name, _, address = listener.partition("://")
        found[name.strip()] = int(address.rpartition(":")[2])
    client = found.get("PLAINTEXT", found.get("SASL_SSL"))  # plain, or `broker start --secure`
    if client is None or "CONTROLLER" not in found:
        missing = "a PLAINTEXT or SASL_SSL listener" if client is None else "CONTROLLER"
        raise ValueError(f"listeners {listeners!r} lack {missing}")
    return BrokerPorts(client=client, controller=found["CONTROLLER"])


def read_ports(files: BrokerFiles) -> BrokerPorts:
    """The ports of the run directory's server.properties (what a restart will listen on)."""
    return ports_of(parse_properties(files.server_properties.read_text(encoding="utf-8")))


def formatted_cluster_id(files: BrokerFiles) -> str | None:
    """The KRaft cluster id the data directory was formatted with; None if not formatted."""
    try:
        text = files.meta_properties.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    return parse_properties(text).get("cluster.id")
