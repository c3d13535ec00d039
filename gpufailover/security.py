"""How a client authenticates to Kafka: one frozen object per process, built once from flags and
`GPUFAILOVER_*` env vars, handed to every factory in `gpufailover.kafka` and to faust.

Secrets come only from a file (`--sasl-password-file` / `GPUFAILOVER_SASL_PASSWORD_FILE`) or the
environment (`GPUFAILOVER_SASL_PASSWORD`): a flag value would show in `ps` and shell history.
The password is never part of `repr()` or a log line.
"""

from __future__ import annotations

import argparse
import getpass
import os
import ssl
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpufailover import settings as declare
from gpufailover.settings import setting

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN")
DEFAULT_MECHANISM = "SCRAM-SHA-512"


@dataclass(frozen=True)
class SecurityOptions:
    """The security flags and env vars, as declared; `KafkaSecurity.build` reads them."""

    security_protocol: str = setting(
        "PLAINTEXT",
        env="GPUFAILOVER_SECURITY_PROTOCOL",
        flag="--security-protocol",
        help="Kafka security protocol",
        choices=PROTOCOLS,
        convert=str.upper,
        label="security protocol",
    )
    sasl_mechanism: str = setting(
        DEFAULT_MECHANISM,
        env="GPUFAILOVER_SASL_MECHANISM",
        flag="--sasl-mechanism",
        help="SASL mechanism",
        choices=MECHANISMS,
        convert=str.upper,
        label="SASL mechanism",
    )
    sasl_username: str = setting(
        "",
        env="GPUFAILOVER_SASL_USERNAME",
        flag="--sasl-username",
        help="SASL user name (the principal)",
    )
    sasl_password_file: str = setting(
        "",
        env="GPUFAILOVER_SASL_PASSWORD_FILE",
        flag="--sasl-password-file",
        help="file holding the SASL password (or env GPUFAILOVER_SASL_PASSWORD; never a flag "
        "value)",
    )
    ssl_cafile: str = setting(
        "",
        env="GPUFAILOVER_SSL_CAFILE",
        flag="--ssl-cafile",
        help="CA bundle that signed the broker certificate",
    )
    ssl_certfile: str = setting(
        "",
        env="GPUFAILOVER_SSL_CERTFILE",
        flag="--ssl-certfile",
        help="client certificate (SSL client auth)",
    )
    ssl_keyfile: str = setting(
        "",
        env="GPUFAILOVER_SSL_KEYFILE",
        flag="--ssl-keyfile",
        help="client private key (SSL client auth)",
    )


class SecurityConfigError(ValueError):
    """Security settings that cannot work together (named in the message)."""


