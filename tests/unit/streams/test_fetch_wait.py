"""The classifier worker's faust consumer fetches with FETCH_MAX_WAIT_MS, not faust's 1.5 s."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from faust.transport.drivers.aiokafka import AIOKafkaConsumerThread

from gpufailover.cli import build_parser
from streams.config import ClassifierSettings
from streams.fetch_wait import FETCH_MAX_WAIT_MS


def test_the_worker_consumer_waits_at_most_fetch_max_wait(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("GPUFAILOVER_STATE_DIR", str(tmp_path))
    from streams.app import build_app  # installs the fetch wait at import

    args = build_parser().parse_args(["classifier", "--bootstrap", "127.0.0.1:1"])
    app = build_app(ClassifierSettings.from_args(args))

    async def worker_consumer_wait() -> int:
        loop = asyncio.get_running_loop()
        thread = AIOKafkaConsumerThread(app.consumer, loop=loop, beacon=app.consumer.beacon)
        consumer = thread._create_worker_consumer(app.transport)
        try:
            return int(consumer._fetch_max_wait_ms)
        finally:
            await consumer.stop()  # never started: releases its client

    assert FETCH_MAX_WAIT_MS < 1500
    assert asyncio.run(worker_consumer_wait()) == FETCH_MAX_WAIT_MS
