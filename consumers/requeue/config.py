"""Requeue service settings: flags, then `GPUFAILOVER_REQUEUE_*` env vars, then defaults."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

from consumers.quarantine.actuation import Backoff
from consumers.runtime.config import CommonSettings, add_common_arguments, flag
from gpufailover import settings as env

SERVICE = "requeue"
_E = "GPUFAILOVER_REQUEUE_"
SCHEDULERS = ("none", "slurm")


@dataclass(frozen=True)
class RequeueSettings:
    common: CommonSettings
    priority_boost: int = 100  # added to a failover job's priority
    retry_priority_boost: int = 0  # added to a retried (transient) job's priority
    spec_wait_s: float = 5.0  # how long to let jobs.events catch up for an unknown job
    scheduler: str = "none"  # none: jobs.requeue only; slurm: also carry it out with scontrol
    backoff: Backoff = field(default_factory=Backoff)  # retries of failed scheduler commands

    @staticmethod
    def from_env_and_args(args: argparse.Namespace | None = None) -> RequeueSettings:
        scheduler = flag(args, "scheduler", env.env_str(f"{_E}SCHEDULER", "none"))
        if scheduler not in SCHEDULERS:
            raise SystemExit(f"requeue scheduler must be one of {SCHEDULERS}, got {scheduler!r}")
        try:
            backoff = Backoff(
                first_ms=int(1000 * env.env_float(f"{_E}BACKOFF_S", 1.0)),
                max_ms=int(1000 * env.env_float(f"{_E}BACKOFF_MAX_S", 60.0)),
            )
        except ValueError as exc:
            raise SystemExit(str(exc)) from None
        return RequeueSettings(
            scheduler=scheduler,
            backoff=backoff,
            common=CommonSettings.from_env_and_args(SERVICE, args),
            priority_boost=flag(args, "priority_boost", env.env_int(f"{_E}PRIORITY_BOOST", 100)),
            retry_priority_boost=flag(
                args, "retry_priority_boost", env.env_int(f"{_E}RETRY_PRIORITY_BOOST", 0)
            ),
            spec_wait_s=flag(args, "spec_wait_s", env.env_float(f"{_E}SPEC_WAIT_S", 5.0)),
        )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_common_arguments(parser, SERVICE)
    parser.add_argument(
        "--priority-boost",
        type=int,
        help=f"added to a failover job's priority (env {_E}PRIORITY_BOOST, default 100)",
    )
    parser.add_argument(
        "--retry-priority-boost",
        type=int,
        help=f"added to a retried job's priority (env {_E}RETRY_PRIORITY_BOOST, default 0)",
    )
    parser.add_argument(
        "--scheduler",
        choices=SCHEDULERS,
        help="none: publish jobs.requeue only; slurm: also requeue the job on Slurm with "
        "scontrol (same JobId, excluded nodes, priority); jobs not requeued stay ended; "
        f"docs/slurm.md (env {_E}SCHEDULER, default none; retries: {_E}BACKOFF_S, "
        f"{_E}BACKOFF_MAX_S)",
    )
    parser.add_argument(
        "--spec-wait-s",
        type=float,
        help="how long to let jobs.events catch up when a decision names a job not seen yet "
        f"(env {_E}SPEC_WAIT_S, default 5)",
    )
