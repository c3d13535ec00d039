"""Test helpers for the real broker: produce, wait for records, run a service as a process."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from gpufailover.bench.service import Service
from gpufailover.ports import free_port


@dataclass(frozen=True)
class Rec:
    topic: str
    key: str | None
    value: Any
    partition: int = -1
    offset: int = -1


async def produce(
    bootstrap: str, records: Iterable[tuple[str, str | None, Any]], partition: int | None = None
) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True)
    await producer.start()
    try:
        for topic, key, value in records:
            raw = value if isinstance(value, bytes) else orjson.dumps(value)
            await producer.send(
                topic, raw, key=key.encode() if key is not None else None, partition=partition
            )
        await producer.flush()
    finally:
        await producer.stop()


async def wait_for(
    bootstrap: str,
    topics: Sequence[str],
    done: Callable[[list[Rec]], bool],
    timeout_s: float = 60.0,
    settle_s: float = 0.0,
) -> list[Rec]:
    """Read `topics` from the start until `done(records)` holds; then keep reading `settle_s`
    more seconds (to catch duplicates); fail with what was seen on timeout."""
    consumer = AIOKafkaConsumer(
        *topics, bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False
    )
    await consumer.start()
    seen: list[Rec] = []
    deadline = time.monotonic() + timeout_s
    settle_until: float | None = None
    try:
        while True:
            now = time.monotonic()
            if settle_until is not None and now >= settle_until:
                return seen
            if settle_until is None and done(seen):
                if settle_s <= 0:
                    return seen
                settle_until = now + settle_s
                continue
            if now > deadline:
                raise AssertionError(
                    f"timed out after {timeout_s}s; saw {len(seen)} records: "
                    + "\n".join(repr(r) for r in seen[-20:])
                )
            batch = await consumer.getmany(timeout_ms=200)
            for tp, messages in batch.items():
                for m in messages:
                    value = orjson.loads(m.value) if m.value else None
                    seen.append(
                        Rec(
                            tp.topic,
                            m.key.decode() if m.key else None,
                            value,
                            tp.partition,
                            m.offset,
                        )
                    )
    finally:
        await consumer.stop()


async def cli(
    *args: str, timeout_s: float = 60.0, env: dict[str, str] | None = None
) -> tuple[int, str, str]:
    """Run `gpufailover ARGS...` (with `env` over the environment); (exit code, stdout, stderr)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "gpufailover",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, **(env or {})},
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout_s)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


def classifier(
    bootstrap: str,
    prefix: str,
    partitions: int,
    tmp: Path,
    policy: Path | None = None,
    idle_after_s: float = 0.5,
) -> Service:
    args = [
        "classifier",
        "--bootstrap",
        bootstrap,
        "--topic-prefix",
        prefix,
        "--partitions",
        str(partitions),
        "--web-port",
        str(free_port()),
        "--idle-after",
        str(idle_after_s),
        "--tick-interval",
        "0.2",
    ]
    if policy is not None:
        args += ["--policy", str(policy)]
    return Service(args, tmp / f"classifier-{time.monotonic_ns()}.log", {})


def service(command: str, bootstrap: str, prefix: str, tmp: Path, *extra: str) -> Service:
    """A consumer service (`quarantine`, `requeue`, `job-status`) on this test's topics."""
    args = [command, "--bootstrap", bootstrap, "--topic-prefix", prefix, *extra]
    return Service(args, tmp / f"{command}-{time.monotonic_ns()}.log", {})


def short_grace_policy(tmp: Path, grace_s: int = 3, **overrides: Any) -> Path:
    """The shipped policy with a short grace, so non-hardware decisions close in seconds."""
    shipped = Path(__file__).resolve().parents[2] / "streams" / "data" / "policy.json"
    data = orjson.loads(shipped.read_bytes())
    data["grace_s"] = grace_s
    data.update(overrides)
    path = tmp / "policy.json"
    path.write_bytes(orjson.dumps(data))
    return path
