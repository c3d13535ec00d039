"""Every Kafka topic the pipeline uses, declared once: key, cleanup, retention, who writes and
who reads. Part of the contract (docs/topics.md is generated from it); creating the topics on a
broker is deploy/topics.py's job.

Code asks `TopicNames` for real (prefixed) names instead of hard-coding strings:

    names = TopicNames.from_env()          # GPUFAILOVER_TOPIC_PREFIX
    producer.send(names.gpu_xid, ...)
    names.dlq(names.gpu_xid)               # -> "<prefix>gpu.xid.dlq"

and `Topic` for the logical (unprefixed) names, e.g. in a replayed dump's lines.
"""

from __future__ import annotations

import enum
import os
import re
from dataclasses import dataclass
from typing import Final

_HOUR_MS = 3_600_000
_DAY_MS = 24 * _HOUR_MS
_PREFIX_RE = re.compile(r"[A-Za-z0-9.-]*")
DLQ_SUFFIX = ".dlq"
DLQ_RETENTION_MS = 14 * _DAY_MS


class Key(enum.StrEnum):
    NODE = "node"
    JOB_ID = "job_id"
    NONE = "none"


class Topic:
    """The logical name of every declared topic (dead-letter companions: `dlq_of`). Plain
    strings, not an enum: orjson refuses a str subclass as a dict key."""

    GPU_XID: Final = "gpu.xid"
    GPU_HEALTH: Final = "gpu.health"
    JOBS_EVENTS: Final = "jobs.events"
    TRAINING_TELEMETRY: Final = "training.telemetry"
    FAILOVER_DECISIONS: Final = "failover.decisions"
    NODES_QUARANTINE: Final = "nodes.quarantine"
    NODES_VALIDATE: Final = "nodes.validate"
    VALIDATION_RESULTS: Final = "nodes.validation-results"
    JOBS_REQUEUE: Final = "jobs.requeue"
    JOBS_STATUS: Final = "jobs.status"
    FAILOVER_ALERTS: Final = "failover.alerts"
    OPERATORS_AUDIT: Final = "operators.audit"
    TERM_BY_NODE: Final = "failover.term-by-node"
    NODE_EVIDENCE: Final = "failover.node-evidence"
    NODE_SIGNALS: Final = "failover.node-signals"
    QUARANTINE_REQUESTS: Final = "failover.quarantine-requests"
    TICKS: Final = "failover.ticks"


def dlq_of(logical: str) -> str:
    """The logical name of `logical`'s dead-letter companion."""
    return logical + DLQ_SUFFIX


# Who writes and who reads, as docs/topics.md shows them (components by their CLI name).
_AGENT = "node agent (`gpufailover agent`)"
_SCHEDULER = "scheduler hooks (`gpufailover publish`, the Kubernetes pod watcher)"
_TRAINING = "training jobs (`producers.telemetry` client)"
_CLASSIFIER = "classifier"
_QUARANTINE = "quarantine service"
_REQUEUE = "requeue service"
_JOBSTATUS = "job status service"
_OPERATORS = "operators (`gpufailover` CLI)"


@dataclass(frozen=True)
class TopicSpec:
    logical: str  # the unprefixed name
    key: Key
    retention_ms: int | None  # None: compacted, kept forever
    description: str
    dlq: bool = False  # an input topic with a `<name>.dlq` companion
    internal: bool = False  # written and read only by the stream processor
    writers: tuple[str, ...] = ()
    readers: tuple[str, ...] = ()

    @property
    def compacted(self) -> bool:
        return self.retention_ms is None

    def configs(self) -> dict[str, str]:
        if self.retention_ms is None:
            return {"cleanup.policy": "compact"}
        return {"cleanup.policy": "delete", "retention.ms": str(self.retention_ms)}


