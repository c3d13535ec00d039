"""The operator commands' Kafka side: release a node, validate it, reset the breaker; all
audited.

Every command is appended to `operators.audit` with the principal that sent it and its reason.
A release is a `released` record on `nodes.quarantine` and its audit record, written in one
transaction (there is no release without its audit record). A breaker reset IS its audit
record: the quarantine service obeys resets from `operators.audit` only, which only the
`operator` role may write (deploy/acls.py). A validate command is one too: the service
moves the node to `validating` and asks its agent (docs/node-lifecycle.md).
"""

from __future__ import annotations

import uuid

from consumers.quarantine import alerts
from consumers.quarantine.table import QUARANTINED, RELEASED
from consumers.runtime.oneshot import publish, publish_atomically, read_key
from consumers.runtime.records import now_ms
from deploy.topics import TopicNames
from gpufailover.errors import EXIT_WRONG_STATE
from gpufailover.security import PLAINTEXT, KafkaSecurity, operator_identity
from schemas.audit import BREAKER_RESET, RELEASE, VALIDATE, OperatorCommand
from schemas.codec import dumps, loads
from schemas.errors import SchemaError
from schemas.quarantine import QuarantineRecord


def audit_record(
    kind: str, target: str, reason: str, security: KafkaSecurity, ts_ms: int
) -> OperatorCommand:
    return OperatorCommand(
        kind=kind,
        target=target,
        principal=operator_identity(security),
        authenticated=security.authenticated_user is not None,
        reason=reason,
        ts_ms=ts_ms,
    )


async def current_state(
    bootstrap: str, names: TopicNames, node: str, *, security: KafkaSecurity = PLAINTEXT
) -> QuarantineRecord | None:
    """The node's latest readable record on `nodes.quarantine`."""
    for rec in reversed(await read_key(bootstrap, names.nodes_quarantine, node, security=security)):
        if rec.value is None:
            return None  # a tombstone: the node was forgotten
        try:
            return QuarantineRecord.from_dict(loads(rec.value))
        except SchemaError:
            continue
    return None


async def release_node(
    bootstrap: str,
    names: TopicNames,
    node: str,
    reason: str,
    *,
    security: KafkaSecurity = PLAINTEXT,
    force: bool = False,
) -> tuple[int, str]:
    """Publish a `released` record (reason "operator") and its audit record; (exit code,
    message)."""
    current = await current_state(bootstrap, names, node, security=security)
    if not force and (current is None or current.state != QUARANTINED):
        state = "unknown" if current is None else current.state
        return EXIT_WRONG_STATE, (
            f"gpufailover quarantine: {node} is not quarantined (state: {state}); "
            "nothing published; --force publishes the release anyway"
        )
    ts = now_ms()
    audit = audit_record(RELEASE, node, reason, security, ts)
    # The history goes on with the release: the next quarantine still counts to the lemon rule.
    history = current.history if current is not None else ()
    record = QuarantineRecord(node, RELEASED, "operator", (), None, ts, history=history)
    value = record.to_dict() | {"detail": reason, "operator": audit.principal}
    [(partition, offset), _] = await publish_atomically(
        bootstrap,
        [
            (names.nodes_quarantine, node, dumps(value)),
            (names.operators_audit, node, dumps(audit.to_dict())),
        ],
        transactional_id=f"{names.prefix}gpufailover-operator-{uuid.uuid4().hex}",
        security=security,
    )
    return (
        0,
        f"released {node} as {audit.principal}: {names.nodes_quarantine}[{partition}]@{offset}",
    )


async def validate_node(
    bootstrap: str,
    names: TopicNames,
    node: str,
    reason: str,
    *,
    security: KafkaSecurity = PLAINTEXT,
) -> tuple[int, str]:
    """Ask the quarantine service to validate a quarantined node: an audit record it obeys;
    (exit code, message)."""
    current = await current_state(bootstrap, names, node, security=security)
    if current is None or current.state != QUARANTINED:
        state = "unknown" if current is None else current.state
        return 1, f"gpufailover quarantine validate: {node} is not quarantined ({state})"
    audit = audit_record(VALIDATE, node, reason, security, now_ms())
    topic = names.operators_audit
    partition, offset = await publish(
        bootstrap, topic, node, dumps(audit.to_dict()), security=security
    )
    return (
        0,
        f"validation of {node} requested as {audit.principal}: {topic}[{partition}]@{offset} "
        f"(the running service starts it; see {names.nodes_quarantine})",
    )


async def reset_breaker(
    bootstrap: str, names: TopicNames, reason: str, *, security: KafkaSecurity = PLAINTEXT
) -> str:
    audit = audit_record(BREAKER_RESET, "breaker", reason, security, now_ms())
    topic = names.operators_audit
    partition, offset = await publish(
        bootstrap, topic, alerts.RESET_KEY, dumps(audit.to_dict()), security=security
    )
    return (
        f"breaker reset requested as {audit.principal}: {topic}[{partition}]@{offset} "
        "(the running service obeys)"
    )
