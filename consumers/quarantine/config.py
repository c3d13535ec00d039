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
from consumers.runtime.config import CommonSettings, add_common_arguments
from gpufailover import settings as declare
from gpufailover.backoff import Backoff
from gpufailover.settings import resolve, setting

SERVICE = "quarantine"
_E = "GPUFAILOVER_QUARANTINE_"
DEFAULT_MAX_SHARE: float = BreakerConfig.max_share


@dataclass(frozen=True)
class QuarantineOptions:
    """The quarantine service's own options as declared; `QuarantineSettings` is built from them."""

    policy: str = setting(
        "",
        env="GPUFAILOVER_POLICY",
        flag="--policy",
        help="policy JSON file: its lemon_*, auto_release, validate_on_repair and "
        "max_validations_per_episode keys",
        shown_default="the shipped policy",
    )
    dry_run: bool = setting(
        False,
        env=f"{_E}DRY_RUN",
        flag="--dry-run",
        help="publish what would be done to failover.alerts, write no quarantine record and "
        "call no actuator",
    )
    actuator: str = setting(
        "log",
        env=f"{_E}ACTUATOR",
        flag="--actuator",
        choices=ACTUATORS,
        help="what a quarantine does: log (record the command), slurm (drain/resume with "
        "scontrol; docs/slurm.md) or kubernetes (cordon, taint and annotate the Node; "
        "docs/kubernetes.md)",
    )
    kubeconfig: str = setting(
        "",
        env="GPUFAILOVER_KUBECONFIG",
        flag="--kubeconfig",
        help="kubernetes actuator: kubeconfig file",
        shown_default="KUBECONFIG, ~/.kube/config, else the pod's ServiceAccount",
    )
    taint_key: str = setting(
        DEFAULT_TAINT_KEY,
        env=f"{_E}TAINT_KEY",
        flag="--taint-key",
        help="kubernetes actuator: the quarantine taint's key; its value is the reason",
    )
    taint_effect: str = setting(
        "NoSchedule",
        env=f"{_E}TAINT_EFFECT",
        flag="--taint-effect",
        choices=TAINT_EFFECTS,
        help="kubernetes actuator: NoSchedule keeps running pods, NoExecute evicts them",
    )
    event_namespace: str = setting(
        "default",
        env=f"{_E}EVENT_NAMESPACE",
        flag="--event-namespace",
        help="kubernetes actuator: namespace of the Node Events it records",
    )
    scheduler: str = setting(
        "slurm",
        env="GPUFAILOVER_SCHEDULER",
        flag="--scheduler",
        choices=SCHEDULERS,
        help="whose commands the actuator issues",
    )
    actuator_log: str = setting(
        "",
        env=f"{_E}ACTUATOR_LOG",
        flag="--actuator-log",
        help="file the log actuator appends its commands to",
    )
    actuator_backoff_s: float = setting(
        1.0,
        env=f"{_E}ACTUATOR_BACKOFF_S",
        flag="--actuator-backoff-s",
        help="first retry of a failed actuation after this many seconds, doubling each time",
    )
    actuator_backoff_max_s: float = setting(
        60.0,
        env=f"{_E}ACTUATOR_BACKOFF_MAX_S",
        flag="--actuator-backoff-max-s",
        help="longest wait between actuation retries",
    )
    breaker_window_s: float = setting(
        600.0,
        env=f"{_E}BREAKER_WINDOW_S",
        flag="--breaker-window-s",
        help="breaker window in seconds of arrival (wall-clock) time",
    )
    # None: not given. The share rule then keeps its default without asking for the fleet.
    breaker_max_share: float | None = setting(
        None,
        env=f"{_E}BREAKER_MAX_SHARE",
        flag="--breaker-max-share",
        kind=float,
        help="trip above this share of the known fleet",
        shown_default=f"{DEFAULT_MAX_SHARE:g}",
    )
    breaker_max_nodes: int = setting(
        50,
        env=f"{_E}BREAKER_MAX_NODES",
        flag="--breaker-max-nodes",
        help="trip above this many nodes in the window",
    )
    breaker_min_nodes: int = setting(
        2,
        env=f"{_E}BREAKER_MIN_NODES",
        flag="--breaker-min-nodes",
        help="the share rule never trips at or below this many nodes in the window",
    )
    fleet_size: int = setting(
        0,
        env="GPUFAILOVER_FLEET_SIZE",
        flag="--fleet-size",
        help="fleet size for the breaker's share rule; 0: unknown, the share rule is off",
    )
    fleet_inventory: str = setting(
        "",
        env="GPUFAILOVER_FLEET_INVENTORY",
        flag="--fleet-inventory",
        help="file of the fleet's node names, one per line: the fleet size is its length, and "
        "a quarantine of a node not in it is refused",
    )

    def breaker(self) -> BreakerConfig:
        """ValueError when the breaker's options do not fit together."""
        share = self.breaker_max_share
        breaker = BreakerConfig(
            window_ms=int(1000 * self.breaker_window_s),
            max_share=DEFAULT_MAX_SHARE if share is None else share,
            max_nodes=self.breaker_max_nodes,
            min_nodes=self.breaker_min_nodes,
            fleet_size=self.fleet_size,
            inventory=read_inventory(self.fleet_inventory),
        )
        # A share of 1 never trips: asking for it without a fleet is no mistake.
        if share is not None and 0 < share < 1 and not (breaker.fleet_size or breaker.inventory):
            raise ValueError(
                "the breaker's share rule needs the fleet: give --fleet-size or "
                "--fleet-inventory (GPUFAILOVER_FLEET_SIZE / GPUFAILOVER_FLEET_INVENTORY)"
            )
        return breaker

    def kubernetes(self) -> KubernetesSettings:
        return KubernetesSettings(
            kubeconfig=Path(self.kubeconfig) if self.kubeconfig else None,
            taint=TaintSpec(key=self.taint_key, effect=self.taint_effect),
            event_namespace=self.event_namespace,
        )

    def lifecycle(self) -> LifecyclePolicy:
        from streams.policy import load_policy

        # PolicyError: a ValueError
        return LifecyclePolicy.from_policy(load_policy(self.policy or None))


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
        options = resolve(QuarantineOptions, args)
        try:
            breaker = options.breaker()
            backoff = Backoff(
                first_ms=int(options.actuator_backoff_s * 1000),
                max_ms=int(options.actuator_backoff_max_s * 1000),
            )
            kubernetes = options.kubernetes()
            lifecycle = options.lifecycle()
        except ValueError as exc:
            raise SystemExit(str(exc)) from None
        return QuarantineSettings(
            common=CommonSettings.from_env_and_args(SERVICE, args),
            breaker=breaker,
            dry_run=options.dry_run,
            actuator=options.actuator,
            scheduler=options.scheduler,
            actuator_log=Path(options.actuator_log) if options.actuator_log else None,
            actuator_backoff=backoff,
            kubernetes=kubernetes,
            lifecycle=lifecycle,
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
    declare.add_arguments(parser, QuarantineOptions)
