"""`gpufailover chaos`: parse the command line; the harness is `gpufailover.chaos` (imported
only when the command runs, so `gpufailover --help` stays light)."""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpufailover import settings as env
from gpufailover.settings import setting

if TYPE_CHECKING:
    from gpufailover.chaos.run import ChaosSettings

DEFAULT_FAULTS = (
    "kill-classifier,kill-quarantine,kill-requeue,kill-job-status,add-worker,remove-worker,"
    "broker-restart,broker-kill"
)


@dataclass(frozen=True)
class ChaosOptions:
    """The chaos run's options that also have an env var."""

    rounds: int = setting(
        10, env="GPUFAILOVER_CHAOS_ROUNDS", flag="--rounds", help="rounds of input"
    )
    workers: int = setting(
        2,
        env="GPUFAILOVER_CHAOS_WORKERS",
        flag="--workers",
        help="classifier workers at the start",
    )
    seed: int = setting(
        1,
        env="GPUFAILOVER_CHAOS_SEED",
        flag="--seed",
        help="seed of the workload and the fault schedule",
    )
    faults: str = setting(
        DEFAULT_FAULTS,
        env="GPUFAILOVER_CHAOS_FAULTS",
        flag="--faults",
        help="comma-separated fault kinds, `all` or `none`",
        shown_default=f"all: {DEFAULT_FAULTS}",
    )


def register(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "chaos",
        help="prove decisions do not depend on worker count, crashes or restarts",
        description=(
            "Publish a seeded mixed workload in rounds through N classifier workers and the "
            "quarantine, requeue and job-status services while, at seeded moments, services are "
            "SIGKILLed and restarted, workers are added and removed and the broker restarts; "
            "then check every output against `gpufailover replay` of the same input. Prints one "
            "table (a row per round and a total); exit 1 on any violation. Starts its own "
            "broker unless --bootstrap is given."
        ),
    )
    env.add_arguments(p, ChaosOptions)
    p.add_argument(
        "--max-workers",
        type=int,
        default=None,
        help="add-worker never grows past this (default workers + 2)",
    )
    p.add_argument("--partitions", type=int, default=4, help="partitions per topic (default 4)")
    p.add_argument(
        "--jobs-per-round",
        type=int,
        default=6,
        help="jobs that terminate in each round (default 6)",
    )
    p.add_argument(
        "--bad-per-round",
        type=int,
        default=1,
        help="malformed records per round, each must be dead-lettered once (default 1)",
    )
    p.add_argument(
        "--nodes",
        type=int,
        default=None,
        help="fleet size (default max(48, 4 x jobs-per-round + 4))",
    )
    p.add_argument(
        "--round-seconds",
        type=float,
        default=4.0,
        help="wall-clock length of a round; faults fall inside it (default 4)",
    )
    p.add_argument(
        "--faults-per-round",
        default="1-2",
        metavar="N|MIN-MAX",
        help="faults in each round after the first (default 1-2)",
    )
    p.add_argument(
        "--bootstrap",
        default=None,
        help="use this broker (env KAFKA_BOOTSTRAP) instead of starting one (broker-restart is "
        "then skipped)",
    )
    p.add_argument("--json", type=Path, metavar="FILE", help="also write the results here")
    p.add_argument(
        "--idle-after",
        type=float,
        default=600.0,
        help="the classifiers' idle advance in s (default 600: windows close on event "
        "time only, as in replay)",
    )
    p.add_argument(
        "--quiesce-timeout",
        type=float,
        default=240.0,
        help="bound on the wait for every decision after the input ends (default 240 s)",
    )
    p.add_argument(
        "--settle",
        type=float,
        default=5.0,
        help="seconds read after quiescence, to catch late duplicates (default 5)",
    )
    p.add_argument("--policy", type=Path, default=None, help="policy JSON (default: shipped)")
    p.add_argument(
        "--work-dir",
        type=Path,
        default=None,
        help="service logs (default a new folder under $GPUFAILOVER_STATE_DIR/chaos)",
    )
    p.set_defaults(func=run)


def settings_from_args(args: argparse.Namespace) -> ChaosSettings:
    """The run's settings; ValueError names a bad option."""
    from gpufailover.chaos.faults import parse_kinds, parse_per_round
    from gpufailover.chaos.run import ChaosSettings

    options = env.resolve(ChaosOptions, args)
    if options.rounds < 1 or options.workers < 1 or args.partitions < 1:
        raise ValueError("--rounds, --workers and --partitions must be >= 1")
    return ChaosSettings(
        rounds=options.rounds,
        workers=options.workers,
        max_workers=args.max_workers or options.workers + 2,
        seed=options.seed,
        partitions=args.partitions,
        jobs_per_round=args.jobs_per_round,
        bad_per_round=args.bad_per_round,
        nodes=args.nodes or max(48, 4 * args.jobs_per_round + 4),
        round_s=args.round_seconds,
        faults=parse_kinds(options.faults),
        faults_per_round=parse_per_round(args.faults_per_round),
        bootstrap=args.bootstrap or os.environ.get("KAFKA_BOOTSTRAP") or None,
        json_path=args.json,
        idle_after_s=args.idle_after,
        quiesce_timeout_s=args.quiesce_timeout,
        settle_s=args.settle,
        policy=args.policy,
        work_dir=args.work_dir,
    )


def run(args: argparse.Namespace) -> int:
    from gpufailover.chaos.run import run as run_chaos
    from gpufailover.cli.extras import require_pipeline

    require_pipeline()  # before a broker starts: the classifier workers need faust

    try:
        settings = settings_from_args(args)
    except ValueError as exc:
        print(f"gpufailover chaos: {exc}", file=sys.stderr)
        return 2
    return run_chaos(settings)
