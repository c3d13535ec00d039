"""A bounded read of some topic partitions, by Kafka timestamp, with progress on stderr.

What `gpufailover export` and `gpufailover explain` read: each partition from the first record
stamped at or after `since_ms` (`offsets_for_times`; the beginning when None) to the first at or
after `until_ms` (the end offset taken when the scan starts when None), so a scan ends even while
producers keep writing. The bounds are the records' Kafka timestamps (the producer's clock when
it sent them), not their event times.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import IO, Any

from consumers.runtime.records import InRecord
from gpufailover.kafka import make_consumer, partitions_of
from gpufailover.offsets import behind
from gpufailover.security import PLAINTEXT, KafkaSecurity

_POLL_MS = 200
PROGRESS_EVERY_S = 1.0


class Progress:
    """`label: done/total records (pct)` on stderr at most every PROGRESS_EVERY_S, and once at
    the end if it said anything before: a long scan shows it is moving, a quick one stays
    quiet (so a command that then fails still prints one line)."""

    def __init__(
        self,
        label: str,
        out: IO[str] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.label = label
        self.out = sys.stderr if out is None else out
        self.clock = clock
        self.last = clock()
        self.spoke = False

    def update(self, done: int, total: int, final: bool = False) -> None:
        now = self.clock()
        if (final and not self.spoke) or (not final and now - self.last < PROGRESS_EVERY_S):
            return
        self.last, self.spoke = now, True
        pct = f" ({100 * done // total}%)" if total else ""
        end = ", done" if final else ""
        print(f"{self.label}: {done:,}/{total:,} records{pct}{end}", file=self.out, flush=True)


@dataclass(frozen=True, slots=True)
class Span:
    """The offsets a scan reads of one partition: [start, end)."""

    topic: str
    partition: int
    start: int
    end: int


async def scan(
    bootstrap: str,
    wanted: Mapping[str, Sequence[int] | None],
    *,
    since_ms: int | None = None,
    until_ms: int | None = None,
    security: KafkaSecurity = PLAINTEXT,
    progress: Progress | None = None,
) -> list[InRecord]:
    """Every committed record of the wanted partitions in the range (None: every partition of
    the topic), each partition in offset order. TopicsMissing/NotAuthorized first if a topic is
    unusable."""
    out: list[InRecord] = []
    await scan_into(
        out.extend,
        bootstrap,
        wanted,
        since_ms=since_ms,
        until_ms=until_ms,
        security=security,
        progress=progress,
    )
    return out


async def scan_into(
    sink: Callable[[list[InRecord]], object],
    bootstrap: str,
    wanted: Mapping[str, Sequence[int] | None],
    *,
    since_ms: int | None = None,
    until_ms: int | None = None,
    security: KafkaSecurity = PLAINTEXT,
    progress: Progress | None = None,
) -> int:
    """`scan`, handing each fetched batch to `sink` as it comes (a large range is not held
    twice); the number of records read."""
    from aiokafka import TopicPartition

    found = await partitions_of(bootstrap, list(wanted), security=security)
    tps = [
        TopicPartition(topic, p)
        for topic, parts in wanted.items()
        for p in sorted(set(found[topic] if parts is None else parts) & set(found[topic]))
    ]
    if not tps:
        return 0
    consumer = make_consumer(bootstrap, None, security=security, client_id="gpufailover-cli")
    try:
        await consumer.start()
        consumer.assign(tps)
        spans = await _spans(consumer, tps, since_ms, until_ms)
        total = sum(s.end - s.start for s in spans.values())
        done = 0
        active = [tp for tp in tps if spans[tp].end > spans[tp].start]
        for tp in tps:
            if tp in active:
                consumer.seek(tp, spans[tp].start)
        consumer.pause(*[tp for tp in tps if tp not in active])
        while active:
            batch = await consumer.getmany(*active, timeout_ms=_POLL_MS)
            for tp, records in batch.items():
                end = spans[tp].end
                got = [InRecord.from_consumer(r) for r in records if r.offset < end]
                done += len(got)
                sink(got)
            active = await behind(consumer, {tp: spans[tp].end for tp in active})
            if progress is not None:
                progress.update(done, total)
        if progress is not None:
            progress.update(done, total, final=True)
        return done
    finally:
        await consumer.stop()


async def _spans(
    consumer: Any, tps: list[Any], since_ms: int | None, until_ms: int | None
) -> dict[Any, Span]:
    firsts: dict[Any, int] = await consumer.beginning_offsets(tps)
    ends: dict[Any, int] = await consumer.end_offsets(tps)
    starts = dict(firsts)
    if since_ms is not None:
        found = await consumer.offsets_for_times(dict.fromkeys(tps, since_ms))
        # None: no record stamped at or after `since`: nothing to read there.
        starts = {tp: ends[tp] if found[tp] is None else found[tp].offset for tp in tps}
    if until_ms is not None:
        found = await consumer.offsets_for_times(dict.fromkeys(tps, until_ms))
        ends = {tp: ends[tp] if found[tp] is None else found[tp].offset for tp in tps}
    return {tp: Span(tp.topic, tp.partition, max(starts[tp], firsts[tp]), ends[tp]) for tp in tps}
