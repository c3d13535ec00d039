"""aiokafka clients configured the one way this project uses them.

Producers are idempotent (acks=all); consumers never auto-commit: services commit only after
their output is acknowledged. Every factory takes the process's `KafkaSecurity` (PLAINTEXT
when none is given): how it authenticates, and over TLS or not.
"""

from __future__ import annotations

from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from gpufailover.security import PLAINTEXT, KafkaSecurity


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
