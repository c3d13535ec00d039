"""`jobs.events` (key: job_id): the platform's job lifecycle events."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from schemas import _fields as f
from schemas import bounds as b
from schemas.errors import SchemaError

# `pending`: the attempt cannot start yet, `reason` says why (ImagePullBackOff).
EventType = Literal["submitted", "pending", "started", "terminated", "succeeded", "cancelled"]
TrainingType = Literal["on_demand", "spot"]
EVENT_TYPES: frozenset[EventType] = frozenset(get_args(EventType))
NODES_REQUIRED: frozenset[EventType] = frozenset({"started", "terminated"})
TRAINING_TYPES: frozenset[TrainingType] = frozenset(get_args(TrainingType))
DEFAULT_MAX_FAILOVERS = 3


@dataclass(frozen=True, slots=True)
class JobEvent:
    job_id: str
    attempt: int
    type: EventType
    ts_ms: int
    nodes: tuple[str, ...] = ()
    exit_code: int | None = None
    reason: str | None = None
    failover: bool = True
    training_type: TrainingType = "on_demand"
    max_failovers: int | None = None  # None: the policy's default
    priority: int | None = None
    spec: dict[str, Any] | None = field(default=None, hash=False, compare=True)

    @staticmethod
    def from_dict(value: Any) -> JobEvent:
        d = f.as_object(value)
        f.check_version(d)
        etype = f.req_enum(d, "type", EVENT_TYPES)
        exit_code = d.get("exit_code")
        if exit_code is not None:
            exit_code = f.check_int("exit_code", exit_code, b.I32_MIN, b.I32_MAX)
        return JobEvent(
            job_id=f.req_id(d, "job_id"),
            attempt=f.req_int(d, "attempt", minimum=0, maximum=b.I32_MAX),
            type=etype,
            ts_ms=f.req_ts(d),
            nodes=f.str_list(d, "nodes", required=etype in NODES_REQUIRED),
            exit_code=exit_code,
            reason=f.opt_str(d, "reason", max_len=b.SHORT_MAX_CHARS),
            failover=f.opt_bool(d, "failover", True),
            training_type=f.opt_enum(d, "training_type", TRAINING_TYPES) or "on_demand",
            max_failovers=f.opt_int(d, "max_failovers", minimum=0, maximum=b.I32_MAX),
            priority=f.opt_int(d, "priority", minimum=b.I32_MIN, maximum=b.I32_MAX),
            spec=f.opt_object(d, "spec"),
        )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "schema_version": f.SCHEMA_VERSION,
            "job_id": self.job_id,
            "attempt": self.attempt,
            "type": self.type,
            "ts_ms": self.ts_ms,
        }
        if self.nodes or self.type in NODES_REQUIRED:
            out["nodes"] = list(self.nodes)
        for k in ("exit_code", "reason", "max_failovers", "priority", "spec"):
            v = getattr(self, k)
            if v is not None:
                out[k] = v
        if not self.failover:
            out["failover"] = False
        if self.training_type != "on_demand":
            out["training_type"] = self.training_type
        return out


def validate_new_event(event: JobEvent) -> JobEvent:
    """Extra checks for events we publish ourselves (the CLI refuses what the stream would DLQ)."""
    if event.type in NODES_REQUIRED and not event.nodes:
        raise SchemaError("nodes", f"a {event.type} event needs at least one node")
    return event
