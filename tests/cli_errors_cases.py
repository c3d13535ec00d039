"""Every `gpufailover` command that talks to Kafka, as a newcomer would type it, and a runner
that checks a failure is one line with the documented exit code (gpufailover.cli.errors)."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass

PUBLISH_TIMEOUT_S = 30  # longer than any of these runs may take: failing fast is checked

# The operator commands: each ends with flags for the broker and the topic prefix.
KAFKA_COMMANDS: dict[str, tuple[str, ...]] = {
    "status": ("status", "job-1"),
    "quarantine-release": ("quarantine", "release", "gpu-1", "--reason", "test"),
    "quarantine-validate": ("quarantine", "validate", "gpu-1", "--reason", "test"),
    "quarantine-reset-breaker": ("quarantine", "reset-breaker", "--reason", "test"),
    "audit": ("audit",),
    "explain": ("explain", "job-1"),
    "export": ("export", "--since", "1h"),
    "topics-list": ("topics", "list"),
    "acls-apply": ("acls", "apply"),
    "publish": (
        "publish",
        "started",
        "--job-id",
        "job-1",
        "--attempt",
        "0",
        "--nodes",
        "gpu-1",
        "--timeout",
        str(PUBLISH_TIMEOUT_S),
    ),
}


def prefix_flag(argv: tuple[str, ...]) -> str:
    return "--topic-prefix" if argv[0] == "publish" else "--prefix"


@dataclass(frozen=True)
class Failure:
    code: int
    stderr: str


def run_cli(argv: tuple[str, ...], bootstrap: str, prefix: str, state_dir: str) -> Failure:
    """Run the command as a subprocess (the real entry point, so a traceback would show)."""
    full = [sys.executable, "-m", "gpufailover", *argv, "--bootstrap", bootstrap]
    if argv[0] != "acls":  # ACLs are cluster-wide, not per prefix
        full += [prefix_flag(argv), prefix]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUFAILOVER_", "KAFKA_"))}
    env["GPUFAILOVER_STATE_DIR"] = state_dir
    done = subprocess.run(full, capture_output=True, text=True, timeout=60, env=env, check=False)
    return Failure(done.returncode, done.stderr)


def one_line(failure: Failure, command: str) -> str:
    """The single stderr line, checked to name the command and carry no traceback."""
    lines = failure.stderr.strip().splitlines()
    assert "Traceback" not in failure.stderr, failure.stderr
    assert len(lines) == 1, failure.stderr
    assert lines[0].startswith(f"gpufailover {command}: "), lines[0]
    return lines[0]
