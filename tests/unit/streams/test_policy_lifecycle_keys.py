"""The policy's node-lifecycle keys (lemon rule, auto-release, repair trigger, validation cap):
optional, converted, bounded, and refused with the key named."""

from __future__ import annotations

from importlib import resources
from typing import Any

import orjson
import pytest

from schemas.quarantine import HISTORY_MAX
from streams.policy import PolicyError, load_policy, policy_from_dict

SHIPPED: dict[str, Any] = orjson.loads(
    resources.files("streams").joinpath("data/policy.json").read_bytes()
)
KEYS = ("lemon_count", "lemon_window_s", "auto_release", "validate_on_repair",
        "max_validations_per_episode")  # fmt: skip


def with_(**changes: Any) -> dict[str, Any]:
    data = dict(SHIPPED)
    for k, v in changes.items():
        if v is None:
            data.pop(k, None)
        else:
            data[k] = v
    return data


def test_the_shipped_policy_states_every_lifecycle_key() -> None:
    assert set(KEYS) <= SHIPPED.keys()
    p = load_policy()
    assert (p.lemon_count, p.lemon_window_ms, p.auto_release) == (3, 604_800_000, False)
    assert (p.validate_on_repair, p.max_validations_per_episode) == (False, 3)


def test_the_lifecycle_keys_are_optional_with_the_same_defaults() -> None:
    p = policy_from_dict(with_(**dict.fromkeys(KEYS)))
    q = load_policy()
    assert (p.lemon_count, p.lemon_window_ms, p.auto_release) == (3, 604_800_000, False)
    assert (p.validate_on_repair, p.max_validations_per_episode) == (
        q.validate_on_repair,
        q.max_validations_per_episode,
    )


def test_values_are_taken_and_the_window_converted_to_ms() -> None:
    p = policy_from_dict(
        with_(
            lemon_count=HISTORY_MAX,
            lemon_window_s=1,
            auto_release=True,
            validate_on_repair=True,
            max_validations_per_episode=1,
        )
    )
    assert (p.lemon_count, p.lemon_window_ms, p.auto_release) == (HISTORY_MAX, 1000, True)
    assert (p.validate_on_repair, p.max_validations_per_episode) == (True, 1)


@pytest.mark.parametrize(
    ("key", "bad", "message"),
    [
        ("lemon_count", 0, "lemon_count must be a positive integer, got 0"),
        ("lemon_count", True, "lemon_count must be a positive integer, got True"),
        ("lemon_count", HISTORY_MAX + 1, f"lemon_count must be <= {HISTORY_MAX}"),
        ("lemon_window_s", "7d", "lemon_window_s must be a positive integer, got '7d'"),
        ("max_validations_per_episode", 0, "max_validations_per_episode must be a positive"),
        ("auto_release", 1, "auto_release must be true or false, got 1"),
        ("validate_on_repair", "yes", "validate_on_repair must be true or false, got 'yes'"),
    ],
)
def test_a_bad_value_is_refused_naming_the_key(key: str, bad: Any, message: str) -> None:
    with pytest.raises(PolicyError) as err:
        policy_from_dict(with_(**{key: bad}), "p.json")
    assert str(err.value).startswith(f"p.json: {message}")
