"""What the pipeline must publish: `gpufailover replay` of exactly the records published."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import orjson

from gpufailover.chaos.workload import Record
from schemas.bounds import TS_CEIL_MS
from schemas.event_time import EventTimeBounds
from schemas.topics import Topic
from streams.policy import Policy
from streams.replay import Replayer


@dataclass(frozen=True)
class ReplayAnswer:
    decisions: dict[tuple[str, int], dict[str, Any]]
    quarantines: Counter[str]  # quarantine episodes per node
    quarantine_rounds: dict[str, int]  # node -> the round whose input first quarantined it
    dead_letters: int  # input lines replay rejected (for the report)


def replay(records: Iterable[Record], policy: Policy) -> ReplayAnswer:
    # The workload is stamped at a fixed date: no clock-relative bound, as in the services.
    replayer = Replayer(policy, bounds=EventTimeBounds(TS_CEIL_MS))
    decisions: dict[tuple[str, int], dict[str, Any]] = {}
    quarantines: Counter[str] = Counter()
    rounds: dict[str, int] = {}
    current = [-1]  # the round of the record replay read last (it answers before reading on)

    def lines() -> Iterator[bytes]:
        for r in records:
            current[0] = r.round
            yield r.replay_line()

    for line in replayer.run(lines()):
        out = orjson.loads(line)
        value = out["value"]
        if out["topic"] == Topic.FAILOVER_DECISIONS:
            key = (str(value["job_id"]), int(value["attempt"]))
            if key in decisions:
                raise AssertionError(f"replay decided {key} twice")  # the engine's own promise
            decisions[key] = value
        elif out["topic"] == Topic.NODES_QUARANTINE:
            quarantines[str(out["key"])] += 1
            rounds.setdefault(str(out["key"]), current[0])
    dead = sum(replayer.stats.dead_letters.values())
    return ReplayAnswer(decisions, quarantines, rounds, dead)
