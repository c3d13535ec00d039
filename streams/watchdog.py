"""A worker stuck in a rebalance or a table recovery stops itself, so it is restarted.

Seen in the chaos harness (faust 0.15.3, 3 workers): after a SIGKILL every member rejoined the
group and then none synced it for minutes; the partitions they held were processed by nobody
while every process looked alive. A watchdog thread (it does not depend on faust's event loop,
which may be the thing that is stuck) checks the app's `rebalancing` and `in_recovery` flags;
when one has stayed up longer than the timeout it sends the worker SIGTERM (a clean stop leaves
the group at once, so the others rebalance without it), then SIGKILL if that does not end it.
`gpufailover run`, Kubernetes or the chaos harness restart it.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable

log = logging.getLogger("gpufailover.classifier")
CHECK_EVERY_S = 1.0
KILL_AFTER_S = 30.0


class StuckTimer:
    """How long a condition has held without a break; pure, the clock is passed in."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.since: float | None = None

    def observe(self, busy: bool, now: float) -> float | None:
        """Note the condition at `now`; how long it has held once that exceeds the timeout."""
        if not busy:
            self.since = None
            return None
        if self.since is None:
            self.since = now
        held = now - self.since
        return held if held > self.timeout_s else None


def start(
    busy: Callable[[], bool],
    timeout_s: float,
    what: str = "rebalance or table recovery",
) -> threading.Thread | None:
    """Watch `busy()` from a daemon thread; None (nothing started) when timeout_s <= 0."""
    if timeout_s <= 0:
        return None
    timer = StuckTimer(timeout_s)

    def watch() -> None:
        while True:
            time.sleep(CHECK_EVERY_S)  # a periodic check on its own thread, not a wait
            held = timer.observe(busy(), time.monotonic())
            if held is None:
                continue
            log.error(
                "stuck in a %s for %.0f s (limit %.0f s): stopping the worker so it is "
                "restarted and the group rebalances without it",
                what,
                held,
                timeout_s,
            )
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(KILL_AFTER_S)
            log.error("still running %.0f s after SIGTERM: SIGKILL", KILL_AFTER_S)
            os.kill(os.getpid(), signal.SIGKILL)

    thread = threading.Thread(target=watch, name="gpufailover-rebalance-watchdog", daemon=True)
    thread.start()
    return thread
