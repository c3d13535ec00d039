"""Patches for faust-streaming 0.15.3: input records lost when a worker resumes after recovery.

The race (faust issue #596; reproduced by tests/integration/test_classifier_restart.py): at the
end of table recovery faust resumes the input partitions, then awaits the seek to the committed
offsets, then clears every stream buffer (`flow_control.resume()`). Records fetched in that
window are marked read but cleared before an agent takes them, so they are never fetched again;
the next record is acked and the commit moves past them (a 1-record head gap is committed over).

1. `resume inputs after the clear`: during `Recovery.on_recovery_completed` and
   `Recovery._resume_streams`, input partitions are resumed right after the buffers are cleared
   instead of before the seek, so nothing can be fetched into a buffer that is about to be
   cleared (the order before faust PR #241); and the consumer thread gets a snapshot of the
   active partitions, because aiokafka takes an empty set for "all partitions" and faust
   drops what it returns for paused ones (which the reorder alone made happen at every start
   with records waiting); and input partitions with no committed offset, which faust's
   `seek_to_committed` leaves where the fetcher was, are sought to their earliest offset.
2. `hole guard`: every input record the consumer thread returns is remembered until it is
   acked. One that a later record of its partition overtakes unacked was lost (cleared from a
   buffer, dropped by `getmany`, "DROPPED MESSAGE ROFF"): it is logged, counted, and that
   partition's commits are held at it, so a restart processes it again instead of the commit
   silently passing it (faust's `_new_offset` commits over a 1-record head gap).

`apply()` is idempotent; `streams.app` calls it at import. To measure the race,
`GPUFAILOVER_FAUST_PATCHES=guard-only` leaves faust's order as it is (the guard reports the loss)
and `none` applies nothing (faust as released); the default is `all`.
"""

from __future__ import annotations

import functools
import heapq
import logging
import os
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import faust
from faust.tables.recovery import Recovery
from faust.transport.consumer import Consumer, ThreadDelegateConsumer

from gpufailover.offsets import faust_committed

log = logging.getLogger("gpufailover.faust_patches")

FAUST_VERSION = "0.15.3"  # the patches read faust internals of exactly this release
PATCHES_ENV = "GPUFAILOVER_FAUST_PATCHES"
PATCH_SETS = ("all", "guard-only", "none")
# The longest the consumer thread waits for records on one snapshot of the active partitions.
SNAPSHOT_WAIT_S = 0.05

_originals: dict[tuple[type, str], Any] = {}


@dataclass
class _Partition:
    fetched: list[int] = field(default_factory=list)  # heap: fetched, not yet passed
    hole: int | None = None  # lowest offset lost since the last seek
    cap: int | None = None  # first offset with evidence held in memory (`streams.deferred`)


class OffsetWatch:
    """Per input partition: which records the consumer fetched and no agent acked.

    Pure bookkeeping (no faust): the consumer patches feed it. Agents run with concurrency=1,
    so a partition's records are acked in offset order: at a commit, a fetched offset at or
    above the committed one and below the highest acked one that is not acked itself is a
    record no agent processed. (faust's Cython stream iterator acks without calling
    `Consumer.ack`, so the check runs where the commit offset is computed.)
    """

    def __init__(self) -> None:
        self._parts: dict[Any, _Partition] = {}
        self.lost_total = 0

    def fetched(self, tp: Any, offset: int) -> None:
        heapq.heappush(self._parts.setdefault(tp, _Partition()).fetched, offset)

    def overtaken(self, tp: Any, committed: int | None, acked: Iterable[int]) -> list[int]:
        """Offsets fetched, not acked, below an acked one: lost (usually none)."""
        done = set(acked)
        part = self._parts.get(tp)
        if not done or part is None:
            return []
        top, heap, lost = max(done), part.fetched, list[int]()
        while heap and heap[0] <= top:
            offset = heapq.heappop(heap)
            if offset in done or (committed is not None and offset < committed):
                continue
            if not lost or lost[-1] != offset:
                lost.append(offset)
        if lost:
            self.lost_total += len(lost)
            part.hole = lost[0] if part.hole is None else min(part.hole, lost[0])
        return lost

    def hold(self, tp: Any, offset: int) -> None:
        """An agent gave up on the record at `offset` (it crashes): faust acks it all the same
        when the agent's stream closes, so commits of `tp` are held at it until a seek."""
        part = self._parts.setdefault(tp, _Partition())
        part.hole = offset if part.hole is None else min(part.hole, offset)

    def sought(self, tp: Any, position: int | None) -> None:
        """The consumer moved to `position` (the committed offset): records from there on are
        fetched again, so an earlier hole is healed; older fetched offsets are done with."""
        part = self._parts.setdefault(tp, _Partition())
        part.hole = None
        if position is not None:
            part.fetched = [o for o in part.fetched if o >= position]
            heapq.heapify(part.fetched)

    def cap(self, tp: Any, offset: int | None) -> int | None:
        """Commits of `tp` stay at `offset` (None: no cap): the node agent holds evidence of
        the records from there on in memory (`streams.deferred`). The cap it replaces."""
        part = self._parts.setdefault(tp, _Partition())
        previous, part.cap = part.cap, offset
        return previous

    def capped(self, tp: Any) -> bool:
        part = self._parts.get(tp)
        return part is not None and part.cap is not None and part.hole is None

    def commit_limit(self, tp: Any, offset: int | None) -> int | None:
        """The offset to commit instead of `offset`: never past a lost record, nor past
        held evidence."""
        part = self._parts.get(tp)
        if offset is None or part is None:
            return offset
        for limit in (part.hole, part.cap):
            if limit is not None:
                offset = min(offset, limit)
        return offset

    def holes(self) -> dict[Any, int]:
        return {tp: p.hole for tp, p in self._parts.items() if p.hole is not None}


