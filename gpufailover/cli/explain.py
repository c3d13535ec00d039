"""`gpufailover explain JOB [--attempt N] [--json]`: why a job was decided as it was.

Reads the job's records (jobs.events, failover.decisions, jobs.requeue, failover.alerts: the
job's partition only) and then its nodes' (gpu.xid, gpu.health, failover.quarantine-requests
around the job's own records' Kafka timestamps; nodes.quarantine whole: compacted), and prints
the timeline `streams/explain.py` builds. `--file DUMP` explains from a JSONL dump instead,
replayed in-process (no broker).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpufailover import settings as env
from gpufailover.cli.options import PolicyChoice
from gpufailover.cli.target import add_target_arguments, target, target_security
from gpufailover.errors import NotFound, UsageError
from gpufailover.settings import setting
from schemas.topics import Topic

if TYPE_CHECKING:
    from consumers.runtime.records import InRecord
    from gpufailover.security import KafkaSecurity
    from schemas.topics import TopicNames
    from streams.explain import SourceRecord
    from streams.policy import Policy

JOB_TOPICS = (
    Topic.JOBS_EVENTS,
    Topic.FAILOVER_DECISIONS,
    Topic.JOBS_REQUEUE,
    Topic.FAILOVER_ALERTS,
)
# Read around the job's own records: signals of its nodes were written about when they were.
WINDOWED_NODE_TOPICS = (Topic.GPU_XID, Topic.GPU_HEALTH, Topic.QUARANTINE_REQUESTS)


@dataclass(frozen=True)
class ExplainRange:
    margin: int = setting(
        600,
        env="GPUFAILOVER_EXPLAIN_MARGIN_S",
        flag="--margin",
        help="seconds read beyond the job's window on its nodes' signal topics, for producer "
        "clocks and agent buffering",
    )
    since: str = setting(
        "",
        env="GPUFAILOVER_EXPLAIN_SINCE",
        flag="--since",
        help="read the job's topics from the first record stamped at or after this (a "
        "duration before now such as 7d, epoch ms or ISO 8601 with a zone)",
        shown_default="all that Kafka kept",
    )


def register(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "explain",
        help="explain a job's failover decisions: timeline, rule, evidence counted and not",
        description="Print what happened to JOB on which node and when, which rule decided "
        "each attempt, what was done (quarantines, requeues), and which signals of its nodes "
        "were seen but did not count, and why. Reads the topics (progress on stderr), or a "
        "JSONL dump with --file.",
    )
    p.add_argument("job_id", help="the job")
    p.add_argument("--attempt", type=int, default=None, help="only this attempt")
    p.add_argument("--json", action="store_true", help="print the explanation as JSON")
    p.add_argument(
        "--file",
        default=None,
        help="explain from this JSONL dump (`gpufailover export`, examples/) replayed "
        "in-process instead of the topics",
    )
    env.add_arguments(p, PolicyChoice)  # which signals are ignored, how wide the window is
    env.add_arguments(p, ExplainRange)
    add_target_arguments(p)
    p.set_defaults(func=cmd_explain)


def cmd_explain(args: argparse.Namespace) -> int:
    from streams.explain import explain
    from streams.explain_render import to_json, to_text
    from streams.policy import PolicyError, load_policy

    if args.attempt is not None and args.attempt < 0:
        raise UsageError(f"--attempt: must be >= 0, got {args.attempt}")
    try:
        policy = load_policy(env.resolve(PolicyChoice, args).policy or None)
    except PolicyError as exc:
        raise UsageError(f"bad policy: {exc}") from None
    window = env.resolve(ExplainRange, args)
    since = None
    if window.since:
        from streams.clock import now_ms
        from streams.export import parse_time

        try:
            since = parse_time(window.since, now_ms(), "--since")
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    if args.file is not None:
        records = _from_file(args.file, policy)
        where = args.file
    else:
        bootstrap, names = target(args)
        records = asyncio.run(
            fetch(
                bootstrap,
                names,
                args.job_id,
                args.attempt,
                policy,
                window.margin * 1000,
                target_security(args),
                since,
            )
        )
        where = f"{names.jobs_events} at {bootstrap}"
    explanation = explain(args.job_id, records, policy, args.attempt)
    if explanation is None:
        which = f"job {args.job_id!r}" + (
            f" attempt {args.attempt}" if args.attempt is not None else ""
        )
        raise NotFound(
            f"unknown {which}: no event or decision for it on {where}; check the id, the "
            "--prefix and the --attempt"
        )
    print(to_json(explanation) if args.json else to_text(explanation))
    return 0


def _from_file(path: str, policy: Policy) -> list[SourceRecord]:
    from streams.explain_dump import records_from_dump

    try:
        raw = sys.stdin.buffer.read() if path == "-" else Path(path).read_bytes()
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from None
    return records_from_dump(raw.splitlines(), policy)


async def fetch(
    bootstrap: str,
    names: TopicNames,
    job_id: str,
    attempt: int | None,
    policy: Policy,
    margin_ms: int,
    security: KafkaSecurity,
    since_ms: int | None = None,
) -> list[SourceRecord]:
    """The records `explain` needs, in two bounded reads: the job's partition of its topics,
    then its nodes' partitions around the job's records. Empty when the job has none."""
    from aiokafka.partitioner import DefaultPartitioner

    from gpufailover.kafka import partitions_of
    from streams.explain import NEARBY_MS, job_nodes
    from streams.export_scan import Progress, scan

    topics = [*JOB_TOPICS, *WINDOWED_NODE_TOPICS, Topic.NODES_QUARANTINE]
    found = await partitions_of(bootstrap, [names.name(t) for t in topics], security=security)
    partitioner = DefaultPartitioner()

    def partition(topic: str, key: str) -> int:
        parts = found[names.name(topic)]
        chosen: int = partitioner(key.encode("utf-8"), parts, parts)
        return chosen

    logical = {names.name(t): t for t in topics}
    wanted: dict[str, list[int] | None] = {
        names.name(t): [partition(t, job_id)] for t in JOB_TOPICS
    }
    progress = Progress("gpufailover explain: job records")
    raw = await scan(bootstrap, wanted, since_ms=since_ms, security=security, progress=progress)
    own_raw = [r for r in raw if r.key == job_id.encode("utf-8")]
    own = [_source(r, logical) for r in own_raw]
    # The Kafka timestamps of the job's records (of the attempt asked for) bound the next read.
    anchors = [
        r.timestamp_ms
        for r, s in zip(own_raw, own, strict=True)
        if attempt is None or (isinstance(s.value, dict) and s.value.get("attempt") == attempt)
    ]
    nodes = sorted(job_nodes(job_id, own))
    if not anchors or not nodes:
        return own
    before = policy.lookback_ms + NEARBY_MS + margin_ms
    after = policy.grace_ms + NEARBY_MS + margin_ms
    node_parts = {t: sorted({partition(t, n) for n in nodes}) for t in topics}
    windowed = {names.name(t): list(node_parts[t]) for t in WINDOWED_NODE_TOPICS}
    progress = Progress(f"gpufailover explain: signals of {len(nodes)} node(s)")
    signals = await scan(
        bootstrap,
        windowed,
        since_ms=min(anchors) - before,
        until_ms=max(anchors) + after,
        security=security,
        progress=progress,
    )
    states = await scan(
        bootstrap,
        {names.nodes_quarantine: list(node_parts[Topic.NODES_QUARANTINE])},
        security=security,
        progress=Progress("gpufailover explain: quarantine states"),
    )
    wanted_keys = {n.encode("utf-8") for n in nodes}
    return own + [_source(r, logical) for r in signals + states if r.key in wanted_keys]


def _source(rec: InRecord, logical: dict[str, str]) -> SourceRecord:
    """A read record as explain's input; a value that is not JSON stays None (reported as
    unreadable by `explain`)."""
    from schemas.errors import SchemaError
    from streams.explain import SourceRecord

    try:
        value = rec.json()
    except SchemaError:
        value = None
    return SourceRecord(logical[rec.topic], rec.key_str(), value, rec.where)
