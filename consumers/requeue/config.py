"""Requeue service settings: flags, then `GPUFAILOVER_REQUEUE_*` env vars, then defaults."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

from consumers.runtime.config import CommonSettings, add_common_arguments, flag
from gpufailover import settings as env
from gpufailover.backoff import Backoff

SERVICE = "requeue"
_E = "GPUFAILOVER_REQUEUE_"
SCHEDULERS = ("none", "slurm", "kubernetes")


@dataclass(frozen=True)
class RequeueSettings:
    common: CommonSettings
    priority_boost: int = 100  # added to a failover job's priority
    retry_priority_boost: int = 0  # added to a retried (transient) job's priority
    spec_wait_s: float = 5.0  # how long to let jobs.events catch up for an unknown job
    scheduler: str = "none"  # none: jobs.requeue only; slurm/kubernetes: also carry it out
    backoff: Backoff = field(default_factory=Backoff)  # retries of failed scheduler commands
    kubeconfig: str | None = None  # None: GPUFAILOVER_KUBECONFIG, KUBECONFIG, ~/.kube, in-cluster
    k8s_namespace: str | None = None  # None: look for the job's Job in every namespace
    k8s_failover_priority_class: str | None = "gpufailover-failover"
    k8s_retry_priority_class: str | None = None  # None: a retried Job keeps its own

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
            kubeconfig=flag(args, "kubeconfig", env.env_str("GPUFAILOVER_KUBECONFIG", "")) or None,
            k8s_namespace=flag(args, "k8s_namespace", env.env_str(f"{_E}K8S_NAMESPACE", ""))
            or None,
            k8s_failover_priority_class=flag(
                args,
                "k8s_failover_priority_class",
                env.env_str(f"{_E}K8S_FAILOVER_PRIORITY_CLASS", "gpufailover-failover"),
            )
            or None,
            k8s_retry_priority_class=flag(
                args,
                "k8s_retry_priority_class",
                env.env_str(f"{_E}K8S_RETRY_PRIORITY_CLASS", ""),
            )
            or None,
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
        "scontrol (same JobId, excluded nodes, priority), docs/slurm.md; kubernetes: recreate "
        "the job's batch/v1 Job with node affinity excluding the nodes, at the failover "
        "PriorityClass, docs/kubernetes.md; jobs not requeued stay ended "
        f"(env {_E}SCHEDULER, default none; retries: {_E}BACKOFF_S, {_E}BACKOFF_MAX_S)",
    )
    parser.add_argument(
        "--kubeconfig",
        help="kubeconfig for --scheduler kubernetes (env GPUFAILOVER_KUBECONFIG; default "
        "KUBECONFIG, ~/.kube/config, then the in-cluster ServiceAccount)",
    )
    parser.add_argument(
        "--k8s-namespace",
        help=f"namespace of the training Jobs (env {_E}K8S_NAMESPACE, default: all)",
    )
    parser.add_argument(
        "--k8s-failover-priority-class",
        help="PriorityClass of a Job relocated by a failover; it must exist "
        f"(env {_E}K8S_FAILOVER_PRIORITY_CLASS, default gpufailover-failover; '' keeps the "
        "Job's own)",
    )
    parser.add_argument(
        "--k8s-retry-priority-class",
        help="PriorityClass of a Job restarted by a retry "
        f"(env {_E}K8S_RETRY_PRIORITY_CLASS, default: the Job's own)",
    )
    parser.add_argument(
        "--spec-wait-s",
        type=float,
        help="how long to let jobs.events catch up when a decision names a job not seen yet "
        f"(env {_E}SPEC_WAIT_S, default 5)",
    )
