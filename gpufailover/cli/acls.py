"""`gpufailover acls apply|show`: the role ACLs of deploy/acls.py on a broker.

Applied with the admin client's CreateAcls request (aiokafka 0.14 has no `create_acls` method,
only the protocol message). Creating an ACL that exists is a no-op on the broker, so `apply`
is idempotent. It needs a principal allowed to alter the cluster's ACLs (a super user).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from deploy.acls import ALLOW, ROLE_NAMES, AclBinding, all_bindings
from deploy.kafka_admin import admin_client
from gpufailover.cli.errors import quiet_kafka_client_logs
from gpufailover.cli.target import KafkaTarget
from gpufailover.errors import NotAuthorized, WrongState
from gpufailover.security import KafkaSecurity, add_security_arguments
from gpufailover.settings import add_arguments, default_bootstrap, resolve


class AclError(RuntimeError):
    """The broker refused to create an ACL (named in the message)."""


async def apply_acls(
    bootstrap: str, binds: list[AclBinding], *, security: KafkaSecurity, timeout_s: float = 30.0
) -> int:
    """Create every binding; the number created (existing ones count too: it is a no-op).
    A refusal raises NotAuthorized or WrongState (no authorizer), else AclError."""
    from aiokafka.errors import for_code
    from aiokafka.protocol.admin import CreateAclsRequest

    async with asyncio.timeout(timeout_s):
        async with admin_client(bootstrap, timeout_s=timeout_s, security=security) as admin:
            for b in binds:
                request = CreateAclsRequest(
                    int(b.resource),
                    b.name,
                    int(b.pattern),
                    b.principal,
                    "*",
                    int(b.operation),
                    ALLOW,
                )
                response = await admin._send_request(request)
                for code, message in response.creation_responses:
                    if code != 0:
                        raise _refused(bootstrap, b, for_code(code), message)
    return len(binds)


def _refused(
    bootstrap: str, binding: AclBinding, error: type[Exception], message: str | None
) -> Exception:
    """The broker's refusal of one ACL as the error kind the CLI reports (cli_errors)."""
    from aiokafka.errors import ClusterAuthorizationFailedError, SecurityDisabled

    detail = f"{error.__name__} creating {binding.describe()}" + (f": {message}" if message else "")
    if issubclass(error, SecurityDisabled):
        return WrongState(
            f"{bootstrap} has no authorizer, so it keeps no ACLs ({error.__name__}); nothing "
            "applied: start a secured broker (`gpufailover broker start --secure`) or point "
            "--bootstrap at one"
        )
    if issubclass(error, ClusterAuthorizationFailedError):
        return NotAuthorized(bootstrap, f"{detail} (applying ACLs needs a super user)")
    return AclError(detail)


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "acls",
        help="apply the per-role Kafka ACLs declared in deploy/acls.py",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = parser.add_subparsers(dest="acls_command", metavar="ACTION", required=True)
    apply = actions.add_parser("apply", help="create the ACLs of every role (idempotent)")
    show = actions.add_parser("show", help="print the ACLs `apply` would create")
    for p in (apply, show):
        add_arguments(p, KafkaTarget, only=("prefix",), document=p is apply)
        p.add_argument(
            "--user",
            action="append",
            default=[],
            metavar="ROLE=USER",
            help=f"SASL user of a role when it is not the role's name (roles: "
            f"{', '.join(ROLE_NAMES)}); repeatable",
        )
    add_arguments(apply, KafkaTarget, only=("bootstrap",))
    add_security_arguments(apply)
    apply.set_defaults(func=cmd_apply)
    show.set_defaults(func=cmd_show)


def _bindings(args: argparse.Namespace) -> list[AclBinding]:
    users: dict[str, str] = {}
    for item in args.user:
        role, sep, user = item.partition("=")
        if not sep or role not in ROLE_NAMES or not user:
            raise SystemExit(
                f"gpufailover acls: --user {item!r}: expected ROLE=USER, ROLE one of "
                f"{', '.join(ROLE_NAMES)}"
            )
        users[role] = user
    return all_bindings(resolve(KafkaTarget, args).prefix, users)


def cmd_show(args: argparse.Namespace) -> int:
    for b in _bindings(args):
        print(b.describe())
    return 0


def cmd_apply(args: argparse.Namespace) -> int:
    quiet_kafka_client_logs()
    binds = _bindings(args)
    bootstrap = resolve(KafkaTarget, args).bootstrap or default_bootstrap()
    security = KafkaSecurity.from_env_and_args(args)
    try:
        count = asyncio.run(apply_acls(bootstrap, binds, security=security))
    except AclError as exc:  # any other refusal (the rest: gpufailover.cli.main)
        print(f"gpufailover acls: {bootstrap}: {exc}", file=sys.stderr)
        return 1
    print(f"{count} ACLs for roles {', '.join(ROLE_NAMES)} on {bootstrap}", file=sys.stderr)
    return 0
