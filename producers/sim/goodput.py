"""Goodput of one large synchronous training job: the arithmetic, and the three baselines.

The job runs on every node of its allocation at once (Llama 3's setting: any node's failure
stops all ranks). Its effective training time (goodput) is the training progress it keeps
divided by the wall time of the run. Each attempt spends `restart_ms` starting up (scheduling,
image, checkpoint load), then trains and checkpoints every `checkpoint_ms` of training. An
interruption stops progress at its onset and loses what was trained since the last checkpoint;
nothing is gained until the next attempt has started up again.

A strategy turns the interruptions into stops: (onset, resume), the resume being when the next
attempt starts. Three strategies are pure functions of the truth here; gpufailover's stops
come from the real decision engine (`producers.sim.goodput_run`).

- no failover: a person restarts the job `person_ms` after it died (and swaps a broken node);
- naive restart in place: the scheduler restarts it on the same nodes after
  `naive_restart_ms`. Enough for transient and unknown failures; on broken hardware the job
  crash-loops until a person swaps the node, on a software bug until a person fixes the code
  (`person_ms` after it died, in both cases);
- a "decide within 5 minutes" service (the mission's source): a perfect classifier that holds
  the job in `Pending-failoverinprogress` for `service_latency_ms`, then fails hardware over and
  retries transient failures, up to `max_failovers` times before it stops the job for a person;
  software and unknown failures stop the job for a person.

A software failure costs `person_ms` in every strategy: someone must fix the code.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

MINUTE_MS = 60_000
HOUR_MS = 60 * MINUTE_MS
BASELINES = ("no_failover", "naive_restart", "five_minute_service")
# Llama 3 (failure-data.md): 419 unexpected interruptions in 54 days on 16,384 GPUs.
LLAMA3_RATE = 419 / (54 * 24 * 2048)  # job interruptions per node-hour


@dataclass(frozen=True, slots=True)
class Params:
    checkpoint_ms: int = 30 * MINUTE_MS  # training time between checkpoints
    restart_ms: int = 10 * MINUTE_MS  # start-up of an attempt: scheduling, image, checkpoint load
    decision_latency_ms: int = 1_000  # gpufailover: its decision -> the requeue acts on it
    person_ms: int = 60 * MINUTE_MS  # a person notices, diagnoses and restarts
    naive_restart_ms: int = MINUTE_MS  # the scheduler's own retry delay (restart in place)
    service_latency_ms: int = 5 * MINUTE_MS  # the mission's source: node check of up to 5 min
    max_failovers: int = 3  # the mission's retry cap, per job (a person's restart is a new job)

    def __post_init__(self) -> None:
        if self.checkpoint_ms <= 0:
            raise ValueError("the checkpoint interval must be positive")
        for name in ("restart_ms", "decision_latency_ms", "person_ms", "naive_restart_ms"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must not be negative")
        if self.service_latency_ms < 0 or self.max_failovers < 0:
            raise ValueError("service latency and max failovers must not be negative")


@dataclass(frozen=True, slots=True)
class Interruption:
    """A failure of the job as the simulator drew it: progress stops at `onset_ms`, the job is
    declared dead at `term_ms` (detection, NCCL watchdog, hang timeout)."""

    onset_ms: int
    term_ms: int
    true_class: str  # hardware | software | transient | unknown


@dataclass(frozen=True, slots=True)
class Stop:
    onset_ms: int
    resume_ms: int  # the next attempt starts (its start-up follows)


@dataclass(frozen=True, slots=True)
class LiveStop:
    """An interruption in gpufailover's live run (`goodput_run`) and how it ended."""

    onset_ms: int
    resume_ms: int
    truth: str
    automatic: bool  # resumed by the engine's failover/retry, not by a person


@dataclass(frozen=True, slots=True)
class Goodput:
    useful_ms: int
    wall_ms: int
    stops: int  # interruptions that hit the job

    @property
    def ratio(self) -> float:
        return self.useful_ms / self.wall_ms if self.wall_ms else 0.0


