"""The Slurm actuator's pure parts: reading scontrol's one-line output, our drain reason."""

from __future__ import annotations

import asyncio

import pytest

from consumers.quarantine.actuator_scontrol import (
    SlurmCommandError,
    run_slurm,
    state_flags,
)
from consumers.quarantine.actuator_slurm import drain_reason, is_ours, is_unavailable
from gpufailover.slurm_text import parse_fields
from schemas.decisions import Evidence
from schemas.quarantine import QuarantineRecord

NODE_LINE = (
    "NodeName=gpu-2 Arch=x86_64 CoresPerSocket=1 CPUAlloc=1 Gres=gpu:8 NodeAddr=127.0.0.1 "
    "State=MIXED+DRAIN ThreadsPerCore=1 Partitions=gpu "
    "Reason=gpufailover: hardware xid 79 gpu 3 job 42 [root@2026-12-01T10:00:00]"
)


def test_parse_fields_keeps_spaces_inside_a_value_up_to_the_next_key() -> None:
    node = parse_fields(NODE_LINE)
    assert node["NodeName"] == "gpu-2" and node["State"] == "MIXED+DRAIN"
    assert node["Reason"] == "gpufailover: hardware xid 79 gpu 3 job 42 [root@2026-12-01T10:00:00]"
    assert is_ours(node) and is_unavailable(node)


@pytest.mark.parametrize(
    ("state", "unavailable"),
    [
        ("IDLE", False),
        ("MIXED", False),
        ("IDLE+NOT_RESPONDING", False),
        ("IDLE+DRAIN", True),
        ("DOWN*", True),
        ("DOWN*+DRAIN", True),
    ],
)
def test_unavailable_states(state: str, unavailable: bool) -> None:
    assert is_unavailable({"State": state}) is unavailable
    assert "DOWN" in state_flags("DOWN*+DRAIN")


def test_drain_reason_names_the_evidence_once_and_has_no_equals_sign() -> None:
    xid = Evidence("gpu-2", 3, "xid", 79, 1, "hardware")
    health = Evidence("gpu-2", None, "health", "row_remap=failed", 2, "hardware")
    record = QuarantineRecord("gpu-2", "quarantined", "hardware", (xid, xid, health), "42", 3)
    reason = drain_reason(record)
    assert reason == "gpufailover: hardware xid 79 gpu 3, health row_remap:failed job 42"
    long = QuarantineRecord("gpu-2", "quarantined", "hardware", (xid,) * 1, "j" * 500, 3)
    assert len(drain_reason(long)) == 200


async def test_a_failing_command_raises_with_its_stderr() -> None:
    with pytest.raises(SlurmCommandError, match="exited 3: no such node"):
        await run_slurm(["sh", "-c", "echo no such node >&2; exit 3"])


async def test_a_hanging_command_is_killed_at_its_time_limit() -> None:
    loop = asyncio.get_running_loop()
    start = loop.time()
    with pytest.raises(SlurmCommandError, match="timed out"):
        await run_slurm(["sleep", "30"], timeout_s=0.2)
    assert loop.time() - start < 5
