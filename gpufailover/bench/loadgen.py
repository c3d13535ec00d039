"""Load generator process for the pipeline benchmarks (run by the harness, not by hand).

Sends health/XID noise at `--rate` records/s (event time = now) until its stdin closes: the
stress mix over 4,096 nodes, or with `--fleet-nodes N` a real fleet's mix (fleet.py). A line
`flood` on stdin sends `--flood-count` identical XIDs plus a wave over `--wave-nodes` nodes as
fast as it can, beside the steady noise. It reports on stdout, one JSON object a line:
`started`, `flood-start`, `flood-end`, and `stopped` with what it sent. Its own process, so the
harness measuring latencies does not share a CPU-bound event loop with it.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from typing import Any

import orjson
from aiokafka import AIOKafkaProducer

from gpufailover.bench.fleet import Fleet, FleetNoise
from gpufailover.bench.harness import BulkProducer
from gpufailover.bench.workload import Noise, flood
from schemas.topics import TopicNames

TICK_S = 0.01


def emit(event: str, **fields: Any) -> None:
    sys.stdout.write(orjson.dumps({"event": event, "t": time.time(), **fields}).decode() + "\n")
    sys.stdout.flush()


async def steady(
    producer: AIOKafkaProducer, noise: Noise | FleetNoise, rate: float, stop: asyncio.Event
) -> int:
    sent = 0
    start = time.monotonic()
    next_t = start
    while not stop.is_set():
        due = int(rate * (time.monotonic() - start)) - sent
        for topic, key, value in noise.records(min(due, int(rate))):
            await producer.send(topic, value, key=key)
            sent += 1
        next_t += TICK_S
        await asyncio.sleep(max(0.0, next_t - time.monotonic()))  # pacing, not a wait
    await producer.flush()
    return sent


async def main_async(args: argparse.Namespace) -> None:
    names = TopicNames(args.prefix)
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    producer = AIOKafkaProducer(bootstrap_servers=args.bootstrap, linger_ms=5, acks=1)
    await producer.start()
    stop = asyncio.Event()
    flood_sent = 0
    try:
        async with BulkProducer(args.bootstrap, args.partitions) as bulk:
            t0 = time.time()
            noise = (
                FleetNoise(names, Fleet(nodes=args.fleet_nodes), args.seed)
                if args.fleet_nodes
                else Noise(names, args.seed)
            )
            task = asyncio.create_task(steady(producer, noise, args.rate, stop))
            emit("started")
            while line := (await reader.readline()).strip():
                if line == b"flood":
                    emit("flood-start")
                    n = await bulk.send_all(flood(names, args.flood_count, args.wave_nodes))
                    flood_sent += n
                    emit("flood-end", count=n)
            stop.set()
            sent = await task
            t1 = time.time()
    finally:
        await producer.stop()
    emit("stopped", sent=sent, flood=flood_sent, seconds=t1 - t0, rate=sent / (t1 - t0))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--prefix", required=True)
    p.add_argument("--partitions", type=int, required=True)
    p.add_argument("--rate", type=float, default=5000.0)
    p.add_argument("--flood-count", type=int, default=500_000)
    p.add_argument("--wave-nodes", type=int, default=100_000)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--fleet-nodes", type=int, default=0, help="a real fleet's mix (fleet.py)")
    args = p.parse_args(argv)
    asyncio.run(main_async(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
