"""The node agent loses nothing it has seen: killed with SIGKILL while the broker is
unreachable or right after delivering, restarted, every kernel record arrives exactly once and
in order, on the real broker.

The kernel log is a fake /dev/kmsg (a file of `pri,seq,usec,flags;text` records, read through
the same follower as the device); "broker down" is a bootstrap address nothing listens on (the
session broker is shared and not stopped).
"""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

from aiokafka import AIOKafkaConsumer, TopicPartition

from schemas.topics import TopicNames
from schemas.xid import GpuXid
from tests.integration.kafka_io import Service, free_port, wait_for

UUID = "GPU-5e4c1fb2-2fa8-1e57-4a3b-8e4b1b2d2a11"
NODE = "gpu-node-spool"


def kmsg_record(seq: int, text: str) -> str:
    return f"4,{seq},{seq * 1_000_000},-;{text}\n"


def xid_line(seq: int, code: int, bus: int) -> str:
    return kmsg_record(seq, f"NVRM: Xid (PCI:0000:{bus:02x}:00): {code}, pid=1, name=t, seq {seq}")


def agent(
    tmp_path: Path, name: str, kmsg: Path, bootstrap: str, prefix: str, metrics_port: int = 0
) -> Service:
    args = ["agent", "--source", "kmsg", "--kmsg-path", str(kmsg), "--from-start",
            "--node", NODE, "--bootstrap", bootstrap, "--topic-prefix", prefix,
            "--spool-dir", str(tmp_path / "spool"), "--dedup-window", "60",
            "--metrics-port", str(metrics_port),
            # one heartbeat at start only: a later one (30 s by default) spooled while the
            # broker is down would change the buffer depth these tests count XIDs by
            "--heartbeat-interval", "3600"]  # fmt: skip
    return Service(args, tmp_path / f"{name}.log", {"GPUFAILOVER_LOG_LEVEL": "INFO"})


def kill(service: Service) -> None:
    assert service.proc is not None
    service.proc.send_signal(signal.SIGKILL)
    service.proc.wait(30)


