"""`gpufailover publish TYPE --job-id ID --attempt N ...`: one job event from a scheduler hook.

Everything is validated before connecting: a bad argument prints a clear message and exits 2
without publishing anything. Broker trouble exits with the codes of `gpufailover.cli.errors`
(3 unreachable, 4 topics missing, 5 not authorized), one line each. `--dry-run` prints the
record instead.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

import orjson

from gpufailover.cli.target import KafkaTarget
from gpufailover.security import PLAINTEXT, KafkaSecurity, add_security_arguments
from gpufailover.settings import add_arguments, resolve
from producers.hostlist import HostlistError, expand_hostlist
from schemas.errors import SchemaError
from schemas.jobs import EVENT_TYPES, JobEvent

EXIT_BAD_ARGS = 2


class UsageError(ValueError):
    """An argument is invalid: nothing is published."""


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "publish",
        help="publish one job lifecycle event to jobs.events (for scheduler hooks)",
        description="Publish one job event. Validates everything before connecting; on a bad "
        "argument it exits 2 and publishes nothing.",
    )
    parser.add_argument("type", choices=sorted(EVENT_TYPES), help="the event type")
    parser.add_argument("--job-id", required=True, help="the job's id (the record key)")
    parser.add_argument(
        "--attempt", required=True, help="attempt number, 0 for the first run (>= 0)"
    )
    parser.add_argument(
        "--nodes",
        default=None,
        help="nodes the attempt ran on: comma list or Slurm hostlist (gpu-[01-04],gpu-07); "
        "required for started and terminated",
    )
    parser.add_argument("--exit-code", default=None, help="the job's exit code (integer)")
    parser.add_argument("--reason", default=None, help="why it ended, e.g. OOMKilled, Hang")
    parser.add_argument(
        "--no-failover", action="store_true", help="the job did not opt in to failover"
    )
    parser.add_argument("--spot", action="store_true", help="a spot job (never failed over)")
    parser.add_argument(
        "--max-failovers", default=None, help="per-job failover cap (default: the policy's)"
    )
    parser.add_argument("--priority", default=None, help="scheduling priority (integer)")
    parser.add_argument("--spec", default=None, help="job definition as a JSON object")
    parser.add_argument("--ts-ms", default=None, help="event time, epoch ms (default: now)")
    add_arguments(parser, KafkaTarget)
    parser.add_argument(
        "--timeout", type=float, default=30.0, help="seconds to wait for the broker (30)"
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="print the validated record, publish nothing"
    )
    add_security_arguments(parser)
    parser.set_defaults(func=cmd_publish)


def _err(message: str) -> None:
    print(f"gpufailover publish: {message}", file=sys.stderr)


def _int(name: str, raw: str | None, minimum: int | None = None) -> int | None:
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise UsageError(f"--{name}: expected an integer, got {raw!r}") from None
    if minimum is not None and value < minimum:
        raise UsageError(f"--{name}: must be >= {minimum}, got {value}")
    return value


def _spec(raw: str | None) -> dict[str, Any] | None:
    if raw is None:
        return None
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise UsageError(f"--spec: not valid JSON ({exc})") from None
    if not isinstance(value, dict):
        raise UsageError(f"--spec: expected a JSON object, got {type(value).__name__}")
    return value


def build_event(args: argparse.Namespace, now_ms: int) -> JobEvent:
    """The validated event the arguments describe; UsageError naming the argument if not."""
    from producers.jobs import checked_event

    if not args.job_id.strip():
        raise UsageError("--job-id: must not be empty")
    if args.nodes is not None and not args.nodes.strip():
        raise UsageError("--nodes: must not be empty")
    try:
        nodes = expand_hostlist(args.nodes) if args.nodes is not None else ()
    except HostlistError as exc:
        raise UsageError(f"--nodes: {exc}") from None
    exit_code = _int("exit-code", args.exit_code)
    if args.type == "succeeded" and exit_code not in (None, 0):
        raise UsageError(f"--exit-code {exit_code} contradicts a succeeded event")
    if args.reason is not None and not args.reason.strip():
        raise UsageError("--reason: must not be empty when given")
    ts_ms = _int("ts-ms", args.ts_ms, minimum=0)
    attempt = _int("attempt", args.attempt, minimum=0)
    assert attempt is not None  # required by argparse
    event = JobEvent(
        job_id=args.job_id,
        attempt=attempt,
        type=args.type,
        ts_ms=now_ms if ts_ms is None else ts_ms,
        nodes=nodes,
        exit_code=exit_code,
        reason=args.reason,
        failover=not args.no_failover,
        training_type="spot" if args.spot else "on_demand",
        max_failovers=_int("max-failovers", args.max_failovers, minimum=0),
        priority=_int("priority", args.priority),
        spec=_spec(args.spec),
    )
    try:
        return checked_event(event)
    except SchemaError as exc:
        raise UsageError(f"--{exc.field.replace('_', '-')}: {exc.reason}") from None


def cmd_publish(args: argparse.Namespace) -> int:
    from producers.jobs import now_ms
    from schemas.topics import TopicNames

    where = resolve(KafkaTarget, args)
    try:
        names = TopicNames(where.prefix)
        if not args.timeout > 0:
            raise UsageError(f"--timeout: must be > 0, got {args.timeout}")
        event = build_event(args, now_ms())
    except (UsageError, ValueError) as exc:
        _err(f"error: {exc}; nothing published")
        return EXIT_BAD_ARGS
    if args.dry_run:
        print(orjson.dumps({"topic": names.jobs_events, "value": event.to_dict()}).decode())
        return 0
    security = KafkaSecurity.from_env_and_args(args)
    return asyncio.run(_publish(where.bootstrap or None, names, event, args.timeout, security))


async def _publish(
    bootstrap: str | None,
    names: Any,
    event: JobEvent,
    timeout_s: float,
    security: KafkaSecurity = PLAINTEXT,
) -> int:
    """Publish, or raise what `gpufailover.cli.main` reports: the topic is checked first, so
    a broker without topics fails at once rather than when the timeout runs out."""
    from gpufailover.cli.errors import quiet_kafka_client_logs
    from gpufailover.errors import BrokerUnreachable
    from producers.jobs import JobEventPublisher

    quiet_kafka_client_logs()
    publisher = JobEventPublisher(
        bootstrap,
        topics=names,
        security=security,
        request_timeout_ms=max(1000, int(timeout_s * 1000)),
    )
    try:
        async with asyncio.timeout(timeout_s), publisher:
            await publisher.require_topic()
            await publisher.publish(event)
    except TimeoutError:
        raise BrokerUnreachable(
            publisher.bootstrap, f"no acknowledgement within --timeout {timeout_s:g}s"
        ) from None
    print(f"published {event.type} job={event.job_id} attempt={event.attempt}", file=sys.stderr)
    return 0
