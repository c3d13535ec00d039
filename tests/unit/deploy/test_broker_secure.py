"""`broker start --secure`'s files and properties, without starting a broker (openssl only)."""

from __future__ import annotations

import stat
import subprocess
from pathlib import Path

import pytest

from deploy.acls import ROLE_NAMES
from deploy.broker_config import BrokerPorts, parse_properties, ports_of, render_properties
from deploy.broker_secure import (
    USERS,
    SecureFiles,
    make_material,
    scram_format_args,
    secure_properties,
)


@pytest.fixture(scope="module")
def material(tmp_path_factory: pytest.TempPathFactory) -> SecureFiles:
    files = SecureFiles(tmp_path_factory.mktemp("secure"))
    make_material(files)
    return files


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_user_per_role_with_its_own_private_password(material: SecureFiles) -> None:
    assert set(USERS) == {"admin", *ROLE_NAMES}
    passwords = {material.password(u) for u in USERS}
    assert len(passwords) == len(USERS) and all(len(p) >= 32 for p in passwords)
    for user in USERS:
        assert mode(material.password_file(user)) == 0o600
    assert mode(material.broker_pem) == 0o600 and mode(material.ca_key) == 0o600


def test_the_broker_certificate_is_for_127_0_0_1_and_signed_by_the_ca(
    material: SecureFiles,
) -> None:
    cert = material.broker_pem.read_text().split("-----END PRIVATE KEY-----\n")[1]
    crt = material.tls_dir / "check.crt"
    crt.write_text(cert)
    verify = subprocess.run(
        ["openssl", "verify", "-CAfile", str(material.ca_cert), str(crt)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert verify.returncode == 0, verify.stderr
    san = subprocess.run(
        ["openssl", "x509", "-in", str(crt), "-noout", "-ext", "subjectAltName"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert "IP Address:127.0.0.1" in san and "DNS:localhost" in san


def test_acls_are_enforced_and_admin_is_the_only_super_user(material: SecureFiles) -> None:
    props = secure_properties(material, BrokerPorts(client=19092, controller=19093))
    assert props["authorizer.class.name"].endswith("StandardAuthorizer")
    assert props["allow.everyone.if.no.acl.found"] == "false"
    assert props["super.users"] == "User:admin"  # no ANONYMOUS: the controller authenticates
    assert props["listener.security.protocol.map"] == "CONTROLLER:SASL_PLAINTEXT,SASL_SSL:SASL_SSL"
    assert "PLAINTEXT://" not in props["listeners"].replace("SASL_PLAINTEXT", "")
    # What `broker start` reads back from the file to find its ports.
    assert ports_of(parse_properties(render_properties(props))) == BrokerPorts(19092, 19093)


def test_every_user_is_created_at_format_time(material: SecureFiles) -> None:
    args = scram_format_args(material)
    assert args[::2] == ["--add-scram"] * len(USERS)
    assert args[1] == f"SCRAM-SHA-512=[name=admin,password={material.password('admin')}]"
