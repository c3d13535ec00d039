"""What one termination on N nodes costs the classifier's state: bytes each table would put on
its changelog, and the glue's CPU time, through the real glue with in-memory tables (issue 12).

    python -m gpufailover.bench.big_termination 4000

The termination fans out to N nodes of one partition; the node agent answers each, then its
watermark passes the termination and the end of the grace; the job agent reads every report.
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import orjson

from deploy.topics import TopicNames
from streams.engine.job_side import JobState
from streams.engine.node_side import NodeState, PartitionClock
from streams.engine.progress import Progress, ProgressClock
from streams.glue import NodeGlue
from streams.job_glue import JobGlue
from streams.policy import load_policy
from streams.signal_filter import InputRecord, SignalFilter
from streams.tables import CodecTable

T = 1_773_532_800_000


class Measured(dict[str, Any]):
    """A table that counts the bytes of every value written (what its changelog gets)."""

    def __init__(self, name: str, written: Counter[str]) -> None:
        super().__init__()
        self.name, self.written = name, written

    def __setitem__(self, key: str, value: Any) -> None:
        self.written[self.name] += len(orjson.dumps(value))
        super().__setitem__(key, value)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("nodes", type=int, nargs="?", default=4000)
    n = p.parse_args().nodes
    written: Counter[str] = Counter()

    def table(name: str, decode: Callable[[Any], Any], encode: Callable[[Any], Any]) -> Any:
        return CodecTable(Measured(name, written), decode, encode)

    names, policy = TopicNames(""), load_policy()
    node_glue = NodeGlue(
        policy,
        names,
        table("node-states", NodeState.from_dict, NodeState.to_dict),
        table("clocks", PartitionClock.from_dict, PartitionClock.to_dict),
    )
    job_glue = JobGlue(
        policy,
        names,
        table("job-states", JobState.from_dict, JobState.to_dict),
        table("job-progress", Progress.from_dict, Progress.to_dict),
        table("progress-clocks", ProgressClock.from_dict, ProgressClock.to_dict),
        idle_after_ms=5_000,
    )
    nodes = [f"gpu-{i:05d}" for i in range(n)]
    event = {"job_id": "big", "attempt": 0, "type": "terminated", "ts_ms": T, "nodes": nodes}
    started = time.perf_counter()
    fan_out = job_glue.handle(names.jobs_events, 0, 0, b"big", orjson.dumps(event))
    by_node = [InputRecord(names.term_by_node, 0, i, o.key, o.value) for i, o in enumerate(fan_out)]
    node_started = time.perf_counter()
    reports = []
    for out in SignalFilter(policy, names, 5_000).reduce(by_node, 0):
        reports += node_glue.handle(names.node_signals, 0, 0, None, out.value)
    for watermark in (T + 1, T + policy.grace_ms + 1):
        body = orjson.dumps({"watermark": watermark})
        reports += node_glue.handle(names.node_signals, 0, 0, None, body)
    job_started = time.perf_counter()
    decisions = [
        d
        for r in reports
        for d in job_glue.handle(names.node_evidence, 0, 0, r.key, r.value)
        if d.topic == names.failover_decisions
    ]
    done = time.perf_counter()
    print(
        f"{n} nodes: {len(reports)} node-evidence records, {len(decisions)} decision; CPU "
        f"fan-out {node_started - started:.2f} s, node agent {job_started - node_started:.2f} s, "
        f"job agent {done - job_started:.2f} s"
    )
    for name, size in sorted(written.items()):
        print(f"  {name:<16} {size / 1e6:10.1f} MB written")


if __name__ == "__main__":
    main()
