"""Waiting for a local daemon (kube-apiserver, slurmctld, munged) to become ready."""

from __future__ import annotations

import time
from collections.abc import Callable


def poll_until(what: str, check: Callable[[], bool], timeout_s: float, poll_s: float) -> None:
    """Poll `check` until it is true; TimeoutError naming `what` after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(poll_s)
