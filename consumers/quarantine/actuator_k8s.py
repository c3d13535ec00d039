"""The Kubernetes actuator: quarantine = cordon + taint + annotation, release = undo only ours.

What it changes and what it may undo is decided in `k8s_node.py` (pure); this module reads the
Node, sends the merge patch and records a Node Event per action, with lightkube's async client
(typed models, kubeconfig or in-cluster ServiceAccount). Both actions read the node first, so
they are idempotent: a redelivered quarantine of a node already carrying that record's marks
patches nothing. A node the cluster does not know is logged and skipped (nothing to cordon).
An API error raises, and the actuation stage retries with back-off
(`gpufailover_quarantine_actuator_errors_total`). `reconcile` makes the cluster agree with
`nodes.quarantine` when the service starts. Needs: nodes get/list/patch, events create
(deploy/k8s/rbac-quarantine.yaml).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from consumers.quarantine import k8s_node as kn
from consumers.quarantine.actions import QUARANTINE, RELEASE
from consumers.quarantine.table import RELEASED
from consumers.runtime.records import now_ms
from schemas.quarantine import QuarantineRecord

log = logging.getLogger(__name__)

Desired = Callable[[str], QuarantineRecord | None]
FIELD_MANAGER = "gpufailover-quarantine"
NOT_FOUND = 404
ALREADY_EXISTS = 409


def make_client(kubeconfig: Path | None) -> Any:
    """A lightkube AsyncClient (gpufailover/kubeclient.py: the file if given, else
    GPUFAILOVER_KUBECONFIG, KUBECONFIG/~/.kube/config, else the pod's ServiceAccount)."""
    from gpufailover.kubeclient import make_async_client

    return make_async_client(None if kubeconfig is None else str(kubeconfig), FIELD_MANAGER)


class KubernetesActuator:
    name = "kubernetes"

    def __init__(
        self,
        client: Any = None,
        *,
        kubeconfig: Path | None = None,
        taint: kn.TaintSpec | None = None,
        event_namespace: str = "default",
        clock: Callable[[], int] = now_ms,
    ) -> None:
        self._client, self._kubeconfig = client, kubeconfig
        self.taint = taint or kn.TaintSpec()
        self.event_namespace, self._clock = event_namespace, clock

    @property
    def client(self) -> Any:
        if self._client is None:  # created on first use: settings errors surface at the call
            self._client = make_client(self._kubeconfig)
        return self._client

    def command(self, action: str, record: QuarantineRecord) -> str:
        return kn.describe(action, record.node, record, self.taint)

    async def apply(self, action: str, record: QuarantineRecord) -> None:
        if action not in (QUARANTINE, RELEASE):
            raise ValueError(f"unknown action {action!r}")
        node = await self._read(record.node)
        if node is None:
            log.warning(
                "kubernetes: node %s not in the cluster: nothing to %s", record.node, action
            )
        elif action == QUARANTINE:
            await self._quarantine(node, record)
        else:
            await self._release(node, record)

    async def _read(self, name: str) -> kn.NodeView | None:
        from lightkube import ApiError
        from lightkube.resources.core_v1 import Node

        try:
            return kn.NodeView.from_node(await self.client.get(Node, name))
        except ApiError as exc:
            if exc.status.code == NOT_FOUND:
                return None
            raise

    async def _quarantine(self, node: kn.NodeView, record: QuarantineRecord) -> None:
        if kn.already_applied(node, record, self.taint):
            log.info("kubernetes: %s already quarantined by gpufailover for this record", node.name)
        else:
            was = "cordoned" if node.unschedulable else "schedulable"
            await self._patch(
                node.name, kn.quarantine_patch(node, record, self.taint, self._clock())
            )
            log.info("kubernetes: cordoned and tainted %s (was %s): %s %s", node.name, was,
                     record.reason, kn.evidence_summary(record))  # fmt: skip
        await self._event(QUARANTINE, node, record)  # named by the record: at most one

    async def _release(self, node: kn.NodeView, record: QuarantineRecord) -> None:
        if not kn.holds_our_marks(node, self.taint):
            log.info("kubernetes: %s carries no gpufailover taint or annotation: nothing to "
                     "release", node.name)  # fmt: skip
            return
        note = kn.read_ownership(node)
        ours = note is not None and note.get("cordoned_by_us") is True
        await self._patch(node.name, kn.release_patch(node, self.taint))
        if node.unschedulable and not ours:
            log.warning("kubernetes: released %s but left it cordoned: not cordoned by "
                        "gpufailover", node.name)  # fmt: skip
        else:
            log.info("kubernetes: released %s (taint, annotation and cordon removed)", node.name)
        await self._event(RELEASE, node, record)

    async def _patch(self, name: str, patch: dict[str, Any]) -> None:
        from lightkube.resources.core_v1 import Node
        from lightkube.types import PatchType

        await self.client.patch(Node, name, patch, patch_type=PatchType.MERGE)

    async def _event(self, action: str, node: kn.NodeView, record: QuarantineRecord) -> None:
        from lightkube import ApiError
        from lightkube.resources.core_v1 import Event

        body = kn.event_body(
            action, node, record, self.taint, namespace=self.event_namespace, now_ms=self._clock()
        )
        try:
            await self.client.create(Event.from_dict(body))
        except ApiError as exc:
            if exc.status.code != ALREADY_EXISTS:
                raise
            log.debug("kubernetes: event %s exists already", body["metadata"]["name"])

    async def reconcile(self, desired: Desired) -> int:
        """Make the cluster agree with the desired states (`desired(node)`: its latest record on
        nodes.quarantine, or None): a quarantined node without our marks gets them again; a
        node carrying our marks that is no longer quarantined is released. Nodes changed."""
        from lightkube.resources.core_v1 import Node

        changed = 0
        async for obj in self.client.list(Node):
            node = kn.NodeView.from_node(obj)
            record = desired(node.name)
            if record is not None and record.state != RELEASED:  # validating: still drained
                if not kn.already_applied(node, record, self.taint):
                    log.warning("kubernetes reconcile: %s is quarantined but lacks our marks: "
                                "applying them", node.name)  # fmt: skip
                    await self._quarantine(node, record)
                    changed += 1
            elif kn.holds_our_marks(node, self.taint):
                log.warning("kubernetes reconcile: %s was released while we were away: "
                            "releasing it", node.name)  # fmt: skip
                await self._release(node, record or _released(node.name, self._clock()))
                changed += 1
        log.info("kubernetes reconcile: %d node(s) changed", changed)
        return changed


def _released(node: str, ts_ms: int) -> QuarantineRecord:
    """Stands in for a release no record asked for (the node is unknown to nodes.quarantine)."""
    return QuarantineRecord(node, "released", "operator", (), None, ts_ms)
