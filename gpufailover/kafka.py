"""aiokafka clients configured the one way this project uses them.

Producers are idempotent (acks=all); consumers never auto-commit: services commit only after
their output is acknowledged.
"""

from __future__ import annotations

from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer


def make_producer(bootstrap: str, client_id: str, **overrides: Any) -> AIOKafkaProducer:
    options: dict[str, Any] = {
        "bootstrap_servers": bootstrap,
        "client_id": client_id,
        "enable_idempotence": True,  # forces acks=all
        "linger_ms": 5,
    }
    options.update(overrides)
    return AIOKafkaProducer(**options)


def make_consumer(
    bootstrap: str, group_id: str | None, *topics: str, **overrides: Any
) -> AIOKafkaConsumer:
    options: dict[str, Any] = {
        "bootstrap_servers": bootstrap,
        "group_id": group_id,
        "client_id": group_id or "gpufailover-reader",
        "enable_auto_commit": False,
        "auto_offset_reset": "earliest",
        "isolation_level": "read_committed",
    }
    options.update(overrides)
    return AIOKafkaConsumer(*topics, **options)
