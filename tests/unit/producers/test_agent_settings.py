"""Agent settings (flags over env over defaults), its metrics, and `gpufailover agent` exits."""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from producers.agent_config import add_arguments, settings_from_args
from producers.metrics import AgentMetrics


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(list(argv))


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for name in list(os.environ):
        if name.startswith("GPUFAILOVER_AGENT_"):
            monkeypatch.delenv(name)


def test_defaults() -> None:
    s = settings_from_args(parse())
    assert (s.node, s.source, s.sample_interval_s, s.dedup_window_s) == (
        socket.gethostname(),
        "nvml",
        10.0,
        60.0,
    )
    assert (s.buffer_size, s.metrics_port, s.from_start) == (10_000, 0, False)
    assert s.thresholds.pcie_replays_per_min == 8.0


def test_env_then_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUFAILOVER_AGENT_NODE", "gpu-17")
    monkeypatch.setenv("GPUFAILOVER_AGENT_SOURCE", "journal")
    monkeypatch.setenv("GPUFAILOVER_AGENT_METRICS_PORT", "9402")
    monkeypatch.setenv("GPUFAILOVER_AGENT_PCIE_REPLAYS_PER_MIN", "20")
    monkeypatch.setenv("GPUFAILOVER_AGENT_FROM_START", "true")
    s = settings_from_args(parse())
    assert (s.node, s.source, s.metrics_port, s.from_start) == ("gpu-17", "journal", 9402, True)
    assert s.thresholds.pcie_replays_per_min == 20.0
    s = settings_from_args(
        parse(
            "--node", "gpu-18", "--source", "file:/var/log/kern.log", "--pcie-replays-per-min", "4"
        )
    )
    assert (s.node, s.file_path(), s.thresholds.pcie_replays_per_min) == (
        "gpu-18",
        "/var/log/kern.log",
        4.0,
    )


def test_spool_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("GPUFAILOVER_STATE_DIR", str(tmp_path / "state"))
    s = settings_from_args(parse("--node", "gpu/17 a"))
    assert s.spool_path() == tmp_path / "state" / "agent-spool" / "gpu_17_a.nvml.sqlite"
    assert (s.spool_max_bytes, s.spool_sync, s.kmsg_path) == (64 << 20, "normal", "/dev/kmsg")
    monkeypatch.setenv("GPUFAILOVER_AGENT_SPOOL_DIR", str(tmp_path / "spool"))
    monkeypatch.setenv("GPUFAILOVER_AGENT_SPOOL_SYNC", "full")
    monkeypatch.setenv("GPUFAILOVER_AGENT_SPOOL_MAX_BYTES", str(8 << 20))
    monkeypatch.setenv("GPUFAILOVER_AGENT_KMSG_PATH", "/tmp/kmsg")
    s = settings_from_args(parse("--node", "gpu-17"))
    assert s.spool_path() == tmp_path / "spool" / "gpu-17.nvml.sqlite"
    assert (s.spool_max_bytes, s.spool_sync, s.kmsg_path) == (8 << 20, "full", "/tmp/kmsg")
    kmsg = settings_from_args(parse("--node", "gpu-17", "--source", "kmsg"))
    assert kmsg.spool_path() == tmp_path / "spool" / "gpu-17.kmsg.sqlite"  # next to NVML's
    s = settings_from_args(parse("--spool-dir", "none", "--spool-sync", "normal"))
    assert (s.spool_path(), s.spool_sync) == (None, "normal")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--source", "dcgm"], "--source"),
        (["--source", "file:"], "--source"),
        (["--interval", "0"], "--interval"),
        (["--buffer-size", "0"], "--buffer-size"),
        (["--metrics-port", "70000"], "--metrics-port"),
        (["--dedup-window", "-1"], "--dedup-window"),
        (["--spool-max-bytes", "1000"], "--spool-max-bytes"),
        (["--spool-sync", "sometimes"], "--spool-sync"),
    ],
)
def test_invalid_settings(argv: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        settings_from_args(parse(*argv))


def test_metrics_live_on_the_injected_registry_without_node_labels() -> None:
    registry = CollectorRegistry()
    m = AgentMetrics(registry)
    m.xids.labels(code="79").inc()
    m.published.labels(topic="gpu.xid").inc(2)
    assert registry.get_sample_value("gpufailover_agent_xids_total", {"code": "79"}) == 1
    assert registry.get_sample_value("gpufailover_agent_published_total", {"topic": "gpu.xid"}) == 2
    names = {metric.name for metric in registry.collect()}
    assert {
        "gpufailover_agent_xids",
        "gpufailover_agent_health_conditions",
        "gpufailover_agent_buffer_depth",
        "gpufailover_agent_dropped_events",
        "gpufailover_agent_unparsed_lines",
        "gpufailover_agent_published",
    } <= names
    for metric in registry.collect():
        for sample in metric.samples:
            assert "node" not in sample.labels
    AgentMetrics()  # a second set on its own registry does not clash


def agent(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpufailover", "agent", "--spool-dir", "none", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def nvml_present() -> bool:
    from producers.nvml_source import NvmlError, PynvmlBackend

    try:
        PynvmlBackend().init()
    except NvmlError:
        return False
    return True


@pytest.mark.skipif(nvml_present(), reason="this machine has an NVIDIA driver")
def test_nvml_source_without_a_driver_is_a_clear_error() -> None:
    result = agent("--source", "nvml", "--bootstrap", "127.0.0.1:1")
    assert result.returncode == 1
    assert "NVML is not available on this machine" in result.stderr
    assert "--source kmsg, journal or file:PATH" in result.stderr


def test_bad_agent_arguments_exit_2() -> None:
    result = agent("--source", "dcgm")
    assert result.returncode == 2
    assert "--source 'dcgm'" in result.stderr
