"""The operator commands' Kafka side: release a node, reset the breaker."""

from __future__ import annotations

from consumers.quarantine import alerts
from consumers.quarantine.table import QUARANTINED, RELEASED
from consumers.runtime.oneshot import publish, read_key
from consumers.runtime.records import now_ms
from deploy.topics import TopicNames
from schemas.codec import dumps, loads
from schemas.errors import SchemaError
from schemas.quarantine import QuarantineRecord


async def current_state(bootstrap: str, names: TopicNames, node: str) -> QuarantineRecord | None:
    """The node's latest readable record on `nodes.quarantine`."""
    for rec in reversed(await read_key(bootstrap, names.nodes_quarantine, node)):
        if rec.value is None:
            return None  # a tombstone: the node was forgotten
        try:
            return QuarantineRecord.from_dict(loads(rec.value))
        except SchemaError:
            continue
    return None


async def release_node(
    bootstrap: str, names: TopicNames, node: str, reason: str, who: str, *, force: bool = False
) -> tuple[int, str]:
    """Publish a `released` record (reason "operator"); (exit code, message)."""
    current = await current_state(bootstrap, names, node)
    if not force and (current is None or current.state != QUARANTINED):
        state = "unknown" if current is None else current.state
        return 1, f"gpufailover quarantine release: {node} is not quarantined ({state}); --force"
    record = QuarantineRecord(node, RELEASED, "operator", (), None, now_ms())
    value = record.to_dict() | {"detail": reason, "operator": who}
    partition, offset = await publish(bootstrap, names.nodes_quarantine, node, dumps(value))
    return 0, f"released {node}: {names.nodes_quarantine}[{partition}]@{offset}"


async def reset_breaker(bootstrap: str, names: TopicNames, reason: str, who: str) -> str:
    command = alerts.ResetCommand(ts_ms=now_ms(), operator=who, reason=reason)
    topic = names.failover_alerts
    partition, offset = await publish(bootstrap, topic, alerts.RESET_KEY, dumps(command.to_dict()))
    return f"breaker reset requested: {topic}[{partition}]@{offset} (the running service obeys)"
