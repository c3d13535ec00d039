"""The classifier's internal topics: messages between the two halves of the engine, and the
quarantine requests it emits.

The engine is split the way Kafka partitions it: the *node side* owns evidence (keyed by node),
the *job side* owns terminations (keyed by job). They meet only through these messages, which the
Kafka glue carries on internal topics and replay carries on an in-process queue.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from schemas import _fields as f
from schemas.decisions import Evidence
from schemas.errors import SchemaError
from schemas.quarantine import QuarantineRecord


@dataclass(frozen=True, slots=True)
class NodeTermination:
    """Job side -> node side: job (job_id, attempt) ended at `terminated_ts_ms` on `node`.

    With `until_ms` it is a progress request for a termination the node already knows: report
    again once the node's watermark has passed `until_ms` (a hardware signal after the
    termination moved the decision time; every node must be complete up to it).
    """

    job_id: str
    attempt: int
    node: str
    terminated_ts_ms: int
    until_ms: int | None = None

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "job_id": self.job_id,
            "attempt": self.attempt,
            "node": self.node,
            "terminated_ts_ms": self.terminated_ts_ms,
        }
        if self.until_ms is not None:
            d["until_ms"] = self.until_ms
        return d

    @staticmethod
    def from_dict(value: Any) -> NodeTermination:
        """Checked: the signal filter keeps its times in a heap and does arithmetic on them,
        so a malformed record must fail here (SchemaError), not later in the loop."""
        d = f.as_object(value)
        return NodeTermination(
            f.req_id(d, "job_id"),
            f.req_int(d, "attempt", minimum=0),
            f.req_id(d, "node"),
            f.req_ts(d, "terminated_ts_ms"),
            f.opt_int(d, "until_ms"),
        )


@dataclass(frozen=True, slots=True)
class NodeReport:
    """Node side -> job side: evidence from `node` inside the job's window.

    `initial` marks the answer to the NodeTermination; `closed` says the node's watermark passed
    the end of the grace, so nothing more will come from this node for this (job, attempt).
    `complete_to` is the node partition's watermark when the report was made: every signal of
    the node with `ts_ms < complete_to` has been read (the completeness rule, README).
    """

    job_id: str
    attempt: int
    node: str
    items: tuple[Evidence, ...]
    initial: bool
    closed: bool
    complete_to: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "attempt": self.attempt,
            "node": self.node,
            "items": [e.to_dict() for e in self.items],
            "initial": self.initial,
            "closed": self.closed,
            "complete_to": self.complete_to,
        }

    @staticmethod
    def from_dict(d: dict[str, Any]) -> NodeReport:
        return NodeReport(
            d["job_id"],
            d["attempt"],
            d["node"],
            tuple(Evidence.from_dict(e) for e in d["items"]),
            d["initial"],
            d["closed"],
            d.get("complete_to"),
        )


@dataclass(frozen=True, slots=True)
class QuarantineRequest:
    """Node side -> quarantine: a hardware or precursor signal on a node not yet quarantined."""

    node: str
    reason: Literal["hardware", "precursor"]
    evidence: Evidence
    job_id: str | None
    ts_ms: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": f.SCHEMA_VERSION,
            "node": self.node,
            "state": "quarantined",
            "reason": self.reason,
            "evidence": [self.evidence.to_dict()],
            "job_id": self.job_id,
            "ts_ms": self.ts_ms,
        }

    @staticmethod
    def from_dict(value: Any) -> QuarantineRequest:
        """Read back as the quarantine service reads it (a QuarantineRecord, one evidence)."""
        rec = QuarantineRecord.from_dict(value)
        if rec.state != "quarantined" or rec.reason not in ("hardware", "precursor"):
            raise SchemaError("reason", "a quarantine request is a hardware or precursor ask")
        if len(rec.evidence) != 1:
            raise SchemaError("evidence", "a quarantine request carries one evidence item")
        return QuarantineRequest(rec.node, rec.reason, rec.evidence[0], rec.job_id, rec.ts_ms)


@dataclass(frozen=True, slots=True)
class NodeReportPack:
    """Several reports from one input record bound for one partition of
    `failover.node-evidence` (key: the job's id when all are of one job, else none): the job
    agent reads one record, not one each, and writes each job's state once."""

    reports: tuple[NodeReport, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"reports": [r.to_dict() for r in self.reports]}

    @staticmethod
    def from_dict(d: dict[str, Any]) -> NodeReportPack:
        return NodeReportPack(tuple(NodeReport.from_dict(r) for r in d["reports"]))


# `failover.node-signals` (no key: the signal filter writes to the partition it read): what the
# filter forwards to the node side, one of three records.
@dataclass(frozen=True, slots=True)
class SignalPack:
    """Folded evidence and terminations, in the order the filter read them."""

    signals: tuple[Evidence | NodeTermination, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "signals": [
                {"evidence": s.to_dict()}
                if isinstance(s, Evidence)
                else {"termination": s.to_dict()}
                for s in self.signals
            ]
        }

    @staticmethod
    def from_dict(d: dict[str, Any]) -> SignalPack:
        return SignalPack(
            tuple(
                Evidence.from_dict(i["evidence"])
                if "evidence" in i
                else NodeTermination.from_dict(i["termination"])
                for i in d["signals"]
            )
        )


@dataclass(frozen=True, slots=True)
class Watermark:
    """Every signal of the partition stamped before `watermark` has been read."""

    watermark: int

    def to_dict(self) -> dict[str, Any]:
        return {"watermark": self.watermark}

    @staticmethod
    def from_dict(d: dict[str, Any]) -> Watermark:
        return Watermark(d["watermark"])


@dataclass(frozen=True, slots=True)
class IdleMarker:
    """The partition's inputs are read and have been quiet for `idle_ms` of wall clock."""

    idle_ms: int

    def to_dict(self) -> dict[str, Any]:
        return {"idle_ms": self.idle_ms}

    @staticmethod
    def from_dict(d: dict[str, Any]) -> IdleMarker:
        return IdleMarker(d["idle_ms"])


@dataclass(frozen=True, slots=True)
class Tick:
    """`failover.ticks` (no key, one per partition): the clock's beat, driving expiry."""

    def to_dict(self) -> dict[str, Any]:
        return {}

    @staticmethod
    def from_dict(d: dict[str, Any]) -> Tick:
        if d:
            raise SchemaError("value", "a tick is an empty object")
        return Tick()
