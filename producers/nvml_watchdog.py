"""A watchdog on the NVML threads: a call that does not return in time is reported as hung.

A hung driver can leave an NVML call blocked forever (NVSentinel PR #1574); the thread that made
it can neither report nor notice. `TimedNvml` notes when each call starts and ends; the
watchdog, its own thread, reads that and publishes a node-level `gpu.health` condition
`nvml_hung` once a call has run `timeout_s` past its allowance, then `ok` once it returns. The
agent's heartbeat asks `TimedNvml.stuck()` and says `nvml_hung` while it is (docs/silent-nodes.md).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from producers.nvml_source import Nvml
from schemas.health import Condition, GpuHealth, Severity

log = logging.getLogger(__name__)

DEFAULT_HANG_TIMEOUT_S = 20.0


@dataclass(frozen=True, slots=True)
class Call:
    name: str
    started: float  # monotonic seconds
    deadline: float  # hung once the clock passes it


class TimedNvml:
    """`Nvml` (every method of the wrapped one) with each call in flight on record."""

    def __init__(
        self, nvml: Nvml, timeout_s: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._nvml = nvml
        self.timeout_s = timeout_s
        self.clock = clock
        self._lock = threading.Lock()
        self._in_flight: dict[int, Call] = {}  # per thread: NVML calls do not nest

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._nvml, name)
        if not callable(target):
            return target

        def timed(*args: Any, **kwargs: Any) -> Any:
            allowance = self.timeout_s
            if name == "event_wait":  # blocks by design for up to its own timeout
                allowance += int(kwargs.get("timeout_ms", args[1] if len(args) > 1 else 0)) / 1e3
            now = self.clock()
            me = threading.get_ident()
            with self._lock:
                self._in_flight[me] = Call(name, now, now + allowance)
            try:
                return target(*args, **kwargs)
            finally:
                with self._lock:
                    self._in_flight.pop(me, None)

        return timed

    def stuck(self) -> Call | None:
        """The oldest call past its deadline, if any."""
        now = self.clock()
        with self._lock:
            late = [c for c in self._in_flight.values() if now > c.deadline]
        return min(late, key=lambda c: c.started, default=None)

    def stuck_detail(self) -> str | None:
        """What the heartbeat says while a call hangs (None: NVML answers)."""
        call = self.stuck()
        if call is None:
            return None
        return f"NVML call {call.name} has not returned for {self.clock() - call.started:.1f} s"


class NvmlWatchdog:
    """Publishes `nvml_hung` when a call of `nvml` hangs and `ok` when it returns."""

    def __init__(
        self,
        nvml: TimedNvml,
        node: str,
        sink: Callable[[GpuHealth], None],
        now_ms: Callable[[], int],
        check_every_s: float | None = None,
    ) -> None:
        self.nvml = nvml
        self.node = node
        self.sink = sink
        self.now_ms = now_ms
        self.check_every_s = check_every_s or min(1.0, nvml.timeout_s / 4)
        self.hung: Call | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="nvml-watchdog", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)

    def _run(self) -> None:
        while not self._stop.wait(self.check_every_s):
            self.check()

    def check(self) -> None:
        """One look: raise or clear the condition on a change."""
        call = self.nvml.stuck()
        if call is not None and self.hung is None:
            self.hung = call
            detail = self.nvml.stuck_detail() or call.name
            log.error("%s: the node reports nvml_hung", detail)
            self.sink(self._record("nvml_hung", "critical", detail))
        elif call is None and self.hung is not None:
            took = self.nvml.clock() - self.hung.started
            detail = f"NVML answers again: {self.hung.name} returned after {took:.1f} s"
            log.warning("%s", detail)
            self.hung = None
            self.sink(self._record("ok", "info", detail))

    def _record(self, condition: Condition, severity: Severity, detail: str) -> GpuHealth:
        return GpuHealth(
            node=self.node,
            ts_ms=self.now_ms(),
            condition=condition,
            severity=severity,
            detail=detail,
        )
