"""Every Kafka topic the pipeline uses, declared once: partitions, key, cleanup and retention.

Code asks `TopicNames` for real (prefixed) names instead of hard-coding strings:

    names = TopicNames.from_env()          # GPUFAILOVER_TOPIC_PREFIX
    producer.send(names.gpu_xid, ...)
    names.dlq(names.gpu_xid)               # -> "<prefix>gpu.xid.dlq"

All topics get the same partition count: node-keyed and job-keyed topics are co-partitioned
(faust's assignor gives partition N of every topic of an agent to the same worker), and the
tick topic must reach every partition of the agent it drives.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import os
import re
from dataclasses import dataclass
from typing import Any

from deploy.kafka_admin import admin_client
from gpufailover.security import PLAINTEXT, KafkaSecurity

log = logging.getLogger(__name__)

DEFAULT_PARTITIONS = 4
_HOUR_MS = 3_600_000
_DAY_MS = 24 * _HOUR_MS
_PREFIX_RE = re.compile(r"[A-Za-z0-9.-]*")
_TOPIC_ALREADY_EXISTS = 36


class Key(enum.StrEnum):
    NODE = "node"
    JOB_ID = "job_id"
    NONE = "none"


@dataclass(frozen=True)
class TopicSpec:
    logical: str  # the unprefixed name
    key: Key
    retention_ms: int | None  # None: compacted, kept forever
    description: str
    dlq: bool = False  # an input topic with a `<name>.dlq` companion
    internal: bool = False  # written and read only by the stream processor

    @property
    def compacted(self) -> bool:
        return self.retention_ms is None

    def configs(self) -> dict[str, str]:
        if self.retention_ms is None:
            return {"cleanup.policy": "compact"}
        return {"cleanup.policy": "delete", "retention.ms": str(self.retention_ms)}


_DECLARED: tuple[TopicSpec, ...] = (
    TopicSpec("gpu.xid", Key.NODE, 7 * _DAY_MS, "XID events from node agents", dlq=True),
    TopicSpec("gpu.health", Key.NODE, 3 * _DAY_MS, "GPU health samples", dlq=True),
    TopicSpec("jobs.events", Key.JOB_ID, 7 * _DAY_MS, "job lifecycle events", dlq=True),
    TopicSpec("training.telemetry", Key.JOB_ID, 3 * _DAY_MS, "training progress", dlq=True),
    TopicSpec("failover.decisions", Key.JOB_ID, 30 * _DAY_MS, "classified job failures", dlq=True),
    TopicSpec("nodes.quarantine", Key.NODE, None, "current quarantine per node", dlq=True),
    # The validation gate (docs/node-lifecycle.md): requests for each node's agent (compacted:
    # an agent that starts finds its node's latest request) and what the agents report back.
    TopicSpec("nodes.validate", Key.NODE, None, "validation requests per node"),
    TopicSpec(
        "nodes.validation-results",
        Key.NODE,
        30 * _DAY_MS,
        "validation results and repair signals from node agents",
        dlq=True,
    ),
    TopicSpec("jobs.requeue", Key.JOB_ID, 7 * _DAY_MS, "requeue requests"),
    TopicSpec("jobs.status", Key.JOB_ID, None, "latest failover status per job"),
    TopicSpec("failover.alerts", Key.JOB_ID, 30 * _DAY_MS, "alerts for operators"),
    # Append-only: every operator command with its principal and reason; never compacted, so
    # a node's later records cannot hide that it was released, and by whom.
    TopicSpec("operators.audit", Key.NONE, 365 * _DAY_MS, "operator commands, who and why"),
    TopicSpec(
        "failover.term-by-node", Key.NODE, _DAY_MS, "job terminations re-keyed", internal=True
    ),
    TopicSpec(
        "failover.node-evidence", Key.JOB_ID, _DAY_MS, "node evidence re-keyed", internal=True
    ),
    TopicSpec(
        "failover.node-signals",
        Key.NODE,
        _DAY_MS,
        "node-side input reduced by the signal filter",
        internal=True,
    ),
    TopicSpec(
        "failover.quarantine-requests",
        Key.NODE,
        7 * _DAY_MS,
        "quarantine asks",
        dlq=True,
        internal=True,
    ),
    TopicSpec("failover.ticks", Key.NONE, _HOUR_MS, "clock ticks driving expiry", internal=True),
)
_DLQS: tuple[TopicSpec, ...] = tuple(
    TopicSpec(f"{s.logical}.dlq", s.key, 14 * _DAY_MS, f"dead letters of {s.logical}")
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


def default_partitions() -> int:
    raw = os.environ.get("GPUFAILOVER_PARTITIONS", "")
    try:
        value = int(raw) if raw else DEFAULT_PARTITIONS
    except ValueError:
        raise ValueError(f"GPUFAILOVER_PARTITIONS={raw!r}: expected an integer") from None
    if value < 1:
        raise ValueError(f"GPUFAILOVER_PARTITIONS={value}: must be >= 1")
    return value


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
            raise KeyError(f"undeclared topic {logical!r}: declare it in deploy/topics.py")
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
        return self.name(f"{logical}.dlq")

    def all(self) -> tuple[str, ...]:
        return tuple(self.prefix + spec.logical for spec in TOPICS)

    # Input topics
    @property
    def gpu_xid(self) -> str:
        return self.name("gpu.xid")

    @property
    def gpu_health(self) -> str:
        return self.name("gpu.health")

    @property
    def jobs_events(self) -> str:
        return self.name("jobs.events")

    @property
    def training_telemetry(self) -> str:
        return self.name("training.telemetry")

    @property
    def nodes_quarantine(self) -> str:
        return self.name("nodes.quarantine")

    @property
    def nodes_validate(self) -> str:
        return self.name("nodes.validate")

    @property
    def validation_results(self) -> str:
        return self.name("nodes.validation-results")

    # Outputs
    @property
    def failover_decisions(self) -> str:
        return self.name("failover.decisions")

    @property
    def jobs_requeue(self) -> str:
        return self.name("jobs.requeue")

    @property
    def jobs_status(self) -> str:
        return self.name("jobs.status")

    @property
    def operators_audit(self) -> str:
        return self.name("operators.audit")

    @property
    def failover_alerts(self) -> str:
        return self.name("failover.alerts")

    # Internal to the stream processor
    @property
    def term_by_node(self) -> str:
        return self.name("failover.term-by-node")

    @property
    def node_evidence(self) -> str:
        return self.name("failover.node-evidence")

    @property
    def node_signals(self) -> str:
        return self.name("failover.node-signals")

    @property
    def quarantine_requests(self) -> str:
        return self.name("failover.quarantine-requests")

    @property
    def ticks(self) -> str:
        return self.name("failover.ticks")


class TopicMismatchError(RuntimeError):
    """A topic exists with a partition count other than the one asked for."""


async def create_topics(
    bootstrap: str,
    partitions: int | None = None,
    prefix: str | None = None,
    *,
    replication_factor: int = 1,
    timeout_s: float = 30.0,
    security: KafkaSecurity = PLAINTEXT,
) -> list[str]:
    """Create every declared topic that does not exist yet; return the names it created.

    Idempotent: existing topics are left alone, but must have `partitions` partitions
    (else TopicMismatchError: co-partitioning would silently break). Returns once every
    topic has a leader. `partitions`/`prefix` default to GPUFAILOVER_PARTITIONS /
    GPUFAILOVER_TOPIC_PREFIX.
    """
    from aiokafka.admin import NewTopic

    names = TopicNames(default_prefix() if prefix is None else prefix)
    count = default_partitions() if partitions is None else partitions
    if count < 1:
        raise ValueError(f"partitions={count}: must be >= 1")
    async with admin_client(bootstrap, timeout_s=timeout_s, security=security) as admin:
        existing = set(await admin.list_topics()) & set(names.all())
        wanted = [
            NewTopic(real, count, replication_factor, topic_configs=names.spec(real).configs())
            for real in names.all()
            if real not in existing
        ]
        created: list[str] = []
        if wanted:
            response = await admin.create_topics(wanted, timeout_ms=int(timeout_s * 1000))
            created, raced = _check_create_response(response.to_object())
            existing |= raced
        await _check_partitions(admin, sorted(existing), count)
        await _await_leaders(admin, list(names.all()), timeout_s)
    log.info(
        "topics with prefix %r on %s: %d created, %d already existed",
        names.prefix,
        bootstrap,
        len(created),
        len(existing),
    )
    return created


async def create_compacted_topics(
    bootstrap: str,
    topics: list[str],
    partitions: int,
    *,
    replication_factor: int = 1,
    timeout_s: float = 30.0,
    security: KafkaSecurity = PLAINTEXT,
) -> list[str]:
    """Create the compacted topics (a faust app's changelogs) that do not exist yet, with
    `partitions` each, and return once every one has a leader.

    faust creates its changelog topics itself at start, but a table write can come before the
    new topic's metadata has arrived (`PartitionsMismatch ... has 0 partitions`, which crashed
    a worker about once in ten starts on pre-loaded topics): created first, they are there.
    """
    from aiokafka.admin import NewTopic

    async with admin_client(bootstrap, timeout_s=timeout_s, security=security) as admin:
        existing = set(await admin.list_topics()) & set(topics)
        wanted = [
            NewTopic(t, partitions, replication_factor, topic_configs={"cleanup.policy": "compact"})
            for t in topics
            if t not in existing
        ]
        created: list[str] = []
        if wanted:
            response = await admin.create_topics(wanted, timeout_ms=int(timeout_s * 1000))
            created, raced = _check_create_response(response.to_object())
            existing |= raced
        await _check_partitions(admin, sorted(existing), partitions)
        await _await_leaders(admin, list(topics), timeout_s)
    return created


def _check_create_response(obj: dict[str, Any]) -> tuple[list[str], set[str]]:
    from aiokafka.errors import for_code

    created: list[str] = []
    raced: set[str] = set()
    failures = []
    for err in obj["topic_errors"]:
        code = err["error_code"]
        if code == 0:
            created.append(err["topic"])
        elif code == _TOPIC_ALREADY_EXISTS:  # created concurrently since we listed
            raced.add(err["topic"])
        else:
            failures.append(f"{err['topic']}: {for_code(code).__name__} {err.get('error_message')}")
    if failures:
        raise RuntimeError("could not create topics: " + "; ".join(failures))
    return sorted(created), raced


async def _check_partitions(admin: Any, topics: list[str], count: int) -> None:
    if not topics:
        return
    wrong = sorted(
        f"{t['topic']} has {len(t['partitions'])}"
        for t in await admin.describe_topics(topics)
        if t["error_code"] == 0 and len(t["partitions"]) != count
    )
    if wrong:
        raise TopicMismatchError(
            f"existing topics need {count} partitions: {', '.join(wrong)} "
            "(recreate them, or pass the partition count they were created with)"
        )


async def _await_leaders(admin: Any, topics: list[str], timeout_s: float) -> None:
    """Poll metadata until every partition of every topic has a leader."""
    async with asyncio.timeout(timeout_s):
        while True:
            described = await admin.describe_topics(topics)
            pending = [
                t["topic"]
                for t in described
                if t["error_code"] != 0 or any(p["leader"] < 0 for p in t["partitions"])
            ]
            if not pending and len(described) == len(topics):
                return
            await asyncio.sleep(0.1)


async def describe_topics(
    bootstrap: str, prefix: str | None = None, *, security: KafkaSecurity = PLAINTEXT
) -> dict[str, int]:
    """Declared topics present on the broker -> their partition counts."""
    names = TopicNames(default_prefix() if prefix is None else prefix)
    async with admin_client(bootstrap, security=security) as admin:
        present = set(await admin.list_topics()) & set(names.all())
        if not present:
            return {}
        described = await admin.describe_topics(sorted(present))
    return {t["topic"]: len(t["partitions"]) for t in described if t["error_code"] == 0}
