"""The fault schedule: which fault hits which service when, a pure function of the seed.

Times are seconds from the start of a round. A kill is SIGKILL followed, `down_s` later, by a
restart of the same service; `add-worker` starts one more classifier worker in the same
consumer group; `remove-worker` stops one (SIGTERM, a clean leave); `broker-restart` stops the
broker (SIGTERM, a controlled shutdown) and starts it again on the same address;
`broker-kill` does the same with SIGKILL, as a crash would. The schedule tracks the worker
count so that it never removes the last worker nor grows past `max_workers`.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass

KILL_CLASSIFIER = "kill-classifier"
KILL_QUARANTINE = "kill-quarantine"
KILL_REQUEUE = "kill-requeue"
KILL_JOB_STATUS = "kill-job-status"
ADD_WORKER = "add-worker"
REMOVE_WORKER = "remove-worker"
BROKER_RESTART = "broker-restart"
BROKER_KILL = "broker-kill"
KINDS: tuple[str, ...] = (
    KILL_CLASSIFIER,
    KILL_QUARANTINE,
    KILL_REQUEUE,
    KILL_JOB_STATUS,
    ADD_WORKER,
    REMOVE_WORKER,
    BROKER_RESTART,
    BROKER_KILL,
)
# Relative odds: classifier faults are what the issue is about, a broker restart is slow.
WEIGHTS: dict[str, float] = {
    KILL_CLASSIFIER: 4,
    KILL_QUARANTINE: 1,
    KILL_REQUEUE: 1,
    KILL_JOB_STATUS: 1,
    ADD_WORKER: 1.5,
    REMOVE_WORKER: 1.5,
    BROKER_RESTART: 0.5,
    BROKER_KILL: 0.5,
}
# The service each kill hits (the `gpufailover` command that runs it).
KILLED_SERVICE: dict[str, str] = {
    KILL_CLASSIFIER: "classifier",
    KILL_QUARANTINE: "quarantine",
    KILL_REQUEUE: "requeue",
    KILL_JOB_STATUS: "job-status",
}


@dataclass(frozen=True, slots=True)
class Fault:
    round: int
    at_s: float  # from the start of the round
    kind: str
    worker: int | None = None  # kill/remove: index among the classifier workers then running
    down_s: float = 0.0  # kill: how long the service stays dead before its restart

    def describe(self) -> str:
        target = f" worker#{self.worker}" if self.worker is not None else ""
        down = f" down {self.down_s:.1f}s" if self.down_s else ""
        return f"r{self.round} +{self.at_s:.1f}s {self.kind}{target}{down}"


def parse_kinds(text: str) -> tuple[str, ...]:
    """`--faults`: comma-separated kinds, or `all`, or `none`."""
    if text.strip() in ("", "none"):
        return ()
    if text.strip() == "all":
        return KINDS
    kinds = tuple(k.strip() for k in text.split(",") if k.strip())
    unknown = sorted(set(kinds) - set(KINDS))
    if unknown:
        raise ValueError(f"unknown fault kind(s) {unknown}; known: {', '.join(KINDS)}")
    return kinds


def parse_per_round(text: str) -> tuple[int, int]:
    """`--faults-per-round`: `N` or `MIN-MAX` (each round draws a count in that range)."""
    low, _, high = text.partition("-")
    try:
        span = (int(low), int(high or low))
    except ValueError:
        raise ValueError(f"faults per round {text!r}: expected N or MIN-MAX") from None
    if not 0 <= span[0] <= span[1]:
        raise ValueError(f"faults per round {text!r}: expected 0 <= MIN <= MAX")
    return span


def schedule(
    seed: int,
    rounds: int,
    kinds: Iterable[str],
    *,
    workers: int,
    max_workers: int,
    round_s: float,
    per_round: tuple[int, int] = (1, 2),
) -> list[Fault]:
    """Faults for every round, in time order. Round 0 is left alone (the pipeline warms up)."""
    allowed = tuple(k for k in KINDS if k in set(kinds))
    rng = random.Random(f"chaos-faults/{seed}")  # noqa: S311 - a schedule's dice
    count = workers
    out: list[Fault] = []
    for rnd in range(1, rounds):
        times = sorted(rng.uniform(0.0, round_s * 0.8) for _ in range(rng.randint(*per_round)))
        for at in times:
            possible = [
                k
                for k in allowed
                if not (k == REMOVE_WORKER and count <= 1)
                and not (k == ADD_WORKER and count >= max_workers)
            ]
            if not possible:
                continue
            kind = rng.choices(possible, weights=[WEIGHTS[k] for k in possible])[0]
            worker: int | None = None
            down = 0.0
            if kind in (KILL_CLASSIFIER, REMOVE_WORKER):
                worker = rng.randrange(count)
            if kind in KILLED_SERVICE:
                down = round(rng.uniform(0.0, round_s), 1)
            count += {ADD_WORKER: 1, REMOVE_WORKER: -1}.get(kind, 0)
            out.append(Fault(rnd, round(at, 1), kind, worker, down))
    return out
