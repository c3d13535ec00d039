"""The shipped policy (`streams/data/policy.json`) against NVIDIA's XID catalog and issue 2, and
the loader's refusal of bad policy files."""

from __future__ import annotations

import copy
import csv
from importlib import resources
from pathlib import Path
from typing import Any

import orjson
import pytest

from streams.policy import Policy, PolicyError, load_policy, policy_from_dict

CATALOG = resources.files("streams").joinpath("data/nvidia-xid-catalog.csv")
RAW = orjson.loads(resources.files("streams").joinpath("data/policy.json").read_bytes())
POLICY = load_policy()


def catalog_rows() -> list[dict[str, str]]:
    with resources.as_file(CATALOG) as path, path.open(newline="") as f:
        return list(csv.DictReader(f))


# -- the shipped table ------------------------------------------------------------------------


def test_catalog_lists_xids_1_to_172() -> None:
    codes = [int(row["xid"]) for row in catalog_rows()]
    assert sorted(codes) == list(range(1, 173))


def test_every_catalog_code_is_mapped_in_the_policy() -> None:
    unmapped = [int(r["xid"]) for r in catalog_rows() if int(r["xid"]) not in POLICY.xid_class]
    assert unmapped == []


def test_policy_maps_no_code_outside_the_catalog() -> None:
    catalog = {int(row["xid"]) for row in catalog_rows()}
    assert set(POLICY.xid_class) <= catalog


def test_policy_rows_carry_the_catalog_bucket() -> None:
    by_code = {int(row["xid"]): row for row in catalog_rows()}
    wrong = {
        code: (entry["bucket"], by_code[int(code)]["nvidia_action"])
        for code, entry in RAW["xid"].items()
        if entry["bucket"] != by_code[int(code)]["nvidia_action"]
    }
    assert wrong == {}


@pytest.mark.parametrize("code", [48, 64, 74, 79, 94, 95, 119, 120])
def test_required_hardware_xids(code: int) -> None:
    assert POLICY.classify_xid(code) == "hardware"


def test_xid_94_is_hardware_although_nvidia_files_it_under_restart_app() -> None:
    by_code = {int(row["xid"]): row for row in catalog_rows()}
    assert by_code[94]["nvidia_action"] == "RESTART_APP"
    assert POLICY.classify_xid(94) == "hardware"


@pytest.mark.parametrize("code", [13, 31, 43])
def test_required_software_xids(code: int) -> None:
    assert POLICY.classify_xid(code) == "software"


@pytest.mark.parametrize("code", [63, 92])
def test_required_precursor_xids(code: int) -> None:
    assert POLICY.classify_xid(code) == "precursor"


def test_xid_45_is_ignored() -> None:
    assert POLICY.classify_xid(45) == "ignore"
    assert POLICY.is_known_xid(45)


@pytest.mark.parametrize("code", [0, 173, 999, 10**6])
def test_codes_outside_the_table_are_unknown_and_ignored(code: int) -> None:
    assert not POLICY.is_known_xid(code)
    assert POLICY.classify_xid(code) == "ignore"


@pytest.mark.parametrize(
    ("condition", "cls"),
    [
        ("gpu_lost", "hardware"),
        ("ecc_uncorrectable", "hardware"),
        ("row_remap_failure", "hardware"),
        ("thermal", "hardware"),
        ("power", "hardware"),
        ("pcie", "hardware"),
        ("nvlink", "hardware"),
        ("row_remap_pending", "precursor"),
        ("ecc_correctable_rate", "precursor"),
        ("throttle", "ignore"),
        ("ok", "ignore"),
    ],
)
def test_required_condition_classes(condition: str, cls: str) -> None:
    assert POLICY.classify_condition(condition) == cls


@pytest.mark.parametrize(
    ("reason", "cls"),
    [
        ("OOMKilled", "software"),
        ("NCCLTimeout", "transient"),
        ("Hang", "transient"),
        ("WorkerLost", "transient"),
        ("Error", "ignore"),
        (None, "ignore"),
    ],
)
def test_required_reason_classes(reason: str | None, cls: str) -> None:
    assert POLICY.classify_reason(reason) == cls


def test_windows_and_budget_defaults() -> None:
    assert (POLICY.lookback_ms, POLICY.grace_ms, POLICY.max_failovers) == (600_000, 120_000, 3)
    assert POLICY.retention_ms == max(POLICY.lookback_ms + POLICY.grace_ms, 172_800_000)


def test_no_xid_is_classified_transient() -> None:
    assert "transient" not in set(POLICY.xid_class.values())


# -- loading ----------------------------------------------------------------------------------


def test_load_policy_from_a_file_equals_the_shipped_default(tmp_path: Path) -> None:
    path = tmp_path / "policy.json"
    path.write_bytes(orjson.dumps(RAW))
    loaded = load_policy(path)
    assert loaded.xid_class == POLICY.xid_class
    assert loaded.condition_class == POLICY.condition_class
    assert loaded.reason_class == POLICY.reason_class
    assert loaded.source == str(path)


