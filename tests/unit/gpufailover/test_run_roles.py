"""`gpufailover run` gives each service its own Kafka user when one is configured."""

from __future__ import annotations

from gpufailover.cli.run import service_env

SHARED = {
    "GPUFAILOVER_SECURITY_PROTOCOL": "SASL_SSL",
    "GPUFAILOVER_SASL_USERNAME": "shared",
    "GPUFAILOVER_SASL_PASSWORD": "shared-pw",
}


def test_a_service_with_its_own_user_gets_only_its_own_password() -> None:
    env = SHARED | {
        "GPUFAILOVER_JOB_STATUS_SASL_USERNAME": "job-status",
        "GPUFAILOVER_JOB_STATUS_SASL_PASSWORD_FILE": "/run/job-status",
    }
    child = service_env(env, "job-status")
    assert child["GPUFAILOVER_SASL_USERNAME"] == "job-status"
    assert child["GPUFAILOVER_SASL_PASSWORD_FILE"] == "/run/job-status"
    assert "GPUFAILOVER_SASL_PASSWORD" not in child  # never another role's password
    assert child["GPUFAILOVER_SECURITY_PROTOCOL"] == "SASL_SSL"


def test_a_service_without_its_own_user_keeps_the_shared_settings() -> None:
    env = SHARED | {"GPUFAILOVER_QUARANTINE_SASL_USERNAME": "quarantine"}
    assert service_env(env, "requeue") == env
