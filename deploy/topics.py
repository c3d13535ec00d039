"""Creating the declared topics on a broker (the catalog itself is schemas/topics.py).

All topics get the same partition count: node-keyed and job-keyed topics are co-partitioned
(faust's assignor gives partition N of every topic of an agent to the same worker), and the
tick topic must reach every partition of the agent it drives.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any

from deploy.kafka_admin import admin_client
from gpufailover.security import PLAINTEXT, KafkaSecurity
from schemas.topics import TopicNames, default_prefix

log = logging.getLogger(__name__)

DEFAULT_PARTITIONS = 4
_TOPIC_ALREADY_EXISTS = 36


def default_partitions() -> int:
    raw = os.environ.get("GPUFAILOVER_PARTITIONS", "")
    try:
        value = int(raw) if raw else DEFAULT_PARTITIONS
    except ValueError:
        raise ValueError(f"GPUFAILOVER_PARTITIONS={raw!r}: expected an integer") from None
    if value < 1:
        raise ValueError(f"GPUFAILOVER_PARTITIONS={value}: must be >= 1")
    return value


class TopicMismatchError(RuntimeError):
    """A topic exists with a partition count other than the one asked for."""


async def create_topics(
    bootstrap: str,
    partitions: int | None = None,
    prefix: str | None = None,
    *,
    replication_factor: int = 1,
    timeout_s: float = 30.0,
    security: KafkaSecurity = PLAINTEXT,
) -> list[str]:
    """Create every declared topic that does not exist yet; return the names it created.

    Idempotent: existing topics are left alone, but must have `partitions` partitions
    (else TopicMismatchError: co-partitioning would silently break). Returns once every
    topic has a leader. `partitions`/`prefix` default to GPUFAILOVER_PARTITIONS /
    GPUFAILOVER_TOPIC_PREFIX.
    """
    from aiokafka.admin import NewTopic

    names = TopicNames(default_prefix() if prefix is None else prefix)
    count = default_partitions() if partitions is None else partitions
    if count < 1:
        raise ValueError(f"partitions={count}: must be >= 1")
    async with admin_client(bootstrap, timeout_s=timeout_s, security=security) as admin:
        existing = set(await admin.list_topics()) & set(names.all())
        wanted = [
            NewTopic(real, count, replication_factor, topic_configs=names.spec(real).configs())
            for real in names.all()
            if real not in existing
        ]
        created: list[str] = []
        if wanted:
            response = await admin.create_topics(wanted, timeout_ms=int(timeout_s * 1000))
            created, raced = _check_create_response(response.to_object())
            existing |= raced
        await _check_partitions(admin, sorted(existing), count)
        await _await_leaders(admin, list(names.all()), timeout_s)
    log.info(
        "topics with prefix %r on %s: %d created, %d already existed",
        names.prefix,
        bootstrap,
        len(created),
        len(existing),
    )
    return created


async def create_compacted_topics(
    bootstrap: str,
    topics: list[str],
    partitions: int,
    *,
    replication_factor: int = 1,
    timeout_s: float = 30.0,
    security: KafkaSecurity = PLAINTEXT,
) -> list[str]:
    """Create the compacted topics (a faust app's changelogs) that do not exist yet, with
    `partitions` each, and return once every one has a leader.

    faust creates its changelog topics itself at start, but a table write can come before the
    new topic's metadata has arrived (`PartitionsMismatch ... has 0 partitions`, which crashed
    a worker about once in ten starts on pre-loaded topics): created first, they are there.
    """
    from aiokafka.admin import NewTopic

    async with admin_client(bootstrap, timeout_s=timeout_s, security=security) as admin:
        existing = set(await admin.list_topics()) & set(topics)
        wanted = [
            NewTopic(t, partitions, replication_factor, topic_configs={"cleanup.policy": "compact"})
            for t in topics
            if t not in existing
        ]
        created: list[str] = []
        if wanted:
            response = await admin.create_topics(wanted, timeout_ms=int(timeout_s * 1000))
            created, raced = _check_create_response(response.to_object())
            existing |= raced
        await _check_partitions(admin, sorted(existing), partitions)
        await _await_leaders(admin, list(topics), timeout_s)
    return created


def _check_create_response(obj: dict[str, Any]) -> tuple[list[str], set[str]]:
    from aiokafka.errors import for_code

    created: list[str] = []
    raced: set[str] = set()
    failures = []
    for err in obj["topic_errors"]:
        code = err["error_code"]
        if code == 0:
            created.append(err["topic"])
        elif code == _TOPIC_ALREADY_EXISTS:  # created concurrently since we listed
            raced.add(err["topic"])
        else:
            failures.append(f"{err['topic']}: {for_code(code).__name__} {err.get('error_message')}")
    if failures:
        raise RuntimeError("could not create topics: " + "; ".join(failures))
    return sorted(created), raced


async def _check_partitions(admin: Any, topics: list[str], count: int) -> None:
    if not topics:
        return
    wrong = sorted(
        f"{t['topic']} has {len(t['partitions'])}"
        for t in await admin.describe_topics(topics)
        if t["error_code"] == 0 and len(t["partitions"]) != count
    )
    if wrong:
        raise TopicMismatchError(
            f"existing topics need {count} partitions: {', '.join(wrong)} "
            "(recreate them, or pass the partition count they were created with)"
        )


async def _await_leaders(admin: Any, topics: list[str], timeout_s: float) -> None:
    """Poll metadata until every partition of every topic has a leader."""
    async with asyncio.timeout(timeout_s):
        while True:
            described = await admin.describe_topics(topics)
            pending = [
                t["topic"]
                for t in described
                if t["error_code"] != 0 or any(p["leader"] < 0 for p in t["partitions"])
            ]
            if not pending and len(described) == len(topics):
                return
            await asyncio.sleep(0.1)


async def describe_topics(
    bootstrap: str, prefix: str | None = None, *, security: KafkaSecurity = PLAINTEXT
) -> dict[str, int]:
    """Declared topics present on the broker -> their partition counts."""
    names = TopicNames(default_prefix() if prefix is None else prefix)
    async with admin_client(bootstrap, security=security) as admin:
        present = set(await admin.list_topics()) & set(names.all())
        if not present:
            return {}
        described = await admin.describe_topics(sorted(present))
    return {t["topic"]: len(t["partitions"]) for t in described if t["error_code"] == 0}
