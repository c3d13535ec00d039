"""The changelogs' own producer: started once, flushed by faust's commit barrier, stopped
after faust's producer."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from streams import changelog
from streams.changelog import Changelog, ChangelogClient


class FakeFaustProducer:
    """faust's producer as the commit and mode's stop see it: `flush`, `on_stop`."""

    def __init__(self, calls: list[str]) -> None:
        self.calls = calls

    async def flush(self) -> None:
        self.calls.append("faust flush")

    async def on_stop(self) -> None:
        await self.flush()  # as faust's Producer.on_stop does (looked up on the instance)
        self.calls.append("faust stop")


class FakeClient:
    """An aiokafka producer whose sends are delivered only when flushed."""

    def __init__(self, calls: list[str], stop_hangs: bool = False) -> None:
        self.calls = calls
        self.stop_hangs = stop_hangs
        self.pending: list[asyncio.Future[None]] = []
        self.sent: list[tuple[str, bytes | None, bytes, int]] = []

    async def start(self) -> None:
        self.calls.append("client start")
        await asyncio.sleep(0)  # a real start yields: two first senders overlap here

    async def send(self, topic: str, value: bytes | None, key: bytes, partition: int) -> Any:
        self.sent.append((topic, value, key, partition))
        delivered: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.pending.append(delivered)
        return delivered

    async def flush(self) -> None:
        for delivered in self.pending:
            delivered.set_result(None)
        self.calls.append(f"client flush ({len(self.pending)} delivered)")
        self.pending = []

    async def stop(self) -> None:
        if self.stop_hangs:
            await asyncio.Event().wait()
        self.calls.append("client stop")


async def test_faust_commit_flush_also_delivers_the_changelog_records() -> None:
    calls: list[str] = []
    clients: list[FakeClient] = []

    def make() -> FakeClient:
        clients.append(FakeClient(calls))
        return clients[-1]

    faust_producer = FakeFaustProducer(calls)
    own = ChangelogClient(make)
    log = Changelog(lambda: own.started(faust_producer))
    log.queued.append(("t-changelog", b'"n1"', b"{}", 2))
    deliveries = await log.send()
    assert clients[0].sent == [("t-changelog", b"{}", b'"n1"', 2)]
    assert not any(d.done() for d in deliveries)  # type: ignore[attr-defined]
    await faust_producer.flush()  # what faust's Consumer.commit awaits before committing
    assert all(d.done() for d in deliveries)  # type: ignore[attr-defined]
    assert calls == ["client start", "faust flush", "client flush (1 delivered)"]


async def test_started_once_for_concurrent_first_sends() -> None:
    calls: list[str] = []
    own = ChangelogClient(lambda: FakeClient(calls))
    faust_producer = FakeFaustProducer(calls)
    first, second = await asyncio.gather(own.started(faust_producer), own.started(faust_producer))
    assert first is second and calls == ["client start"]
    await faust_producer.flush()
    assert calls == ["client start", "faust flush", "client flush (0 delivered)"]


async def test_faust_stop_flushes_both_then_stops_the_client() -> None:
    calls: list[str] = []
    own = ChangelogClient(lambda: FakeClient(calls))
    faust_producer = FakeFaustProducer(calls)
    await own.started(faust_producer)
    await faust_producer.on_stop()
    assert calls == [
        "client start",
        "faust flush",
        "client flush (0 delivered)",
        "faust stop",
        "client stop",
    ]


async def test_a_hanging_client_stop_is_cut_off(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(changelog, "STOP_TIMEOUT_S", 0.05)
    calls: list[str] = []
    own = ChangelogClient(lambda: FakeClient(calls, stop_hangs=True))
    faust_producer = FakeFaustProducer(calls)
    await own.started(faust_producer)
    await faust_producer.on_stop()
    assert calls[-1] == "faust stop"
    assert "changelog producer: stop took over 0.05 s" in caplog.text


async def test_nothing_queued_starts_nothing() -> None:
    calls: list[str] = []
    own = ChangelogClient(lambda: FakeClient(calls))
    log = Changelog(lambda: own.started(FakeFaustProducer(calls)))
    assert await log.send() == []
    assert calls == []
