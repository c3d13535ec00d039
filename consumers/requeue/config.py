"""Requeue service settings: flags, then `GPUFAILOVER_REQUEUE_*` env vars, then defaults."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field, replace

from consumers.runtime.config import CommonSettings, add_common_arguments
from gpufailover import settings as declare
from gpufailover.backoff import Backoff
from gpufailover.settings import resolve, setting

SERVICE = "requeue"
_E = "GPUFAILOVER_REQUEUE_"
SCHEDULERS = ("none", "slurm", "kubernetes")


@dataclass(frozen=True)
class SchedulerRetries:
    """Env only: how failed scheduler commands are retried (the service's `Backoff`)."""

    backoff_s: float = setting(
        1.0,
        env=f"{_E}BACKOFF_S",
        help="first retry of a failed scheduler command after this many seconds, doubling",
    )
    backoff_max_s: float = setting(
        60.0, env=f"{_E}BACKOFF_MAX_S", help="longest wait between scheduler command retries"
    )

    def backoff(self) -> Backoff:
        """ValueError when the two do not fit."""
        return Backoff(first_ms=int(1000 * self.backoff_s), max_ms=int(1000 * self.backoff_max_s))


@dataclass(frozen=True)
class RequeueSettings:
    common: CommonSettings = field(default_factory=CommonSettings)
    priority_boost: int = setting(
        100,
        env=f"{_E}PRIORITY_BOOST",
        flag="--priority-boost",
        help="added to a failover job's priority",
    )
    retry_priority_boost: int = setting(
        0,
        env=f"{_E}RETRY_PRIORITY_BOOST",
        flag="--retry-priority-boost",
        help="added to a retried (transient) job's priority",
    )
    spec_wait_s: float = setting(
        5.0,
        env=f"{_E}SPEC_WAIT_S",
        flag="--spec-wait-s",
        help="how long to let jobs.events catch up when a decision names a job not seen yet",
    )
    scheduler: str = setting(
        "none",
        env=f"{_E}SCHEDULER",
        flag="--scheduler",
        choices=SCHEDULERS,
        label="requeue scheduler",
        help="none: publish jobs.requeue only; slurm: also requeue the job on Slurm with "
        "scontrol (same JobId, excluded nodes, priority), docs/slurm.md; kubernetes: recreate "
        "the job's batch/v1 Job with node affinity excluding the nodes, at the failover "
        "PriorityClass, docs/kubernetes.md; jobs not requeued stay ended "
        f"(retries: {_E}BACKOFF_S, {_E}BACKOFF_MAX_S)",
    )
    backoff: Backoff = field(default_factory=Backoff)  # retries of failed scheduler commands
    kubeconfig: str | None = setting(
        None,
        env="GPUFAILOVER_KUBECONFIG",
        flag="--kubeconfig",
        kind=str,
        help="kubeconfig for --scheduler kubernetes",
        shown_default="KUBECONFIG, ~/.kube/config, then the in-cluster ServiceAccount",
    )
    k8s_namespace: str | None = setting(
        None,
        env=f"{_E}K8S_NAMESPACE",
        flag="--k8s-namespace",
        kind=str,
        help="namespace of the training Jobs",
        shown_default="all",
    )
    k8s_failover_priority_class: str | None = setting(
        "gpufailover-failover",
        env=f"{_E}K8S_FAILOVER_PRIORITY_CLASS",
        flag="--k8s-failover-priority-class",
        help="PriorityClass of a Job relocated by a failover; it must exist ('' keeps the "
        "Job's own)",
    )
    k8s_retry_priority_class: str | None = setting(
        None,
        env=f"{_E}K8S_RETRY_PRIORITY_CLASS",
        flag="--k8s-retry-priority-class",
        kind=str,
        help="PriorityClass of a Job restarted by a retry",
        shown_default="the Job's own",
    )

    @staticmethod
    def from_env_and_args(args: argparse.Namespace | None = None) -> RequeueSettings:
        try:
            backoff = resolve(SchedulerRetries, args).backoff()
        except ValueError as exc:
            raise SystemExit(str(exc)) from None
        given = resolve(
            RequeueSettings,
            args,
            common=CommonSettings.from_env_and_args(SERVICE, args),
            backoff=backoff,
        )
        return replace(  # '' (flag or env) means none
            given,
            kubeconfig=given.kubeconfig or None,
            k8s_namespace=given.k8s_namespace or None,
            k8s_failover_priority_class=given.k8s_failover_priority_class or None,
            k8s_retry_priority_class=given.k8s_retry_priority_class or None,
        )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_common_arguments(parser, SERVICE)
    declare.add_arguments(parser, RequeueSettings)
    declare.add_arguments(parser, SchedulerRetries)
