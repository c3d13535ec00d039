"""Broker fixtures: one real Kafka broker per session, a fresh topic set per test.

Set KAFKA_BOOTSTRAP to use an existing broker instead of starting one.
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from deploy.broker import running_broker
from deploy.broker_state import external_bootstrap
from deploy.topics import create_topics
from schemas.event_time import BOUNDS_OFF_ENV
from schemas.topics import TopicNames

_HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.is_relative_to(_HERE):
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="package", autouse=True)
def event_time_bounds_off() -> Iterator[None]:
    """The fixtures are stamped at fixed dates (tests/fixtures, examples/): the clock-relative
    event-time bounds (schemas.event_time) would refuse them in every service these tests start.
    A test of the bounds passes its own values in its services' env. Package scope: undone
    before the unit tests run in the same session (they test the default bounds)."""
    saved = {name: os.environ.get(name) for name in BOUNDS_OFF_ENV}
    os.environ.update(BOUNDS_OFF_ENV)
    yield
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


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
