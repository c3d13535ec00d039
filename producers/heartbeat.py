"""The agent's heartbeat on `gpu.health`: proof that the node's agent is alive, every interval.

The classifier judges a node whose heartbeats stop as silent (docs/silent-nodes.md). The
heartbeat is honest: while a source says it is stuck (an NVML call that does not return, see
`producers.nvml_watchdog`), it is the condition `nvml_hung` with the reason, not `heartbeat`.
It is sent from the agent's event loop, not from a source's thread, so a hung NVML thread
does not stop it, and an agent whose loop is stuck stops sending it (and is judged silent).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from schemas.health import GpuHealth

DEFAULT_INTERVAL_S = 30.0  # keep equal to the policy's silent_node.heartbeat_interval_s

Probe = Callable[[], str | None]  # why the source is stuck, or None


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


class Heartbeat:
    def __init__(
        self,
        node: str,
        interval_s: float = DEFAULT_INTERVAL_S,
        probes: Sequence[Probe] = (),
        clock: Callable[[], float] = time.monotonic,
        now_ms: Callable[[], int] = wall_ms,
    ) -> None:
        if interval_s <= 0:
            raise ValueError(f"heartbeat interval must be > 0, got {interval_s}")
        self.node = node
        self.interval_s = interval_s
        self.probes = list(probes)
        self.clock = clock
        self.now_ms = now_ms
        self._next: float | None = None  # the first one goes out at once

    def due(self) -> GpuHealth | None:
        """The heartbeat record when one is due, else None."""
        now = self.clock()
        if self._next is not None and now < self._next:
            return None
        # On the schedule, not `interval` after a late tick (which would stretch every gap by
        # the tick's lateness); after a long stall, the next one is an interval from now.
        late = self._next is None or now - self._next >= self.interval_s
        base = now if late or self._next is None else self._next
        self._next = base + self.interval_s
        stuck = next((why for why in (probe() for probe in self.probes) if why), None)
        interval = {"interval_s": self.interval_s}
        if stuck is not None:
            return GpuHealth(
                self.node, self.now_ms(), "nvml_hung", None, "critical", stuck, interval
            )
        return GpuHealth(self.node, self.now_ms(), "heartbeat", None, "info", None, interval)
