"""Closed sets are Literals: mypy checks every spelling, and the values stay plain strings."""

from __future__ import annotations

import orjson
import pytest

from schemas.decisions import Decision
from schemas.health import (
    CONDITIONS,
    HARDWARE_CONDITIONS,
    LIVENESS_CONDITIONS,
    PRECURSOR_CONDITIONS,
    as_condition,
)


def test_condition_groups_partition_the_conditions() -> None:
    groups = (HARDWARE_CONDITIONS, PRECURSOR_CONDITIONS, LIVENESS_CONDITIONS, {"throttle", "ok"})
    assert frozenset().union(*groups) == CONDITIONS
    assert sum(map(len, groups)) == len(CONDITIONS)


def test_as_condition_refuses_a_name_outside_the_set() -> None:
    assert as_condition("gpu_lost") == "gpu_lost"
    with pytest.raises(ValueError, match="gpu_on_fire"):
        as_condition("gpu_on_fire")


def test_decoded_closed_set_values_can_key_a_json_object() -> None:
    """orjson refuses a str subclass (an enum member) as a dict key: counts by verdict, as the
    replay comparison writes them, need the plain strings the decoder returns."""
    d = Decision.from_dict(
        {"schema_version": 1, "job_id": "j", "attempt": 0, "verdict": "hardware",
         "action": "failover", "status": "Pending-failoverinprogress", "suspect_nodes": ["n"],
         "next_attempt": 1, "evidence": [], "rule": "hardware.failover",
         "terminated_ts_ms": 1, "decided_ts_ms": 2}
    )  # fmt: skip
    counts = {d.verdict: 1, d.action: 1, d.status: 1}
    assert orjson.loads(orjson.dumps(counts)) == {
        "hardware": 1, "failover": 1, "Pending-failoverinprogress": 1
    }  # fmt: skip
