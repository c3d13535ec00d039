"""Job status service settings: flags, then `GPUFAILOVER_JOB_STATUS_*` env vars, then defaults."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

from consumers.runtime.config import CommonSettings, add_common_arguments
from gpufailover import settings as declare
from gpufailover.settings import resolve, setting

SERVICE = "job-status"
_E = "GPUFAILOVER_JOB_STATUS_"


@dataclass(frozen=True)
class JobStatusSettings:
    common: CommonSettings = field(default_factory=CommonSettings)
    history_max: int = setting(
        50, env=f"{_E}HISTORY_MAX", flag="--history-max", help="status steps kept per job"
    )
    decision_deadline_s: float = setting(
        300.0,
        env="GPUFAILOVER_DECISION_DEADLINE_S",
        flag="--decision-deadline-s",
        help="alert (failover.alerts kind decision_overdue) when a termination has no decision "
        "this many seconds after it was read",
    )

    @staticmethod
    def from_env_and_args(args: argparse.Namespace | None = None) -> JobStatusSettings:
        settings = resolve(
            JobStatusSettings, args, common=CommonSettings.from_env_and_args(SERVICE, args)
        )
        if settings.history_max < 1:
            raise SystemExit(f"history max must be >= 1, got {settings.history_max}")
        if settings.decision_deadline_s <= 0:
            raise SystemExit(
                f"decision deadline must be > 0 s, got {settings.decision_deadline_s:g}"
            )
        return settings


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_common_arguments(parser, SERVICE)
    declare.add_arguments(parser, JobStatusSettings)