@dataclass(frozen=True)
class KafkaSecurity:
    """PLAINTEXT by default; `aiokafka_options()` and `faust_credentials()` apply it."""

    protocol: str = "PLAINTEXT"
    mechanism: str = DEFAULT_MECHANISM
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    cafile: str | None = None
    certfile: str | None = None
    keyfile: str | None = None

    def __post_init__(self) -> None:
        if self.protocol not in PROTOCOLS:
            raise SecurityConfigError(
                f"security protocol {self.protocol!r}: expected one of {', '.join(PROTOCOLS)}"
            )
        if self.mechanism not in MECHANISMS:
            raise SecurityConfigError(
                f"SASL mechanism {self.mechanism!r}: expected one of {', '.join(MECHANISMS)}"
            )
        if self.uses_sasl and not (self.username and self.password):
            raise SecurityConfigError(
                f"{self.protocol} needs a SASL user name (--sasl-username / "
                "GPUFAILOVER_SASL_USERNAME) and a password (--sasl-password-file / "
                "GPUFAILOVER_SASL_PASSWORD_FILE / GPUFAILOVER_SASL_PASSWORD)"
            )
        if (self.certfile is None) != (self.keyfile is None):
            raise SecurityConfigError("a client certificate needs both --ssl-certfile and key")
        if not self.uses_ssl and (self.cafile or self.certfile):
            raise SecurityConfigError(f"CA or client certificate given for {self.protocol}")

    @property
    def uses_sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    @property
    def uses_ssl(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def authenticated_user(self) -> str | None:
        """The SASL user the broker authenticates us as (None: no SASL, no identity)."""
        return self.username if self.uses_sasl else None

    def describe(self) -> str:
        """For logs: protocol and user, never the password."""
        who = f" as {self.username}" if self.uses_sasl else ""
        return f"{self.protocol}{who}"

    def ssl_context(self) -> ssl.SSLContext | None:
        if not self.uses_ssl:
            return None
        from aiokafka.helpers import create_ssl_context

        context: ssl.SSLContext = create_ssl_context(
            cafile=self.cafile, certfile=self.certfile, keyfile=self.keyfile
        )
        return context

    def aiokafka_options(self) -> dict[str, Any]:
        """Keyword arguments of AIOKafkaProducer/Consumer/AdminClient."""
        options: dict[str, Any] = {"security_protocol": self.protocol}
        if self.uses_ssl:
            options["ssl_context"] = self.ssl_context()
        if self.uses_sasl:
            options["sasl_mechanism"] = self.mechanism
            options["sasl_plain_username"] = self.username
            options["sasl_plain_password"] = self.password
        return options

    def faust_credentials(self) -> Any:
        """faust's `broker_credentials` (None for PLAINTEXT): faust 0.15.3 hands them to its
        consumer, producer and admin clients (`credentials_to_aiokafka_auth`)."""
        import faust

        if self.uses_sasl:
            return faust.SASLCredentials(
                username=self.username,
                password=self.password,
                ssl_context=self.ssl_context(),
                mechanism=self.mechanism,
            )
        if self.uses_ssl:
            return faust.SSLCredentials(self.ssl_context())
        return None

    @staticmethod
    def from_env_and_args(args: argparse.Namespace | None = None) -> KafkaSecurity:
        """Flags first, then env vars; SystemExit with the reason when they do not fit."""
        try:
            return KafkaSecurity.build(args)
        except SecurityConfigError as exc:
            raise SystemExit(f"Kafka security settings: {exc}") from None

    @staticmethod
    def build(args: argparse.Namespace | None = None) -> KafkaSecurity:
        """Flags first, then env vars; SecurityConfigError when they do not fit."""

        given = declare.resolve(SecurityOptions, args)
        protocol = given.security_protocol or "PLAINTEXT"
        # Read only when used: manifests may wire a role's (optional) secret file everywhere
        # and let the protocol decide.
        sasl = protocol.startswith("SASL_")
        return KafkaSecurity(
            protocol=protocol,
            mechanism=given.sasl_mechanism or DEFAULT_MECHANISM,
            username=(given.sasl_username or None) if sasl else None,
            password=_read_password(given.sasl_password_file or None) if sasl else None,
            cafile=given.ssl_cafile or None,
            certfile=given.ssl_certfile or None,
            keyfile=given.ssl_keyfile or None,
        )


PLAINTEXT = KafkaSecurity()


def _read_password(path: str | None) -> str | None:
    if path:
        try:
            return Path(path).read_text(encoding="utf-8").rstrip("\r\n")
        except OSError as exc:
            raise SecurityConfigError(f"cannot read the SASL password file {path}: {exc}") from None
    return os.environ.get("GPUFAILOVER_SASL_PASSWORD") or None


class _RefusePassword(argparse.Action):
    """`--sasl-password VALUE` is refused (without echoing VALUE): a flag value shows in `ps`
    and shell history. Declared so that argparse does not take it as an abbreviation of
    `--sasl-password-file`."""

    def __call__(self, parser: argparse.ArgumentParser, *_: Any, **__: Any) -> None:
        parser.error(
            "--sasl-password: a password is never taken from the command line; use "
            "--sasl-password-file FILE or the GPUFAILOVER_SASL_PASSWORD env var"
        )


def add_security_arguments(parser: argparse.ArgumentParser, *, suppress: bool = False) -> None:
    """The security flags (`suppress`: on a sub-action's parser, not clobbering the parent's)."""
    parser.add_argument("--sasl-password", action=_RefusePassword, help=argparse.SUPPRESS)
    # Documented once for all commands (docs/settings.md), not in every command's table.
    declare.add_arguments(parser, SecurityOptions, suppress=suppress, document=False)


def operator_identity(security: KafkaSecurity) -> str:
    """Who an operator command is recorded as: the SASL user the broker authenticated, else
    `unauthenticated:<login>` so that nobody mistakes a login name (which LOGNAME overrides)
    for an identity."""
    user = security.authenticated_user
    if user is not None:
        return user
    try:
        login = getpass.getuser()
    except (KeyError, OSError):
        login = "unknown"
    return f"unauthenticated:{login}"
