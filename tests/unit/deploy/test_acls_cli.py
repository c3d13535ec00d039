"""How `acls apply` reports a broker's refusal: each kind of refusal its own exit code."""

from __future__ import annotations

from aiokafka.errors import ClusterAuthorizationFailedError, PolicyViolationError, SecurityDisabled

from deploy.acls import all_bindings
from gpufailover.cli.acls import AclError, _refused
from gpufailover.cli.errors import explain
from gpufailover.errors import EXIT_NOT_AUTHORIZED, EXIT_WRONG_STATE

BINDING = all_bindings()[0]


def test_no_authorizer_is_a_wrong_state_with_what_to_do() -> None:
    explained = explain(_refused("b:9092", BINDING, SecurityDisabled, None), "b:9092")
    assert explained is not None
    code, line = explained
    assert code == EXIT_WRONG_STATE
    assert line.startswith("b:9092 has no authorizer, so it keeps no ACLs (SecurityDisabled)")
    assert "gpufailover broker start --secure" in line


def test_a_principal_that_is_not_a_super_user_is_not_authorized() -> None:
    exc = _refused("b:9093", BINDING, ClusterAuthorizationFailedError, "denied")
    explained = explain(exc, "b:9093")
    assert explained is not None
    code, line = explained
    assert code == EXIT_NOT_AUTHORIZED
    assert f"ClusterAuthorizationFailedError creating {BINDING.describe()}: denied" in line
    assert "applying ACLs needs a super user" in line


def test_any_other_refusal_names_the_error_and_the_acl() -> None:
    exc = _refused("b:9092", BINDING, PolicyViolationError, "no")
    assert isinstance(exc, AclError)
    assert str(exc) == f"PolicyViolationError creating {BINDING.describe()}: no"
