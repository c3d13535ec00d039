"""Job status service settings: flags, then `GPUFAILOVER_JOB_STATUS_*` env vars, then defaults."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from consumers.runtime.config import CommonSettings, add_common_arguments, flag
from gpufailover import settings as env

SERVICE = "job-status"
_E = "GPUFAILOVER_JOB_STATUS_"


@dataclass(frozen=True)
class JobStatusSettings:
    common: CommonSettings
    history_max: int = 50  # steps kept per job
    decision_deadline_s: float = 300.0  # wall clock from reading a termination to the alert

    @staticmethod
    def from_env_and_args(args: argparse.Namespace | None = None) -> JobStatusSettings:
        history_max = flag(args, "history_max", env.env_int(f"{_E}HISTORY_MAX", 50))
        if history_max < 1:
            raise SystemExit(f"history max must be >= 1, got {history_max}")
        deadline_s = flag(
            args, "decision_deadline_s", env.env_float("GPUFAILOVER_DECISION_DEADLINE_S", 300)
        )
        if deadline_s <= 0:
            raise SystemExit(f"decision deadline must be > 0 s, got {deadline_s}")
        return JobStatusSettings(
            common=CommonSettings.from_env_and_args(SERVICE, args),
            history_max=history_max,
            decision_deadline_s=deadline_s,
        )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_common_arguments(parser, SERVICE)
    parser.add_argument(
        "--history-max",
        type=int,
        help=f"status steps kept per job (env {_E}HISTORY_MAX, default 50)",
    )
    parser.add_argument(
        "--decision-deadline-s",
        type=float,
        help="alert (failover.alerts kind decision_overdue) when a termination has no decision "
        "this many seconds after it was read (env GPUFAILOVER_DECISION_DEADLINE_S, default 300)",
    )
