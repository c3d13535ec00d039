"""`gpufailover replay FILE [--policy FILE] [--compare NEW_POLICY [--json]]`."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import IO, Any

import orjson

from gpufailover import settings as declare
from gpufailover.cli.options import PolicyChoice
from gpufailover.errors import UsageError
from gpufailover.settings import setting
from streams.policy import Policy, PolicyError, load_policy
from streams.replay import Replayer

# `replay --compare`: some decision changed. Replay never contacts a broker, so this cannot be
# read as gpufailover.cli.errors' "broker unreachable" (also 3); docs/cli.md says so.
EXIT_DECISIONS_CHANGED = 3


@dataclass(frozen=True)
class ReplayClock:
    now: str = setting(
        "",
        env="GPUFAILOVER_REPLAY_NOW",
        flag="--now",
        help="the wall clock replay checks the max future skew against: epoch ms or an ISO 8601 "
        "time with its zone. A record stamped more than GPUFAILOVER_MAX_FUTURE_SKEW_S "
        "(default 300) after it is dead-lettered",
        shown_default="the current time",
    )


def register(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "replay",
        help="run the decision engine offline over a JSONL dump of topics",
        description="Replay a JSONL dump ({topic, key, value} per line, file order) through the "
        "decision engine. Prints the records the pipeline would publish (decisions, quarantines, "
        "dead letters) on stdout and a summary on stderr.",
    )
    p.add_argument("file", help="JSONL dump, or - for stdin")
    declare.add_arguments(p, PolicyChoice)
    declare.add_arguments(p, ReplayClock)
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


def _policy(path: str | None, what: str) -> Policy:
    try:
        return load_policy(path)
    except PolicyError as exc:
        raise UsageError(f"{what}: {exc}") from None


def _read_lines(path: str) -> Iterator[bytes]:
    """The dump's lines (opened now, closed at the end); a read failure is the user's (exit 2)."""
    try:
        stream: IO[bytes] = sys.stdin.buffer if path == "-" else open(path, "rb")  # noqa: SIM115
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from None
    return _lines(stream)


def _lines(stream: IO[bytes]) -> Iterator[bytes]:
    try:
        yield from stream
    except OSError as exc:
        raise UsageError(f"read failed: {exc}") from None
    finally:
        if stream is not sys.stdin.buffer:
            stream.close()


def run(args: argparse.Namespace) -> int:
    if args.json and args.compare is None:
        raise UsageError("--json goes with --compare NEW_POLICY")
    policy = _policy(declare.resolve(PolicyChoice, args).policy or None, "bad policy")
    try:
        now = parse_now(declare.resolve(ReplayClock, args).now or None)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    lines = _read_lines(args.file)
    if args.compare is not None:
        return _compare(args, lines, policy, now)
    replayer = Replayer(policy, now)
    out = sys.stdout.buffer
    for line in replayer.run(lines):
        out.write(line)
        out.write(b"\n")
    out.flush()
    print(replayer.stats.summary(), file=sys.stderr)
    return 0


def _compare(
    args: argparse.Namespace, lines: Iterator[bytes], policy: Policy, now: int | None
) -> int:
    from streams.replay_compare import compare

    new_policy = _policy(args.compare, "bad --compare policy")
    result = compare(list(lines), policy, new_policy, now)
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
