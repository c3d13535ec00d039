"""policy_from_dict key by key: each value converted (seconds to ms), each bound exactly at its
edge, the optional telemetry keys and their defaults, and the exact error a bad value gets."""

from __future__ import annotations

import copy
from importlib import resources
from typing import Any

import orjson
import pytest

from streams.policy import PolicyError, load_policy, policy_from_dict

RAW = orjson.loads(resources.files("streams").joinpath("data/policy.json").read_bytes())


def with_(**changes: Any) -> dict[str, Any]:
    data = copy.deepcopy(RAW)
    for key, v in changes.items():
        if v is None:
            data.pop(key, None)
        else:
            data[key] = v
    return data


def error(data: Any) -> str:
    with pytest.raises(PolicyError) as info:
        policy_from_dict(data, "p.json")
    return str(info.value)


def test_each_window_is_converted_from_seconds_to_ms() -> None:
    p = policy_from_dict(
        with_(lookback_s=11, grace_s=12, coalesce_s=13, hang_after_s=14, max_failovers=15)
        | {"max_evidence_per_node": 16, "straggler_ratio": 0.25, "straggler_min_samples": 17}
    )
    assert (p.lookback_ms, p.grace_ms, p.coalesce_ms, p.hang_after_ms) == (
        11_000,
        12_000,
        13_000,
        14_000,
    )
    assert (p.max_failovers, p.max_evidence_per_node) == (15, 16)
    assert (p.straggler_ratio, p.straggler_min_samples) == (0.25, 17)
    assert p.source == "<dict>"


def test_telemetry_keys_are_optional_with_their_defaults() -> None:
    p = policy_from_dict(with_(hang_after_s=None, straggler_ratio=None, straggler_min_samples=None))
    assert (p.hang_after_ms, p.straggler_ratio, p.straggler_min_samples) == (600_000, 0.5, 5)
    assert policy_from_dict(with_(reasons=None)).reason_class == {}


def test_smallest_accepted_values() -> None:
    p = policy_from_dict(
        with_(lookback_s=0, grace_s=0, coalesce_s=0, max_failovers=0, max_evidence_per_node=1)
        | {"hang_after_s": 1, "straggler_min_samples": 1, "straggler_ratio": 0.001}
    )
    assert (p.lookback_ms, p.max_evidence_per_node, p.hang_after_ms, p.straggler_min_samples) == (
        0,
        1,
        1000,
        1,
    )
    assert policy_from_dict(with_(straggler_ratio=0.999)).straggler_ratio == 0.999
    assert policy_from_dict(with_(straggler_ratio=1.0 / 3)).straggler_ratio == 1.0 / 3


def test_an_integer_ratio_is_refused_only_for_its_range() -> None:
    assert (
        error(with_(straggler_ratio=1))
        == "p.json: straggler_ratio must be a number in (0, 1), got 1"
    )


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"lookback_s": -1}, "p.json: lookback_s must be a non-negative integer, got -1"),
        ({"grace_s": True}, "p.json: grace_s must be a non-negative integer, got True"),
        ({"max_evidence_per_node": 0}, "p.json: max_evidence_per_node must be >= 1"),
        ({"xid": []}, "p.json: xid must be an object of code -> class"),
        ({"conditions": 1}, "p.json: conditions must be an object of condition -> class"),
        ({"reasons": []}, "p.json: reasons must be an object of reason -> class"),
        ({"hang_after_s": 0}, "p.json: hang_after_s must be a positive integer, got 0"),
        ({"hang_after_s": "600"}, "p.json: hang_after_s must be a positive integer, got '600'"),
        ({"hang_after_s": True}, "p.json: hang_after_s must be a positive integer, got True"),
        ({"straggler_ratio": 0}, "p.json: straggler_ratio must be a number in (0, 1), got 0"),
        ({"straggler_ratio": 1.0}, "p.json: straggler_ratio must be a number in (0, 1), got 1.0"),
        (
            {"straggler_ratio": "0.5"},
            "p.json: straggler_ratio must be a number in (0, 1), got '0.5'",
        ),
        ({"straggler_ratio": True}, "p.json: straggler_ratio must be a number in (0, 1), got True"),
        (
            {"straggler_min_samples": 0},
            "p.json: straggler_min_samples must be a positive integer, got 0",
        ),
        (
            {"straggler_min_samples": 2.0},
            "p.json: straggler_min_samples must be a positive integer, got 2.0",
        ),
        (
            {"straggler_min_samples": False},
            "p.json: straggler_min_samples must be a positive integer, got False",
        ),
    ],
)
def test_a_bad_value_gets_an_error_naming_file_key_and_value(
    changes: dict[str, Any], message: str
) -> None:
    assert error(with_(**changes)) == message


def test_bad_table_rows_get_an_error_naming_the_row() -> None:
    bad_xid = with_(xid={"abc": "hardware"})
    assert error(bad_xid) == "p.json: xid.abc: not an integer XID code"
    assert error(with_(xid={"-5": "hardware"})) == "p.json: xid.-5: XID codes are >= 0"
    assert error(with_(xid={"79": "broken"})) == (
        "p.json: xid.79: class must be one of "
        "['hardware', 'software', 'transient', 'precursor', 'ignore'], got 'broken'"
    )
    melted = with_(conditions=RAW["conditions"] | {"melted": "hardware"})
    assert error(melted) == "p.json: conditions.melted: unknown condition"
    partial = {k: v for k, v in RAW["conditions"].items() if k not in ("ok", "power")}
    assert error(with_(conditions=partial)) == "p.json: conditions: no class for ['ok', 'power']"
    assert error(with_(reasons={"Boom": "fatal"})).startswith("p.json: reasons.Boom: class must")
    assert error([]) == "p.json: the policy must be a JSON object"


def test_xid_code_zero_is_a_valid_row() -> None:
    assert policy_from_dict(with_(xid={"0": "hardware"})).classify_xid(0) == "hardware"


def test_a_row_may_give_its_class_as_an_object() -> None:
    p = policy_from_dict(with_(xid={"79": {"class": "hardware", "bucket": "RESET_GPU"}}))
    assert p.classify_xid(79) == "hardware"
    assert p.is_known_xid(79) and not p.is_known_xid(80)
    assert p.classify_xid(80) == "ignore"


def test_unlisted_conditions_and_reasons_are_ignored() -> None:
    p = load_policy()
    assert p.classify_condition("not-a-condition") == "ignore"
    assert p.classify_reason("NotAReason") == "ignore"
    assert p.source == "default policy"


def test_evidence_retention_is_optional_in_seconds_and_never_shorter_than_the_window() -> None:
    assert policy_from_dict(with_(evidence_retention_s=None), "p").evidence_retention_ms == (
        172_800_000
    )
    p = policy_from_dict(with_(evidence_retention_s=3_600), "p")
    assert (p.evidence_retention_ms, p.retention_ms) == (3_600_000, 3_600_000)
    short = policy_from_dict(with_(evidence_retention_s=1), "p")  # shorter than lookback+grace
    assert short.retention_ms == short.lookback_ms + short.grace_ms


@pytest.mark.parametrize("bad", [0, -5, 1.5, "3600", True])
def test_a_bad_evidence_retention_names_the_key_and_the_value(bad: Any) -> None:
    assert error(with_(evidence_retention_s=bad)) == (
        f"p.json: evidence_retention_s must be a positive integer, got {bad!r}"
    )
