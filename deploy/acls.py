"""Who may do what on Kafka: one role per component, declared once, applied by
`gpufailover acls apply`.

Each role is a SASL user of the same name (`broker start --secure` creates one per role). A
role may read and write only the topics listed here, use only its own consumer groups and
transactional ids, and nothing else: with `allow.everyone.if.no.acl.found=false` the broker
refuses the rest. READ and WRITE imply DESCRIBE in Kafka, so no DESCRIBE is listed.

Topics are logical names (the prefix is added when applied). A role's dead-letter topics are
those of the inputs it reads (each reader dead-letters what it cannot use), added by
`bindings`. The classifier's faust app owns every topic, group and transactional id under
its app id (changelogs, repartition topics, the signal filter's group).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from schemas.topics import SPECS, TOPICS, Topic, TopicNames


class Resource(enum.IntEnum):
    """Kafka's ResourceType codes (CreateAcls wire values)."""

    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5


class Pattern(enum.IntEnum):
    """Kafka's PatternType codes."""

    LITERAL = 3
    PREFIXED = 4


class Operation(enum.IntEnum):
    """Kafka's AclOperation codes."""

    READ = 3
    WRITE = 4
    CREATE = 5
    DESCRIBE = 8


ALLOW = 3  # AclPermissionType.ALLOW


@dataclass(frozen=True)
class Role:
    name: str  # also its SASL user name
    does: str  # for people: what the component is
    reads: tuple[str, ...] = ()  # logical topic names
    writes: tuple[str, ...] = ()
    # Name prefixes (after the topic prefix) of its consumer groups and transactional ids.
    groups: tuple[str, ...] = ()
    transactional_ids: tuple[str, ...] = ()
    # Topics it may create and use by name prefix (a faust app's changelogs).
    owns_topic_prefix: str | None = None
    creates: bool = False  # may create (and describe) every declared topic


CLASSIFIER_APP_ID = "gpufailover-classifier"
_INTERNAL = (
    Topic.TERM_BY_NODE,
    Topic.NODE_EVIDENCE,
    Topic.NODE_SIGNALS,
    Topic.TICKS,
)

ROLES: tuple[Role, ...] = (
    # The agent reads validation requests (it runs only its own node's) and reports results.
    Role(
        "agent",
        "GPU node agent",
        reads=(Topic.NODES_VALIDATE,),
        writes=(Topic.GPU_XID, Topic.GPU_HEALTH, Topic.VALIDATION_RESULTS),
    ),
    Role("scheduler", "scheduler hooks (`gpufailover publish`)", writes=(Topic.JOBS_EVENTS,)),
    Role("telemetry", "training-script telemetry client", writes=(Topic.TRAINING_TELEMETRY,)),
    # Reads jobs.events once at start (no group) so that a restart sends nothing twice.
    Role(
        "k8s-events",
        "Kubernetes pod watcher (`gpufailover k8s-events`)",
        reads=(Topic.JOBS_EVENTS,),
        writes=(Topic.JOBS_EVENTS,),
    ),
    Role(
        "classifier",
        "stream processor (faust app and signal filter)",
        reads=(
            Topic.GPU_XID,
            Topic.GPU_HEALTH,
            Topic.JOBS_EVENTS,
            Topic.TRAINING_TELEMETRY,
            Topic.NODES_QUARANTINE,
            *_INTERNAL,
        ),
        writes=(
            *_INTERNAL,
            Topic.QUARANTINE_REQUESTS,
            Topic.FAILOVER_DECISIONS,
            Topic.FAILOVER_ALERTS,
        ),
        groups=(CLASSIFIER_APP_ID,),  # its faust group and `<app id>-signals`
        owns_topic_prefix=f"{CLASSIFIER_APP_ID}-",
    ),
    Role(
        "quarantine",
        "quarantine service (breaker, actuator)",
        reads=(
            Topic.QUARANTINE_REQUESTS,
            Topic.FAILOVER_DECISIONS,
            Topic.FAILOVER_ALERTS,
            Topic.NODES_QUARANTINE,
            Topic.OPERATORS_AUDIT,
            Topic.VALIDATION_RESULTS,
        ),
        writes=(Topic.NODES_QUARANTINE, Topic.FAILOVER_ALERTS, Topic.NODES_VALIDATE),
        groups=("gpufailover-quarantine",),
        transactional_ids=("gpufailover-quarantine",),
    ),
    Role(
        "requeue",
        "requeue service",
        reads=(
            Topic.FAILOVER_DECISIONS,
            Topic.NODES_QUARANTINE,
            Topic.JOBS_EVENTS,
            Topic.JOBS_REQUEUE,
        ),
        writes=(Topic.JOBS_REQUEUE,),
        groups=("gpufailover-requeue",),
        transactional_ids=("gpufailover-requeue",),
    ),
    Role(
        "job-status",
        "job status service",
        reads=(Topic.JOBS_EVENTS, Topic.FAILOVER_DECISIONS, Topic.JOBS_STATUS),
        writes=(Topic.JOBS_STATUS, Topic.FAILOVER_ALERTS),
        groups=("gpufailover-job-status",),
        transactional_ids=("gpufailover-job-status",),
    ),
    Role(
        "deployer",
        "`gpufailover topics create` (an init container): creates the declared topics",
        creates=True,
    ),
    Role(
        "operator",
        "people: `quarantine release`, `validate`, `reset-breaker`, `status`, `audit`, "
        "`explain`, `export`",
        # explain and export read what the pipeline read and wrote (no consumer group)
        reads=(
            Topic.NODES_QUARANTINE,
            Topic.JOBS_STATUS,
            Topic.OPERATORS_AUDIT,
            Topic.FAILOVER_ALERTS,
            Topic.JOBS_EVENTS,
            Topic.FAILOVER_DECISIONS,
            Topic.JOBS_REQUEUE,
            Topic.GPU_XID,
            Topic.GPU_HEALTH,
            Topic.TRAINING_TELEMETRY,
            Topic.QUARANTINE_REQUESTS,
        ),
        # A release goes to nodes.quarantine and operators.audit in one transaction; a
        # breaker reset is an operators.audit record, which only this role may write.
        writes=(Topic.NODES_QUARANTINE, Topic.OPERATORS_AUDIT),
        transactional_ids=("gpufailover-operator",),
    ),
)
ROLE_NAMES: tuple[str, ...] = tuple(r.name for r in ROLES)
BY_NAME: dict[str, Role] = {r.name: r for r in ROLES}


