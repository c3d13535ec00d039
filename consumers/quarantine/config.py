"""Quarantine service settings: flags, then `GPUFAILOVER_QUARANTINE_*` env vars, then defaults."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path

from consumers.quarantine.actuator import ACTUATORS, SCHEDULERS
from consumers.quarantine.breaker import BreakerConfig
from consumers.quarantine.k8s_node import (
    DEFAULT_TAINT_KEY,
    TAINT_EFFECTS,
    KubernetesSettings,
    TaintSpec,
)
from consumers.quarantine.lifecycle import LifecyclePolicy
from consumers.runtime.config import CommonSettings, add_common_arguments, flag
from gpufailover import settings as env
from gpufailover.backoff import Backoff

SERVICE = "quarantine"
_E = "GPUFAILOVER_QUARANTINE_"


@dataclass(frozen=True)
class QuarantineSettings:
    common: CommonSettings
    breaker: BreakerConfig
    dry_run: bool = False
    actuator: str = "log"
    scheduler: str = "slurm"
    actuator_log: Path | None = None
    actuator_backoff: Backoff = field(default_factory=Backoff)
    kubernetes: KubernetesSettings = field(default_factory=KubernetesSettings)
    # Lemon rule, auto-release, repair trigger and validation cap: the policy file's keys.
    lifecycle: LifecyclePolicy = field(default_factory=LifecyclePolicy)

    @staticmethod
    def from_env_and_args(args: argparse.Namespace | None = None) -> QuarantineSettings:
        log_path = flag(args, "actuator_log", env.env_str(f"{_E}ACTUATOR_LOG", ""))
        scheduler = flag(args, "scheduler", env.env_str("GPUFAILOVER_SCHEDULER", "slurm"))
        if scheduler not in SCHEDULERS:
            raise SystemExit(f"scheduler must be one of {SCHEDULERS}, got {scheduler!r}")
        try:
            breaker = BreakerConfig(
                window_ms=int(
                    1000
                    * flag(args, "breaker_window_s", env.env_float(f"{_E}BREAKER_WINDOW_S", 600))
                ),
                max_share=flag(
                    args, "breaker_max_share", env.env_float(f"{_E}BREAKER_MAX_SHARE", 0.2)
                ),
                max_nodes=flag(
                    args, "breaker_max_nodes", env.env_int(f"{_E}BREAKER_MAX_NODES", 50)
                ),
                min_nodes=flag(args, "breaker_min_nodes", env.env_int(f"{_E}BREAKER_MIN_NODES", 2)),
                fleet_size=flag(args, "fleet_size", env.env_int("GPUFAILOVER_FLEET_SIZE", 0)),
                inventory=read_inventory(
                    flag(args, "fleet_inventory", env.env_str("GPUFAILOVER_FLEET_INVENTORY", ""))
                ),
            )
            share = flag(args, "breaker_max_share", env.env_float(f"{_E}BREAKER_MAX_SHARE", 0))
            # A share of 1 never trips: asking for it without a fleet is no mistake.
            if 0 < share < 1 and not (breaker.fleet_size or breaker.inventory):
                raise ValueError(
                    "the breaker's share rule needs the fleet: give --fleet-size or "
                    "--fleet-inventory (GPUFAILOVER_FLEET_SIZE / GPUFAILOVER_FLEET_INVENTORY)"
                )
            first_s = flag(args, "actuator_backoff_s", env.env_float(f"{_E}ACTUATOR_BACKOFF_S", 1))
            max_s = flag(
                args, "actuator_backoff_max_s", env.env_float(f"{_E}ACTUATOR_BACKOFF_MAX_S", 60)
            )
            backoff = Backoff(first_ms=int(first_s * 1000), max_ms=int(max_s * 1000))
            kubernetes = _kubernetes_settings(args)
            lifecycle = _lifecycle_policy(args)
        except ValueError as exc:
            raise SystemExit(str(exc)) from None
        actuator = flag(args, "actuator", env.env_str(f"{_E}ACTUATOR", "log"))
        if actuator not in ACTUATORS:
            raise SystemExit(f"actuator must be one of {ACTUATORS}, got {actuator!r}")
        return QuarantineSettings(
            common=CommonSettings.from_env_and_args(SERVICE, args),
            breaker=breaker,
            dry_run=flag(args, "dry_run", env.env_bool(f"{_E}DRY_RUN", False)),
            actuator=actuator,
            scheduler=scheduler,
            actuator_log=Path(log_path) if log_path else None,
            actuator_backoff=backoff,
            kubernetes=kubernetes,
            lifecycle=lifecycle,
        )


def _lifecycle_policy(args: argparse.Namespace | None) -> LifecyclePolicy:
    from streams.policy import load_policy

    path = flag(args, "policy", env.env_str("GPUFAILOVER_POLICY", ""))
    return LifecyclePolicy.from_policy(load_policy(path or None))  # PolicyError: a ValueError


def _kubernetes_settings(args: argparse.Namespace | None) -> KubernetesSettings:
    kubeconfig = flag(args, "kubeconfig", env.env_str("GPUFAILOVER_KUBECONFIG", ""))
    taint = TaintSpec(
        key=flag(args, "taint_key", env.env_str(f"{_E}TAINT_KEY", DEFAULT_TAINT_KEY)),
        effect=flag(args, "taint_effect", env.env_str(f"{_E}TAINT_EFFECT", "NoSchedule")),
    )
    return KubernetesSettings(
        kubeconfig=Path(kubeconfig) if kubeconfig else None,
        taint=taint,
        event_namespace=flag(
            args, "event_namespace", env.env_str(f"{_E}EVENT_NAMESPACE", "default")
        ),
    )


def read_inventory(path: str) -> frozenset[str] | None:
    """The fleet's node names, one per line (blank lines and `#` comments skipped); None when
    no file is given. ValueError names the file and what is wrong."""
    if not path:
        return None
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"fleet inventory {path}: cannot read: {exc}") from None
    nodes = frozenset(
        line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")
    )
    if not nodes:
        raise ValueError(f"fleet inventory {path}: no node names")
    return nodes


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_common_arguments(parser, SERVICE)
    parser.add_argument(
        "--policy",
        help="policy JSON file: its lemon_*, auto_release, validate_on_repair and "
        "max_validations_per_episode keys (env GPUFAILOVER_POLICY; default: the shipped policy)",
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        default=None,
        help="publish what would be done to failover.alerts, write no quarantine record and call "
        f"no actuator (env {_E}DRY_RUN)",
    )
    parser.add_argument(
        "--actuator",
        choices=ACTUATORS,
        help="what a quarantine does: log (record the command), slurm (drain/resume with "
        "scontrol; docs/slurm.md) or kubernetes (cordon, taint and annotate the Node; "
        f"docs/kubernetes.md) (env {_E}ACTUATOR, default log)",
    )
    parser.add_argument(
        "--kubeconfig",
        help="kubernetes actuator: kubeconfig file (env GPUFAILOVER_KUBECONFIG; default "
        "KUBECONFIG, ~/.kube/config, else the pod's ServiceAccount)",
    )
    parser.add_argument(
        "--taint-key",
        help=f"kubernetes actuator: the quarantine taint's key (env {_E}TAINT_KEY, default "
        f"{DEFAULT_TAINT_KEY}); its value is the reason",
    )
    parser.add_argument(
        "--taint-effect",
        choices=TAINT_EFFECTS,
        help="kubernetes actuator: NoSchedule keeps running pods, NoExecute evicts them "
        f"(env {_E}TAINT_EFFECT, default NoSchedule)",
    )
    parser.add_argument(
        "--event-namespace",
        help="kubernetes actuator: namespace of the Node Events it records "
        f"(env {_E}EVENT_NAMESPACE, default default)",
    )
    parser.add_argument(
        "--scheduler",
        choices=SCHEDULERS,
        help="whose commands the actuator issues (env GPUFAILOVER_SCHEDULER, default slurm)",
    )
    parser.add_argument(
        "--actuator-log",
        help=f"file the log actuator appends its commands to (env {_E}ACTUATOR_LOG)",
    )
    parser.add_argument(
        "--actuator-backoff-s",
        type=float,
        help="first retry of a failed actuation after this many seconds, doubling each time "
        f"(env {_E}ACTUATOR_BACKOFF_S, default 1)",
    )
    parser.add_argument(
        "--actuator-backoff-max-s",
        type=float,
        help=f"longest wait between actuation retries (env {_E}ACTUATOR_BACKOFF_MAX_S, default 60)",
    )
    parser.add_argument(
        "--breaker-window-s",
        type=float,
        help="breaker window in seconds of arrival (wall-clock) time "
        f"(env {_E}BREAKER_WINDOW_S, default 600)",
    )
    parser.add_argument(
        "--breaker-max-share",
        type=float,
        help=f"trip above this share of the known fleet (env {_E}BREAKER_MAX_SHARE, default 0.2)",
    )
    parser.add_argument(
        "--breaker-max-nodes",
        type=int,
        help=f"trip above this many nodes in the window (env {_E}BREAKER_MAX_NODES, default 50)",
    )
    parser.add_argument(
        "--breaker-min-nodes",
        type=int,
        help="the share rule never trips at or below this many nodes in the window "
        f"(env {_E}BREAKER_MIN_NODES, default 2)",
    )
    parser.add_argument(
        "--fleet-size",
        type=int,
        help="fleet size for the breaker's share rule; 0: unknown, the share rule is off "
        "(env GPUFAILOVER_FLEET_SIZE, default 0)",
    )
    parser.add_argument(
        "--fleet-inventory",
        help="file of the fleet's node names, one per line: the fleet size is its length, and a "
        "quarantine of a node not in it is refused (env GPUFAILOVER_FLEET_INVENTORY)",
    )
