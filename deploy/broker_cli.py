"""`gpufailover broker start|stop|status`: a local Kafka broker that outlives the command."""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

from deploy.broker import BrokerError, start_broker, stop_broker
from deploy.broker_state import (
    clear_state,
    external_bootstrap,
    live_state_broker,
    load_state,
    runs_dir,
    save_state,
)
from deploy.kafka_admin import KafkaUnavailableError, cluster_broker_ids, run_sync
from deploy.kafka_jars import JarResolutionError


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "broker",
        help="run a local single-node Kafka broker (KRaft, no Docker)",
        description="Start, inspect or stop a local Apache Kafka broker. If KAFKA_BOOTSTRAP is "
        "set, that broker is used instead and nothing is started or stopped.",
    )
    actions = parser.add_subparsers(dest="broker_command", metavar="ACTION", required=True)
    start = actions.add_parser("start", help="start in the background; print the bootstrap")
    start.add_argument("--timeout", type=float, default=60.0, help="readiness timeout, seconds")
    start.set_defaults(func=cmd_start)
    stop = actions.add_parser("stop", help="stop the broker started by `broker start`")
    stop.add_argument("--keep-files", action="store_true", help="keep its data and logs")
    stop.set_defaults(func=cmd_stop)
    status = actions.add_parser("status", help="is the broker up? (exit 0 if it answers)")
    status.set_defaults(func=cmd_status)


def _err(message: str) -> None:
    print(f"gpufailover broker: {message}", file=sys.stderr)


def cmd_start(args: argparse.Namespace) -> int:
    external = external_bootstrap()
    if external is not None:
        _err(f"KAFKA_BOOTSTRAP is set: using the broker at {external}, not starting one")
        print(external)
        return 0
    running = live_state_broker()
    if running is not None:
        _err(f"already running (pid {running.pid}, log {running.log_path})")
        print(running.bootstrap)
        return 0
    clear_state()
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    run_dir = runs_dir() / f"broker-{stamp}-{os.getpid()}"
    try:
        broker = start_broker(run_dir=run_dir, ready_timeout_s=args.timeout)
    except (BrokerError, JarResolutionError) as exc:
        _err(f"could not start the broker: {exc}")
        return 1
    save_state(broker)
    _err(f"started pid {broker.pid}; log {broker.log_path}; stop with `gpufailover broker stop`")
    print(broker.bootstrap)
    return 0


def cmd_stop(args: argparse.Namespace) -> int:
    external = external_bootstrap()
    if external is not None:
        _err(f"KAFKA_BOOTSTRAP is set: the broker at {external} is not ours to stop")
        return 0
    broker = load_state()
    if broker is None:
        _err("no broker was started with `gpufailover broker start`")
        return 0
    try:
        stop_broker(broker, remove_files=not args.keep_files)
    except BrokerError as exc:
        _err(f"could not stop pid {broker.pid}: {exc}")
        return 1
    clear_state()
    _err(f"stopped {broker.bootstrap} (pid {broker.pid})")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    bootstrap = external_bootstrap()
    if bootstrap is None:
        broker = live_state_broker()
        if broker is None:
            stale = load_state()
            _err("not running" + (f" (stale state for pid {stale.pid})" if stale else ""))
            return 1
        bootstrap = broker.bootstrap
        print(f"pid {broker.pid}  log {broker.log_path}")
    try:
        ids = run_sync(cluster_broker_ids(bootstrap, timeout_s=10.0))
    except KafkaUnavailableError as exc:
        _err(f"{bootstrap} does not answer: {exc}")
        return 1
    print(f"{bootstrap}  up, broker ids {ids}")
    return 0