def kept(start_ms: int, stop_ms: int, p: Params, *, failed: bool) -> int:
    """Training kept by an attempt started at `start_ms` and stopped at `stop_ms`: all of it at
    the end of the run, only up to its last checkpoint when it failed."""
    trained = max(0, stop_ms - start_ms - p.restart_ms)
    return trained // p.checkpoint_ms * p.checkpoint_ms if failed else trained


def goodput(start_ms: int, horizon_ms: int, stops: Iterable[Stop], p: Params) -> Goodput:
    """The job's goodput over [start_ms, horizon_ms) given its stops. A stop whose onset falls
    while the job is down (between a stop and its resume) does not hit it."""
    t, useful, hits = start_ms, 0, 0
    for s in sorted(stops, key=lambda s: s.onset_ms):
        if s.onset_ms < t or s.onset_ms >= horizon_ms:
            continue
        useful += kept(t, s.onset_ms, p, failed=True)
        hits += 1
        t = max(s.resume_ms, s.onset_ms)
    if t < horizon_ms:
        useful += kept(t, horizon_ms, p, failed=False)
    return Goodput(useful, horizon_ms - start_ms, hits)


def baseline_stops(
    strategy: str, interruptions: Sequence[Interruption], p: Params, start_ms: int
) -> list[Stop]:
    """The stops of a baseline strategy: interruptions that find the job down are skipped,
    and the retry cap counts failovers since the last person's restart."""
    if strategy not in BASELINES:
        raise ValueError(f"unknown strategy {strategy!r}; expected one of {BASELINES}")
    stops: list[Stop] = []
    up_at, failovers = start_ms, 0
    for i in sorted(interruptions, key=lambda i: i.onset_ms):
        if i.onset_ms < up_at:
            continue
        person = i.term_ms + p.person_ms
        if strategy == "no_failover":
            resume = person
        elif strategy == "naive_restart":
            quick = i.true_class in ("transient", "unknown")
            resume = i.term_ms + p.naive_restart_ms if quick else person
        elif i.true_class in ("hardware", "transient") and failovers < p.max_failovers:
            resume, failovers = i.term_ms + p.service_latency_ms, failovers + 1
        else:  # refused or out of retries: Pending-internalerror / -maxretriesexceeded
            resume, failovers = max(person, i.term_ms + p.service_latency_ms), 0
        stops.append(Stop(i.onset_ms, resume))
        up_at = resume
    return stops


BUG_RECURS_MS = 12 * MINUTE_MS + 30_000  # a wrong failover: the bug is back 5-20 min later


def retimed(stops: Sequence[LiveStop], shift_ms: int) -> list[Stop]:
    """The live run's stops with every automatic resume moved by `shift_ms`: the same run
    under another decision latency, to first order (what a later resume makes the job miss or
    meet is left out)."""
    return [Stop(s.onset_ms, s.resume_ms + shift_ms if s.automatic else s.resume_ms) for s in stops]


def with_false_quarantines(
    stops: Sequence[LiveStop], rate: float, p: Params
) -> tuple[list[Stop], int]:
    """The live run's stops if `rate` of its non-hardware failures also quarantined a healthy
    node and failed the job over: a software failure then reaches a person only after a
    restart and the bug's return; a transient one is retried either way. Every such case
    keeps a healthy node out (the caller prices it). Spread evenly (every 1/rate-th case), so
    the curve is monotone and needs no seed. Returns (stops, false quarantines)."""
    if not 0 <= rate <= 1:
        raise ValueError("rate is a fraction (0..1)")
    out: list[Stop] = []
    credit, count = 0.0, 0
    for s in stops:
        delay = 0
        if s.truth != "hardware":
            credit += rate
            if credit >= 1 - 1e-9:
                credit -= 1
                count += 1
                delay = 0 if s.automatic else p.restart_ms + BUG_RECURS_MS
        out.append(Stop(s.onset_ms, s.resume_ms + delay))
    return out, count
