"""The agent sends its heartbeat on gpu.health from its own loop, whatever its sources do,
and its settings come from flags and GPUFAILOVER_AGENT_* (docs/silent-nodes.md)."""

from __future__ import annotations

import asyncio

import pytest
from test_agent_pipeline import Broker, ListSource, make_publisher
from test_agent_settings import parse

from producers.agent import Agent
from producers.agent_config import settings_from_args
from producers.heartbeat import Heartbeat
from schemas.topics import TopicNames


async def test_the_agent_publishes_its_heartbeat_keyed_by_node_while_its_source_is_quiet() -> None:
    broker = Broker()
    publisher, metrics = make_publisher(broker)
    stuck: list[str | None] = [None]
    beat = Heartbeat("node-a", 0.01, [lambda: stuck[0]])
    agent = Agent(TopicNames("p."), publisher, metrics, dedup_window_s=0.2, heartbeat=beat)
    run = asyncio.create_task(agent.run([ListSource([])]))
    await broker.wait_for(2)
    stuck[0] = "NVML call temperature has not returned for 25.0 s"
    await broker.until(lambda: any(v["condition"] == "nvml_hung" for _, _, v in broker.log))
    agent.stop()
    assert await asyncio.wait_for(run, 10) == 0
    topics = {(t, k) for t, k, _ in broker.log}
    assert topics == {("p.gpu.health", b"node-a")}
    conditions = [v["condition"] for _, _, v in broker.log]
    assert conditions[:2] == ["heartbeat", "heartbeat"]
    hung = next(v for _, _, v in broker.log if v["condition"] == "nvml_hung")
    assert hung["detail"] == stuck[0] and "gpu_index" not in hung
    count = metrics.registry.get_sample_value(
        "gpufailover_agent_health_conditions_total", {"condition": "heartbeat"}
    )
    assert count is not None and count >= 2


async def test_without_a_heartbeat_the_agent_sends_none() -> None:
    broker = Broker()
    publisher, metrics = make_publisher(broker)
    ticks = asyncio.Event()

    class Counted(Agent):
        flushes = 0

        def flush_due(self) -> None:  # called once per tick, before the heartbeat
            super().flush_due()
            self.flushes += 1
            if self.flushes >= 3:
                ticks.set()

    agent = Counted(TopicNames("p."), publisher, metrics, dedup_window_s=0.2)
    run = asyncio.create_task(agent.run([ListSource([])]))
    await asyncio.wait_for(ticks.wait(), 10)  # two whole ticks have run: nothing was sent
    agent.stop()
    assert await asyncio.wait_for(run, 10) == 0
    assert broker.log == []


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GPUFAILOVER_AGENT_HEARTBEAT_INTERVAL_S", raising=False)
    monkeypatch.delenv("GPUFAILOVER_AGENT_NVML_HANG_TIMEOUT_S", raising=False)


def test_heartbeat_and_hang_timeout_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    s = settings_from_args(parse())
    assert (s.heartbeat_interval_s, s.nvml_hang_timeout_s) == (30.0, 20.0)
    monkeypatch.setenv("GPUFAILOVER_AGENT_HEARTBEAT_INTERVAL_S", "5")
    monkeypatch.setenv("GPUFAILOVER_AGENT_NVML_HANG_TIMEOUT_S", "7")
    s = settings_from_args(parse())
    assert (s.heartbeat_interval_s, s.nvml_hang_timeout_s) == (5.0, 7.0)
    s = settings_from_args(parse("--heartbeat-interval", "2", "--nvml-hang-timeout", "3"))
    assert (s.heartbeat_interval_s, s.nvml_hang_timeout_s) == (2.0, 3.0)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--heartbeat-interval", "0"], "--heartbeat-interval must be > 0"),
        (["--nvml-hang-timeout", "-1"], "--nvml-hang-timeout must be > 0"),
    ],
)
def test_bad_heartbeat_settings(argv: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        settings_from_args(parse(*argv))
