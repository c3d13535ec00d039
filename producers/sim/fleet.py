"""The scheduler stand-in's pure parts: jobs, the priority queue, placement.

Queue order is (priority descending, then arrival): a relocated job (the requeue service adds
its boost to the priority) goes before every waiting job, except jobs queued with a higher
priority, and among equals the earlier one goes first, as the mission says. Placement is
first-fit on nodes that are free, not quarantined and not excluded by the command; when the
job at the head cannot be placed, the nodes it needs are held back from the jobs behind it
(EASY-style), so small jobs cannot starve a large relocated one.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

GPUS_PER_NODE = 8


@dataclass(slots=True)
class Job:
    job_id: str
    nodes_needed: int
    priority: int
    work_ms: int  # useful training time needed to finish
    submitted_ms: int
    progress_ms: int = 0  # checkpointed progress: where the next attempt resumes
    attempt: int = 0
    state: str = "queued"  # queued | running | failing | deciding | ended | done
    nodes: tuple[str, ...] = ()
    started_ms: int | None = None  # current attempt
    first_start_ms: int | None = None
    bug: str | None = None  # a software fault that comes back on every attempt
    ended_ms: int | None = None
    end_reason: str | None = None  # succeeded | reject | give_up | fail
    terminated_ms: int | None = None  # the last failure's termination
    resumes_ms: list[int] = field(default_factory=list)  # termination -> next attempt started

    @property
    def gpus(self) -> int:
        return self.nodes_needed * GPUS_PER_NODE

    def spec(self) -> dict[str, object]:
        return {"image": "trainer:sim", "nodes": self.nodes_needed, "gpus": self.gpus}


@dataclass(frozen=True, slots=True)
class Entry:
    job_id: str
    priority: int
    seq: int
    need: int
    exclude: frozenset[str] = frozenset()


@dataclass(slots=True)
class JobQueue:
    _entries: dict[str, Entry] = field(default_factory=dict)
    _seq: itertools.count[int] = field(default_factory=itertools.count)

    def push(self, job_id: str, priority: int, need: int, exclude: Iterable[str] = ()) -> Entry:
        entry = Entry(job_id, priority, next(self._seq), need, frozenset(exclude))
        self._entries[job_id] = entry
        return entry

    def remove(self, job_id: str) -> None:
        self._entries.pop(job_id, None)

    def ordered(self) -> list[Entry]:
        return sorted(self._entries.values(), key=lambda e: (-e.priority, e.seq))

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, job_id: object) -> bool:
        return job_id in self._entries

    def demand(self) -> int:
        """Nodes the waiting jobs need."""
        return sum(e.need for e in self._entries.values())


def place(
    queue: JobQueue, free: Sequence[str], quarantined: Iterable[str]
) -> list[tuple[str, tuple[str, ...]]]:
    """Which queued jobs start now, on which nodes; removes them from the queue.

    `free`: nodes with no job, in preference order. Quarantined and excluded nodes are never
    used.
    """
    banned = set(quarantined)
    pool = [n for n in free if n not in banned]
    held = 0  # nodes held back for a blocked job ahead
    placed: list[tuple[str, tuple[str, ...]]] = []
    for entry in queue.ordered():
        usable = [n for n in pool if n not in entry.exclude]
        if len(usable) - held >= entry.need:
            chosen = tuple(usable[: entry.need])
            placed.append((entry.job_id, chosen))
            taken = set(chosen)
            pool = [n for n in pool if n not in taken]
            queue.remove(entry.job_id)
        else:
            held += entry.need
    return placed