@dataclass(frozen=True, order=True)
class AclBinding:
    principal: str  # "User:<name>"
    resource: Resource
    name: str
    pattern: Pattern
    operation: Operation

    def describe(self) -> str:
        star = "*" if self.pattern == Pattern.PREFIXED else ""
        what = f"{self.resource.name.lower()} {self.name}{star}"
        return f"{self.principal} {self.operation.name} {what}"


def dead_letter_topics(reads: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(f"{t}.dlq" for t in reads if SPECS[t].dlq)


def bindings(role: Role, prefix: str = "", *, user: str | None = None) -> list[AclBinding]:
    """Every ALLOW binding of `role` for topics under `prefix` (`user`: its SASL user name
    when that differs from the role name)."""
    names = TopicNames(prefix)
    principal = f"User:{user or role.name}"

    def acl(resource: Resource, name: str, pattern: Pattern, op: Operation) -> AclBinding:
        return AclBinding(principal, resource, name, pattern, op)

    out = [acl(Resource.TOPIC, names.name(t), Pattern.LITERAL, Operation.READ) for t in role.reads]
    writes = (*role.writes, *dead_letter_topics(role.reads))
    out += [acl(Resource.TOPIC, names.name(t), Pattern.LITERAL, Operation.WRITE) for t in writes]
    out += [acl(Resource.GROUP, prefix + g, Pattern.PREFIXED, Operation.READ) for g in role.groups]
    for txn in role.transactional_ids:
        out.append(acl(Resource.TRANSACTIONAL_ID, prefix + txn, Pattern.PREFIXED, Operation.WRITE))
    if role.creates:
        for spec in TOPICS:
            for op in (Operation.CREATE, Operation.DESCRIBE):
                out.append(acl(Resource.TOPIC, names.name(spec.logical), Pattern.LITERAL, op))
    if role.owns_topic_prefix is not None:
        owned = prefix + role.owns_topic_prefix
        for op in (Operation.CREATE, Operation.READ, Operation.WRITE):
            out.append(acl(Resource.TOPIC, owned, Pattern.PREFIXED, op))
    for topic in (*role.reads, *writes):
        if topic not in SPECS:
            raise ValueError(f"role {role.name}: {topic!r} is not a declared topic")
    return sorted(set(out))


def all_bindings(prefix: str = "", users: dict[str, str] | None = None) -> list[AclBinding]:
    """Every role's bindings (`users`: role -> SASL user name where they differ)."""
    users = users or {}
    return [b for role in ROLES for b in bindings(role, prefix, user=users.get(role.name))]
