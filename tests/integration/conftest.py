"""Broker fixtures: one real Kafka broker per session, a fresh topic set per test.

Set KAFKA_BOOTSTRAP to use an existing broker instead of starting one.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from deploy.broker import running_broker
from deploy.broker_state import external_bootstrap
from deploy.topics import TopicNames, create_topics

_HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.is_relative_to(_HERE):
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    external = external_bootstrap()
    if external is not None:
        yield external
        return
    with running_broker() as broker:
        yield broker.bootstrap


@pytest.fixture(scope="session")
def topic_partitions() -> int:
    """Partitions of every topic in a test's topic set (more than one, to exercise keying)."""
    return 2


@pytest.fixture
async def topic_prefix(
    kafka_bootstrap: str, topic_partitions: int, request: pytest.FixtureRequest
) -> str:
    """A prefix unique to this test, with every declared topic created under it."""
    name = re.sub(r"[^A-Za-z0-9-]+", "-", request.node.name)[:40].strip("-")
    prefix = f"t-{name}-{uuid.uuid4().hex[:8]}."
    await create_topics(kafka_bootstrap, partitions=topic_partitions, prefix=prefix)
    return prefix


@pytest.fixture
def topic_names(topic_prefix: str) -> TopicNames:
    return TopicNames(topic_prefix)
