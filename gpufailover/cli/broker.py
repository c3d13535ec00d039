"""`gpufailover broker start|stop|restart|status`: one local Kafka broker that outlives the
command and keeps its address, cluster id and data across stops and starts."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from deploy.broker import Broker, BrokerError, PortInUseError
from deploy.broker_secure import ADMIN, USERS, SecureFiles
from deploy.broker_state import (
    BrokerStateError,
    clear_state,
    external_bootstrap,
    load_state,
    new_run_dir,
    save_state,
)
from deploy.kafka_admin import KafkaUnavailableError, cluster_broker_ids, run_sync
from deploy.kafka_jars import JarResolutionError
from gpufailover.security import KafkaSecurity

_FRESH_HINT = "`gpufailover broker start --fresh` starts a new, empty cluster (new ports) instead"

DESCRIPTION = """\
Start, inspect, restart or stop one local Apache Kafka broker (KRaft, no Docker).

The broker keeps its run directory (config, data, logs; under $GPUFAILOVER_STATE_DIR/runs/,
recorded in $GPUFAILOVER_STATE_DIR/broker.json): `stop` then `start` brings back the SAME
broker, on the same 127.0.0.1 port, with the same KRaft cluster id, topics, records and
committed offsets, so clients reconnect to the address they have. If that port is taken by
another process, `start` says so and exits 1; it never moves to another port. `--fresh` starts
a new, empty cluster (new data directory, new ports) and deletes the old one.

