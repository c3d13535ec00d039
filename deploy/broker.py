"""Launch, probe and stop a real single-node Apache Kafka (KRaft) broker without Docker.

    with running_broker() as broker:        # tests: fresh ports and log dir, removed afterwards
        use(broker.bootstrap)

The broker runs as `java ... kafka.Kafka server.properties` in its own process group, with its
output in files (never a pipe). It is ready when its log says `Kafka Server started` and a
metadata request through aiokafka lists one broker.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from deploy.broker_config import BrokerFiles, allocate_ports, new_cluster_id, write_config
from deploy.kafka_admin import KafkaUnavailableError, cluster_broker_ids, run_sync
from deploy.kafka_jars import KAFKA_VERSION, resolve_jars

log = logging.getLogger(__name__)

READY_LINE = "Kafka Server started"
JVM_OPTS = ("-Xms256m", "-Xmx512m", "-XX:+UseG1GC", "-Djava.awt.headless=true")
_POLL_S = 0.1
_TAIL_LINES = 40
# Brokers started by this process: kept so they can be reaped (no zombies, no ResourceWarning).
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


class BrokerError(RuntimeError):
    """The broker could not be started, did not become ready, or could not be stopped."""


@dataclass(frozen=True)
class RunningBroker:
    bootstrap: str
    pid: int  # also the process-group id
    run_dir: Path
    data_dir: Path
    log_path: Path  # the broker's log4j log
    console_path: Path  # JVM stdout/stderr
    cluster_id: str
    kafka_version: str = KAFKA_VERSION

    def to_json(self) -> dict[str, Any]:
        return {k: str(v) if isinstance(v, Path) else v for k, v in asdict(self).items()}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunningBroker:
        return cls(
            bootstrap=str(data["bootstrap"]),
            pid=int(data["pid"]),
            run_dir=Path(data["run_dir"]),
            data_dir=Path(data["data_dir"]),
            log_path=Path(data["log_path"]),
            console_path=Path(data["console_path"]),
            cluster_id=str(data["cluster_id"]),
            kafka_version=str(data.get("kafka_version", KAFKA_VERSION)),
        )


def java_executable() -> str:
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").exists():
        return str(Path(home) / "bin" / "java")
    found = shutil.which("java")
    if found is None:
        raise BrokerError("`java` not found (set JAVA_HOME or put JDK 17+ on PATH)")
    return found


def _java_cmd(lib: Path, files: BrokerFiles, *args: str) -> list[str]:
    log_flag = f"-Dlog4j.configuration=file:{files.log4j_properties}"
    return [java_executable(), *JVM_OPTS, log_flag, "-cp", f"{lib}/*", *args]


def start_broker(
    *,
    run_dir: Path | None = None,
    cache_dir: Path | None = None,
    ready_timeout_s: float = 60.0,
) -> RunningBroker:
    """Resolve jars, write config, format storage, start the broker and wait until it is ready.

    `run_dir` must be new or empty (a temporary directory by default); it is left in place.
    """
    lib = resolve_jars(cache_dir)
    if run_dir is None:
        run_dir = Path(tempfile.mkdtemp(prefix="gpufailover-kafka-"))
    elif run_dir.exists() and any(run_dir.iterdir()):
        raise BrokerError(
            f"run directory {run_dir} is not empty (a formatted log dir is not reusable)"
        )
    files = BrokerFiles(run_dir)
    ports = allocate_ports()
    write_config(files, ports)
    cluster_id = new_cluster_id()
    _format_storage(lib, files, cluster_id)

    log.info("starting Kafka %s broker on %s (run dir %s)", KAFKA_VERSION, ports.bootstrap, run_dir)
    cmd = _java_cmd(lib, files, "kafka.Kafka", str(files.server_properties))
    with files.console_log.open("ab") as console:
        proc = subprocess.Popen(
            cmd,
            cwd=run_dir,
            stdin=subprocess.DEVNULL,
            stdout=console,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # own process group: stop signals reach the whole JVM tree
        )
    _CHILDREN[proc.pid] = proc
    broker = RunningBroker(
        bootstrap=ports.bootstrap,
        pid=proc.pid,
        run_dir=run_dir,
        data_dir=files.data_dir,
        log_path=files.server_log,
        console_path=files.console_log,
        cluster_id=cluster_id,
    )
    try:
        wait_ready(broker, timeout_s=ready_timeout_s)
    except BaseException:
        stop_broker(broker, grace_s=5.0)
        raise
    return broker


def _format_storage(lib: Path, files: BrokerFiles, cluster_id: str) -> None:
    cmd = _java_cmd(
        lib, files, "kafka.tools.StorageTool", "format", "-t", cluster_id,
        "-c", str(files.server_properties),
    )  # fmt: skip
    started = time.monotonic()
    proc = subprocess.run(
        cmd, capture_output=True, text=True, check=False, stdin=subprocess.DEVNULL
    )
    if proc.returncode != 0:
        output = (proc.stdout + proc.stderr).strip()
        raise BrokerError(f"formatting {files.data_dir} failed (exit {proc.returncode}):\n{output}")
    log.debug("formatted %s in %.1f s", files.data_dir, time.monotonic() - started)


def wait_ready(broker: RunningBroker, *, timeout_s: float = 60.0) -> None:
    """Block until the log says the server started and a metadata request lists one broker."""
    started = time.monotonic()
    deadline = started + timeout_s
    next_report = started + 5.0
    follower = _LogFollower(broker.log_path)
    while not follower.seen(READY_LINE):
        _check_alive(broker)
        now = time.monotonic()
        if now > deadline:
            raise BrokerError(_with_tail(f"broker not ready after {timeout_s:g} s", broker))
        if now >= next_report:
            log.info("waiting for the broker to start (%.0f s)...", now - started)
            next_report += 5.0
        time.sleep(_POLL_S)
    while True:
        remaining = deadline - time.monotonic()
        try:
            ids = run_sync(cluster_broker_ids(broker.bootstrap, timeout_s=max(1.0, remaining)))
        except KafkaUnavailableError as exc:
            _check_alive(broker)
            if time.monotonic() > deadline:
                raise BrokerError(
                    _with_tail(f"no metadata from {broker.bootstrap}", broker)
                ) from exc
            time.sleep(_POLL_S)
            continue
        if len(ids) == 1:
            break
        raise BrokerError(_with_tail(f"expected one broker in the metadata, got {ids}", broker))
    log.info("Kafka broker ready at %s in %.1f s", broker.bootstrap, time.monotonic() - started)


def is_running(broker: RunningBroker) -> bool:
    """Whether the broker's JVM is alive (and the pid is still that JVM, not a reused pid)."""
    child = _CHILDREN.get(broker.pid)
    if child is not None:
        return child.poll() is None
    cmdline = Path(f"/proc/{broker.pid}/cmdline")
    if cmdline.parent.parent.exists():  # Linux: check what the pid runs now
        try:
            args = cmdline.read_bytes().split(b"\0")
        except (FileNotFoundError, ProcessLookupError):
            return False
        return str(broker.run_dir / "server.properties").encode() in args
    try:
        os.kill(broker.pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stop_broker(
    broker: RunningBroker, *, grace_s: float = 30.0, remove_files: bool = False
) -> None:
    """SIGTERM the process group, SIGKILL after `grace_s`; optionally delete the run dir."""
    if is_running(broker):
        log.info("stopping Kafka broker pid %d (%s)", broker.pid, broker.bootstrap)
        _signal_group(broker.pid, signal.SIGTERM)
        if not _wait_exit(broker, grace_s):
            log.warning("broker pid %d ignored SIGTERM for %.0f s: SIGKILL", broker.pid, grace_s)
            _signal_group(broker.pid, signal.SIGKILL)
            if not _wait_exit(broker, 10.0):
                raise BrokerError(f"broker pid {broker.pid} survived SIGKILL")
    _CHILDREN.pop(broker.pid, None)
    if remove_files:
        shutil.rmtree(broker.run_dir, ignore_errors=True)


def running_bootstrap() -> str | None:
    """Bootstrap of the broker `gpufailover broker start` left running, if any."""
    from deploy.broker_state import live_state_broker  # deferred: broker_state imports us

    broker = live_state_broker()
    return broker.bootstrap if broker is not None else None


@contextmanager
def running_broker(
    *, cache_dir: Path | None = None, ready_timeout_s: float = 60.0
) -> Iterator[RunningBroker]:
    """A fresh broker for the duration of the block; its files are removed afterwards."""
    broker = start_broker(cache_dir=cache_dir, ready_timeout_s=ready_timeout_s)
    try:
        yield broker
    finally:
        stop_broker(broker, remove_files=True)


def log_tail(broker: RunningBroker, lines: int = _TAIL_LINES) -> str:
    """The first ERROR/FATAL lines (the cause hides above the shutdown noise), then the tails."""
    parts = []
    for path in (broker.log_path, broker.console_path):
        try:
            text = path.read_text(encoding="utf-8", errors="replace").splitlines()
        except FileNotFoundError:
            continue
        errors = [line for line in text if " ERROR " in line or " FATAL " in line][:10]
        if errors:
            parts.append(f"--- first errors in {path} ---\n" + "\n".join(errors))
        if text:
            parts.append(f"--- last {lines} lines of {path} ---\n" + "\n".join(text[-lines:]))
    return "\n".join(parts) or f"(no broker output in {broker.run_dir})"


def _with_tail(message: str, broker: RunningBroker) -> str:
    return f"{message} (run dir {broker.run_dir})\n{log_tail(broker)}"


def _check_alive(broker: RunningBroker) -> None:
    child = _CHILDREN.get(broker.pid)
    code = child.poll() if child is not None else (None if is_running(broker) else "?")
    if code is not None:
        raise BrokerError(_with_tail(f"broker exited (code {code}) before it was ready", broker))


def _signal_group(pid: int, sig: signal.Signals) -> None:
    with suppress(ProcessLookupError):
        os.killpg(pid, sig)


def _wait_exit(broker: RunningBroker, timeout_s: float) -> bool:
    child = _CHILDREN.get(broker.pid)
    if child is not None:
        try:
            child.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return False
        return True
    deadline = time.monotonic() + timeout_s
    while is_running(broker):
        if time.monotonic() > deadline:
            return False
        time.sleep(_POLL_S)
    return True


class _LogFollower:
    """Reads a growing log file incrementally and remembers whether a line was seen."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._offset = 0
        self._carry = b""

    def seen(self, needle: str) -> bool:
        wanted = needle.encode()
        try:
            with self._path.open("rb") as fh:
                fh.seek(self._offset)
                chunk = fh.read()
        except FileNotFoundError:
            return False
        self._offset += len(chunk)
        text = self._carry + chunk
        if wanted in text:
            return True
        self._carry = text[-len(wanted) :]
        return False