def test_a_policy_file_can_change_the_windows_and_classes(tmp_path: Path) -> None:
    data = copy.deepcopy(RAW)
    data["grace_s"] = 30
    data["xid"]["43"] = "hardware"  # the short form: code -> class
    data["reasons"]["SpotReclaimed"] = "transient"
    path = tmp_path / "policy.json"
    path.write_bytes(orjson.dumps(data))
    p = load_policy(path)
    assert p.grace_ms == 30_000
    assert p.classify_xid(43) == "hardware"
    assert p.classify_reason("SpotReclaimed") == "transient"


def test_the_shipped_policy_retries_what_the_scheduler_took_away() -> None:
    # The reasons the Slurm hook (PREEMPTED) and k8s-events (preemption, eviction, node lost)
    # send: the job did nothing wrong, so without hardware evidence it is retried, not refused.
    for reason in ("Preempted", "Evicted", "WorkerLost"):
        assert POLICY.classify_reason(reason) == "transient", reason
    assert POLICY.classify_reason("OOMKilled") == "software"


def mutated(change: Any) -> dict[str, Any]:
    data = copy.deepcopy(RAW)
    change(data)
    return data


def _set(path: tuple[str, ...], value: Any) -> Any:
    def change(data: dict[str, Any]) -> None:
        for key in path[:-1]:
            data = data[key]
        data[path[-1]] = value

    return change


def _drop(path: tuple[str, ...]) -> Any:
    def change(data: dict[str, Any]) -> None:
        for key in path[:-1]:
            data = data[key]
        del data[path[-1]]

    return change


BAD_POLICIES = [
    ("lookback_s", _drop(("lookback_s",))),
    ("lookback_s", _set(("lookback_s",), -1)),
    ("lookback_s", _set(("lookback_s",), "600")),
    ("grace_s", _set(("grace_s",), True)),
    ("grace_s", _set(("grace_s",), 1.5)),
    ("coalesce_s", _drop(("coalesce_s",))),
    ("max_failovers", _set(("max_failovers",), None)),
    ("max_evidence_per_node", _set(("max_evidence_per_node",), 0)),
    ("xid", _set(("xid",), [])),
    ("xid", _drop(("xid",))),
    ("xid.abc", _set(("xid", "abc"), "hardware")),
    ("xid.-5", _set(("xid", "-5"), "hardware")),
    ("xid.79", _set(("xid", "79"), "broken")),
    ("xid.79", _set(("xid", "79"), {"bucket": "RESTART_BM"})),
    ("conditions", _set(("conditions",), "hardware")),
    ("conditions.melted", _set(("conditions", "melted"), "hardware")),
    ("conditions.thermal", _set(("conditions", "thermal"), "hot")),
    ("conditions", _drop(("conditions", "gpu_lost"))),
    ("reasons", _set(("reasons",), ["OOMKilled"])),
    ("reasons.OOMKilled", _set(("reasons", "OOMKilled"), "fatal")),
]


@pytest.mark.parametrize(
    ("key", "change"), BAD_POLICIES, ids=[f"{k}-{i}" for i, (k, _) in enumerate(BAD_POLICIES)]
)
def test_bad_policy_is_a_policy_error_naming_the_key(key: str, change: Any) -> None:
    with pytest.raises(PolicyError) as info:
        policy_from_dict(mutated(change), "test.json")
    assert key in str(info.value)
    assert "test.json" in str(info.value)


@pytest.mark.parametrize(("key", "change"), BAD_POLICIES[:4])
def test_bad_policy_file_is_a_policy_error_naming_the_file_and_key(
    tmp_path: Path, key: str, change: Any
) -> None:
    path = tmp_path / "bad.json"
    path.write_bytes(orjson.dumps(mutated(change)))
    with pytest.raises(PolicyError, match=key) as info:
        load_policy(path)
    assert str(path) in str(info.value)


def test_policy_that_is_not_json_is_a_policy_error(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text('{"lookback_s": 600,')
    with pytest.raises(PolicyError, match="not valid JSON"):
        load_policy(path)


def test_policy_that_is_not_an_object_is_a_policy_error() -> None:
    with pytest.raises(PolicyError, match="JSON object"):
        policy_from_dict([1, 2, 3], "list.json")


def test_missing_policy_file_is_a_policy_error(tmp_path: Path) -> None:
    with pytest.raises(PolicyError, match="cannot read"):
        load_policy(tmp_path / "absent.json")


def test_policy_tables_are_read_only() -> None:
    assert isinstance(POLICY, Policy)
    with pytest.raises(TypeError):
        POLICY.xid_class[79] = "ignore"  # type: ignore[index]
