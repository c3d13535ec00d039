"""The quarantine set rebuilt from `nodes.quarantine`, and the log actuator's commands."""

from __future__ import annotations

from pathlib import Path

import pytest
from consumer_fakes import NAMES, rec, request

from consumers.quarantine.actions import QUARANTINE, RELEASE
from consumers.quarantine.actuator import LogActuator, make_actuator
from consumers.quarantine.table import QuarantineTable
from consumers.runtime.records import InRecord
from schemas.errors import SchemaError
from schemas.quarantine import QuarantineRecord

Q = QuarantineRecord("n1", "quarantined", "hardware", (), "job-1", 100)
R = QuarantineRecord("n1", "released", "operator", (), None, 200)


def test_the_newest_offset_wins_whatever_the_order_it_arrives_in() -> None:
    table = QuarantineTable()
    assert table.apply(R, 0, 11)  # the service's own write, acknowledged at offset 11
    assert not table.apply(Q, 0, 10)  # the tail catching up on an older record
    assert not table.is_quarantined("n1")
    assert table.quarantined() == frozenset()


def test_a_tombstone_forgets_the_node_and_quarantine_times_are_kept() -> None:
    table = QuarantineTable()
    table.apply(Q, 0, 1)
    table.apply_record(InRecord(NAMES.nodes_quarantine, 0, 2, b"n1", None))
    assert table.get("n1") is None and list(table.nodes()) == []
    assert table.quarantined_at == {"n1": 100}
    assert not table.apply(Q, 0, 1)  # older than the tombstone


def test_on_change_sees_previous_and_new() -> None:
    table = QuarantineTable()
    seen: list[tuple[str | None, str]] = []
    table.on_change = lambda prev, new: seen.append((prev and prev.state, new.state))
    table.apply(Q, 0, 1)
    table.apply(R, 0, 2)
    assert seen == [(None, "quarantined"), ("quarantined", "released")]


def test_unreadable_records_raise() -> None:
    with pytest.raises(SchemaError):
        QuarantineTable().apply_record(
            rec(NAMES.nodes_quarantine, "n1", request("n1", 1) | {"state": "x"})
        )


async def test_log_actuator_records_slurm_and_kubernetes_commands(tmp_path: Path) -> None:
    odd = QuarantineRecord("gpu 7; rm -rf /", "quarantined", "precursor", (), None, 1)
    slurm = LogActuator("slurm", tmp_path / "actions.log")
    await slurm.apply(QUARANTINE, Q)
    await slurm.apply(RELEASE, R)
    await slurm.apply(QUARANTINE, odd)
    assert slurm.commands == [
        "scontrol update nodename=n1 state=drain reason='gpufailover: hardware job job-1'",
        "scontrol update nodename=n1 state=resume",
        "scontrol update nodename='gpu 7; rm -rf /' state=drain reason='gpufailover: precursor'",
    ]
    logged = (tmp_path / "actions.log").read_text().splitlines()
    assert len(logged) == 3
    assert logged[0].split(" ", 2)[1:] == ["quarantine", slurm.commands[0]]
    k8s = make_actuator("log", "kubernetes", None)
    assert k8s.command(QUARANTINE, Q) == "kubectl cordon n1"
    assert k8s.command(RELEASE, R) == "kubectl uncordon n1"
    with pytest.raises(ValueError, match="actuator"):
        make_actuator("ssh", "slurm", None)
