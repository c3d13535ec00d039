"""`gpufailover goodput`: effective training time at real failure rates, in simulated time.

A separate command rather than `demo --offline`: the demo is a live, broker-backed show of
the pipeline on a small fleet of small jobs in scaled wall time; this is a model run of one
large job over weeks with the engine in-process, with its own parameters and output.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpufailover import settings as declare
from gpufailover.cli.options import PolicyChoice
from producers.sim.goodput import LLAMA3_RATE, MINUTE_MS, Params

if TYPE_CHECKING:
    from producers.sim.goodput_run import RunConfig

ENV = "GPUFAILOVER_GOODPUT_"


def _number(kind: Callable[[str], Any], low: float, what: str) -> Callable[[str], Any]:
    def parse(raw: str) -> Any:
        try:
            value = kind(raw)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{raw!r} is not a {what}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"{raw!r}: must be at least {low:g}")
        return value

    return parse


def _fraction(raw: str) -> float:
    value = _number(float, 0, "number")(raw)
    if value > 1:
        raise argparse.ArgumentTypeError(f"{raw!r}: a probability, at most 1")
    return float(value)


def _opt(p: argparse.ArgumentParser, flag: str, default: str, parse: Any, text: str) -> None:
    env = ENV + flag.lstrip("-").replace("-", "_").upper()

    def parse_named(raw: str) -> Any:
        try:
            return parse(raw)
        except argparse.ArgumentTypeError as exc:
            raise argparse.ArgumentTypeError(f"{exc} (set by {flag} or {env})") from None

    p.add_argument(flag, default=os.environ.get(env, default), type=parse_named,
                   help=f"{text} (env {env}, default {default or 'unset'})")  # fmt: skip


def register(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "goodput",
        help="effective training time at real failure rates (simulated time, no broker)",
        description="Run one large synchronous training job over simulated days at the "
        "failure rates of Llama 3's pre-training, with the decision engine in-process, and "
        "report its effective training time under gpufailover, a 'decide within 5 minutes' "
        "service, naive restart in place and no failover (docs/demo.md).",
    )
    positive, count = _number(float, 0, "number"), _number(int, 0, "whole number")
    _opt(p, "--nodes", "2048", _number(int, 1, "whole number"), "nodes of the job, 8 GPUs each")
    _opt(p, "--spares", "32", count, "healthy spare nodes a failover can take")
    _opt(p, "--days", "30", _number(float, 0.01, "number"), "simulated days")
    _opt(p, "--seed", "1", count, "random seed")
    _opt(p, "--rate", f"{LLAMA3_RATE:.4g}", positive,
         "job interruptions per node-hour; the default is Llama 3's: 419 in 54 days on "
         "2,048 nodes")  # fmt: skip
    _opt(
        p,
        "--checkpoint-min",
        "30",
        _number(float, 0.1, "number"),
        "training minutes between checkpoints",
    )
    _opt(p, "--restart-min", "10", positive, "start-up of an attempt in minutes")
    _opt(p, "--decision-latency-s", "1", positive,
         "seconds from gpufailover's decision to the requeue acting on it")  # fmt: skip
    _opt(p, "--person-min", "60", positive, "minutes until a person restarts a stopped job")
    _opt(p, "--service-latency-min", "5", positive, "the 5-minute service's decision time")
    _opt(p, "--max-failovers", "3", count, "retry cap per job (the mission's is 3)")
    _opt(p, "--repair-h", "24", positive, "hours until a quarantined node is back")
    _opt(p, "--false-evidence", "", lambda raw: None if raw == "" else _fraction(raw),
         "probability that a non-hardware failure shows an unrelated hardware XID "
         "(unset: the simulator's default, 0.15 of software failures only)")  # fmt: skip
    declare.add_arguments(p, PolicyChoice)
    p.add_argument("--html", default=os.environ.get(ENV + "HTML"), metavar="PATH",
                   help=f"also write the report with its charts here (env {ENV}HTML)")  # fmt: skip
    p.set_defaults(func=run)


def config_from(args: argparse.Namespace) -> RunConfig:
    from producers.sim.goodput_run import RunConfig  # the engine: only when the command runs

    params = Params(
        checkpoint_ms=int(args.checkpoint_min * MINUTE_MS),
        restart_ms=int(args.restart_min * MINUTE_MS),
        decision_latency_ms=int(args.decision_latency_s * 1000),
        person_ms=int(args.person_min * MINUTE_MS),
        service_latency_ms=int(args.service_latency_min * MINUTE_MS),
        max_failovers=args.max_failovers,
    )
    return RunConfig(
        nodes=args.nodes,
        spares=args.spares,
        days=args.days,
        seed=args.seed,
        rate_per_node_hour=args.rate,
        repair_ms=int(args.repair_h * 60 * MINUTE_MS),
        false_evidence=args.false_evidence,
        params=params,
    )


def run(args: argparse.Namespace) -> int:
    from producers.sim.goodput_html import render
    from producers.sim.goodput_report import build, text
    from streams.policy import PolicyError, load_policy

    try:
        policy = load_policy(declare.resolve(PolicyChoice, args).policy or None)
    except PolicyError as exc:
        print(f"gpufailover goodput: bad policy: {exc}", file=sys.stderr)
        return 2
    cfg = config_from(args)
    started = time.monotonic()

    def progress(day: int) -> None:
        print(f"goodput: day {day}/{cfg.days:g} simulated, {time.monotonic() - started:.1f} s",
              file=sys.stderr, flush=True)  # fmt: skip

    report = build(cfg, policy, progress)
    print(text(report))
    print(f"goodput: done in {time.monotonic() - started:.1f} s", file=sys.stderr)
    if args.html:
        Path(args.html).write_text(render(report), encoding="utf-8")
        print(f"goodput: wrote {args.html}", file=sys.stderr)
    return 0
