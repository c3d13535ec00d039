"""`gpufailover run`: the whole pipeline (classifier + consumers) as supervised processes.

Each service stays a separate process, as in production, so a crash in one is visible and
stops the group instead of leaving a half-working pipeline behind.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from typing import Any

from gpufailover import settings as declare
from gpufailover.security import KafkaSecurity
from gpufailover.settings import (
    bootstrap_setting,
    default_bootstrap,
    setting,
    topic_prefix_setting,
)

log = logging.getLogger("gpufailover.run")
# The services `run` starts, in order (those this install has).
KILL_AFTER_S = 30
SERVICES: tuple[str, ...] = ("classifier", "quarantine", "requeue", "job-status")


@dataclass(frozen=True)
class RunTarget:
    """Where the pipeline runs; the children get these as their env vars."""

    bootstrap: str = bootstrap_setting()
    topic_prefix: str | None = topic_prefix_setting(None)
    partitions: int | None = setting(
        None,
        env="GPUFAILOVER_PARTITIONS",
        flag="--partitions",
        kind=int,
        help="partitions of every topic",
        shown_default="4",
    )


def register(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "run",
        help="run the whole pipeline: classifier, quarantine, requeue and job-status services",
        description="Start every pipeline service as a child process against one broker; "
        "SIGINT/SIGTERM stop them all; if one exits, the others are stopped too.",
    )
    declare.add_arguments(p, RunTarget)
    p.add_argument(
        "--no-create-topics",
        action="store_true",
        help="do not create missing topics before starting (on a secured cluster the "
        "services' roles may not create topics: an admin runs `gpufailover topics create`)",
    )
    p.add_argument(
        "--only",
        default=None,
        help=f"comma-separated subset of services to start (of {','.join(SERVICES)})",
    )
    p.set_defaults(func=run)


def _child_env(where: RunTarget) -> dict[str, str]:
    env = dict(os.environ)
    env["GPUFAILOVER_BOOTSTRAP"] = where.bootstrap or default_bootstrap()
    if where.topic_prefix is not None:
        env["GPUFAILOVER_TOPIC_PREFIX"] = where.topic_prefix
    if where.partitions is not None:
        env["GPUFAILOVER_PARTITIONS"] = str(where.partitions)
    return env


_ROLE_SETTINGS = ("SASL_USERNAME", "SASL_PASSWORD_FILE", "SASL_PASSWORD")


def service_env(env: dict[str, str], service: str) -> dict[str, str]:
    """`env` with the service's own credentials, when given: GPUFAILOVER_<SERVICE>_SASL_USERNAME
    (and _SASL_PASSWORD_FILE / _SASL_PASSWORD) become its GPUFAILOVER_SASL_*, so each service
    runs as its own role (deploy/acls.py) under one `run`."""
    upper = service.upper().replace("-", "_")
    own = {
        f"GPUFAILOVER_{name}": env[f"GPUFAILOVER_{upper}_{name}"]
        for name in _ROLE_SETTINGS
        if env.get(f"GPUFAILOVER_{upper}_{name}")
    }
    if own:
        # Its own password only: never fall back to another role's.
        env = {
            k: v
            for k, v in env.items()
            if k not in ("GPUFAILOVER_SASL_PASSWORD", "GPUFAILOVER_SASL_PASSWORD_FILE")
        }
    return env | own


def available_services() -> tuple[str, ...]:
    from gpufailover.cli import build_parser

    actions = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    known = set(actions[0].choices) if actions else set()
    return tuple(s for s in SERVICES if s in known)


def run(args: argparse.Namespace) -> int:
    services = available_services()
    if args.only:
        wanted = [s.strip() for s in args.only.split(",") if s.strip()]
        unknown = sorted(set(wanted) - set(services))
        if unknown:
            print(
                f"gpufailover run: unknown service(s) {unknown}; have {list(services)}",
                file=sys.stderr,
            )
            return 2
        services = tuple(wanted)
    if "classifier" in services:
        from gpufailover.cli.extras import require_pipeline

        require_pipeline()  # one clear line here, not a child's exit status
    where = declare.resolve(RunTarget, args)
    env = _child_env(where)
    if not args.no_create_topics:
        from deploy.topics import create_topics

        try:
            asyncio.run(
                create_topics(
                    env["GPUFAILOVER_BOOTSTRAP"],
                    where.partitions,
                    where.topic_prefix,
                    security=KafkaSecurity.from_env_and_args(),
                )
            )
        except Exception as exc:  # noqa: BLE001 - report any broker/admin failure plainly
            print(
                f"gpufailover run: cannot create topics on {env['GPUFAILOVER_BOOTSTRAP']}: {exc}",
                file=sys.stderr,
            )
            return 1
    return supervise(services, env, args.log_level)


def _kill(children: list[subprocess.Popen[bytes]]) -> None:
    for child in children:
        if child.poll() is None:
            log.warning("pid %d did not stop in %d s: killing it", child.pid, KILL_AFTER_S)
            child.kill()


def supervise(services: tuple[str, ...], env: dict[str, str], log_level: str) -> int:
    children: dict[str, subprocess.Popen[bytes]] = {}
    stopping = False

    def stop_all(signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True
        log.info("signal %d: stopping %s", signum, ", ".join(children))
        for child in children.values():
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
        # A child that ignores SIGTERM must not keep the pipeline half-alive.
        killer = threading.Timer(KILL_AFTER_S, _kill, args=(list(children.values()),))
        killer.daemon = True
        killer.start()

    signal.signal(signal.SIGTERM, stop_all)
    signal.signal(signal.SIGINT, stop_all)
    for name in services:
        cmd = [sys.executable, "-m", "gpufailover", "--log-level", log_level, name]
        children[name] = subprocess.Popen(cmd, env=service_env(env, name))
        log.info(
            "started %s (pid %d) on %s", name, children[name].pid, env["GPUFAILOVER_BOOTSTRAP"]
        )
    exit_code = 0
    while children:
        pid, status = os.wait()
        ended = next((n for n, c in children.items() if c.pid == pid), None)
        if ended is None:
            continue
        child = children.pop(ended)
        child.returncode = os.waitstatus_to_exitcode(status)
        if not stopping:
            log.error("%s exited with %d: stopping the pipeline", ended, child.returncode)
            exit_code = 1
            stop_all(signal.SIGTERM, None)
        else:
            log.info("%s stopped (%d)", ended, child.returncode)
    return exit_code
