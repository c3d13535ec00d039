"""One chaos run: broker, topics, pipeline processes, rounds of input with faults, quiescence,
then the invariants against replay, the table and the exit code."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import inspect
import logging
import sys
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import orjson

from deploy.topics import create_topics
from gpufailover.chaos import report
from gpufailover.chaos.bus import Publisher, Reader, pipeline_lag
from gpufailover.chaos.check import BadRecord, Expected, check
from gpufailover.chaos.faults import (
    ADD_WORKER,
    BROKER_KILL,
    BROKER_RESTART,
    KILLED_SERVICE,
    REMOVE_WORKER,
    Fault,
    schedule,
)
from gpufailover.chaos.oracle import replay
from gpufailover.chaos.services import Pipeline, PipelineConfig, Proc
from gpufailover.chaos.workload import (
    ROUND_SPAN_MS,
    START_MS,
    WorkloadConfig,
    build,
    close_markers,
)
from gpufailover.settings import state_dir
from schemas.topics import TopicNames
from streams.policy import load_policy

log = logging.getLogger("gpufailover.chaos")
READY_LINE = "Worker ready"  # faust's line once a worker has its assignment and tables


@dataclass(frozen=True)
class ChaosSettings:
    rounds: int = 5
    workers: int = 2
    max_workers: int = 4
    seed: int = 1
    partitions: int = 4
    jobs_per_round: int = 6
    bad_per_round: int = 1
    nodes: int = 48
    round_s: float = 4.0
    faults: tuple[str, ...] = ()
    faults_per_round: tuple[int, int] = (1, 2)
    bootstrap: str | None = None
    json_path: Path | None = None
    idle_after_s: float = 600.0
    tick_interval_s: float = 1.0
    ready_timeout_s: float = 180.0
    quiesce_timeout_s: float = 240.0
    settle_s: float = 5.0
    policy: Path | None = None
    work_dir: Path | None = None

    def to_json(self) -> dict[str, Any]:
        return {k: str(v) if isinstance(v, Path) else v for k, v in asdict(self).items()}


@dataclass
class Progress:
    """What happened, for the report: faults carried out, rounds, where bad records landed."""

    t0: float = field(default_factory=time.monotonic)
    faults: list[report.FaultDone] = field(default_factory=list)
    rounds: list[report.RoundInfo] = field(default_factory=list)
    bad: list[BadRecord] = field(default_factory=list)
    not_quiet: str | None = None  # why the wait for quiescence gave up, if it did
    lag: dict[str, dict[str, int]] = field(default_factory=dict)  # when the wait ended

    def since(self) -> float:
        return time.monotonic() - self.t0


def say(text: str) -> None:
    print(f"chaos: {text}", file=sys.stderr, flush=True)


def run(settings: ChaosSettings) -> int:
    """Run it all; 0 when no invariant was violated, 1 otherwise, 2 when the run failed."""
    with contextlib.ExitStack() as stack:
        broker: Any = None
        bootstrap = settings.bootstrap
        if bootstrap is None:
            from deploy.broker import running_broker

            say("starting a broker for this run")
            broker = stack.enter_context(running_broker())
            bootstrap = broker.bootstrap
        try:
            return asyncio.run(_run(settings, bootstrap, broker))
        except Exception as exc:  # the run itself failed: say it, exit 2
            log.exception("chaos run failed")
            print(f"gpufailover chaos: the run failed: {exc}", file=sys.stderr)
            return 2
    return 2  # unreachable: ExitStack does not swallow exceptions


async def _run(settings: ChaosSettings, bootstrap: str, broker: Any) -> int:
    policy = load_policy(str(settings.policy) if settings.policy else None)
    workload = build(
        WorkloadConfig(
            seed=settings.seed,
            rounds=settings.rounds,
            jobs_per_round=settings.jobs_per_round,
            nodes=settings.nodes,
            bad_per_round=settings.bad_per_round,
            max_failovers=policy.max_failovers,
        )
    )
    markers = close_markers(
        workload.max_ts_ms(), policy.lookback_ms, policy.grace_ms, settings.partitions
    )
    answer = replay([*workload.records(), *markers], policy)
    faults = schedule(
        settings.seed,
        settings.rounds,
        settings.faults,
        workers=settings.workers,
        max_workers=settings.max_workers,
        round_s=settings.round_s,
        per_round=settings.faults_per_round,
    )
    say(
        f"seed {settings.seed}: {settings.rounds} rounds, {len(workload.terminations)} "
        f"terminations, replay decides {len(answer.decisions)} and quarantines "
        f"{sum(answer.quarantines.values())} nodes; {len(faults)} faults scheduled"
    )
    prefix = f"chaos-{settings.seed}-{uuid.uuid4().hex[:8]}."
    await create_topics(bootstrap, partitions=settings.partitions, prefix=prefix)
    names = TopicNames(prefix)
    work_dir = settings.work_dir or Path(
        tempfile.mkdtemp(prefix=f"chaos-{settings.seed}-", dir=_ensure(state_dir() / "chaos"))
    )
    work_dir.mkdir(parents=True, exist_ok=True)
    say(f"topics {prefix}*, bootstrap {bootstrap}, service logs in {work_dir}")
    pipeline = Pipeline(
        PipelineConfig(
            bootstrap, prefix, settings.partitions, work_dir, settings.idle_after_s,
            settings.tick_interval_s, settings.policy,
        )
    )  # fmt: skip
    progress = Progress()
    publisher = Publisher(bootstrap, names)
    reader = Reader(bootstrap, names)
    try:
        pipeline.start(settings.workers)
        await _wait_ready(pipeline.workers, settings.ready_timeout_s)
        await publisher.start()
        progress.t0 = time.monotonic()
        for rnd, records in enumerate(workload.rounds):
            terms = sum(1 for k, r in workload.terminations.items() if r == rnd)
            progress.rounds.append(
                report.RoundInfo(
                    rnd, len(records), terms, progress.since(), time.time_ns() // 10**6
                )
            )
            todo = [f for f in faults if f.round == rnd]
            say(f"round {rnd}: {len(records)} records, {terms} terminations, faults: "
                + (", ".join(f.describe() for f in todo) or "none"))  # fmt: skip
            await _round(records, todo, settings, pipeline, publisher, broker, progress)
        for ended in pipeline.revive_crashed():
            say(f"found crashed: {ended}")
        await publisher.publish(markers)
        say("input complete (end-of-input markers published); waiting for quiescence")
        await reader.start()
        await _quiesce(settings, answer.decisions.keys(), progress, reader, bootstrap, names)
    finally:
        await publisher.stop()
        await reader.stop()
        await asyncio.to_thread(pipeline.stop)
    observed = dataclasses.replace(reader.outputs.observed(names), lag=progress.lag)
    expected = Expected(
        decisions=answer.decisions,
        quarantines=answer.quarantines,
        terminations=workload.terminations,
        bad=tuple(progress.bad),
        quarantine_rounds=answer.quarantine_rounds,
    )
    result = check(expected, observed, _round_of_ts)
    print(report.table(result, progress.rounds, progress.faults))
    violations = result.violations()
    if violations:
        print(f"\n{len(violations)} violation(s):")
        print(report.findings_text(result, progress.faults, progress.rounds))
    if progress.not_quiet:
        print(f"\nthe pipeline did not go quiet: {progress.not_quiet}")
    if pipeline.exits:
        print("\nservices that exited on their own: " + "; ".join(pipeline.exits))
    if reader.outputs.unreadable:
        print(f"\nunreadable output records: {', '.join(reader.outputs.unreadable[:10])}")
    if settings.json_path is not None:
        data = report.to_json(
            result, progress.rounds, progress.faults, settings.to_json(), progress.since()
        )
        data["crashed_services"] = pipeline.exits
        data["not_quiet"] = progress.not_quiet
        settings.json_path.write_bytes(orjson.dumps(data, option=orjson.OPT_INDENT_2))
    say(f"done in {progress.since():.0f} s: {len(violations)} violation(s)")
    return 1 if violations else 0


def _ensure(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def _round_of_ts(ts_ms: int) -> int:
    return max(-1, (ts_ms - START_MS) // ROUND_SPAN_MS)


async def _wait_ready(workers: list[Proc], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    for proc in workers:
        while READY_LINE not in _log_text(proc):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{proc.name}: no {READY_LINE!r} in {timeout_s:.0f} s:\n"
                                   + proc.log_tail())  # fmt: skip
            if not proc.alive:
                raise RuntimeError(f"{proc.name} exited while starting:\n{proc.log_tail()}")
            await asyncio.sleep(0.2)  # polling a log file, bounded by the deadline


def _log_text(proc: Proc) -> str:
    return proc.log_path.read_text(errors="replace") if proc.log_path.exists() else ""


async def _round(
    records: list[Any],
    todo: list[Fault],
    settings: ChaosSettings,
    pipeline: Pipeline,
    publisher: Publisher,
    broker: Any,
    progress: Progress,
) -> None:
    """Publish the round while its faults fire at their times; the round lasts `round_s`."""
    start = time.monotonic()
    restarts: list[asyncio.Task[None]] = []

    async def faults() -> None:
        for fault in todo:
            await asyncio.sleep(max(0.0, start + fault.at_s - time.monotonic()))  # the schedule
            restart = await _apply(fault, pipeline, broker, progress)
            if restart is not None:
                restarts.append(asyncio.create_task(restart))

    async def publish() -> None:
        progress.bad += await publisher.publish(records)

    await asyncio.gather(publish(), faults())
    await asyncio.sleep(max(0.0, start + settings.round_s - time.monotonic()))  # pacing
    await asyncio.gather(*restarts)
    for ended in pipeline.revive_crashed():
        say(f"found crashed: {ended}")


async def _apply(fault: Fault, pipeline: Pipeline, broker: Any, progress: Progress) -> Any:
    """Carry out one fault; return the coroutine that restarts a killed service, if any."""

    def done(target: str, outcome: str = "done") -> None:
        progress.faults.append(
            report.FaultDone(
                fault.round, progress.since(), fault.kind, target, outcome, time.time_ns() // 10**6
            )
        )
        say(f"r{fault.round} {fault.kind} {target}: {outcome}")

    if fault.kind in KILLED_SERVICE:
        proc = pipeline.service(KILLED_SERVICE[fault.kind], fault.worker)
        if not proc.alive:  # an earlier kill's downtime is not over
            done(proc.name, "skipped: already down")
            return None
        pid = proc.pid
        await asyncio.to_thread(proc.kill)
        done(f"{proc.name} pid {pid}")
        return _restart_later(proc, fault.down_s, pipeline)
    if fault.kind == ADD_WORKER:
        proc = await asyncio.to_thread(pipeline.add_worker)
        done(proc.name)
    elif fault.kind == REMOVE_WORKER:
        proc = await asyncio.to_thread(pipeline.remove_worker, fault.worker or 0)
        done(proc.name)
    elif fault.kind in (BROKER_RESTART, BROKER_KILL):
        why = _broker_restart_unavailable(broker)
        if why is not None:
            done("broker", f"skipped: {why}")
            return None
        hard = fault.kind == BROKER_KILL
        # Blocking (stop, start, wait until ready): off the loop, so publishing goes on trying.
        result = await asyncio.to_thread(lambda: broker.restart(hard=hard))
        if inspect.isawaitable(result):
            await result
        done(f"broker {broker.bootstrap}")
    return None


def _broker_restart_unavailable(broker: Any) -> str | None:
    if broker is None:
        return "--bootstrap names a broker this run does not own"
    restart = getattr(broker, "restart", None)
    if restart is None:
        return (
            "deploy.broker's running broker has no restart() yet "
            "(same-address restart, issue 11 item 7)"
        )
    if "hard" not in inspect.signature(restart).parameters:
        return "the broker's restart() takes no `hard` flag"
    return None


async def _restart_later(proc: Proc, down_s: float, pipeline: Pipeline) -> None:
    await asyncio.sleep(down_s)  # the schedule's downtime
    if proc in pipeline.all():  # not removed meanwhile
        await asyncio.to_thread(proc.start)


async def _quiesce(
    settings: ChaosSettings,
    decisions: Any,
    progress: Progress,
    reader: Reader,
    bootstrap: str,
    names: TopicNames,
) -> None:
    """Read the outputs until every expected decision is there and the pipeline's lag is 0,
    then `settle_s` more (to catch late duplicates); give up after `quiesce_timeout_s`."""
    deadline = time.monotonic() + settings.quiesce_timeout_s
    wanted = set(decisions)
    last_note = 0.0
    while True:
        await reader.poll()
        seen = {(str(d.get("job_id")), int(d.get("attempt", -1)))
                for d in reader.outputs.observed(names).decisions}  # fmt: skip
        missing = wanted - seen
        lag = await pipeline_lag(bootstrap, names, settings.partitions)
        behind = {g: sum(parts.values()) for g, parts in lag.items() if parts}
        if not missing and not behind:
            say(f"quiet after {progress.since():.0f} s: all {len(wanted)} decisions, lag 0")
            break
        if time.monotonic() > deadline:
            say(
                f"NOT quiet after {settings.quiesce_timeout_s:.0f} s: {len(missing)} "
                f"decisions missing ({sorted(missing)[:10]}), lag by partition "
                f"{ {g: parts for g, parts in lag.items() if parts} }; checking what is there"
            )
            progress.not_quiet = f"{len(missing)} decisions missing; lag {lag}"
            progress.lag = {g: parts for g, parts in lag.items() if parts}
            break
        if time.monotonic() - last_note > 5:
            last_note = time.monotonic()
            say(f"waiting: {len(wanted) - len(missing)}/{len(wanted)} decisions, lag {behind}")
    settle_until = time.monotonic() + settings.settle_s
    while time.monotonic() < settle_until:
        await reader.poll(timeout_ms=200)
