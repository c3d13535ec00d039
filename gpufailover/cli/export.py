"""`gpufailover export --since 24h [--until T]`: the input topics of a time range as replay's
JSONL, for `gpufailover replay FILE --compare NEW_POLICY` (policy what-if on real history)."""

from __future__ import annotations

import argparse
import asyncio
import sys
from dataclasses import dataclass
from typing import Any

from gpufailover import settings as env
from gpufailover.cli.target import add_target_arguments, target, target_security
from gpufailover.errors import UsageError
from gpufailover.settings import setting


@dataclass(frozen=True)
class ExportRange:
    since: str = setting(
        "24h",
        env="GPUFAILOVER_EXPORT_SINCE",
        flag="--since",
        help="start: a duration before now (24h, 90m, 7d), epoch ms or an ISO 8601 time with "
        "its zone",
    )
    until: str = setting(
        "",
        env="GPUFAILOVER_EXPORT_UNTIL",
        flag="--until",
        help="end (exclusive), in the same forms",
        shown_default="the end of each partition when the export starts",
    )


def register(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "export",
        help="dump the input topics of a time range as JSONL for `gpufailover replay`",
        description="Read gpu.xid, gpu.health, jobs.events, training.telemetry and "
        "nodes.quarantine from the first record stamped at or after --since to the first at or "
        "after --until (Kafka timestamps, found with offsets_for_times; the end of each "
        "partition when the export started if no --until) and print them on stdout, one "
        '{"topic", "key", "value"} line each, in event-time order (held in memory to sort). '
        "Progress goes to stderr. nodes.quarantine is compacted: only the records Kafka kept.",
    )
    env.add_arguments(p, ExportRange)
    add_target_arguments(p)
    p.set_defaults(func=cmd_export)


def cmd_export(args: argparse.Namespace) -> int:
    from streams.clock import now_ms
    from streams.export import EXPORTED_TOPICS, LineSorter, parse_time
    from streams.export_scan import Progress, scan_into

    now = now_ms()
    window = env.resolve(ExportRange, args)
    try:
        since = parse_time(window.since, now, "--since")
        until = parse_time(window.until, now, "--until") if window.until else None
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if until is not None and until <= since:
        raise UsageError(f"--until ({until}) must be after --since ({since})")
    bootstrap, names = target(args)
    real = {names.name(t): t for t in EXPORTED_TOPICS}
    sorter = LineSorter(real)
    asyncio.run(
        scan_into(
            sorter.add,
            bootstrap,
            dict.fromkeys(real),
            since_ms=since,
            until_ms=until,
            security=target_security(args),
            progress=Progress("gpufailover export"),
        )
    )
    lines, stats = sorter.lines()
    out = sys.stdout.buffer
    for line in lines:
        out.write(line)
        out.write(b"\n")
    out.flush()
    print(
        f"gpufailover export: {stats.lines} records from {bootstrap} "
        f"({stats.tombstones} tombstones skipped, {stats.not_json} values not JSON kept as text)",
        file=sys.stderr,
    )
    return 0
