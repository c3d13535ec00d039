"""Operator commands: the audit record's contract, and that only resets from operators.audit
(writable by operators alone) move the breaker."""

from __future__ import annotations

import pytest
from consumer_fakes import NAMES, acks, rec, request, value

from consumers.quarantine.actuator import LogActuator
from consumers.quarantine.breaker import BreakerConfig
from consumers.quarantine.commands import audit_record
from consumers.quarantine.logic import QuarantineProcessor
from consumers.quarantine.metrics import QuarantineMetrics
from consumers.quarantine.table import QuarantineTable
from consumers.runtime.records import InRecord, Output
from gpufailover.security import KafkaSecurity
from schemas.audit import BREAKER_RESET, RELEASE, RESET_KEY, OperatorCommand, ResetCommand
from schemas.errors import SchemaError

WAVE_CFG = BreakerConfig(window_ms=600_000, max_share=0.2, max_nodes=50, fleet_size=10)
ALICE = KafkaSecurity("SASL_PLAINTEXT", username="alice", password="pw")


async def run(p: QuarantineProcessor, *records: InRecord) -> list[Output]:
    p.begin()
    outputs = [out for r in records for out in p.handle(r)]
    await p.committed(acks(outputs))
    return outputs


async def tripped() -> QuarantineProcessor:
    p = QuarantineProcessor(
        NAMES, WAVE_CFG, QuarantineTable(), LogActuator(), QuarantineMetrics.create(None)
    )
    wave = [rec(NAMES.quarantine_requests, f"n{i}", request(f"n{i}", 1_000 + i)) for i in range(4)]
    await run(p, *wave)
    assert p.breaker.tripped
    return p


async def test_a_reset_audit_record_closes_the_breaker() -> None:
    p = await tripped()
    reset = audit_record(
        BREAKER_RESET, "breaker", "driver fixed", ALICE, p.breaker.tripped_wall_ms or 0
    )
    [closed] = await run(p, rec(NAMES.operators_audit, RESET_KEY, reset.to_dict()))
    assert value(closed)["state"] == "closed" and not p.breaker.tripped


async def test_a_reset_written_to_failover_alerts_is_not_obeyed() -> None:
    p = await tripped()
    forged = ResetCommand(ts_ms=p.breaker.tripped_wall_ms or 0, operator="agent", reason="x")
    p.begin()
    with pytest.raises(SchemaError, match="not an input"):
        p.handle(rec(NAMES.failover_alerts, RESET_KEY, forged.to_dict()))
    assert p.breaker.tripped


async def test_a_release_audit_record_is_only_a_record_for_the_service() -> None:
    p = await tripped()
    release = audit_record(RELEASE, "n1", "repaired", ALICE, 5_000)
    assert await run(p, rec(NAMES.operators_audit, "n1", release.to_dict())) == []
    assert p.breaker.tripped


def test_the_audit_record_names_the_principal_and_round_trips() -> None:
    signed = audit_record(RELEASE, "gpu-7", "swapped the GPU", ALICE, 1_700_000_000_000)
    assert (signed.principal, signed.authenticated) == ("alice", True)
    assert OperatorCommand.from_dict(signed.to_dict()) == signed
    # It is also the ResetCommand the service decodes (for resets).
    reset = audit_record(BREAKER_RESET, "breaker", "why", ALICE, 7).to_dict()
    assert ResetCommand.from_dict(reset) == ResetCommand(ts_ms=7, operator="alice", reason="why")


def test_unauthenticated_commands_say_so() -> None:
    plain = audit_record(RELEASE, "gpu-7", "why", KafkaSecurity(), 1)
    assert plain.principal.startswith("unauthenticated:") and plain.authenticated is False


@pytest.mark.parametrize("reason", ["", "   ", "x" * 1025])
def test_a_command_needs_a_reason_of_sane_length(reason: str) -> None:
    with pytest.raises(SchemaError, match="reason"):
        audit_record(RELEASE, "gpu-7", reason, ALICE, 1)
