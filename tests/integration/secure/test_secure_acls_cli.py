"""`gpufailover acls apply` on a secured broker: the super user applies them (twice: it is
idempotent); any other principal is refused in one line with exit 5."""

from __future__ import annotations

from deploy.broker import Broker
from deploy.broker_secure import ADMIN
from gpufailover.errors import EXIT_NOT_AUTHORIZED
from tests.integration.secure.conftest import cli_as, role_env


async def test_only_the_super_user_applies_the_acls(secure_broker: Broker) -> None:
    b = secure_broker.bootstrap
    apply = ("acls", "apply", "--bootstrap", b)
    rc, _, err = await cli_as(role_env(secure_broker, "operator"), *apply)
    assert rc == EXIT_NOT_AUTHORIZED, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert err.startswith(f"gpufailover acls: not authorized on {b}: ClusterAuthorization"), err
    assert "applying ACLs needs a super user" in err
    for _ in range(2):
        rc, _, err = await cli_as(role_env(secure_broker, ADMIN), *apply)
        assert rc == 0 and " ACLs for roles " in err, err