def watch_of(consumer: Any) -> OffsetWatch:
    """The consumer's OffsetWatch (created on first use)."""
    watch: OffsetWatch | None = consumer.__dict__.get("_gpufailover_watch")
    if watch is None:
        watch = consumer.__dict__["_gpufailover_watch"] = OffsetWatch()
    return watch


def _is_input(consumer: Any, tp: Any) -> bool:
    return not consumer._is_changelog_tp(tp) and consumer.app.topics.acks_enabled_for(tp.topic)


def _patch_new_offset(
    original: Callable[[Any, Any], int | None],
) -> Callable[[Any, Any], int | None]:
    """faust's commit offset for `tp`, but never past a fetched record no agent acked."""

    @functools.wraps(original)
    def new_offset(self: Any, tp: Any) -> int | None:
        watch = watch_of(self)
        acked = self._acked.get(tp)
        if acked and _is_input(self, tp):
            lost = watch.overtaken(tp, faust_committed(self, tp), acked)
            if lost:
                log.error(
                    "faust lost %d record(s) of %s[%d] at offsets %s: fetched and overtaken "
                    "unprocessed; commits of this partition are held at %d so "
                    "the worker's next start processes them",
                    len(lost),
                    tp.topic,
                    tp.partition,
                    _first_offsets(lost),
                    lost[0],
                )
        offset = original(self, tp)
        limit = watch.commit_limit(tp, offset)
        if offset is not None and limit is not None and limit < offset and watch.capped(tp):
            # faust has dropped the acks it counted (`acked[:n] = []`) and, once the commit
            # is at the cap, returns None while its acks start above it: keep the ones past
            # the cap, so commits move on when it is lifted.
            kept = range(max(limit, faust_committed(self, tp) or 0), offset)
            self._acked[tp][:0] = kept
            self._acked_index[tp].update(kept)
        return limit

    return new_offset


async def seek_uncommitted_inputs(consumer: Any) -> list[Any]:
    """Seek the input partitions that have no committed offset to their earliest offset.

    faust's `seek_to_committed` moves only partitions with a committed offset above 0. A
    partition with none (a new group, or records processed since the start but not committed
    yet) keeps the position its fetcher reached before the rebalance or recovery, and the
    records fetched up to there and cleared from the buffers are never fetched again (seen
    with 2 and 3 workers starting together: a worker lost hundreds of node reports). This is
    `auto_offset_reset=earliest` made explicit; records processed already are processed again,
    which the engine absorbs (at-least-once).
    """
    tps = [
        tp
        for tp in consumer.assignment()
        if _is_input(consumer, tp) and not faust_committed(consumer, tp)
    ]
    if not tps:
        return []
    earliest = await consumer.earliest_offsets(*tps)
    # `seek_wait` runs on the consumer's own thread (faust's `seek` touches aiokafka from the
    # caller's thread) and sets faust's read offsets as `seek` would.
    await consumer.seek_wait({tp: offset for tp, offset in earliest.items() if offset is not None})
    return tps


def _patch_perform_seek(
    original: Callable[[Any], Awaitable[None]], seek_uncommitted: bool = True
) -> Callable[..., Any]:
    @functools.wraps(original)
    async def perform_seek(self: Any) -> None:
        await original(self)
        if seek_uncommitted:
            sought = await seek_uncommitted_inputs(self)
            if sought:
                log.info(
                    "no committed offset: %d input partition(s) sought to the earliest", len(sought)
                )
        watch = watch_of(self)
        for tp, position in list(self._read_offset.items()):
            if not self._is_changelog_tp(tp):
                watch.sought(tp, position)

    return perform_seek


