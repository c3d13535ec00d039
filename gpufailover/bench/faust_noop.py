"""A faust worker that does nothing with the records: faust's own per-record cost, as a baseline
for the classifier (same faust settings: raw bytes, concurrency 1, commit every 1,000).

    python -m gpufailover.bench.faust_noop --bootstrap B --prefix P --partitions N \
        --total M --mode MODE

MODE: `events` (async for event in stream.events()), `take` (stream.take(1000, within=0.2)),
`decode` (events + orjson.loads of each value). Reads gpu.xid, gpu.health and jobs.events from
the start in its own consumer group; prints one JSON line when it has seen `--total` records:
{"event": "done", "n": ..., "first": wall time of the first record, "last": ...}; then idles
until stopped.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from typing import Any

import faust
import orjson

from schemas.topics import TopicNames


def build(args: argparse.Namespace, datadir: str) -> faust.App:
    names = TopicNames(args.prefix)
    app = faust.App(
        f"{args.prefix}bench-noop-{args.mode}",
        broker=f"kafka://{args.bootstrap}",
        store="memory://",
        datadir=datadir,
        topic_partitions=args.partitions,
        topic_replication_factor=1,
        topic_disable_leader=True,
        consumer_auto_offset_reset="earliest",
        web_enabled=False,
        key_serializer="raw",
        value_serializer="raw",
        broker_commit_every=1000,
    )
    topic = app.topic(
        names.gpu_xid,
        names.gpu_health,
        names.jobs_events,
        key_type=bytes,
        value_type=bytes,
        key_serializer="raw",
        value_serializer="raw",
    )
    # CPU: this process's user + system seconds (all threads: faust's consumer thread too)
    seen = {"n": 0, "first": 0.0, "cpu_first": 0.0}

    def count(k: int) -> None:
        if not seen["n"]:
            seen["first"] = time.time()
            seen["cpu_first"] = time.process_time()
        seen["n"] += k
        if seen["n"] >= args.total and seen["n"] - k < args.total:
            line = {
                "event": "done",
                "n": seen["n"],
                "first": seen["first"],
                "last": time.time(),
                "cpu_s": time.process_time() - seen["cpu_first"],
            }
            sys.stdout.write(orjson.dumps(line).decode() + "\n")
            sys.stdout.flush()

    mode = args.mode

    @app.agent(topic, name="noop", concurrency=1)
    async def noop(stream: Any) -> None:
        if mode == "take":
            async for batch in stream.take(1000, within=0.2):
                count(len(batch))
        elif mode == "decode":
            loads = orjson.loads
            async for event in stream.events():
                loads(event.message.value)
                count(1)
        else:
            async for _event in stream.events():
                count(1)

    return app


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--prefix", required=True)
    p.add_argument("--partitions", type=int, required=True)
    p.add_argument("--total", type=int, required=True)
    p.add_argument("--mode", choices=("events", "take", "decode"), default="events")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="faust-noop-") as datadir:
        app = build(args, datadir)
        worker = faust.Worker(app, loglevel="warning", quiet=True, redirect_stdouts=False)
        worker.execute_from_commandline()
    return 0


if __name__ == "__main__":
    sys.exit(main())
