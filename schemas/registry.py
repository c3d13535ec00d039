"""The value type(s) of every declared topic: what a record on it is, as a schemas/ type.

One topic, one record type, except where a topic carries a few kinds of record told apart by
their fields (`failover.alerts` by `kind`, `failover.node-signals` and `failover.node-evidence`
by their top-level key). Every dead-letter topic carries DeadLetter. The JSON Schemas
(schemas/jsonschema/) and docs/topics.md are generated from this table and the catalog.
"""

from __future__ import annotations

from typing import Any

from schemas.alerts import (
    BreakerAlert,
    DryRunAlert,
    JobAlert,
    LemonAlert,
    RefusedAlert,
    ValidationAlert,
)
from schemas.audit import OperatorCommand
from schemas.dead_letter import DeadLetter
from schemas.decisions import Decision
from schemas.engine import (
    IdleMarker,
    NodeReport,
    NodeReportPack,
    NodeTermination,
    QuarantineRequest,
    SignalPack,
    Tick,
    Watermark,
)
from schemas.health import GpuHealth
from schemas.jobs import JobEvent
from schemas.quarantine import QuarantineRecord, ValidationRequest, ValidationResult
from schemas.requeue import RequeueCommand
from schemas.status import JobStatus
from schemas.telemetry import TrainingTelemetry
from schemas.topics import SPECS, Topic
from schemas.xid import GpuXid

_DECLARED: dict[str, tuple[type[Any], ...]] = {
    Topic.GPU_XID: (GpuXid,),
    Topic.GPU_HEALTH: (GpuHealth,),
    Topic.JOBS_EVENTS: (JobEvent,),
    Topic.TRAINING_TELEMETRY: (TrainingTelemetry,),
    Topic.FAILOVER_DECISIONS: (Decision,),
    Topic.NODES_QUARANTINE: (QuarantineRecord,),
    Topic.NODES_VALIDATE: (ValidationRequest,),
    Topic.VALIDATION_RESULTS: (ValidationResult,),
    Topic.JOBS_REQUEUE: (RequeueCommand,),
    Topic.JOBS_STATUS: (JobStatus,),
    # A topic without a `.dlq` of its own dead-letters here (consumers.runtime.records).
    Topic.FAILOVER_ALERTS: (
        JobAlert,
        BreakerAlert,
        RefusedAlert,
        DryRunAlert,
        LemonAlert,
        ValidationAlert,
        DeadLetter,
    ),
    Topic.OPERATORS_AUDIT: (OperatorCommand,),
    Topic.TERM_BY_NODE: (NodeTermination,),
    Topic.NODE_EVIDENCE: (NodeReport, NodeReportPack),
    Topic.NODE_SIGNALS: (SignalPack, Watermark, IdleMarker),
    Topic.QUARANTINE_REQUESTS: (QuarantineRequest,),
    Topic.TICKS: (Tick,),
}

VALUE_TYPES: dict[str, tuple[type[Any], ...]] = {
    logical: _DECLARED.get(logical, (DeadLetter,) if logical.endswith(".dlq") else ())
    for logical in SPECS
}
