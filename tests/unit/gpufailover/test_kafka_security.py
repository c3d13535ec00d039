"""Client security settings: flags and env, validation, what reaches aiokafka and faust, and
that the password never shows."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

import pytest

from gpufailover.security import (
    KafkaSecurity,
    SecurityConfigError,
    add_security_arguments,
    operator_identity,
)


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_security_arguments(parser)
    return parser.parse_args(list(argv))


@pytest.fixture(autouse=True)
def _no_security_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (
        "GPUFAILOVER_SECURITY_PROTOCOL",
        "GPUFAILOVER_SASL_MECHANISM",
        "GPUFAILOVER_SASL_USERNAME",
        "GPUFAILOVER_SASL_PASSWORD",
        "GPUFAILOVER_SASL_PASSWORD_FILE",
        "GPUFAILOVER_SSL_CAFILE",
    ):
        monkeypatch.delenv(name, raising=False)


def test_plaintext_by_default_passes_no_credentials() -> None:
    security = KafkaSecurity.from_env_and_args(parse())
    assert security.aiokafka_options() == {"security_protocol": "PLAINTEXT"}
    assert security.faust_credentials() is None
    assert security.authenticated_user is None


def test_sasl_from_flags_and_a_password_file(tmp_path: Path) -> None:
    secret = tmp_path / "pw"
    secret.write_text("s3cret-value\n", encoding="utf-8")
    args = parse(
        "--security-protocol", "sasl_plaintext", "--sasl-username", "agent",
        "--sasl-password-file", str(secret),
    )  # fmt: skip
    options = KafkaSecurity.from_env_and_args(args).aiokafka_options()
    assert options == {
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "agent",
        "sasl_plain_password": "s3cret-value",  # the file's trailing newline is not part of it
    }


def test_env_supplies_what_flags_do_not(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUFAILOVER_SECURITY_PROTOCOL", "SASL_PLAINTEXT")
    monkeypatch.setenv("GPUFAILOVER_SASL_USERNAME", "from-env")
    monkeypatch.setenv("GPUFAILOVER_SASL_PASSWORD", "pw-from-env")
    security = KafkaSecurity.from_env_and_args(parse("--sasl-username", "from-flag"))
    assert (security.username, security.password) == ("from-flag", "pw-from-env")
    assert operator_identity(security) == "from-flag"


def test_the_password_is_not_a_flag(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse("--sasl-password", "visible-in-ps")
    err = capsys.readouterr().err
    assert "--sasl-password-file" in err and "visible-in-ps" not in err


def test_the_password_never_shows_in_repr_or_logs(caplog: pytest.LogCaptureFixture) -> None:
    security = KafkaSecurity("SASL_PLAINTEXT", username="u", password="hunter2-secret")
    with caplog.at_level(logging.INFO):
        logging.getLogger("t").info("connecting with %s (%r)", security.describe(), security)
    assert "hunter2-secret" not in repr(security) + caplog.text
    assert "u" in security.describe()


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"protocol": "SASL_SSL"}, "user name"),
        ({"protocol": "SASL_SSL", "username": "u"}, "password"),
        ({"protocol": "TLS"}, "expected one of"),
        ({"protocol": "SASL_SSL", "username": "u", "password": "p", "mechanism": "MD5"}, "MD5"),
        ({"protocol": "PLAINTEXT", "cafile": "/ca.pem"}, "CA"),
        ({"protocol": "SSL", "certfile": "/c.pem"}, "both"),
    ],
)
def test_settings_that_cannot_work_are_refused_with_the_reason(
    kwargs: dict[str, str], words: str
) -> None:
    with pytest.raises(SecurityConfigError, match=words):
        KafkaSecurity(**kwargs)


def test_a_missing_password_file_is_a_clear_exit(tmp_path: Path) -> None:
    args = parse(
        "--security-protocol", "SASL_SSL", "--sasl-username", "u",
        "--sasl-password-file", str(tmp_path / "absent"),
    )  # fmt: skip
    with pytest.raises(SystemExit, match="cannot read the SASL password file"):
        KafkaSecurity.from_env_and_args(args)


def test_credentials_are_read_only_when_the_protocol_uses_them(tmp_path: Path) -> None:
    args = parse("--sasl-username", "agent", "--sasl-password-file", str(tmp_path / "absent"))
    assert KafkaSecurity.from_env_and_args(args) == KafkaSecurity()


def test_faust_gets_scram_credentials() -> None:
    import faust

    creds = KafkaSecurity("SASL_PLAINTEXT", username="c", password="p").faust_credentials()
    assert isinstance(creds, faust.SASLCredentials)
    assert (creds.mechanism.value, creds.username, creds.password) == ("SCRAM-SHA-512", "c", "p")
    assert creds.protocol.value == "SASL_PLAINTEXT"


def test_without_sasl_an_operator_is_marked_unauthenticated(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LOGNAME", "root")  # anyone can set it: it must not pass for an identity
    who = operator_identity(KafkaSecurity())
    assert who == "unauthenticated:root"
    signed = operator_identity(KafkaSecurity("SASL_PLAINTEXT", username="alice", password="p"))
    assert signed == "alice"


def test_a_bad_protocol_in_the_env_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUFAILOVER_SECURITY_PROTOCOL", "tls")
    with pytest.raises(SystemExit, match=r"got 'TLS' \(from GPUFAILOVER_SECURITY_PROTOCOL\)"):
        KafkaSecurity.from_env_and_args(parse())
    monkeypatch.setenv("GPUFAILOVER_SECURITY_PROTOCOL", "sasl_ssl")  # the case does not matter
    monkeypatch.setenv("GPUFAILOVER_SASL_USERNAME", "u")
    monkeypatch.setenv("GPUFAILOVER_SASL_PASSWORD", "p")
    assert KafkaSecurity.from_env_and_args(parse()).protocol == "SASL_SSL"
