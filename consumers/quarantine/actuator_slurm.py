"""The Slurm actuator: quarantine = drain the node, release = resume it, only if we drained it.

- quarantine: `scontrol update NodeName=N State=DRAIN Reason="gpufailover: <reason> <evidence>"`.
  A running job keeps running; Slurm schedules nothing new there. A node already drained or
  down for another reason (an operator, a health check) is left alone and recorded as such: its
  reason is not ours, so our release will not resume it either.
- release: `State=RESUME` only when the node's drain reason is ours; anything else stays.
Both read the node first, so they are idempotent: draining a node drained by us, or releasing
a node that is not drained, runs no update. A command that fails or times out raises, and the
actuation stage retries it with back-off (`gpufailover_quarantine_actuator_errors_total`).
`reconcile` makes Slurm agree with `nodes.quarantine` when the service starts.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from consumers.quarantine.actions import QUARANTINE, RELEASE
from consumers.quarantine.actuator_scontrol import (
    OURS,
    scontrol,
    show_node,
    show_nodes,
    state_flags,
)
from consumers.quarantine.table import RELEASED
from schemas.quarantine import QuarantineRecord

log = logging.getLogger(__name__)

REASON_MAX = 200
UNAVAILABLE = frozenset({"DRAIN", "DOWN", "FAIL", "MAINT", "REBOOT_ISSUED"})

Desired = Callable[[str], QuarantineRecord | None]


def drain_reason(record: QuarantineRecord) -> str:
    """`gpufailover: hardware xid 79 gpu 3, ... job 42`: ours by its prefix, no `=` in it
    (scontrol's one-line output is `Key=Value` pairs)."""
    seen: list[str] = []
    for e in record.evidence:
        item = f"{e.kind} {e.code}" + ("" if e.gpu_index is None else f" gpu {e.gpu_index}")
        if item not in seen:
            seen.append(item)
    parts = [OURS, record.reason, ", ".join(seen)]
    if record.job_id:
        parts.append(f"job {record.job_id}")
    text = " ".join(p for p in parts if p).replace("=", ":").replace("\n", " ")
    return text[:REASON_MAX]


def is_ours(node: dict[str, str]) -> bool:
    return node.get("Reason", "").startswith(OURS)


def is_unavailable(node: dict[str, str]) -> bool:
    return bool(state_flags(node.get("State", "")) & UNAVAILABLE)


class SlurmActuator:
    name = "slurm"

    def __init__(self) -> None:
        # Nodes found drained/down by someone else when we were to drain them -> their reason.
        self.foreign: dict[str, str] = {}

    def command(self, action: str, record: QuarantineRecord) -> str:
        if action == QUARANTINE:
            return (
                f"scontrol update NodeName={record.node} State=DRAIN "
                f"Reason='{drain_reason(record)}'"
            )
        return f"scontrol update NodeName={record.node} State=RESUME (if drained by gpufailover)"

    async def apply(self, action: str, record: QuarantineRecord) -> None:
        node = await show_node(record.node)
        if action == QUARANTINE:
            await self._drain(record, node)
        elif action == RELEASE:
            await self._resume(record.node, node)
        else:
            raise ValueError(f"unknown action {action!r}")

    async def _drain(self, record: QuarantineRecord, node: dict[str, str]) -> None:
        state = node.get("State", "?")
        if is_unavailable(node) and is_ours(node):
            log.info("slurm: %s already drained by gpufailover (%s)", record.node, state)
            return
        if is_unavailable(node):
            reason = node.get("Reason", "")
            self.foreign[record.node] = reason
            log.warning(
                "slurm: %s is already %s by someone else (reason %r): left alone, "
                "and our release will not resume it",
                record.node,
                state,
                reason,
            )
            return
        self.foreign.pop(record.node, None)
        reason = drain_reason(record)
        await scontrol("update", f"NodeName={record.node}", "State=DRAIN", f"Reason={reason}")
        log.info("slurm: drained %s (was %s): %s", record.node, state, reason)

    async def _resume(self, name: str, node: dict[str, str]) -> None:
        state = node.get("State", "?")
        if not is_unavailable(node):
            log.info("slurm: %s is not drained (%s): nothing to resume", name, state)
            return
        if not is_ours(node):
            log.warning(
                "slurm: %s is %s for a reason not ours (%r): left drained for its owner",
                name,
                state,
                node.get("Reason", ""),
            )
            return
        await scontrol("update", f"NodeName={name}", "State=RESUME")
        log.info("slurm: resumed %s (was %s)", name, state)

    async def reconcile(self, desired: Desired) -> int:
        """Make Slurm agree with the desired states (`desired(node)`: the node's latest record
        on nodes.quarantine, or None): a node we quarantined that Slurm shows available is
        drained again; a node drained by us that is no longer quarantined is resumed. The number
        of nodes changed."""
        changed = 0
        for node in await show_nodes():
            name = node.get("NodeName", "")
            record = desired(name)
            wanted = record is not None and record.state != RELEASED  # validating: drained
            if record is not None and wanted and not is_unavailable(node):
                log.warning("slurm reconcile: %s is quarantined but %s: draining it", name,
                            node.get("State"))  # fmt: skip
                await self._drain(record, node)
                changed += 1
            elif not wanted and is_unavailable(node) and is_ours(node):
                log.warning("slurm reconcile: %s was released while we were away: resuming", name)
                await self._resume(name, node)
                changed += 1
        log.info("slurm reconcile: %d node(s) changed", changed)
        return changed
