"""`gpufailover demo --scheduler slurm`: the demo's fleet on a real local Slurm cluster.

Starts munged + slurmctld + one slurmd per node (`deploy.slurm_local`) with slurmctld's
prolog/epilog hooks publishing job events, the pipeline with the Slurm actuator and the Slurm
requeue stage, and `producers.sim.slurm_session` (sbatch jobs, injected failures, the report).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import sys
from collections.abc import Callable
from importlib import resources
from pathlib import Path

import orjson

from deploy.slurm_local import MAX_NODES, SlurmCluster, missing_binaries, running_slurm_cluster
from gpufailover.cli.demo_pipeline import prepare_run, start_pipeline, stop_pipeline
from producers.sim.slurm_fleet import BREAKER_MAX_SHARE, BREAKER_WINDOW_S, GRACE_S, LOOKBACK_S

DEFAULT_NODES = 4


def check_slurm(args: argparse.Namespace) -> str | None:
    """Why the Slurm demo cannot run here (None: it can); fills in the default --nodes."""
    missing = missing_binaries()
    if missing:
        return (
            f"Slurm is not installed (missing {', '.join(missing)}); on Debian/Ubuntu: "
            "apt-get install slurmctld slurmd slurm-client munge"
        )
    if hasattr(os, "geteuid") and os.geteuid() != 0:
        return "the local Slurm cluster runs its daemons and jobs as root: run as root"
    if args.nodes is None:
        args.nodes = DEFAULT_NODES
    if not 2 <= args.nodes <= MAX_NODES:
        return f"--nodes must be 2 to {MAX_NODES} with --scheduler slurm (one slurmd each)"
    return None


def demo_policy(workdir: Path) -> Path:
    """The shipped policy with a grace and lookback of seconds: Slurm runs in real time."""
    data = orjson.loads(resources.files("streams").joinpath("data/policy.json").read_bytes())
    data["grace_s"] = GRACE_S
    data["lookback_s"] = LOOKBACK_S
    path = workdir / "policy.json"
    path.write_bytes(orjson.dumps(data, option=orjson.OPT_INDENT_2))
    return path


def run_on_slurm(args: argparse.Namespace, bootstrap: str) -> int:
    prepared = prepare_run(args, bootstrap, "demo-slurm")
    if prepared is None:
        return 1
    prefix, workdir = prepared
    print(f"starting a local Slurm cluster of {args.nodes} slurmd ...", flush=True)
    try:
        with running_slurm_cluster(args.nodes) as cluster:
            print(f"slurm up under {cluster.base} (SLURM_CONF={cluster.conf})", flush=True)
            cluster.install_hooks(bootstrap, prefix)
            return _with_cluster(args, bootstrap, prefix, cluster, workdir)
    except (OSError, TimeoutError, RuntimeError) as exc:
        print(f"gpufailover demo: the local Slurm cluster failed: {exc}", file=sys.stderr)
        return 1


def _with_cluster(
    args: argparse.Namespace, bootstrap: str, prefix: str, cluster: SlurmCluster, workdir: Path
) -> int:
    extra = {
        "SLURM_CONF": str(cluster.conf),
        "GPUFAILOVER_QUARANTINE_ACTUATOR": "slurm",
        "GPUFAILOVER_REQUEUE_SCHEDULER": "slurm",
        "GPUFAILOVER_REQUEUE_PRIORITY_BOOST": "1000",
        "GPUFAILOVER_POLICY": str(demo_policy(workdir)),
        "GPUFAILOVER_IDLE_AFTER_S": "0.5",
        "GPUFAILOVER_TICK_INTERVAL_S": "0.2",
        "GPUFAILOVER_QUARANTINE_BREAKER_WINDOW_S": str(BREAKER_WINDOW_S),
        "GPUFAILOVER_QUARANTINE_BREAKER_MAX_SHARE": str(BREAKER_MAX_SHARE),
    }
    proc = start_pipeline(
        bootstrap, prefix, args.partitions, args.nodes, workdir, "INFO", extra
    )  # fmt: skip
    ok = False
    try:
        code, ok = _session(args, bootstrap, prefix, cluster, proc.poll)
        return code
    finally:
        rc = stop_pipeline(proc)
        if ok and rc == 0 and not args.log_dir:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            print(f"pipeline exited {rc}; its logs: {workdir / 'pipeline.log'}", file=sys.stderr)
            print(f"slurm hooks' log: {cluster.hook_log}", file=sys.stderr)


def _session(
    args: argparse.Namespace,
    bootstrap: str,
    prefix: str,
    cluster: SlurmCluster,
    pipeline_rc: Callable[[], int | None],
) -> tuple[int, bool]:
    from producers.sim import slurm_report
    from producers.sim.slurm_session import SlurmOptions, StopSlurmRun, slurm_session

    signals: list[str] = []

    def should_stop() -> str | None:
        if signals:
            return signals[0]
        rc = pipeline_rc()
        return None if rc is None else f"the pipeline exited with {rc}"

    def on_signal(signum: int, _frame: object) -> None:
        signals.append(signal.Signals(signum).name)
        if len(signals) > 1:
            raise KeyboardInterrupt

    opts = SlurmOptions(
        bootstrap, prefix, args.minutes, args.seed, args.incident_gap_s, args.slurm_repair_s,
        LOOKBACK_S * 1000, GRACE_S * 1000, args.ready_timeout, args.drain_timeout,
    )  # fmt: skip
    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        summary = asyncio.run(slurm_session(cluster, opts, sys.stdout, should_stop))
    except (StopSlurmRun, KeyboardInterrupt) as exc:
        print(f"\nstopped before the fleet ran: {exc or 'interrupted'}", file=sys.stderr)
        return 130 if signals else 1, False
    except TimeoutError as exc:
        print(f"gpufailover demo: {exc or 'the pipeline did not answer in time'}", file=sys.stderr)
        return 1, False
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    print()
    print(slurm_report.render(summary))
    if args.html:
        print("\n(no HTML report with --scheduler slurm: its charts are the simulated fleet's)")
    if args.json:
        Path(args.json).write_bytes(orjson.dumps(summary, option=orjson.OPT_INDENT_2))
    if summary["run"]["stopped"] is not None:
        return (130, True) if signals else (1, False)
    failed = [text for text, passed in slurm_report.checks(summary) if not passed]
    return (1 if args.check and failed else 0), True
