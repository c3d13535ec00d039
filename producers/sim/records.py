"""The records the simulator publishes, in the schemas real producers use.

`Out` names the logical topic; the bus maps it to the real (prefixed) name. Job events go out
through `producers.jobs.JobEventPublisher` (validated like the scheduler hook's), node records
and telemetry through one idempotent producer, releases on `nodes.quarantine` in the shape
`gpufailover quarantine release` writes, stamped with simulated time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from producers.sim.faults import Signal
from producers.sim.truth import Incident
from schemas.health import GpuHealth, Severity, as_condition
from schemas.jobs import JobEvent
from schemas.quarantine import QuarantineRecord
from schemas.telemetry import TrainingTelemetry
from schemas.topics import Topic
from schemas.xid import GpuXid

XID_MESSAGES: dict[int, str] = {
    79: "GPU has fallen off the bus.",
    119: "Timeout after 6s of waiting for RPC response from GPU0 GSP!",
    120: "GSP task exception",
    48: "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer",
    64: "Row remapping failure",
    94: "Contained: SM (0x1). RST: No, D-RST: No",
    95: "Uncontained: LTC TAG (0x2,0x0). RST: Yes, D-RST: No",
    13: "Graphics SM Warp Exception on (GPC 0, TPC 1, SM 0): Out Of Range Address",
    31: "MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ 0x7f2a_4b3c0000",
    43: "Ch 00000008, engmask 00000101",
    63: "Row remapper: new row (0x0000000000f3a2c0) marked for remapping",
    92: "High single-bit ECC error rate",
    45: "Ch 00000010, engmask 00000101",
}
SEVERITY: dict[str, Severity] = {"hardware": "critical", "precursor": "warning"}


@dataclass(frozen=True, slots=True)
class Out:
    topic: str  # logical name: gpu.xid, gpu.health, jobs.events, training.telemetry, ...
    key: str
    value: dict[str, Any]
    job_event: JobEvent | None = None
    incident: Incident | None = None  # a termination: the bus stamps its wall time


def signal_out(s: Signal) -> Out:
    if s.kind == "xid":
        code = int(s.code)
        xid = GpuXid(
            node=s.node,
            xid=code,
            ts_ms=s.ts_ms,
            gpu_index=s.gpu_index,
            pci_bus_id=None
            if s.gpu_index is None
            else f"0000:{0x18 + 0x10 * s.gpu_index:02x}:00.0",
            message=XID_MESSAGES.get(code),
            source="sim",
        )
        return Out(Topic.GPU_XID, s.node, xid.to_dict())
    health = GpuHealth(
        node=s.node,
        ts_ms=s.ts_ms,
        condition=as_condition(str(s.code)),
        gpu_index=s.gpu_index,
        severity=SEVERITY.get(s.cls, "info"),
        detail=f"sim: {s.part}",
    )
    return Out(Topic.GPU_HEALTH, s.node, health.to_dict())


def ok_out(node: str, ts_ms: int) -> Out:
    """The agent's periodic 'all fine' sample: ignored by the policy, it moves event time."""
    return Out(Topic.GPU_HEALTH, node, GpuHealth(node, ts_ms, "ok", severity="info").to_dict())


def job_out(event: JobEvent, incident: Incident | None = None) -> Out:
    return Out(Topic.JOBS_EVENTS, event.job_id, event.to_dict(), job_event=event, incident=incident)


def telemetry_out(t: TrainingTelemetry) -> Out:
    return Out(Topic.TRAINING_TELEMETRY, t.job_id, t.to_dict())


def release_out(node: str, ts_ms: int) -> Out:
    record = QuarantineRecord(node, "released", "operator", (), None, ts_ms)
    value = record.to_dict() | {"detail": "sim: repaired", "operator": "gpufailover-demo"}
    return Out(Topic.NODES_QUARANTINE, node, value)
