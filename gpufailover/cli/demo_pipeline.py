"""The pipeline a demo run drives: a fresh topic set and `gpufailover run` as a child process
group (shared by the simulated-fleet demo and the Slurm demo)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

from gpufailover.ports import free_port
from schemas.event_time import BOUNDS_OFF_ENV

STOP_GRACE_S = 40.0


def start_pipeline(
    bootstrap: str,
    prefix: str,
    partitions: int,
    nodes: int,
    workdir: Path,
    log_level: str,
    extra_env: dict[str, str] | None = None,
) -> subprocess.Popen[bytes]:
    """`gpufailover run` in its own process group (the demo decides when it stops)."""
    env = dict(os.environ)
    env.update(
        GPUFAILOVER_BOOTSTRAP=bootstrap,
        GPUFAILOVER_CLASSIFIER_PORT=str(free_port()),
        GPUFAILOVER_FLEET_SIZE=str(nodes),
        GPUFAILOVER_QUARANTINE_ACTUATOR_LOG=str(workdir / "actuator.log"),
        GPUFAILOVER_STATE_DIR=str(workdir / "state"),  # faust's data dir: not in ~/.cache
    )
    # Simulated time runs faster than the wall clock (--time-scale): the clock-relative
    # event-time bounds would refuse the fleet's records within seconds.
    env.update(BOUNDS_OFF_ENV)
    env.update(extra_env or {})
    cmd = [
        sys.executable, "-m", "gpufailover", "--log-level", log_level, "run",
        "--bootstrap", bootstrap, "--topic-prefix", prefix, "--partitions", str(partitions),
        "--no-create-topics",
    ]  # fmt: skip
    with (workdir / "pipeline.log").open("ab") as log:
        return subprocess.Popen(
            cmd, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip


def stop_pipeline(proc: subprocess.Popen[bytes]) -> int | None:
    """SIGTERM (`run` stops its services), SIGKILL the whole group if it hangs."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            print("pipeline ignored SIGTERM: killing it", file=sys.stderr)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)  # any service left behind in the group
    return proc.wait()


def prepare_run(args: argparse.Namespace, bootstrap: str, label: str) -> tuple[str, Path] | None:
    """A fresh topic set and a log folder for one demo run; None (reported) when the topics
    cannot be created."""
    from deploy.topics import create_topics

    prefix = f"{label}-{args.seed}-{uuid.uuid4().hex[:8]}."
    workdir = (
        Path(args.log_dir) if args.log_dir else Path(tempfile.mkdtemp(prefix="gpufailover-demo-"))
    )
    workdir.mkdir(parents=True, exist_ok=True)
    print(f"broker {bootstrap}, topics {prefix}*, pipeline logs {workdir}", flush=True)
    try:
        asyncio.run(create_topics(bootstrap, args.partitions, prefix))
    except Exception as exc:  # noqa: BLE001 - any broker/admin failure, reported plainly
        print(f"gpufailover demo: cannot create topics on {bootstrap}: {exc}", file=sys.stderr)
        return None
    return prefix, workdir
