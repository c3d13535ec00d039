"""A `gpufailover <command>` child process with its log in a file, as the benchmarks and the
integration tests run services."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path


class Service:
    """A `gpufailover <command>` child process with its log in a file."""

    def __init__(self, args: Sequence[str], log_path: Path, env: dict[str, str]) -> None:
        self.args = list(args)
        self.log_path = log_path
        self.env = {**os.environ, **env}
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Service:
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "gpufailover", *self.args],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
            )
        return self

    def stop(self, timeout_s: float = 30.0) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                before = self.log_tail()
                stacks = self._dump_tasks()
                self.proc.kill()
                self.proc.wait()
                raise AssertionError(
                    f"{self.args[0]} ignored SIGTERM:\n{before}\n--- its tasks:\n{stacks}"
                ) from None
        return self.proc.returncode

    def _dump_tasks(self, wait_s: float = 5.0) -> str:
        """A worker that hangs on stop: ask mode's Worker for every task's stack (SIGUSR1, it
        writes them to the log) before the kill, so the failure says where it hung."""
        assert self.proc is not None
        start = self.log_path.stat().st_size if self.log_path.exists() else 0
        self.proc.send_signal(signal.SIGUSR1)
        deadline, last = time.monotonic() + wait_s, -1
        while time.monotonic() < deadline and self.proc.poll() is None:
            time.sleep(0.1)  # polling the log with a deadline, not a fixed wait
            size = self.log_path.stat().st_size
            if start < size == last:
                break  # written and no longer growing
            last = size
        with self.log_path.open("rb") as log:
            log.seek(start)
            return log.read().decode(errors="replace")

    async def wait_for_log(self, text: str, timeout_s: float = 60.0) -> None:
        """Poll the service's log until it contains `text` (e.g. faust's "Worker ready")."""
        deadline = time.monotonic() + timeout_s
        while text not in (
            self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        ):
            if time.monotonic() > deadline:
                raise AssertionError(f"no {text!r} in {timeout_s}s:\n{self.log_tail()}")
            await asyncio.sleep(0.1)  # polling a file with a deadline, not a fixed wait

    def log_tail(self, lines: int = 40) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def __enter__(self) -> Service:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
