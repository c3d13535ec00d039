"""Where a decision's time goes, hop by hop, from the CreateTime of each record on the way.

A hardware probe's termination travels: `jobs.events` -> job agent -> `failover.term-by-node`
(one per node) -> signal filter -> `failover.node-signals` (a pack with the termination, then
a watermark past its time on each node's partition) -> node agent -> `failover.node-evidence`
-> job agent -> `failover.decisions`. Every record carries the wall time its producer made it
(all on one machine, one clock), so after a run the topics say how long each stage took.
Pure once the records are read (`stages`); `read_topic` reads a whole topic.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from consumers.runtime.oneshot import read_to_end
from gpufailover.bench.harness import percentile
from schemas.topics import TopicNames


@dataclass(frozen=True, slots=True)
class Rec:
    topic: str
    partition: int
    offset: int
    key: str | None
    value: Any
    created_ms: int


STAGES = (
    ("job agent: termination -> term-by-node", "event", "by_node"),
    ("signal filter: term-by-node -> pack", "by_node", "pack"),
    ("event time passes T on every node's partition", "event", "watermark"),
    ("node agent: pack and watermark -> report", "node_ready", "report"),
    ("job agent: last report -> decision", "report", "decision"),
    ("total: termination -> decision", "event", "decision"),
)


def stages(records: Iterable[Rec], names: TopicNames, jobs: Sequence[str]) -> dict[str, list[int]]:
    """Per stage of STAGES, its milliseconds for each job of `jobs` that went all the way."""
    wanted = set(jobs)
    event: dict[str, tuple[int, int]] = {}  # job -> (created, terminated ts_ms)
    by_node: dict[str, list[tuple[int, int]]] = {}  # job -> [(created, partition)]
    pack: dict[str, int] = {}
    watermarks: dict[int, list[tuple[int, int, int]]] = {}  # partition -> [(offset, wm, created)]
    reports: dict[str, list[int]] = {}
    decision: dict[str, int] = {}
    for r in records:
        v = r.value
        if r.topic == names.jobs_events and r.key in wanted and v.get("type") == "terminated":
            event.setdefault(r.key, (r.created_ms, v["ts_ms"]))
        elif r.topic == names.term_by_node and v.get("job_id") in wanted:
            by_node.setdefault(v["job_id"], []).append((r.created_ms, r.partition))
        elif r.topic == names.node_signals:
            if "watermark" in v:
                watermarks.setdefault(r.partition, []).append(
                    (r.offset, v["watermark"], r.created_ms)
                )
            for item in v.get("signals", ()):
                job = item.get("termination", {}).get("job_id")
                if job in wanted:
                    pack[job] = max(pack.get(job, 0), r.created_ms)
        elif r.topic == names.node_evidence:  # one report, or a pack of several jobs'
            for job in {rep.get("job_id") for rep in v.get("reports", (v,))} & wanted:
                reports.setdefault(job, []).append(r.created_ms)
        elif r.topic == names.failover_decisions and r.key in wanted:
            decision.setdefault(r.key, r.created_ms)
    for marks in watermarks.values():
        marks.sort()
    out: dict[str, list[int]] = {name: [] for name, _, _ in STAGES}
    for job in jobs:
        if job not in event or job not in by_node or job not in pack or job not in decision:
            continue
        created, terminated = event[job]
        passed = [_first_past(watermarks.get(p, []), terminated) for _, p in by_node[job]]
        before = [t for t in reports.get(job, []) if t <= decision[job]]
        if None in passed or not before:
            continue
        t = {
            "event": created,
            "by_node": max(c for c, _ in by_node[job]),
            "pack": pack[job],
            "watermark": max(p for p in passed if p is not None),
            "report": max(before),
            "decision": decision[job],
        }
        t["node_ready"] = max(t["pack"], t["watermark"])
        for name, start, end in STAGES:
            out[name].append(t[end] - t[start])
    return out


def _first_past(marks: list[tuple[int, int, int]], ts_ms: int) -> int | None:
    """The CreateTime of the first watermark record past `ts_ms` (the node side's `>`)."""
    return next((created for _, wm, created in marks if wm > ts_ms), None)


def summary(by_stage: dict[str, list[int]]) -> list[tuple[str, float, float, float, int]]:
    """(stage, p50 ms, p90 ms, p99 ms, samples) per stage."""
    return [
        (name, percentile(v, 50), percentile(v, 90), percentile(v, 99), len(v))
        for name, v in by_stage.items()
        if v
    ]


async def read_topic(bootstrap: str, topic: str) -> list[Rec]:
    """Every record of `topic` read to its end now (`read_to_end`, as the operator commands
    read) whose value is a JSON object."""
    out: list[Rec] = []
    for r in await read_to_end(bootstrap, topic):
        try:
            value = orjson.loads(r.value) if r.value else None
        except orjson.JSONDecodeError:
            continue
        if isinstance(value, dict):
            key = None if r.key is None else r.key.decode(errors="replace")
            out.append(Rec(r.topic, r.partition, r.offset, key, value, r.timestamp_ms))
    return out
