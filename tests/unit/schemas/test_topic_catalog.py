from __future__ import annotations

import pytest

from deploy.topics import DEFAULT_PARTITIONS, default_partitions
from schemas.topics import SPECS, TOPICS, Key, TopicNames, default_prefix

INPUTS = {"gpu.xid", "gpu.health", "jobs.events", "training.telemetry", "nodes.quarantine",
          # read by the consumers: their bad records need a dead-letter topic too
          "failover.decisions", "failover.quarantine-requests",
          # the validation gate: agents' results, read by the quarantine service
          "nodes.validation-results"}  # fmt: skip


def test_every_required_topic_is_declared_once() -> None:
    expected = {
        "gpu.xid", "gpu.health", "jobs.events", "training.telemetry", "failover.decisions",
        "nodes.quarantine", "jobs.requeue", "jobs.status", "failover.alerts",
        "failover.term-by-node", "failover.node-evidence", "failover.node-signals",
        "failover.quarantine-requests",
        "failover.ticks", "operators.audit", "nodes.validate", "nodes.validation-results",
    } | {f"{name}.dlq" for name in INPUTS}  # fmt: skip
    assert [s.logical for s in TOPICS] == list(SPECS)  # no duplicates
    assert set(SPECS) == expected


def test_keys_and_cleanup_policies() -> None:
    assert SPECS["gpu.health"].key is Key.NODE
    assert SPECS["nodes.quarantine"].key is Key.NODE
    assert SPECS["failover.term-by-node"].key is Key.NODE
    assert SPECS["failover.quarantine-requests"].key is Key.NODE
    assert SPECS["nodes.validate"].key is Key.NODE
    assert SPECS["nodes.validation-results"].key is Key.NODE
    for name in ("jobs.events", "training.telemetry", "failover.decisions", "jobs.requeue",
                 "jobs.status", "failover.alerts", "failover.node-evidence"):  # fmt: skip
        assert SPECS[name].key is Key.JOB_ID, name
    assert SPECS["failover.ticks"].key is Key.NONE
    # The audit trail is append-only: deleted by age, never compacted away by a later key.
    assert SPECS["operators.audit"].configs()["cleanup.policy"] == "delete"
    # nodes.validate: an agent that starts finds its node's latest request
    assert {s.logical for s in TOPICS if s.compacted} == {
        "nodes.quarantine",
        "jobs.status",
        "nodes.validate",
    }
    assert SPECS["jobs.status"].configs() == {"cleanup.policy": "compact"}
    assert SPECS["gpu.xid"].configs()["cleanup.policy"] == "delete"
    assert int(SPECS["gpu.xid"].configs()["retention.ms"]) > 0


def test_names_are_prefixed_and_dlqs_map_from_inputs() -> None:
    names = TopicNames("t-abc.")
    assert names.gpu_xid == "t-abc.gpu.xid"
    assert names.term_by_node == "t-abc.failover.term-by-node"
    assert names.dlq(names.training_telemetry) == "t-abc.training.telemetry.dlq"
    assert {names.logical(n) for n in names.all()} == set(SPECS)
    assert all(n.startswith("t-abc.") for n in names.all())
    with pytest.raises(KeyError):
        names.dlq(names.jobs_requeue)  # an output nobody here reads: no DLQ
    with pytest.raises(KeyError):
        names.name("gpu.typo")
    with pytest.raises(KeyError):
        names.logical("gpu.xid")  # missing the prefix


@pytest.mark.parametrize("prefix", ["has_underscore.", "space ", "slash/"])
def test_invalid_prefix_is_rejected(prefix: str) -> None:
    with pytest.raises(ValueError, match="prefix"):
        TopicNames(prefix)


def test_env_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GPUFAILOVER_PARTITIONS", raising=False)
    monkeypatch.delenv("GPUFAILOVER_TOPIC_PREFIX", raising=False)
    assert default_partitions() == DEFAULT_PARTITIONS == 4
    assert default_prefix() == ""
    monkeypatch.setenv("GPUFAILOVER_PARTITIONS", "8")
    monkeypatch.setenv("GPUFAILOVER_TOPIC_PREFIX", "staging.")
    assert default_partitions() == 8
    assert TopicNames.from_env().jobs_status == "staging.jobs.status"
    monkeypatch.setenv("GPUFAILOVER_PARTITIONS", "0")
    with pytest.raises(ValueError, match="GPUFAILOVER_PARTITIONS"):
        default_partitions()
