"""aiokafka clients configured the one way this project uses them.

Producers are idempotent (acks=all); consumers never auto-commit: services commit only after
their output is acknowledged. Every factory takes the process's `KafkaSecurity` (PLAINTEXT
when none is given): how it authenticates, and over TLS or not.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from gpufailover.errors import NotAuthorized, TopicsMissing
from gpufailover.security import PLAINTEXT, KafkaSecurity

_TOPIC_AUTHORIZATION_FAILED = 29  # Kafka's error code in a metadata answer


def make_producer(
    bootstrap: str,
    client_id: str,
    *,
    security: KafkaSecurity = PLAINTEXT,
    **overrides: Any,
) -> AIOKafkaProducer:
    options: dict[str, Any] = {
        "bootstrap_servers": bootstrap,
        "client_id": client_id,
        "enable_idempotence": True,  # forces acks=all
        "linger_ms": 5,
        **security.aiokafka_options(),
    }
    options.update(overrides)
    return AIOKafkaProducer(**options)


def make_consumer(
    bootstrap: str,
    group_id: str | None,
    *topics: str,
    security: KafkaSecurity = PLAINTEXT,
    **overrides: Any,
) -> AIOKafkaConsumer:
    options: dict[str, Any] = {
        "bootstrap_servers": bootstrap,
        "group_id": group_id,
        "client_id": group_id or "gpufailover-reader",
        "enable_auto_commit": False,
        "auto_offset_reset": "earliest",
        "isolation_level": "read_committed",
        **security.aiokafka_options(),
    }
    options.update(overrides)
    return AIOKafkaConsumer(*topics, **options)


def make_admin(
    bootstrap: str, client_id: str, *, security: KafkaSecurity = PLAINTEXT, **overrides: Any
) -> Any:
    """An AIOKafkaAdminClient (not started; aiokafka's admin module has no type hints)."""
    from aiokafka.admin import AIOKafkaAdminClient

    options: dict[str, Any] = {
        "bootstrap_servers": bootstrap,
        "client_id": client_id,
        **security.aiokafka_options(),
    }
    options.update(overrides)
    return AIOKafkaAdminClient(**options)


async def partitions_of(
    bootstrap: str, topics: Sequence[str], *, security: KafkaSecurity = PLAINTEXT
) -> dict[str, list[int]]:
    """Each topic's partition ids. TopicsMissing (a LookupError) names the topics that do not
    exist; NotAuthorized the ones this principal may not describe."""
    admin = make_admin(bootstrap, "gpufailover-metadata", security=security)
    try:  # close what a failed start left open too
        await admin.start()
        described: list[dict[str, Any]] = await admin.describe_topics(list(topics))
    finally:
        await admin.close()
    found = {
        t["topic"]: sorted(p["partition"] for p in t["partitions"])
        for t in described
        if t["error_code"] == 0 and t["partitions"]
    }
    denied = sorted(t["topic"] for t in described if t["error_code"] == _TOPIC_AUTHORIZATION_FAILED)
    if denied:
        raise NotAuthorized(bootstrap, f"topic authorization failed for {', '.join(denied)}")
    missing = sorted(set(topics) - set(found))
    if missing:
        raise TopicsMissing(bootstrap, missing)
    return found
