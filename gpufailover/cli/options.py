"""Options several commands share, each declared once (see `gpufailover.settings`)."""

from __future__ import annotations

from dataclasses import dataclass

from gpufailover.settings import setting


@dataclass(frozen=True)
class PolicyChoice:
    """The policy an offline command decides by, as the classifier would."""

    policy: str = setting(
        "",
        env="GPUFAILOVER_POLICY",
        flag="--policy",
        help="policy JSON file",
        shown_default="the shipped policy",
    )


@dataclass(frozen=True)
class Logging:
    log_level: str = setting(
        "INFO",
        env="GPUFAILOVER_LOG_LEVEL",
        flag="--log-level",
        help="logging level",
        choices=("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"),
        convert=str.upper,
        label="log level",
    )
