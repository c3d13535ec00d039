"""The simulated fleet: `FleetCore` plus its reactions to the pipeline's output.

No I/O: `advance(now)` runs every event due by `now` and returns the records to publish, and the
`on_*` methods take what the pipeline published (requeue commands, quarantine records,
decisions) and return the records the fleet and its scheduler publish in reply. The runner
feeds it wall-clock-scaled time and Kafka; the tests feed it numbers.
"""

from __future__ import annotations

from typing import Any

from producers.sim.core import FleetCore
from producers.sim.records import Out
from producers.sim.truth import Seen


class SimEngine(FleetCore):
    # -- what the pipeline published -------------------------------------------------------
    def on_requeue(self, cmd: dict[str, Any]) -> list[Out]:
        job = self.book.jobs.get(str(cmd.get("job_id")))
        if job is None or job.state not in ("deciding", "awaiting") or job.job_id in self.queue:
            return []
        if int(cmd["next_attempt"]) != job.attempt + 1:
            return []
        job.attempt, job.state = int(cmd["next_attempt"]), "queued"
        # The command carries the last checkpoint the pipeline saw in the job's telemetry: the
        # next attempt resumes from it (the sim's own record says where it should be).
        checkpoint = cmd.get("checkpoint")
        step = checkpoint.get("step") if isinstance(checkpoint, dict) else None
        self.checkpoints.append((job.progress_ms // 1000, step if isinstance(step, int) else None))
        if isinstance(step, int):
            job.progress_ms = min(job.progress_ms, step * 1000)
        self.queue.push(job.job_id, int(cmd["priority"]), job.nodes_needed, cmd["exclude_nodes"])
        return self._schedule()

    def on_quarantine(self, value: dict[str, Any]) -> list[Out]:
        node, state = str(value["node"]), value["state"]
        if state == "released":
            self.quarantined.discard(node)
            return self._schedule()
        if node not in self.quarantined and node in self.nodes:
            self.quarantined.add(node)
            self.quarantines.append(
                (node, int(value["ts_ms"]), value["reason"], value.get("job_id"))
            )
            return self._maybe_repair(node)
        return []

    def on_decision(self, seen: Seen) -> list[Out]:
        job = self.book.jobs.get(seen.job_id)
        if job is None:
            return []
        self.decisions.append(seen)
        if job.attempt != seen.attempt or job.state != "deciding":
            return []
        if seen.action in ("failover", "retry"):
            job.state = "awaiting"
            return []
        self.book.end(job, self.now_ms, seen.action)
        return self._schedule()
