"""`gpufailover replay FILE [--policy FILE]`."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator
from typing import IO, Any

from streams.policy import PolicyError, load_policy
from streams.replay import Replayer


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
    p.set_defaults(func=run)


def _lines(stream: IO[bytes]) -> Iterator[bytes]:
    yield from stream


def run(args: argparse.Namespace) -> int:
    try:
        policy = load_policy(args.policy)
    except PolicyError as exc:
        print(f"gpufailover replay: bad policy: {exc}", file=sys.stderr)
        return 2
    try:
        stream: IO[bytes] = sys.stdin.buffer if args.file == "-" else open(args.file, "rb")  # noqa: SIM115
    except OSError as exc:
        print(f"gpufailover replay: cannot read {args.file}: {exc.strerror}", file=sys.stderr)
        return 2
    replayer = Replayer(policy)
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
