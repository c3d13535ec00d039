"""A real single-node Apache Kafka (KRaft) broker without Docker, that can be stopped and
started again as the same broker.

    with running_broker() as broker:        # tests: a new cluster, its files removed afterwards
        use(broker.bootstrap)
        broker.restart()                    # graceful: SIGTERM, controlled shutdown
        broker.restart(hard=True)           # SIGKILL, as a crash would
        broker.stop(); ...; broker.start()  # down for a while

A `Broker` is a run directory (config with its ports, the formatted data, logs) and, while it
runs, a JVM (`java ... kafka.Kafka server.properties`, own process group, output to files).
Every start uses the same directory, so the bootstrap address, the KRaft cluster id, topics,
records and committed offsets stay; clients keep their address and reconnect. A start whose
port is held by another process fails with `PortInUseError`: the broker never moves.
It is ready when its log says `Kafka Server started` and a metadata request lists one broker.
"""

from __future__ import annotations

import logging
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from deploy.broker_config import (
    BrokerFiles,
    BrokerPorts,
    allocate_ports,
    formatted_cluster_id,
    new_cluster_id,
    port_is_free,
    read_ports,
    write_config,
)
from deploy.broker_process import (
    POLL_S,
    PORT_IN_USE_LINE,
    READY_LINE,
    BrokerError,
    LogFollower,
    PortInUseError,
    format_storage,
    jvm_alive,
    log_sizes,
    log_tail,
    read_since,
    signal_group,
    spawn,
    wait_exit,
)
from deploy.broker_secure import (
    ADMIN,
    USERS,
    SecureFiles,
    make_material,
    scram_format_args,
    secure_properties,
)
from deploy.kafka_admin import KafkaUnavailableError, cluster_broker_ids, run_sync
from deploy.kafka_jars import KAFKA_VERSION, resolve_jars
from gpufailover.security import PLAINTEXT, KafkaSecurity

__all__ = ["Broker", "BrokerError", "PortInUseError", "running_broker"]

log = logging.getLogger(__name__)

_KILL_WAIT_S = 10.0


