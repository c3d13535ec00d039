"""What `gpufailover broker start --secure` adds to the local broker: a CA and a broker
certificate (made with `openssl`), one SCRAM-SHA-512 user per role plus `admin` (the super user),
and the server properties of a SASL_SSL listener with KRaft's StandardAuthorizer.

Files, under the run directory (mode 0600 for secrets):
    tls/ca.pem               the CA clients trust (`--ssl-cafile`)
    tls/ca.key, broker.pem   the CA key; the broker's key + certificate (PEM keystore)
    secrets/<user>.password  each SCRAM user's password (`--sasl-password-file`)

The controller listener stays on 127.0.0.1 and authenticates with SASL/PLAIN (`admin` only):
KRaft cannot use SCRAM there, because SCRAM credentials live in the metadata the controller
serves, and a PLAINTEXT controller would need an all-powerful ANONYMOUS super user.
"""

from __future__ import annotations

import os
import secrets
import subprocess
from dataclasses import dataclass
from pathlib import Path

from deploy.acls import ROLE_NAMES
from deploy.broker_config import HOST, BrokerPorts
from gpufailover.security import KafkaSecurity

ADMIN = "admin"
USERS: tuple[str, ...] = (ADMIN, *ROLE_NAMES)
LISTENER = "SASL_SSL"
MECHANISM = "SCRAM-SHA-512"
_DAYS = "3650"


class TlsError(RuntimeError):
    """openssl failed (its output in the message)."""


@dataclass(frozen=True)
class SecureFiles:
    run_dir: Path

    @property
    def tls_dir(self) -> Path:
        return self.run_dir / "tls"

    @property
    def ca_cert(self) -> Path:
        return self.tls_dir / "ca.pem"

    @property
    def ca_key(self) -> Path:
        return self.tls_dir / "ca.key"

    @property
    def broker_pem(self) -> Path:
        """Private key (PKCS#8) then certificate: Kafka's PEM keystore format."""
        return self.tls_dir / "broker.pem"

    @property
    def secrets_dir(self) -> Path:
        return self.run_dir / "secrets"

    def password_file(self, user: str) -> Path:
        return self.secrets_dir / f"{user}.password"

    def password(self, user: str) -> str:
        return self.password_file(user).read_text(encoding="utf-8").strip()

    def exists(self) -> bool:
        return self.ca_cert.exists() and self.password_file(ADMIN).exists()

    def security(self, user: str = ADMIN) -> KafkaSecurity:
        """How `user` connects to this broker."""
        return KafkaSecurity(
            protocol=LISTENER,
            mechanism=MECHANISM,
            username=user,
            password=self.password(user),
            cafile=str(self.ca_cert),
        )

    def env(self, user: str) -> dict[str, str]:
        """The GPUFAILOVER_* variables that make a process connect as `user`."""
        return {
            "GPUFAILOVER_SECURITY_PROTOCOL": LISTENER,
            "GPUFAILOVER_SASL_MECHANISM": MECHANISM,
            "GPUFAILOVER_SASL_USERNAME": user,
            "GPUFAILOVER_SASL_PASSWORD_FILE": str(self.password_file(user)),
            "GPUFAILOVER_SSL_CAFILE": str(self.ca_cert),
        }


def _private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(text)


def _openssl(*args: str, cwd: Path) -> None:
    proc = subprocess.run(
        ["openssl", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    if proc.returncode != 0:
        raise TlsError(f"openssl {args[0]} failed ({proc.returncode}): {proc.stderr.strip()}")


def make_material(files: SecureFiles) -> None:
    """A new CA, a broker certificate for 127.0.0.1/localhost, and a password per user."""
    tls = files.tls_dir
    tls.mkdir(parents=True, exist_ok=True, mode=0o700)
    files.secrets_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    _openssl(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", _DAYS,
        "-subj", "/CN=gpufailover local CA", "-keyout", "ca.key", "-out", "ca.pem",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        cwd=tls,
    )  # fmt: skip
    _openssl(
        "req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={HOST}",
        "-keyout", "broker.key", "-out", "broker.csr",
        cwd=tls,
    )  # fmt: skip
    (tls / "broker.ext").write_text(
        f"subjectAltName=IP:{HOST},DNS:localhost\n"
        "basicConstraints=CA:FALSE\n"
        "keyUsage=critical,digitalSignature,keyEncipherment\n"
        "extendedKeyUsage=serverAuth,clientAuth\n",
        encoding="utf-8",
    )
    _openssl(
        "x509", "-req", "-in", "broker.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
        "-CAcreateserial", "-days", _DAYS, "-extfile", "broker.ext", "-out", "broker.crt",
        cwd=tls,
    )  # fmt: skip
    key = (tls / "broker.key").read_text(encoding="ascii")
    cert = (tls / "broker.crt").read_text(encoding="ascii")
    _private(files.broker_pem, key + cert)
    for leftover in ("broker.key", "broker.csr", "broker.crt", "broker.ext"):
        (tls / leftover).unlink()
    os.chmod(files.ca_key, 0o600)
    for user in USERS:
        _private(files.password_file(user), secrets.token_urlsafe(24) + "\n")


def _jaas(module: str, options: dict[str, str]) -> str:
    # Kafka's JAAS parser takes quoted values; our passwords are URL-safe base64.
    pairs = " ".join(f'{k}="{v}"' for k, v in options.items())
    return f"org.apache.kafka.common.security.{module} required {pairs};"


def secure_properties(files: SecureFiles, ports: BrokerPorts) -> dict[str, str]:
    """Overrides of the plain broker's server properties for a SASL_SSL broker."""
    password = files.password(ADMIN)
    return {
        "listeners": f"{LISTENER}://{HOST}:{ports.client},CONTROLLER://{HOST}:{ports.controller}",
        "advertised.listeners": f"{LISTENER}://{HOST}:{ports.client}",
        "inter.broker.listener.name": LISTENER,
        "listener.security.protocol.map": f"CONTROLLER:SASL_PLAINTEXT,{LISTENER}:{LISTENER}",
        "sasl.enabled.mechanisms": MECHANISM,
        "sasl.mechanism.inter.broker.protocol": MECHANISM,
        "sasl.mechanism.controller.protocol": "PLAIN",
        "listener.name.controller.sasl.enabled.mechanisms": "PLAIN",
        "listener.name.controller.plain.sasl.jaas.config": _jaas(
            "plain.PlainLoginModule",
            {"username": ADMIN, "password": password, f"user_{ADMIN}": password},
        ),
        "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": _jaas(
            "scram.ScramLoginModule", {"username": ADMIN, "password": password}
        ),
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(files.broker_pem),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(files.ca_cert),
        "ssl.client.auth": "none",
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "allow.everyone.if.no.acl.found": "false",
        "super.users": f"User:{ADMIN}",
    }


def scram_format_args(files: SecureFiles) -> list[str]:
    """`kafka-storage format` arguments creating every user's SCRAM credential."""
    args: list[str] = []
    for user in USERS:
        args += ["--add-scram", f"{MECHANISM}=[name={user},password={files.password(user)}]"]
    return args