If KAFKA_BOOTSTRAP is set, that broker is used instead and nothing is started or stopped.
"""


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "broker",
        help="run a local single-node Kafka broker (KRaft, no Docker) that survives restarts",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = parser.add_subparsers(dest="broker_command", metavar="ACTION", required=True)

    start = actions.add_parser(
        "start",
        help="start in the background (the previous broker if there is one); print the bootstrap",
        description="Start the recorded broker again (same address, cluster and data), or a "
        "new one if none is recorded. Prints the bootstrap address on stdout. Exit 1 if its "
        "port is taken by another process.",
    )
    _add_start_flags(start)
    start.set_defaults(func=cmd_start)

    stop = actions.add_parser(
        "stop",
        help="stop the broker; its data is kept for the next `start`",
        description="Stop the broker started by `gpufailover broker start`. Its data, cluster "
        "id and port are kept: the next `start` resumes it.",
    )
    _add_stop_flags(stop)
    stop.add_argument(
        "--delete-data",
        action="store_true",
        help="also delete its data, config and logs and forget it (the next start is new)",
    )
    stop.set_defaults(func=cmd_stop)

    restart = actions.add_parser(
        "restart",
        help="stop and start the same broker (same address, cluster and data)",
        description="Stop the broker (gracefully, or with --kill as a crash would) and start "
        "it again on the same address with the same data (with --fresh: a new, empty cluster "
        "instead). Starts it if it was not running. Prints the bootstrap address.",
    )
    _add_stop_flags(restart)
    _add_start_flags(restart)
    restart.set_defaults(func=cmd_restart)

    status = actions.add_parser("status", help="is the broker up? (exit 0 if it answers)")
    status.set_defaults(func=cmd_status)


def _add_start_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--timeout", type=float, default=60.0, help="readiness timeout, seconds (default 60)"
    )
    parser.add_argument(
        "--fresh",
        action="store_true",
        help="a new, empty cluster: new data directory and cluster id, new ports; the "
        "previous broker's files are deleted",
    )
    parser.add_argument(
        "--secure",
        action="store_true",
        help="a new cluster (implies --fresh when the recorded one is plain) with a SASL_SSL "
        "listener: its own CA, one SCRAM-SHA-512 user per role plus `admin`, ACLs enforced "
        "(apply them with `gpufailover acls apply`); prints the admin's client settings",
    )


def _add_stop_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--kill",
        action="store_true",
        help="SIGKILL at once, as a crash would (default: SIGTERM, Kafka's controlled shutdown)",
    )
    parser.add_argument(
        "--grace",
        type=float,
        default=30.0,
        help="seconds to wait after SIGTERM before SIGKILL (default 30)",
    )


def _err(message: str) -> None:
    print(f"gpufailover broker: {message}", file=sys.stderr)


def cmd_start(args: argparse.Namespace) -> int:
    external = external_bootstrap()
    if external is not None:
        _err(f"KAFKA_BOOTSTRAP is set: using the broker at {external}, not starting one")
        print(external)
        return 0
    try:
        broker = load_state()
    except BrokerStateError as exc:
        if not args.fresh:
            _err(f"{exc}\n{_FRESH_HINT}")
            return 1
        _err(f"forgetting it: {exc}")
        broker = None
    if broker is not None and broker.is_running():
        if args.fresh:
            _err(f"{broker.bootstrap} is running (pid {broker.pid}): use `broker restart --fresh`")
            return 1
        _err(f"already running (pid {broker.pid}, log {broker.log_path})")
        print(broker.bootstrap)
        return 0
    secure = getattr(args, "secure", False)
    if broker is not None and secure and broker.secure is None and not args.fresh:
        _err("the recorded broker is plain: --secure starts a new cluster (--fresh) instead")
        args.fresh = True
    try:
        if broker is None or args.fresh:
            broker = _new_broker(old=broker, secure=secure)
        else:
            _err(f"resuming cluster {broker.cluster_id} on {broker.bootstrap} ({broker.run_dir})")
        broker.start(ready_timeout_s=args.timeout)
    except PortInUseError as exc:
        _err(f"could not start the broker: {exc}\n{_FRESH_HINT}")
        return 1
    except (BrokerError, JarResolutionError, OSError) as exc:
        _err(f"could not start the broker: {exc}")
        return 1
    save_state(broker)
    _err(f"started pid {broker.pid}; log {broker.log_path}; stop with `gpufailover broker stop`")
    if broker.secure is not None:
        _print_secure_hint(broker.secure)
    print(broker.bootstrap)
    return 0


def _print_secure_hint(material: SecureFiles) -> None:
    settings = " ".join(f"{k}={v}" for k, v in material.env(ADMIN).items())
    _err(
        f"SASL_SSL: CA {material.ca_cert}; passwords of {', '.join(USERS)} in "
        f"{material.secrets_dir}/<user>.password\n"
        f"  as the super user: export {settings}\n"
        "  then: gpufailover topics create && gpufailover acls apply"
    )


def _new_broker(*, old: Broker | None, secure: bool = False) -> Broker:
    if old is not None:
        _err(f"--fresh: deleting cluster {old.cluster_id} ({old.run_dir})")
        old.remove_files()
    clear_state()
    broker = Broker.create(new_run_dir(), secure=secure)
    save_state(broker)  # recorded before the first start: a failed start is retried, not lost
    _err(f"new cluster {broker.cluster_id} on {broker.bootstrap} ({broker.run_dir})")
    return broker


def cmd_stop(args: argparse.Namespace) -> int:
    external = external_bootstrap()
    if external is not None:
        _err(f"KAFKA_BOOTSTRAP is set: the broker at {external} is not ours to stop")
        return 0
    try:
        broker = load_state()
    except BrokerStateError as exc:
        _err(f"{exc}\ncheck for a leftover Kafka process, then: {_FRESH_HINT}")
        return 1
    if broker is None:
        _err("no broker was started with `gpufailover broker start`")
        return 0
    what = _stop(broker, args)
    if what is None:
        return 1
    if args.delete_data:
        broker.remove_files()
        clear_state()
        _err(f"{what}; deleted cluster {broker.cluster_id} ({broker.run_dir})")
    else:
        save_state(broker)
        _err(f"{what}; data kept in {broker.run_dir}; `gpufailover broker start` resumes it")
    return 0


def _stop(broker: Broker, args: argparse.Namespace) -> str | None:
    """Stop or kill as the flags say; what happened, or None (reported) if it failed."""
    pid = broker.pid
    try:
        if args.kill:
            broker.kill()
        else:
            broker.stop(grace_s=args.grace)
    except BrokerError as exc:
        _err(f"could not stop pid {pid}: {exc}")
        return None
    if pid is None:
        return f"{broker.bootstrap} was not running"
    return f"{'killed' if args.kill else 'stopped'} {broker.bootstrap} (pid {pid})"


def cmd_restart(args: argparse.Namespace) -> int:
    external = external_bootstrap()
    if external is not None:
        _err(f"KAFKA_BOOTSTRAP is set: the broker at {external} is not ours to restart")
        return 1
    try:
        broker = load_state()
    except BrokerStateError as exc:
        if not args.fresh:
            _err(f"{exc}\n{_FRESH_HINT}")
            return 1
        broker = None  # cmd_start --fresh forgets the damaged record
    if broker is not None:
        what = _stop(broker, args)
        if what is None:
            return 1
        save_state(broker)
        _err(what)
    return cmd_start(args)


def cmd_status(args: argparse.Namespace) -> int:
    bootstrap = external_bootstrap()
    security = KafkaSecurity.from_env_and_args()
    if bootstrap is None:
        try:
            broker = load_state()
        except BrokerStateError as exc:
            _err(f"{exc}\n{_FRESH_HINT}")
            return 1
        if broker is None:
            _err("not running (no broker recorded; `gpufailover broker start` starts one)")
            return 1
        if not broker.is_running():
            _err(
                f"stopped; cluster {broker.cluster_id}, data in {broker.run_dir}; "
                f"`gpufailover broker start` resumes it on {broker.bootstrap}"
            )
            return 1
        bootstrap = broker.bootstrap
        print(f"pid {broker.pid}  cluster {broker.cluster_id}  log {broker.log_path}")
        if broker.secure is not None:
            print(f"SASL_SSL, CA {broker.secure.ca_cert}")
            security = broker.security()
    try:
        ids = run_sync(cluster_broker_ids(bootstrap, timeout_s=10.0, security=security))
    except KafkaUnavailableError as exc:
        _err(f"{bootstrap} does not answer: {exc}")
        return 1
    print(f"{bootstrap}  up, broker ids {ids}")
    return 0
