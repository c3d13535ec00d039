"""Actuators: what quarantining and releasing a node does to the scheduler.

- `log` runs nothing, and records the command it would run (Slurm `scontrol` or Kubernetes
  `kubectl`) in a list and, when given a path, a log file;
- `slurm` (`actuator_slurm.py`) drains and resumes nodes with `scontrol`, and reconciles Slurm
  with `nodes.quarantine` when the service starts;
- `kubernetes` (`actuator_k8s.py`) cordons, taints and annotates Nodes through the API server,
  releases only what it added, and reconciles the cluster when the service starts.
Actuators must be idempotent: draining a drained node is a no-op.
"""

from __future__ import annotations

import asyncio
import logging
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from consumers.quarantine.actions import QUARANTINE
from consumers.runtime.records import now_ms
from schemas.quarantine import QuarantineRecord

if TYPE_CHECKING:
    from consumers.quarantine.k8s_node import KubernetesSettings

log = logging.getLogger(__name__)

SCHEDULERS = ("slurm", "kubernetes")


class Actuator(Protocol):
    name: str

    def command(self, action: str, record: QuarantineRecord) -> str:
        """The command line this actuator runs for `action` (quarantine or release)."""

    async def apply(self, action: str, record: QuarantineRecord) -> None:
        """Carry out `action` on `record.node`; raise on failure."""


@runtime_checkable
class Reconciler(Protocol):
    async def reconcile(self, desired: Callable[[str], QuarantineRecord | None]) -> int:
        """Make the scheduler agree with the desired state of every node it knows; how many
        nodes it changed. Raises on failure (retried by the service)."""


ACTUATORS = ("log", "slurm", "kubernetes")


def scheduler_command(scheduler: str, action: str, record: QuarantineRecord) -> str:
    node = shlex.quote(record.node)
    if scheduler == "kubernetes":
        return f"kubectl {'cordon' if action == QUARANTINE else 'uncordon'} {node}"
    if action == QUARANTINE:
        why = f"gpufailover: {record.reason}" + (f" job {record.job_id}" if record.job_id else "")
        return f"scontrol update nodename={node} state=drain reason={shlex.quote(why)}"
    return f"scontrol update nodename={node} state=resume"


class LogActuator:
    """Records the commands it would run; runs nothing."""

    name = "log"

    def __init__(self, scheduler: str = "slurm", path: Path | None = None) -> None:
        if scheduler not in SCHEDULERS:
            raise ValueError(f"scheduler must be one of {SCHEDULERS}, got {scheduler!r}")
        self.scheduler = scheduler
        self.path = path
        self.commands: list[str] = []

    def command(self, action: str, record: QuarantineRecord) -> str:
        return scheduler_command(self.scheduler, action, record)

    async def apply(self, action: str, record: QuarantineRecord) -> None:
        cmd = self.command(action, record)
        self.commands.append(cmd)
        log.info("actuator log: %s", cmd)
        if self.path is not None:
            await asyncio.to_thread(_append, self.path, f"{now_ms()} {action} {cmd}\n")


def _append(path: Path, line: str) -> None:
    with path.open("a", encoding="utf-8") as fh:
        fh.write(line)


def make_actuator(
    kind: str, scheduler: str, path: Path | None, *, kubernetes: KubernetesSettings | None = None
) -> Actuator:
    if kind == "slurm":
        from consumers.quarantine.actuator_slurm import SlurmActuator

        return SlurmActuator()
    if kind == "kubernetes":
        from consumers.quarantine.actuator_k8s import KubernetesActuator
        from consumers.quarantine.k8s_node import KubernetesSettings

        k = kubernetes or KubernetesSettings()
        return KubernetesActuator(
            kubeconfig=k.kubeconfig, taint=k.taint, event_namespace=k.event_namespace
        )
    if kind != "log":
        raise ValueError(f"unknown actuator {kind!r} (this build has: {', '.join(ACTUATORS)})")
    return LogActuator(scheduler, path)