class Broker:
    """One local broker: a run directory that outlives its JVM. See the module docstring."""

    def __init__(
        self,
        run_dir: Path,
        *,
        ports: BrokerPorts,
        cluster_id: str,
        cache_dir: Path | None = None,
        pid: int | None = None,
    ) -> None:
        self.files = BrokerFiles(run_dir)
        self.ports = ports
        self.cluster_id = cluster_id
        self.kafka_version = KAFKA_VERSION
        self._cache_dir = cache_dir
        self._pid = pid  # of the JVM (and its process group) this object started or was given
        self._child: subprocess.Popen[bytes] | None = None
        self._since = log_sizes(self.files)  # the current (or last) start's share of the logs

    @classmethod
    def create(
        cls, run_dir: Path | None = None, *, cache_dir: Path | None = None, secure: bool = False
    ) -> Broker:
        """A new cluster: new ports, config and formatted storage in a new or empty `run_dir`
        (a temporary directory by default). Not started. `secure`: SASL_SSL with SCRAM users
        and ACLs enforced (`deploy.broker_secure`)."""
        if run_dir is not None and run_dir.exists() and any(run_dir.iterdir()):
            raise BrokerError(f"run directory {run_dir} is not empty: it holds another broker")
        lib = resolve_jars(cache_dir)
        if run_dir is None:
            run_dir = Path(tempfile.mkdtemp(prefix="gpufailover-kafka-"))
        files = BrokerFiles(run_dir)
        ports = allocate_ports()
        cluster_id = new_cluster_id()
        if secure:
            material = SecureFiles(run_dir)
            make_material(material)
            write_config(files, ports, secure_properties(material, ports))
            try:
                format_storage(lib, files, cluster_id, scram_format_args(material))
            except BrokerError as exc:
                raise BrokerError(_redacted(str(exc), material)) from None
        else:
            write_config(files, ports)
            format_storage(lib, files, cluster_id)
        kind = "secure (SASL_SSL) " if secure else ""
        log.info("new %sKafka cluster %s for %s in %s", kind, cluster_id, ports.bootstrap, run_dir)
        return cls(run_dir, ports=ports, cluster_id=cluster_id, cache_dir=cache_dir)

    @classmethod
    def open(
        cls, run_dir: Path, *, cache_dir: Path | None = None, pid: int | None = None
    ) -> Broker:
        """The broker `create` made in `run_dir`, as it was left (`pid`: its JVM, if known)."""
        files = BrokerFiles(run_dir)
        try:
            ports = read_ports(files)
        except (OSError, ValueError) as exc:
            raise BrokerError(f"no usable broker config in {run_dir}: {exc}") from exc
        cluster_id = formatted_cluster_id(files)
        if cluster_id is None:
            raise BrokerError(f"no formatted Kafka data in {files.data_dir}")
        return cls(run_dir, ports=ports, cluster_id=cluster_id, cache_dir=cache_dir, pid=pid)

    @property
    def bootstrap(self) -> str:
        return self.ports.bootstrap

    @property
    def secure(self) -> SecureFiles | None:
        """The CA and user passwords of a `--secure` broker; None for a plain one."""
        material = SecureFiles(self.files.run_dir)
        return material if material.exists() else None

    def security(self, user: str = ADMIN) -> KafkaSecurity:
        """How `user` (default the super user) connects: PLAINTEXT for a plain broker."""
        material = self.secure
        return PLAINTEXT if material is None else material.security(user)

    @property
    def run_dir(self) -> Path:
        return self.files.run_dir

    @property
    def data_dir(self) -> Path:
        return self.files.data_dir

    @property
    def log_path(self) -> Path:
        """The broker's log4j log (appended to by every start)."""
        return self.files.server_log

    @property
    def console_path(self) -> Path:
        """JVM stdout/stderr (appended to by every start)."""
        return self.files.console_log

    @property
    def pid(self) -> int | None:
        """The JVM's pid (also its process-group id) while it runs; None when stopped."""
        return self._pid if self.is_running() else None

    def is_running(self) -> bool:
        return self._pid is not None and jvm_alive(self._pid, self.files, self._child)

    def start(self, *, ready_timeout_s: float = 60.0) -> None:
        """Start the JVM on this run directory's ports and data; return once it is ready.

        Raises PortInUseError when another process holds one of its ports, BrokerError when it
        is already running, exits early or is not ready in time (it is stopped again then).
        """
        if self.is_running():
            raise BrokerError(f"broker {self.bootstrap} is already running (pid {self._pid})")
        if formatted_cluster_id(self.files) != self.cluster_id:
            raise BrokerError(f"{self.data_dir} no longer holds cluster {self.cluster_id}")
        self._check_ports_free()
        lib = resolve_jars(self._cache_dir)
        self._since = log_sizes(self.files)
        log.info("starting Kafka %s broker on %s (%s)", KAFKA_VERSION, self.bootstrap, self.run_dir)
        self._child = spawn(lib, self.files)
        self._pid = self._child.pid
        try:
            self._wait_ready(ready_timeout_s)
        except BaseException:
            self.stop(grace_s=5.0)
            raise

    def stop(self, *, grace_s: float = 30.0) -> None:
        """Graceful stop: SIGTERM (Kafka's controlled shutdown), SIGKILL after `grace_s`.

        The files stay; `start` brings the same broker back. A no-op when it is not running.
        """
        if self._pid is not None and self.is_running():
            log.info("stopping Kafka broker pid %d (%s)", self._pid, self.bootstrap)
            signal_group(self._pid, signal.SIGTERM)
            if not wait_exit(self._pid, self.files, self._child, grace_s):
                log.warning("broker pid %d ignored SIGTERM for %.0f s: SIGKILL", self._pid, grace_s)
                self._kill_group(self._pid)
        self._forget_process()

    def kill(self) -> None:
        """Hard stop: SIGKILL the JVM at once, as a crash would. The files stay; the next
        start recovers the logs. A no-op when it is not running."""
        if self._pid is not None and self.is_running():
            log.info("killing Kafka broker pid %d (%s) with SIGKILL", self._pid, self.bootstrap)
            self._kill_group(self._pid)
        self._forget_process()

    def restart(
        self, *, hard: bool = False, grace_s: float = 30.0, ready_timeout_s: float = 60.0
    ) -> None:
        """`stop` (or `kill` when `hard`), then `start`: same address, cluster and data."""
        if hard:
            self.kill()
        else:
            self.stop(grace_s=grace_s)
        self.start(ready_timeout_s=ready_timeout_s)

    def remove_files(self) -> None:
        """Delete the run directory (config, data, logs). Only when stopped."""
        if self.is_running():
            raise BrokerError(f"broker {self.bootstrap} is running: stop it before removing it")
        shutil.rmtree(self.run_dir, ignore_errors=True)

    def log_tail(self) -> str:
        """What the current (or last) start wrote: its first errors and its last lines."""
        return log_tail(self._since)

    def to_json(self) -> dict[str, Any]:
        """What the state file records (paths for people; `open` reads the rest from disk)."""
        return {
            "bootstrap": self.bootstrap,
            "pid": self.pid,
            "run_dir": str(self.run_dir),
            # what the kernel checks a live pid against (gpufailover/local_broker.py)
            "server_properties": str(self.files.server_properties),
            "data_dir": str(self.data_dir),
            "log_path": str(self.log_path),
            "console_path": str(self.console_path),
            "cluster_id": self.cluster_id,
            "kafka_version": self.kafka_version,
            "secure": self.secure is not None,
        }

    def __repr__(self) -> str:
        where = f"{self.bootstrap}, cluster {self.cluster_id}, pid {self.pid}"
        return f"Broker({where}, {self.run_dir})"

    def _check_ports_free(self) -> None:
        for role, port in (("client", self.ports.client), ("controller", self.ports.controller)):
            if not port_is_free(port):
                raise PortInUseError(
                    f"port {port} ({role} port of the broker in {self.run_dir}) is in use by "
                    "another process; the broker keeps its address, so it does not move to "
                    "another port"
                )

    def _kill_group(self, pid: int) -> None:
        signal_group(pid, signal.SIGKILL)
        if not wait_exit(pid, self.files, self._child, _KILL_WAIT_S):
            raise BrokerError(f"broker pid {pid} survived SIGKILL for {_KILL_WAIT_S:g} s")

    def _forget_process(self) -> None:
        if self._pid is not None and self._child is None:
            self._wait_ports_released()
        self._pid = None
        self._child = None

    def _wait_ports_released(self) -> None:
        """Wait until the ports of a JVM we did not spawn are free: /proc shows such a JVM
        gone (its memory released) a moment before the kernel closes its sockets."""
        deadline = time.monotonic() + _KILL_WAIT_S
        ports = (self.ports.client, self.ports.controller)
        while not all(port_is_free(port) for port in ports):
            if time.monotonic() > deadline:
                log.warning("ports %s still in use %g s after it exited", ports, _KILL_WAIT_S)
                return
            time.sleep(POLL_S)

    def _wait_ready(self, timeout_s: float) -> None:
        """Block until this start's log says the server started and metadata lists one broker."""
        started = time.monotonic()
        deadline = started + timeout_s
        next_report = started + 5.0
        follower = LogFollower(self.log_path, self._since[self.log_path])
        while not follower.seen(READY_LINE):
            self._check_alive()
            now = time.monotonic()
            if now > deadline:
                raise BrokerError(self._with_tail(f"broker not ready after {timeout_s:g} s"))
            if now >= next_report:
                log.info("waiting for the broker to start (%.0f s)...", now - started)
                next_report += 5.0
            time.sleep(POLL_S)
        while True:
            remaining = deadline - time.monotonic()
            try:
                ids = run_sync(
                    cluster_broker_ids(
                        self.bootstrap, timeout_s=max(1.0, remaining), security=self.security()
                    )
                )
            except KafkaUnavailableError as exc:
                self._check_alive()
                if time.monotonic() > deadline:
                    message = self._with_tail(f"no metadata from {self.bootstrap}")
                    raise BrokerError(message) from exc
                time.sleep(POLL_S)
                continue
            if len(ids) == 1:
                break
            raise BrokerError(self._with_tail(f"expected one broker in the metadata, got {ids}"))
        log.info("Kafka broker ready at %s in %.1f s", self.bootstrap, time.monotonic() - started)

    def _check_alive(self) -> None:
        if self.is_running():
            return
        code = self._child.returncode if self._child is not None else "?"
        self._forget_process()
        output = read_since(self.log_path, self._since[self.log_path])
        message = f"broker exited (code {code}) before it was ready"
        if PORT_IN_USE_LINE in output:
            raise PortInUseError(self._with_tail(f"{message}: a port is in use"))
        raise BrokerError(self._with_tail(message))

    def _with_tail(self, message: str) -> str:
        return f"{message} (run dir {self.run_dir})\n{self.log_tail()}"


def _redacted(text: str, material: SecureFiles) -> str:
    for user in USERS:
        text = text.replace(material.password(user), "***")
    return text


@contextmanager
def running_broker(
    *, cache_dir: Path | None = None, ready_timeout_s: float = 60.0, secure: bool = False
) -> Iterator[Broker]:
    """A new cluster, started, for the duration of the block; its files are removed afterwards.

    The block may stop, kill, start and restart it; it is stopped at the end in any case.
    """
    broker = Broker.create(cache_dir=cache_dir, secure=secure)
    try:
        broker.start(ready_timeout_s=ready_timeout_s)
        yield broker
    finally:
        try:
            broker.stop()
        finally:
            broker.remove_files()