_DECLARED: tuple[TopicSpec, ...] = (
    TopicSpec(
        Topic.GPU_XID, Key.NODE, 7 * _DAY_MS, "XID events from node agents", dlq=True,
        writers=(_AGENT,), readers=(_CLASSIFIER,),
    ),
    TopicSpec(
        Topic.GPU_HEALTH, Key.NODE, 3 * _DAY_MS, "GPU health samples", dlq=True,
        writers=(_AGENT,), readers=(_CLASSIFIER,),
    ),
    TopicSpec(
        Topic.JOBS_EVENTS, Key.JOB_ID, 7 * _DAY_MS, "job lifecycle events", dlq=True,
        writers=(_SCHEDULER,), readers=(_CLASSIFIER, _JOBSTATUS, _REQUEUE),
    ),
    TopicSpec(
        Topic.TRAINING_TELEMETRY, Key.JOB_ID, 3 * _DAY_MS, "training progress", dlq=True,
        writers=(_TRAINING,), readers=(_CLASSIFIER,),
    ),
    TopicSpec(
        Topic.FAILOVER_DECISIONS, Key.JOB_ID, 30 * _DAY_MS, "classified job failures", dlq=True,
        writers=(_CLASSIFIER,), readers=(_JOBSTATUS, _QUARANTINE, _REQUEUE),
    ),
    TopicSpec(
        Topic.NODES_QUARANTINE, Key.NODE, None, "current quarantine per node", dlq=True,
        writers=(_QUARANTINE, _OPERATORS), readers=(_CLASSIFIER, _QUARANTINE, _REQUEUE),
    ),
    # The validation gate (docs/node-lifecycle.md): requests for each node's agent (compacted:
    # an agent that starts finds its node's latest request) and what the agents report back.
    TopicSpec(
        Topic.NODES_VALIDATE, Key.NODE, None, "validation requests per node",
        writers=(_QUARANTINE,), readers=(_AGENT,),
    ),
    TopicSpec(
        Topic.VALIDATION_RESULTS,
        Key.NODE,
        30 * _DAY_MS,
        "validation results and repair signals from node agents",
        dlq=True,
        writers=(_AGENT,),
        readers=(_QUARANTINE,),
    ),
    TopicSpec(
        Topic.JOBS_REQUEUE, Key.JOB_ID, 7 * _DAY_MS, "requeue requests",
        writers=(_REQUEUE,), readers=("the scheduler (the requeue service's stage)",),
    ),
    TopicSpec(
        Topic.JOBS_STATUS, Key.JOB_ID, None, "latest failover status per job",
        writers=(_JOBSTATUS,), readers=(_JOBSTATUS, _OPERATORS),
    ),
    TopicSpec(
        Topic.FAILOVER_ALERTS, Key.JOB_ID, 30 * _DAY_MS, "alerts for operators",
        writers=(_CLASSIFIER, _QUARANTINE, _JOBSTATUS), readers=(_QUARANTINE, _OPERATORS),
    ),
    # Append-only: every operator command with its principal and reason; never compacted, so
    # a node's later records cannot hide that it was released, and by whom.
    TopicSpec(
        Topic.OPERATORS_AUDIT, Key.NONE, 365 * _DAY_MS, "operator commands, who and why",
        writers=(_OPERATORS,), readers=(_QUARANTINE,),
    ),
    TopicSpec(
        Topic.TERM_BY_NODE, Key.NODE, _DAY_MS, "job terminations re-keyed", internal=True,
        writers=(_CLASSIFIER,), readers=(_CLASSIFIER,),
    ),
    TopicSpec(
        Topic.NODE_EVIDENCE, Key.JOB_ID, _DAY_MS, "node evidence re-keyed", internal=True,
        writers=(_CLASSIFIER,), readers=(_CLASSIFIER,),
    ),
    TopicSpec(
        Topic.NODE_SIGNALS,
        Key.NODE,
        _DAY_MS,
        "node-side input reduced by the signal filter",
        internal=True,
        writers=(_CLASSIFIER,),
        readers=(_CLASSIFIER,),
    ),
    TopicSpec(
        Topic.QUARANTINE_REQUESTS,
        Key.NODE,
        7 * _DAY_MS,
        "quarantine asks",
        dlq=True,
        internal=True,
        writers=(_CLASSIFIER,),
        readers=(_QUARANTINE,),
    ),
    TopicSpec(
        Topic.TICKS, Key.NONE, _HOUR_MS, "clock ticks driving expiry", internal=True,
        writers=(_CLASSIFIER,), readers=(_CLASSIFIER,),
    ),
)  # fmt: skip
_DLQS: tuple[TopicSpec, ...] = tuple(
    TopicSpec(
        dlq_of(s.logical),
        s.key,
        DLQ_RETENTION_MS,
        f"dead letters of {s.logical}",
        writers=("the reader that gives up on a record (schemas/dead_letter.py OWNERS)",),
        readers=(_OPERATORS,),
    )
    for s in _DECLARED
    if s.dlq
)
TOPICS: tuple[TopicSpec, ...] = _DECLARED + _DLQS
SPECS: dict[str, TopicSpec] = {spec.logical: spec for spec in TOPICS}


