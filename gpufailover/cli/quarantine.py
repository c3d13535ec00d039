"""`gpufailover quarantine`: run the service; `release NODE`, `validate NODE`, `reset-breaker`
for operators."""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from consumers.quarantine.config import add_arguments
from gpufailover.cli.target import add_target_arguments, target, target_security


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "quarantine",
        help="run the quarantine service; release a node; reset the circuit breaker",
        description="Without an ACTION: run the quarantine service until SIGINT/SIGTERM.",
    )
    add_arguments(parser)
    parser.set_defaults(func=cmd_run)
    actions = parser.add_subparsers(dest="quarantine_action", metavar="ACTION")
    release = actions.add_parser(
        "release", help="release a quarantined node (publishes a `released` record)"
    )
    release.add_argument("node", help="the node to release")
    release.add_argument(
        "--reason", required=True, help="why (kept in the record's `detail` and in the audit)"
    )
    release.add_argument(
        "--force", action="store_true", help="publish even if the node is not quarantined"
    )
    add_target_arguments(release)
    release.set_defaults(func=cmd_release)
    validate = actions.add_parser(
        "validate",
        help="run the validation command on a quarantined node (via its agent); pass releases "
        "it only if the policy's auto_release is on (docs/node-lifecycle.md)",
    )
    validate.add_argument("node", help="the quarantined node to validate")
    validate.add_argument("--reason", required=True, help="why (kept in the audit record)")
    add_target_arguments(validate)
    validate.set_defaults(func=cmd_validate)
    reset = actions.add_parser(
        "reset-breaker", help="tell the running service to close its tripped circuit breaker"
    )
    reset.add_argument("--reason", required=True, help="why (kept in the audit record)")
    add_target_arguments(reset)
    reset.set_defaults(func=cmd_reset)


def cmd_run(args: argparse.Namespace) -> int:
    from consumers.quarantine.app import serve
    from consumers.quarantine.config import QuarantineSettings

    return serve(QuarantineSettings.from_env_and_args(args))


def cmd_release(args: argparse.Namespace) -> int:
    from consumers.quarantine.commands import release_node

    bootstrap, names = target(args)
    code, message = asyncio.run(
        release_node(
            bootstrap,
            names,
            args.node,
            args.reason,
            security=target_security(args),
            force=args.force,
        )
    )
    print(message, file=sys.stderr if code else sys.stdout)
    return code


def cmd_validate(args: argparse.Namespace) -> int:
    from consumers.quarantine.commands import validate_node

    bootstrap, names = target(args)
    code, message = asyncio.run(
        validate_node(bootstrap, names, args.node, args.reason, security=target_security(args))
    )
    print(message, file=sys.stderr if code else sys.stdout)
    return code


def cmd_reset(args: argparse.Namespace) -> int:
    from consumers.quarantine.commands import reset_breaker

    bootstrap, names = target(args)
    print(asyncio.run(reset_breaker(bootstrap, names, args.reason, security=target_security(args))))
    return 0
