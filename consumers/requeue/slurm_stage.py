"""The Slurm stage of the requeue service (`--scheduler slurm`): the scheduler stage
(`stage.py`: offsets committed only once Slurm has done it, retries with back-off) over
`SlurmScheduler`, with its metrics `gpufailover_requeue_slurm_*`."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from consumers.requeue.slurm import SlurmScheduler
from consumers.requeue.stage import END_ACTIONS, SchedulerStage, StageMetrics
from deploy.topics import TopicNames
from gpufailover.backoff import Backoff
from gpufailover.security import PLAINTEXT, KafkaSecurity

__all__ = ["END_ACTIONS", "SlurmStage", "SlurmStageMetrics"]


class SlurmStageMetrics:
    @staticmethod
    def create(registry: CollectorRegistry | None = None) -> StageMetrics:
        return StageMetrics.create("slurm", registry)


class SlurmStage(SchedulerStage):
    def __init__(
        self,
        bootstrap: str,
        group_id: str,
        names: TopicNames,
        scheduler: SlurmScheduler,
        metrics: StageMetrics,
        backoff: Backoff,
        *,
        security: KafkaSecurity = PLAINTEXT,
    ) -> None:
        super().__init__(
            "slurm", bootstrap, group_id, names, scheduler, metrics, backoff, security=security
        )