def validate_prefix(prefix: str) -> str:
    """Letters, digits, '.' and '-' only ('_' would collide with '.' in Kafka's metric names)."""
    if not _PREFIX_RE.fullmatch(prefix):
        raise ValueError(f"topic prefix {prefix!r}: use only letters, digits, '.' and '-'")
    if len(prefix) + max(len(s.logical) for s in TOPICS) > 249:
        raise ValueError(f"topic prefix {prefix!r} is too long (topic names max 249 chars)")
    return prefix


def default_prefix() -> str:
    return validate_prefix(os.environ.get("GPUFAILOVER_TOPIC_PREFIX", ""))


@dataclass(frozen=True)
class TopicNames:
    """Real topic names for one prefix (empty in production, unique per test)."""

    prefix: str = ""

    def __post_init__(self) -> None:
        validate_prefix(self.prefix)

    @classmethod
    def from_env(cls) -> TopicNames:
        return cls(default_prefix())

    def name(self, logical: str) -> str:
        if logical not in SPECS:
            raise KeyError(f"undeclared topic {logical!r}: declare it in schemas/topics.py")
        return self.prefix + logical

    def logical(self, real: str) -> str:
        """Inverse of `name`."""
        if not real.startswith(self.prefix) or real[len(self.prefix) :] not in SPECS:
            raise KeyError(f"{real!r} is not a declared topic with prefix {self.prefix!r}")
        return real[len(self.prefix) :]

    def spec(self, real: str) -> TopicSpec:
        return SPECS[self.logical(real)]

    def dlq(self, real: str) -> str:
        """The dead-letter topic of an input topic."""
        logical = self.logical(real)
        if not SPECS[logical].dlq:
            raise KeyError(f"{logical!r} has no dead-letter topic")
        return self.name(dlq_of(logical))

    def all(self) -> tuple[str, ...]:
        return tuple(self.prefix + spec.logical for spec in TOPICS)

    # Input topics
    @property
    def gpu_xid(self) -> str:
        return self.name(Topic.GPU_XID)

    @property
    def gpu_health(self) -> str:
        return self.name(Topic.GPU_HEALTH)

    @property
    def jobs_events(self) -> str:
        return self.name(Topic.JOBS_EVENTS)

    @property
    def training_telemetry(self) -> str:
        return self.name(Topic.TRAINING_TELEMETRY)

    @property
    def nodes_quarantine(self) -> str:
        return self.name(Topic.NODES_QUARANTINE)

    @property
    def nodes_validate(self) -> str:
        return self.name(Topic.NODES_VALIDATE)

    @property
    def validation_results(self) -> str:
        return self.name(Topic.VALIDATION_RESULTS)

    # Outputs
    @property
    def failover_decisions(self) -> str:
        return self.name(Topic.FAILOVER_DECISIONS)

    @property
    def jobs_requeue(self) -> str:
        return self.name(Topic.JOBS_REQUEUE)

    @property
    def jobs_status(self) -> str:
        return self.name(Topic.JOBS_STATUS)

    @property
    def operators_audit(self) -> str:
        return self.name(Topic.OPERATORS_AUDIT)

    @property
    def failover_alerts(self) -> str:
        return self.name(Topic.FAILOVER_ALERTS)

    # Internal to the stream processor
    @property
    def term_by_node(self) -> str:
        return self.name(Topic.TERM_BY_NODE)

    @property
    def node_evidence(self) -> str:
        return self.name(Topic.NODE_EVIDENCE)

    @property
    def node_signals(self) -> str:
        return self.name(Topic.NODE_SIGNALS)

    @property
    def quarantine_requests(self) -> str:
        return self.name(Topic.QUARANTINE_REQUESTS)

    @property
    def ticks(self) -> str:
        return self.name(Topic.TICKS)