def _patch_getmany(snapshot: bool) -> Callable[[Any], Callable[..., Awaitable[Any]]]:
    """Record every input record the consumer thread returns (for the guard) and, with
    `snapshot`, hand the thread a copy of the active partitions instead of faust's live set.

    aiokafka reads that set while it waits for records, and an empty set means "every
    partition": once faust pauses the last active partition (the changelogs, when recovery
    ends) a wait already in flight returns records of paused input partitions too, and
    faust's `getmany` drops those silently after aiokafka has moved past them.

    A snapshot is as old as the wait: a partition faust makes active again meanwhile (its
    agent's stream buffer drained, `Consumer.on_buffer_drop`) is left out of it, and faust
    asks to wait up to 1 s. So the wait is cut to SNAPSHOT_WAIT_S and faust asks again with
    a new snapshot: the throughput drain's last node reports waited for the next clock tick,
    up to 1 s, before the job agent read them (BENCHMARKS.md, issue 18, sixth pass).
    """

    def wrap(original: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        @functools.wraps(original)
        async def getmany(self: Any, active_partitions: Any, **kwargs: Any) -> Any:
            if snapshot and active_partitions is not None:
                active_partitions = frozenset(active_partitions)
                timeout = kwargs.get("timeout")
                if timeout is not None and timeout > SNAPSHOT_WAIT_S:  # None: no wait
                    kwargs["timeout"] = SNAPSHOT_WAIT_S
            records = await original(self, active_partitions=active_partitions, **kwargs)
            watch = watch_of(self)
            for tp, batch in records.items():
                if batch and _is_input(self, tp):
                    for record in batch:
                        watch.fetched(tp, record.offset)
            return records

        return getmany

    return wrap


def _resume_inputs_after_clear(
    original: Callable[..., Awaitable[None]],
) -> Callable[..., Awaitable[None]]:
    """Run `original` (a Recovery method) with its `consumer.resume_partitions` deferred until
    just after its `flow_control.resume()`, which clears the stream buffers.

    Reordering by wrapping the two calls keeps faust's own method body in use.
    """

    @functools.wraps(original)
    async def resume(self: Any, generation_id: int = 0) -> None:
        consumer, flow_control = self.app.consumer, self.app.flow_control
        resume_partitions, clear_and_resume = consumer.resume_partitions, flow_control.resume
        deferred: set[Any] = set()

        def defer(tps: Iterable[Any]) -> None:
            deferred.update(tps)

        def clear_then_resume_inputs() -> None:
            clear_and_resume()
            if deferred:
                resume_partitions(set(deferred))
                deferred.clear()

        consumer.resume_partitions, flow_control.resume = defer, clear_then_resume_inputs
        try:
            await original(self, generation_id)
        finally:
            del consumer.resume_partitions, flow_control.resume  # back to the class methods
            if deferred:  # faust failed between the two calls: resume as faust would have
                resume_partitions(deferred)

    return resume


def _first_offsets(offsets: list[int]) -> str:
    return ", ".join(str(o) for o in offsets[:10]) + (" ..." if len(offsets) > 10 else "")


def patches_from_env() -> str:
    value = os.environ.get(PATCHES_ENV, "all").strip().lower()
    if value not in PATCH_SETS:
        raise ValueError(f"{PATCHES_ENV} must be one of {', '.join(PATCH_SETS)}, not {value!r}")
    return value


def _install(owner: type, name: str, wrap: Callable[[Any], Any] | None) -> None:
    """Set `owner.name` to `wrap(faust's original)`, or back to the original with None."""
    original = _originals.setdefault((owner, name), getattr(owner, name))
    setattr(owner, name, original if wrap is None else wrap(original))


def apply(patches: str | None = None) -> None:
    """Install exactly the patch set `all`, `guard-only` or `none` (None: from the env).

    Idempotent, and a later call replaces an earlier one's set.
    """
    if faust.__version__ != FAUST_VERSION:
        raise RuntimeError(
            f"streams.faust_patches is written for faust-streaming {FAUST_VERSION}, found "
            f"{faust.__version__}: re-check the race it patches before changing the pin"
        )
    patches = patches_from_env() if patches is None else patches
    if patches not in PATCH_SETS:
        raise ValueError(f"patch set must be one of {', '.join(PATCH_SETS)}, not {patches!r}")
    if patches != "all":
        log.warning("%s=%s: faust's recovery can lose input records", PATCHES_ENV, patches)
    guard, order = patches != "none", patches == "all"
    perform_seek = functools.partial(_patch_perform_seek, seek_uncommitted=order)
    _install(ThreadDelegateConsumer, "_getmany", _patch_getmany(order) if guard else None)
    _install(Consumer, "_new_offset", _patch_new_offset if guard else None)
    _install(Consumer, "perform_seek", perform_seek if guard else None)
    for name in ("on_recovery_completed", "_resume_streams"):
        _install(Recovery, name, _resume_inputs_after_clear if order else None)
