"""The pipeline under test as real processes: N classifier workers in one consumer group, and
the quarantine, requeue and job-status services, each a `gpufailover <command>` child with its
log in a file. Faults act on these: SIGKILL and restart, add and remove workers."""

from __future__ import annotations

import itertools
import logging
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from gpufailover.ports import free_port
from schemas.event_time import BOUNDS_OFF_ENV

log = logging.getLogger("gpufailover.chaos")

CONSUMERS = ("quarantine", "requeue", "job-status")
STOP_TIMEOUT_S = 30.0


class Proc:
    """One service process. `start()` after a kill starts a new process with the same args."""

    def __init__(self, name: str, args: list[str], log_path: Path) -> None:
        self.name, self.args, self.log_path = name, args, log_path
        self.proc: subprocess.Popen[bytes] | None = None
        self.down = False  # killed on purpose, a restart is due

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def start(self) -> None:
        if self.alive:
            return
        self.down = False
        with self.log_path.open("ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "gpufailover", *self.args],
                # The workload is stamped at a fixed date (workload.START_MS), not the wall
                # clock: the clock-relative event-time bounds would refuse all of it.
                env={**os.environ, **BOUNDS_OFF_ENV},
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        log.info("started %s (pid %d), log %s", self.name, self.proc.pid, self.log_path)

    def kill(self) -> None:
        """SIGKILL: no shutdown code runs, as when a machine dies."""
        if self.proc is not None and self.proc.poll() is None:
            self.down = True
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
            log.info("SIGKILLed %s (pid %d)", self.name, self.proc.pid)

    def stop(self) -> None:
        """SIGTERM, a clean leave; SIGKILL if it does not exit in time."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            log.warning("%s ignored SIGTERM for %.0f s: SIGKILL", self.name, STOP_TIMEOUT_S)
            self.proc.kill()
            self.proc.wait()

    def log_tail(self, lines: int = 20) -> str:
        if not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


@dataclass(frozen=True)
class PipelineConfig:
    bootstrap: str
    prefix: str
    partitions: int
    log_dir: Path
    idle_after_s: float
    tick_interval_s: float
    policy: Path | None = None


class Pipeline:
    """The processes of one chaos run."""

    def __init__(self, cfg: PipelineConfig) -> None:
        self.cfg = cfg
        self.workers: list[Proc] = []
        self.consumers: dict[str, Proc] = {}
        self._ids = itertools.count(1)
        self.exits: list[str] = []  # services found dead that no fault killed

    def _classifier(self) -> Proc:
        c = self.cfg
        n = next(self._ids)
        args = [
            "classifier",
            "--bootstrap", c.bootstrap,
            "--topic-prefix", c.prefix,
            "--partitions", str(c.partitions),
            "--web-port", str(free_port()),
            "--idle-after", str(c.idle_after_s),
            "--tick-interval", str(c.tick_interval_s),
        ]  # fmt: skip
        if c.policy is not None:
            args += ["--policy", str(c.policy)]
        return Proc(f"classifier-{n}", args, c.log_dir / f"classifier-{n}.log")

    def _consumer(self, command: str) -> Proc:
        c = self.cfg
        args = [command, "--bootstrap", c.bootstrap, "--topic-prefix", c.prefix]
        if command == "quarantine":
            # The breaker guards a real fleet against mass quarantine; here every quarantine
            # replay decides must happen, so it must not trip.
            args += ["--breaker-max-nodes", "1000000", "--breaker-max-share", "1.0"]
        return Proc(command, args, c.log_dir / f"{command}.log")

    def start(self, workers: int) -> None:
        for _ in range(workers):
            self.add_worker()
        for command in CONSUMERS:
            proc = self._consumer(command)
            proc.start()
            self.consumers[command] = proc

    def add_worker(self) -> Proc:
        proc = self._classifier()
        proc.start()
        self.workers.append(proc)
        return proc

    def remove_worker(self, index: int) -> Proc:
        proc = self.workers.pop(index % len(self.workers))
        proc.stop()
        log.info("removed %s (clean stop)", proc.name)
        return proc

    def service(self, name: str, worker: int | None) -> Proc:
        if name == "classifier":
            return self.workers[(worker or 0) % len(self.workers)]
        return self.consumers[name]

    def all(self) -> list[Proc]:
        return [*self.workers, *self.consumers.values()]

    def revive_crashed(self) -> list[str]:
        """Restart services that died on their own (a crash is a finding, not a stop)."""
        found = []
        for proc in self.all():
            if proc.proc is not None and not proc.alive and not proc.down:
                code = proc.proc.returncode
                msg = f"{proc.name} exited on its own with {code}; restarted. Log tail:\n"
                log.warning("%s", msg + proc.log_tail(8))
                found.append(f"{proc.name} exited with {code}")
                proc.start()
        self.exits += found
        return found

    def stop(self) -> None:
        for proc in self.all():
            proc.stop()
