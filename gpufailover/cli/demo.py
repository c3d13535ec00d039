"""`gpufailover demo`: a simulated GPU fleet failing over on a local Kafka broker.

Starts a broker (unless --bootstrap / GPUFAILOVER_BOOTSTRAP / KAFKA_BOOTSTRAP names one),
creates a fresh topic set, runs the pipeline (`gpufailover run` as a child process group) and
the fleet simulator (`producers.sim`), shows a live view, and ends with a report (text, HTML,
optionally JSON). Ctrl-C stops the run early, still reports, and leaves nothing running.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from gpufailover.cli.demo_pipeline import prepare_run, start_pipeline, stop_pipeline


def register(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "demo",
        help="simulate a GPU fleet failing over, on a local Kafka broker, and report",
        description="A local broker, the whole pipeline and a simulated fleet whose jobs fail "
        "the way real clusters fail; live view, then a report (accuracy against the "
        "simulator's ground truth, latency, effective training time vs two baselines).",
    )
    a = p.add_argument
    a(
        "--scheduler",
        choices=("sim", "slurm"),
        default="sim",
        help="sim: the simulator's scheduler stand-in (default); slurm: a local Slurm cluster "
        "(slurmctld + one slurmd per node) runs the jobs, the pipeline drains and requeues "
        "in it (needs Debian's slurmctld slurmd slurm-client munge, and root)",
    )
    a(
        "--nodes",
        type=int,
        default=None,
        help="GPU nodes (8 GPUs each; default 64, with --scheduler slurm 4 slurmd)",
    )
    a("--minutes", type=float, default=2.0, help="wall-clock minutes of simulation (default 2)")
    a("--seed", type=int, default=1, help="seed of the failure trace and workload (default 1)")
    a(
        "--time-scale",
        type=float,
        default=120.0,
        help="simulated seconds per wall second (default 120: 2 minutes = 4 simulated hours)",
    )
    a(
        "--rate",
        type=float,
        default=0.16,
        help="incidents per node per simulated hour (default 0.16, ~1000x a real fleet)",
    )
    a(
        "--mttr-min",
        type=float,
        default=60.0,
        help="minutes a person needs to restart a job (no-failover baseline; default 60)",
    )
    a(
        "--repair-min",
        type=float,
        default=60.0,
        help="simulated minutes to repair a quarantined node before release (default 60)",
    )
    a("--partitions", type=int, default=4, help="partitions of every topic (default 4)")
    a(
        "--bootstrap",
        default=None,
        help="use this broker (env GPUFAILOVER_BOOTSTRAP / KAFKA_BOOTSTRAP); default: start one",
    )
    a("--html", default="gpufailover-demo.html", help="HTML report path ('' = none)")
    a("--json", default=None, help="also write the report as JSON to this path")
    a(
        "--log-dir",
        default=None,
        help="keep the pipeline's logs here (default: a temp dir, removed after a clean run)",
    )
    a(
        "--drain-timeout",
        type=float,
        default=120.0,
        help="wall seconds to wait for the last decisions after the run (default 120)",
    )
    a(
        "--ready-timeout",
        type=float,
        default=120.0,
        help="wall seconds to wait for the pipeline to answer (default 120)",
    )
    a(
        "--incident-gap-s",
        type=float,
        default=8.0,
        help="--scheduler slurm: mean wall seconds between incidents (default 8)",
    )
    a(
        "--slurm-repair-s",
        type=float,
        default=20.0,
        help="--scheduler slurm: wall seconds before a quarantined node is released (default 20)",
    )
    a("--plain", action="store_true", help="plain status lines even on a terminal")
    a("--check", action="store_true", help="exit 1 if a report check fails")
    p.set_defaults(func=cmd_demo)  # fmt: skip


def cmd_demo(args: argparse.Namespace) -> int:
    from gpufailover.cli.extras import require_pipeline
    from producers.sim.config import SimConfig

    require_pipeline()  # before a broker starts: the classifier needs faust

    if logging.getLogger().getEffectiveLevel() > logging.DEBUG:
        # Client chatter (leader elections of the fresh topics) would scroll the live view.
        for name in ("aiokafka", "deploy", "kafka"):
            logging.getLogger(name).setLevel(
                logging.WARNING if name != "aiokafka" else logging.CRITICAL
            )

    if args.scheduler == "slurm":
        from gpufailover.cli.demo_slurm import check_slurm

        problem = check_slurm(args)
        if problem is not None:
            print(f"gpufailover demo --scheduler slurm: {problem}", file=sys.stderr)
            return 2
    elif args.nodes is None:
        args.nodes = 64
    if args.nodes < 2 or args.minutes <= 0 or args.time_scale <= 0:
        print("gpufailover demo: need --nodes >= 2, --minutes > 0, --time-scale > 0",
              file=sys.stderr)  # fmt: skip
        return 2
    try:
        cfg = build_config(args)
    except ValueError as exc:
        print(f"gpufailover demo: {exc}", file=sys.stderr)
        return 2
    assert isinstance(cfg, SimConfig)
    bootstrap = (
        args.bootstrap
        or os.environ.get("GPUFAILOVER_BOOTSTRAP")
        or os.environ.get("KAFKA_BOOTSTRAP")
    )
    with contextlib.ExitStack() as stack:
        if not bootstrap:
            from deploy.broker import running_broker

            print("starting a local Kafka broker ...", flush=True)
            bootstrap = stack.enter_context(running_broker()).bootstrap
        if args.scheduler == "slurm":
            from gpufailover.cli.demo_slurm import run_on_slurm

            return run_on_slurm(args, bootstrap)
        return _with_broker(args, cfg, bootstrap)
    return 1  # unreachable (mypy: ExitStack may swallow)


def build_config(args: argparse.Namespace) -> Any:
    from dataclasses import replace

    from producers.sim.config import SimConfig
    from producers.sim.effective import Costs
    from streams.policy import load_policy

    policy = load_policy(None)
    horizon_ms = int(args.minutes * 60_000 * args.time_scale)
    costs = replace(Costs(), mttr_ms=int(args.mttr_min * 60_000))
    return SimConfig(
        nodes=args.nodes,
        seed=args.seed,
        horizon_ms=horizon_ms,
        rate_per_node_hour=args.rate,
        repair_ms=int(args.repair_min * 60_000),
        lookback_ms=policy.lookback_ms,
        grace_ms=policy.grace_ms,
        costs=costs,
    )


def _with_broker(args: argparse.Namespace, cfg: Any, bootstrap: str) -> int:
    prepared = prepare_run(args, bootstrap, "demo")
    if prepared is None:
        return 1
    prefix, workdir = prepared
    # The breaker's window is wall-clock time: 10 simulated minutes, as on a real fleet.
    window_s = {"GPUFAILOVER_QUARANTINE_BREAKER_WINDOW_S": str(600 / args.time_scale)}
    proc = start_pipeline(
        bootstrap, prefix, args.partitions, args.nodes, workdir, "INFO", window_s
    )  # fmt: skip
    ok = False
    try:
        code, ok = _session(args, cfg, bootstrap, prefix, proc)
        return code
    finally:
        rc = stop_pipeline(proc)
        if ok and rc == 0 and not args.log_dir:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            print(f"pipeline exited {rc}; its logs: {workdir / 'pipeline.log'}", file=sys.stderr)


def _session(
    args: argparse.Namespace, cfg: Any, bootstrap: str, prefix: str, proc: subprocess.Popen[bytes]
) -> tuple[int, bool]:
    from producers.sim import htmlreport, report
    from producers.sim.session import SessionOptions, StopRun, session

    signals: list[str] = []

    def should_stop() -> str | None:
        if signals:
            return signals[0]
        if proc.poll() is not None:
            return f"the pipeline exited with {proc.returncode}"
        return None

    def on_signal(signum: int, _frame: object) -> None:
        signals.append(signal.Signals(signum).name)
        if len(signals) > 1:
            raise KeyboardInterrupt  # a second Ctrl-C: stop waiting at once

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    opts = SessionOptions(
        bootstrap, prefix, args.time_scale, args.ready_timeout, args.drain_timeout,
        tty=sys.stdout.isatty() and not args.plain,
    )  # fmt: skip
    try:
        summary, state = asyncio.run(session(cfg, opts, sys.stdout, should_stop))
    except (StopRun, KeyboardInterrupt) as exc:
        print(f"\nstopped before the fleet ran: {exc or 'interrupted'}", file=sys.stderr)
        return 130 if signals else 1, False
    except TimeoutError:
        print("gpufailover demo: the pipeline did not answer in time", file=sys.stderr)
        return 1, False
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    print()
    print(report.render(summary))
    if args.html:
        Path(args.html).write_text(
            htmlreport.render(summary, state.timeline, state.engine.start_ms), encoding="utf-8"
        )
        print(f"\nHTML report: {Path(args.html).resolve()}")
    if args.json:
        import orjson

        Path(args.json).write_bytes(orjson.dumps(summary, option=orjson.OPT_INDENT_2))
    if state.stopped is not None:
        # Stopped by the user: a clean stop, nothing to keep. Stopped by a crash: keep logs.
        return (130, True) if signals else (1, False)
    failed = [text for text, passed in report.checks(summary) if not passed]
    return (1 if args.check and failed else 0), True
