"""Producers on a real broker: the node agent reading a kernel-log file, the job-event CLI, and
the telemetry client, each read back from its topic."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from producers.telemetry import TelemetryClient
from schemas.jobs import JobEvent
from schemas.telemetry import TrainingTelemetry
from schemas.topics import TopicNames
from schemas.xid import GpuXid
from tests.integration.kafka_io import Rec, Service, free_port, wait_for

UUID = "GPU-5e4c1fb2-2fa8-1e57-4a3b-8e4b1b2d2a11"
KERNEL_LOG = f"""\
[    5.217001] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.90.07
[    5.301200] NVRM: GPU at PCI:0000:3b:00: {UUID}
[  966.500231] NVRM: Xid (PCI:0000:3b:00): 79, pid=1122, GPU has fallen off the bus.
[  966.600000] NVRM: Xid (PCI:0000:3b:00): garbled
"""


async def test_agent_publishes_an_xid_79_from_a_kernel_log_file(
    kafka_bootstrap: str, topic_names: TopicNames, tmp_path: Path
) -> None:
    log = tmp_path / "kern.log"
    log.write_text(KERNEL_LOG)
    metrics_port = free_port()
    agent = Service(
        [
            "agent",
            "--source",
            f"file:{log}",
            "--from-start",
            "--node",
            "gpu-node-17",
            "--bootstrap",
            kafka_bootstrap,
            "--topic-prefix",
            topic_names.prefix,
            "--metrics-port",
            str(metrics_port),
        ],
        tmp_path / "agent.log",
        {"GPUFAILOVER_AGENT_SPOOL_DIR": str(tmp_path / "spool")},
    )
    with agent:
        started = time.time_ns() // 1_000_000
        recs = await wait_for(kafka_bootstrap, [topic_names.gpu_xid], lambda r: len(r) >= 1)
        metrics = await asyncio.to_thread(_scrape, metrics_port)
    assert agent.proc is not None and agent.proc.returncode == 0, agent.log_tail()
    (rec,) = recs
    assert rec.key == "gpu-node-17"
    xid = GpuXid.from_dict(rec.value)
    assert (xid.node, xid.xid, xid.source, xid.count) == ("gpu-node-17", 79, "kmsg", 1)
    assert (xid.pci_bus_id, xid.gpu_uuid, xid.gpu_index) == ("0000:3b:00.0", UUID, None)
    assert xid.message == "pid=1122, GPU has fallen off the bus."
    assert abs(xid.ts_ms - started) < 120_000  # read time, not the boot-relative stamp
    assert 'gpufailover_agent_xids_total{code="79"} 1.0' in metrics
    assert "gpufailover_agent_unparsed_lines_total 1.0" in metrics
    assert 'gpufailover_agent_published_total{topic="gpu.xid"} 1.0' in metrics


def _scrape(port: int) -> str:
    import urllib.request

    deadline = time.monotonic() + 30
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
                text: str = resp.read().decode()
        except OSError:
            if time.monotonic() > deadline:
                raise
            continue
        if "gpufailover_agent_published_total{" in text:
            return text


async def test_telemetry_client_records_can_be_consumed_back(
    kafka_bootstrap: str, topic_names: TopicNames
) -> None:
    def train() -> TelemetryClient:
        with TelemetryClient(
            "llm-7b-0042", 1, kafka_bootstrap, node="gpu-node-3", topics=topic_names
        ) as tm:
            for step in range(3):
                tm.heartbeat(step)
            tm.throughput(1843.5)
            tm.checkpoint(2, "s3://ckpt/llm-7b-0042/step-2")
        return tm

    tm = await asyncio.to_thread(train)
    assert (tm.sent, tm.dropped) == (5, 0)
    recs = await wait_for(
        kafka_bootstrap, [topic_names.training_telemetry], lambda r: len(r) >= 5, settle_s=0.5
    )
    assert {r.key for r in recs} == {"llm-7b-0042"}
    assert len({r.partition for r in recs}) == 1  # one key, one partition: in order
    got = [TrainingTelemetry.from_dict(r.value) for r in sorted(recs, key=_offset)]
    assert [(t.kind, t.step, t.samples_per_s, t.uri) for t in got] == [
        ("heartbeat", 0, None, None),
        ("heartbeat", 1, None, None),
        ("heartbeat", 2, None, None),
        ("throughput", None, 1843.5, None),
        ("checkpoint", 2, None, "s3://ckpt/llm-7b-0042/step-2"),
    ]
    assert {(t.job_id, t.attempt, t.node) for t in got} == {("llm-7b-0042", 1, "gpu-node-3")}


def _offset(r: Rec) -> int:
    return r.offset


async def test_publish_cli_sends_a_job_event(kafka_bootstrap: str, topic_names: TopicNames) -> None:
    argv = [
        sys.executable, "-m", "gpufailover", "publish", "terminated",
        "--job-id", "4242", "--attempt", "2", "--nodes", "gpu-[01-02]",
        "--exit-code", "137", "--reason", "OOMKilled",
        "--bootstrap", kafka_bootstrap, "--topic-prefix", topic_names.prefix,
    ]  # fmt: skip
    result = await asyncio.to_thread(
        subprocess.run, argv, capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    (rec,) = await wait_for(kafka_bootstrap, [topic_names.jobs_events], lambda r: len(r) >= 1)
    event = JobEvent.from_dict(rec.value)
    assert rec.key == "4242"
    assert (event.type, event.attempt, event.nodes, event.exit_code, event.reason) == (
        "terminated",
        2,
        ("gpu-01", "gpu-02"),
        137,
        "OOMKilled",
    )


def _doc_python_blocks() -> list[str]:
    import re

    doc = Path(__file__).resolve().parents[2] / "docs" / "producers.md"
    return re.findall(r"```python\n(.*?)```", doc.read_text(), re.S)


async def test_the_documented_python_examples_publish(
    kafka_bootstrap: str, topic_names: TopicNames, tmp_path: Path
) -> None:
    jobs_example, telemetry_example = _doc_python_blocks()
    env = {
        **os.environ,
        "GPUFAILOVER_BOOTSTRAP": kafka_bootstrap,
        "GPUFAILOVER_TOPIC_PREFIX": topic_names.prefix,
    }
    for i, code in enumerate((jobs_example, telemetry_example)):
        script = tmp_path / f"example_{i}.py"
        script.write_text(code)
        result = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, str(script)],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert result.returncode == 0, result.stderr
    (job,) = await wait_for(kafka_bootstrap, [topic_names.jobs_events], lambda r: len(r) >= 1)
    assert JobEvent.from_dict(job.value).reason == "NCCLTimeout"
    telemetry = await wait_for(
        kafka_bootstrap, [topic_names.training_telemetry], lambda r: len(r) >= 1022
    )
    kinds = [TrainingTelemetry.from_dict(r.value).kind for r in telemetry]
    assert (kinds.count("heartbeat"), kinds.count("throughput"), kinds.count("checkpoint")) == (
        1000,
        20,
        2,
    )


async def test_agent_and_publish_cli_feed_the_classifier_to_a_hardware_decision(
    kafka_bootstrap: str,
    topic_names: TopicNames,
    topic_partitions: int,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """XID 79 in a node's kernel log + the job's termination from the scheduler hook ->
    the classifier fails the job over and names that node."""
    from tests.integration.kafka_io import classifier, short_grace_policy

    monkeypatch.chdir(tmp_path)  # the faust worker keeps its data dir in the working directory
    n = topic_names
    log = tmp_path / "kern.log"
    log.write_text(KERNEL_LOG)
    agent = Service(
        ["agent", "--source", f"file:{log}", "--from-start", "--node", "gpu-node-17",
         "--bootstrap", kafka_bootstrap, "--topic-prefix", n.prefix],
        tmp_path / "agent.log",
        {"GPUFAILOVER_AGENT_SPOOL_DIR": str(tmp_path / "spool")},
    )  # fmt: skip
    with agent:
        await wait_for(kafka_bootstrap, [n.gpu_xid], lambda r: len(r) >= 1)
    publish = [
        sys.executable, "-m", "gpufailover", "publish", "terminated", "--job-id", "llm-7b",
        "--attempt", "0", "--nodes", "gpu-node-[16-17]", "--exit-code", "1",
        "--bootstrap", kafka_bootstrap, "--topic-prefix", n.prefix,
    ]  # fmt: skip
    result = await asyncio.to_thread(
        subprocess.run, publish, capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    with classifier(
        kafka_bootstrap, n.prefix, topic_partitions, tmp_path, short_grace_policy(tmp_path)
    ):
        (decision,) = await wait_for(
            kafka_bootstrap, [n.failover_decisions], lambda r: len(r) >= 1, settle_s=1.0
        )
    d = decision.value
    assert (decision.key, d["verdict"], d["action"]) == ("llm-7b", "hardware", "failover")
    assert d["suspect_nodes"] == ["gpu-node-17"]
