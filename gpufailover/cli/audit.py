"""`gpufailover audit`: every operator command on `operators.audit`, oldest first."""

from __future__ import annotations

import argparse
import asyncio
import sys
from datetime import UTC, datetime
from typing import Any

from gpufailover.cli.target import add_target_arguments, target, target_security


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "audit",
        help="print the operator audit trail (releases and breaker resets: who, when, why)",
        description="Read operators.audit to its end and print every command, oldest first. "
        "An `unauthenticated:<login>` principal was sent without SASL: the login name is "
        "whatever the sender's environment said, not an identity.",
    )
    parser.add_argument("--json", action="store_true", help="print the records as JSON lines")
    parser.add_argument("--target", default=None, help="only commands about this node")
    add_target_arguments(parser)
    parser.set_defaults(func=cmd_audit)


def render(command: Any) -> str:
    when = datetime.fromtimestamp(command.ts_ms / 1000, tz=UTC).isoformat(timespec="seconds")
    who, kind, what = command.principal, command.kind, command.target
    return f"{when}  {who:<24}  {kind:<13}  {what:<16}  {command.reason}"


def cmd_audit(args: argparse.Namespace) -> int:
    from consumers.runtime.oneshot import read_to_end
    from schemas.audit import OperatorCommand
    from schemas.codec import dumps, loads
    from schemas.errors import SchemaError

    bootstrap, names = target(args)
    records = asyncio.run(
        read_to_end(bootstrap, names.operators_audit, security=target_security(args))
    )
    commands = []
    for rec in records:
        try:
            commands.append(OperatorCommand.from_dict(loads(rec.value or b"")))
        except SchemaError as exc:
            print(f"gpufailover audit: unreadable record at {rec.where}: {exc}", file=sys.stderr)
    shown = [c for c in commands if args.target is None or c.target == args.target]
    for command in sorted(shown, key=lambda c: c.ts_ms):
        print(dumps(command.to_dict()).decode() if args.json else render(command))
    print(f"{len(shown)} operator command(s) on {names.operators_audit}", file=sys.stderr)
    return 0
