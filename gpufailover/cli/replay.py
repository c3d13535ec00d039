"""`gpufailover replay FILE [--policy FILE] [--compare NEW_POLICY [--json]]`."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator
from datetime import datetime
from typing import IO, Any

import orjson

from streams.policy import Policy, PolicyError, load_policy
from streams.replay import Replayer

# `replay --compare`: some decision changed. Replay never contacts a broker, so this cannot be
# read as gpufailover.cli.errors' "broker unreachable" (also 3); docs/cli.md says so.
EXIT_DECISIONS_CHANGED = 3


def register(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "replay",
        help="run the decision engine offline over a JSONL dump of topics",
        description="Replay a JSONL dump ({topic, key, value} per line, file order) through the "
        "decision engine. Prints the records the pipeline would publish (decisions, quarantines, "
        "dead letters) on stdout and a summary on stderr.",
    )
    p.add_argument("file", help="JSONL dump, or - for stdin")
    p.add_argument(
        "--policy",
        default=os.environ.get("GPUFAILOVER_POLICY"),
        help="policy JSON file (env GPUFAILOVER_POLICY; default: the shipped policy)",
    )
    p.add_argument(
        "--now",
        default=os.environ.get("GPUFAILOVER_REPLAY_NOW"),
        help="the wall clock replay checks the max future skew against: epoch ms or an ISO 8601 "
        "time with its zone (env GPUFAILOVER_REPLAY_NOW; default: the current time). A record "
        "stamped more than GPUFAILOVER_MAX_FUTURE_SKEW_S (default 300) after it is "
        "dead-lettered",
    )
    p.add_argument(
        "--compare",
        metavar="NEW_POLICY",
        default=None,
        help="replay under --policy and under NEW_POLICY and print how the decisions change "
        "(counts by verdict and action, each changed job with the evidence that flipped it) "
        f"instead of the records; exit {EXIT_DECISIONS_CHANGED} when a decision or the set of "
        "quarantined nodes changes, 0 when nothing does",
    )
    p.add_argument("--json", action="store_true", help="with --compare: print it as JSON")
    p.set_defaults(func=run)


def parse_now(raw: str | None) -> int | None:
    """`--now` as epoch ms; None for the wall clock. ValueError names what is wrong."""
    if raw is None or raw == "":
        return None
    if raw.isdigit():
        return int(raw)
    try:
        when = datetime.fromisoformat(raw)
    except ValueError:
        raise ValueError(f"--now {raw!r}: expected epoch ms or an ISO 8601 time") from None
    if when.tzinfo is None:
        raise ValueError(f"--now {raw!r}: give a time zone (e.g. Z or +00:00)")
    return int(when.timestamp() * 1000)


def _lines(stream: IO[bytes]) -> Iterator[bytes]:
    yield from stream


def run(args: argparse.Namespace) -> int:
    if args.json and args.compare is None:
        print("gpufailover replay: --json goes with --compare NEW_POLICY", file=sys.stderr)
        return 2
    try:
        policy = load_policy(args.policy)
    except PolicyError as exc:
        print(f"gpufailover replay: bad policy: {exc}", file=sys.stderr)
        return 2
    try:
        now = parse_now(args.now)
    except ValueError as exc:
        print(f"gpufailover replay: {exc}", file=sys.stderr)
        return 2
    try:
        stream: IO[bytes] = sys.stdin.buffer if args.file == "-" else open(args.file, "rb")  # noqa: SIM115
    except OSError as exc:
        print(f"gpufailover replay: cannot read {args.file}: {exc.strerror}", file=sys.stderr)
        return 2
    if args.compare is not None:
        return _compare(args, stream, policy, now)
    replayer = Replayer(policy, now)
    out = sys.stdout.buffer
    try:
        for line in replayer.run(_lines(stream)):
            out.write(line)
            out.write(b"\n")
    except OSError as exc:
        print(f"gpufailover replay: read failed: {exc}", file=sys.stderr)
        return 2
    finally:
        if stream is not sys.stdin.buffer:
            stream.close()
    out.flush()
    print(replayer.stats.summary(), file=sys.stderr)
    return 0


def _compare(args: argparse.Namespace, stream: IO[bytes], policy: Policy, now: int | None) -> int:
    from streams.replay_compare import compare

    try:
        new_policy = load_policy(args.compare)
    except PolicyError as exc:
        print(f"gpufailover replay: bad --compare policy: {exc}", file=sys.stderr)
        return 2
    try:
        lines = list(_lines(stream))
    except OSError as exc:
        print(f"gpufailover replay: read failed: {exc}", file=sys.stderr)
        return 2
    finally:
        if stream is not sys.stdin.buffer:
            stream.close()
    result = compare(lines, policy, new_policy, now)
    if args.json:
        print(orjson.dumps(result.to_dict(), option=orjson.OPT_INDENT_2).decode())
    else:
        print(result.render())
    print(
        f"gpufailover replay: {len(result.changes)} of {len(result.before.decisions)} "
        f"decision(s) change under {new_policy.source}",
        file=sys.stderr,
    )
    return EXIT_DECISIONS_CHANGED if result.changed else 0
