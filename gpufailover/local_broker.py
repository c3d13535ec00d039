"""The broker `gpufailover broker start` left running, as its state file records it.

Read here, in the kernel, so that everything finds it the same way: the CLI, `python -m
consumers.<svc>` and a training script's `TelemetryClient`. `deploy/broker_state.py` writes the
file and owns the rest of the broker's lifecycle.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

STATE_FILE = "broker.json"  # in GPUFAILOVER_STATE_DIR (default ~/.cache/gpufailover)


def process_runs(pid: int, marker: str) -> bool:
    """Whether `pid` is alive and still the process started with the argument `marker` (a pid
    the system has reused for something else does not count)."""
    cmdline = Path(f"/proc/{pid}/cmdline")
    if cmdline.parent.parent.exists():  # Linux: check what the pid runs now
        try:
            args = cmdline.read_bytes().split(b"\0")
        except (FileNotFoundError, ProcessLookupError):
            return False
        return marker.encode() in args
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def recorded_bootstrap(state_dir: Path) -> str | None:
    """The recorded broker's bootstrap if its JVM still runs; None when there is none (a
    damaged record counts as none: `gpufailover broker status` is where it is reported)."""
    try:
        data = json.loads((state_dir / STATE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    bootstrap, pid, marker = data.get("bootstrap"), data.get("pid"), data.get("server_properties")
    if not (isinstance(bootstrap, str) and isinstance(pid, int) and isinstance(marker, str)):
        return None
    return bootstrap if process_runs(pid, marker) else None