async def read_topic(bootstrap: str, topic: str, partitions: int) -> list[GpuXid]:
    """Every record of `topic` up to its end offsets, in offset order per partition."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest")
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        ends = await consumer.end_offsets(tps)
        got: list[GpuXid] = []
        for tp in tps:
            while await consumer.position(tp) < ends[tp]:
                batch = await consumer.getmany(tp, timeout_ms=1000)
                got.extend(GpuXid.from_dict(_json(m.value)) for m in batch.get(tp, []))
        return got
    finally:
        await consumer.stop()


def _json(raw: bytes | None) -> dict[str, object]:
    import orjson

    assert raw is not None
    value: dict[str, object] = orjson.loads(raw)
    return value


def seqs(records: list[GpuXid]) -> list[int]:
    return [int((r.message or "").rsplit(" ", 1)[-1]) for r in records]


async def test_sigkill_while_the_broker_is_down_then_after_delivery_loses_and_repeats_nothing(
    kafka_bootstrap: str, topic_names: TopicNames, topic_partitions: int, tmp_path: Path
) -> None:
    kmsg = tmp_path / "kmsg"
    kmsg.write_text(
        kmsg_record(1, f"NVRM: GPU at PCI:0000:3b:00: {UUID}")
        + xid_line(2, 79, 0x3B)
        + kmsg_record(3, "usb 1-1: new high-speed USB device")
        + xid_line(4, 48, 0x5E)
        + xid_line(5, 13, 0x86)
    )
    down = f"127.0.0.1:{free_port()}"  # nothing listens there

    # 1. No broker: the three XIDs are spooled; SIGKILL (no drain, no clean close).
    first = agent(tmp_path, "first", kmsg, down, topic_names.prefix).start()
    try:
        await first.wait_for_log("3 events waiting in")
    finally:
        kill(first)
    # The node keeps logging while the agent is dead.
    with kmsg.open("a") as f:
        f.write(xid_line(6, 63, 0x3B) + kmsg_record(7, "eth0: link up") + xid_line(8, 94, 0x5E))

    # 2. The broker is back: the spooled three go first, then 6 and 8 (not 1..5 again).
    port = free_port()
    second = agent(tmp_path, "second", kmsg, kafka_bootstrap, topic_names.prefix, port).start()
    try:
        await second.wait_for_log("spool drained")
        # Acknowledged and removed from the spool (the gauge moves after the delete commits):
        # a SIGKILL now cannot resend anything.
        await asyncio.to_thread(
            scrape_until, port, ['published_total{topic="gpu.xid"} 5.0', "buffer_depth 0.0"]
        )
    finally:
        kill(second)

    # 3. Killed again, a new record meanwhile: only it is published.
    with kmsg.open("a") as f:
        f.write(xid_line(9, 119, 0x86))
    third = agent(tmp_path, "third", kmsg, kafka_bootstrap, topic_names.prefix)
    with third:
        await wait_for(kafka_bootstrap, [topic_names.gpu_xid], lambda recs: len(recs) >= 6)
    assert third.proc is not None and third.proc.returncode == 0, third.log_tail()

    got = await read_topic(kafka_bootstrap, topic_names.gpu_xid, topic_partitions)
    assert seqs(got) == [2, 4, 5, 6, 8, 9], [r.message for r in got]  # once each, in order
    assert [r.xid for r in got] == [79, 48, 13, 63, 94, 119]
    assert {r.node for r in got} == {NODE}
    assert got[0].gpu_uuid == UUID and got[3].gpu_uuid == UUID  # the mapping, re-learned
    assert "resuming after kernel record 5" in second.log_tail(200)
    assert "resuming after kernel record 8" in third.log_tail(200)


def scrape_until(port: int, wanted: list[str], timeout_s: float = 60.0) -> None:
    """Poll the agent's /metrics until every `wanted` fragment is in it."""
    import urllib.request

    deadline = time.monotonic() + timeout_s
    text = ""
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
                text = resp.read().decode()
        except OSError:
            text = ""
        if all(w in text for w in wanted):
            return
        time.sleep(0.05)  # polling with a deadline
    raise AssertionError(f"no {wanted} in {timeout_s} s:\n{text}")


async def test_sigkill_while_its_own_broker_is_stopped_then_everything_arrives_once(
    tmp_path: Path,
) -> None:
    """The broker goes away under a connected agent (its sends fail), the agent is killed,
    the broker comes back, the agent restarts: what it read meanwhile arrives, once."""
    from deploy.broker import running_broker
    from deploy.topics import create_topics

    kmsg = tmp_path / "kmsg"
    kmsg.write_text(xid_line(1, 79, 0x3B) + xid_line(2, 48, 0x5E))
    prefix = "spool."
    names = TopicNames(prefix)
    with running_broker() as broker:
        await create_topics(broker.bootstrap, partitions=1, prefix=prefix)
        port = free_port()
        first = agent(tmp_path, "first", kmsg, broker.bootstrap, prefix, port).start()
        try:
            await asyncio.to_thread(
                scrape_until, port, ['published_total{topic="gpu.xid"} 2.0', "buffer_depth 0.0"]
            )
            await asyncio.to_thread(broker.kill)
            with kmsg.open("a") as f:
                f.write(xid_line(3, 13, 0x86) + xid_line(4, 63, 0x3B))
            await asyncio.to_thread(scrape_until, port, ["buffer_depth 2.0"])  # held, unsent
        finally:
            kill(first)
        await asyncio.to_thread(broker.start)
        with kmsg.open("a") as f:
            f.write(xid_line(5, 94, 0x5E))
        second = agent(tmp_path, "second", kmsg, broker.bootstrap, prefix)
        with second:
            await wait_for(broker.bootstrap, [names.gpu_xid], lambda recs: len(recs) >= 5)
        assert second.proc is not None and second.proc.returncode == 0, second.log_tail()
        got = await read_topic(broker.bootstrap, names.gpu_xid, 1)
    assert seqs(got) == [1, 2, 3, 4, 5], [r.message for r in got]
