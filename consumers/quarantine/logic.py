"""The quarantine service's decisions, record by record, with changes staged per batch.

Inputs: `failover.quarantine-requests` (the classifier asks), `failover.decisions` (every
suspect of a hardware verdict is quarantined too) and the operator's breaker resets on
`operators.audit` (only operators may write it; a reset on `failover.alerts` is not obeyed).
A node already quarantined is left alone, so a redelivered request or decision writes nothing
twice; a request or decision whose event time is not after the node's
latest release (`ts_ms` of the `released` record) is stale and left alone too, so an old one
redelivered after a release does not quarantine the node again, before or after a restart (the
table is rebuilt from `nodes.quarantine`). Writing the record is all this stage does: the
actuation stage (`actuation_loop.py`) carries it out once it is committed.

The node lifecycle (`lifecycle.py`, docs/node-lifecycle.md) runs here too: a new quarantine
counts towards the lemon rule; an operator's `validate` command (on `operators.audit`) or an
agent's repair signal (on `nodes.validation-results`) moves a quarantined node to
`validating` and asks its agent on `nodes.validate`; the agent's result moves it on.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from consumers.quarantine import alerts, breaker, lifecycle
from consumers.quarantine.actions import QUARANTINE
from consumers.quarantine.actuator import Actuator
from consumers.quarantine.breaker import CAUSE_UNKNOWN_NODE, BreakerConfig, BreakerState
from consumers.quarantine.metrics import QuarantineMetrics
from consumers.quarantine.table import QUARANTINED, RELEASED, QuarantineTable
from consumers.runtime.loop import Ack
from consumers.runtime.records import InRecord, Output, now_ms
from deploy.topics import TopicNames
from schemas.audit import VALIDATE, OperatorCommand
from schemas.decisions import Decision
from schemas.errors import SchemaError
from schemas.event_time import EventTimeBounds
from schemas.quarantine import KIND_REPAIR, QuarantineRecord, ValidationResult

log = logging.getLogger(__name__)

SEEN_DECISIONS_MAX = 100_000


@dataclass
class _Staged:
    writes: dict[str, QuarantineRecord] = field(default_factory=dict)
    dry: dict[str, int] = field(default_factory=dict)
    arrived: dict[str, int] = field(default_factory=dict)  # node -> wall clock applied
    seen: set[tuple[str, int]] = field(default_factory=set)
    breaker: BreakerState | None = None
    on_commit: list[Callable[[], None]] = field(default_factory=list)


class QuarantineProcessor:
    def __init__(
        self,
        names: TopicNames,
        cfg: BreakerConfig,
        table: QuarantineTable,
        actuator: Actuator,
        metrics: QuarantineMetrics,
        *,
        group: str = "gpufailover-quarantine",
        dry_run: bool = False,
        sync: Callable[[], Awaitable[None]] | None = None,
        bounds: EventTimeBounds | None = None,
        clock: Callable[[], int] = now_ms,
        lifecycle_policy: lifecycle.LifecyclePolicy | None = None,
    ) -> None:
        self.names, self.cfg, self.table, self.actuator = names, cfg, table, actuator
        self.lifecycle = lifecycle_policy or lifecycle.LifecyclePolicy()
        self.metrics, self.group, self.dry_run, self._sync = metrics, group, dry_run, sync
        # Requests and decisions out of the event-time bounds are refused (dead-lettered or,
        # for decisions, counted and skipped): schemas.event_time. None: unit tests.
        self.bounds = bounds
        self.clock = clock  # the wall clock: the breaker's window is on arrival time
        self.breaker = BreakerState()
        self.dry: dict[str, int] = {}  # dry-run: nodes that would be quarantined -> arrival
        self.seen: dict[tuple[str, int], None] = {}  # decisions handled, oldest first
        self._staged = _Staged()
        table.on_change = self._table_changed

    # -- Processor protocol ------------------------------------------------------------------
    async def prepare(self, records: Sequence[InRecord]) -> None:
        return None

    def begin(self) -> None:
        self._staged = _Staged()

    def rollback(self) -> None:
        self._staged = _Staged()

    async def on_assigned(self) -> None:
        if self._sync is not None:
            await self._sync()

    def handle(self, rec: InRecord) -> list[Output]:
        if rec.topic == self.names.operators_audit:
            return self._on_operator_command(rec)
        value = rec.json()
        if rec.topic == self.names.quarantine_requests:
            request = QuarantineRecord.from_dict(value)
            if request.state != QUARANTINED:
                raise SchemaError("state", f"a quarantine request must be {QUARANTINED!r}")
            self._check_time("ts_ms", request.ts_ms)
            return self._consider(request, "request")
        if rec.topic == self.names.failover_decisions:
            decision = Decision.from_dict(value)
            self._check_time("decided_ts_ms", decision.decided_ts_ms)
            return self._on_decision(decision)
        if rec.topic == self.names.validation_results:
            result = ValidationResult.from_dict(value)
            self._check_time("ts_ms", result.ts_ms)
            return self._on_agent_report(result)
        raise SchemaError("topic", f"not an input of the quarantine service: {rec.topic!r}")

    async def committed(self, acks: Sequence[Ack]) -> None:
        s, self._staged = self._staged, _Staged()
        for ack in acks:
            if ack.output.topic == self.names.nodes_quarantine:
                node = ack.output.key.decode() if ack.output.key else ""
                self.table.apply(s.writes[node], ack.partition, ack.offset, s.arrived.get(node))
        self.dry.update(s.dry)
        for key in s.seen:
            self.seen[key] = None
        while len(self.seen) > SEEN_DECISIONS_MAX:
            del self.seen[next(iter(self.seen))]
        self.breaker = s.breaker or self.breaker
        for count in s.on_commit:
            count()
        self._gauges()

    async def idle(self) -> None:
        self._gauges()

    def due(self, ready: frozenset[tuple[str, int]]) -> list[Output]:
        return []

    # -- the rules ---------------------------------------------------------------------------
    def _check_time(self, name: str, ts_ms: int) -> None:
        if self.bounds is not None:
            self.bounds.check(name, ts_ms, self.clock())

    def _on_decision(self, d: Decision) -> list[Output]:
        if d.verdict != "hardware" or not d.suspect_nodes:
            return []
        key = (d.job_id, d.attempt)
        if key in self.seen or key in self._staged.seen:
            self._count(lambda: self.metrics.duplicates.labels(source="decision").inc())
            return []
        self._staged.seen.add(key)
        out: list[Output] = []
        for node in d.suspect_nodes:
            evidence = tuple(e for e in d.evidence if e.node == node)
            record = QuarantineRecord(
                node, QUARANTINED, "hardware", evidence, d.job_id, d.decided_ts_ms
            )
            out.extend(self._consider(record, "decision"))
        return out

    def _consider(self, record: QuarantineRecord, source: str) -> list[Output]:
        node = record.node
        if self._is_quarantined(node):
            self._count(lambda: self.metrics.duplicates.labels(source=source).inc())
            return []
        released = self.table.get(node)
        if released is not None and released.state == RELEASED and record.ts_ms <= released.ts_ms:
            self._count(lambda: self.metrics.stale.labels(source=source).inc())
            log.info(
                "%s for %s at ts %d ignored: the node was released at %d, after it",
                source,
                node,
                record.ts_ms,
                released.ts_ms,
            )
            return []
        state, now = self._breaker(), self.clock()
        if not breaker.in_inventory(self.cfg, node):
            # Not a node of the fleet: a forged or mistaken request, never counted.
            self._count(self.metrics.refused.inc)
            log.warning("%s for %s refused: not in the fleet inventory", source, node)
            return [self._alert(node, alerts.refused_alert(record, CAUSE_UNKNOWN_NODE, now))]
        if state.tripped:
            self._count(self.metrics.refused.inc)
            log.warning("breaker tripped: quarantine of %s refused", node)
            return [self._alert(node, alerts.refused_alert(record, state.cause, now))]
        times = {n: ts for n, ts in self._arrivals().items() if n != node}
        would_be = breaker.count_in_window(self.cfg, state, now, times.values()) + 1
        fleet = breaker.known_fleet(self.cfg)
        cause = breaker.trip_cause(self.cfg, would_be, fleet)
        if cause is not None:
            tripped = breaker.trip(state, cause, would_be, fleet, now)
            self._staged.breaker = tripped
            self._count(lambda: self.metrics.breaker_trips.labels(cause=cause).inc())
            self._count(self.metrics.refused.inc)
            log.error(
                "breaker TRIPPED (%s): %d nodes in the window, fleet %d", cause, would_be, fleet
            )
            return [
                self._breaker_output(tripped, now),
                self._alert(node, alerts.refused_alert(record, cause, now)),
            ]
        mode = "dry_run" if self.dry_run else "applied"
        self._count(lambda: self.metrics.quarantines.labels(reason=record.reason, mode=mode).inc())
        if self.dry_run:
            self._staged.dry[node] = now
            command = self.actuator.command(QUARANTINE, record)
            return [self._alert(node, alerts.dry_run_alert(QUARANTINE, record, command, now))]
        record = lifecycle.new_episode(self._current(node), record, self.lifecycle)
        self._staged.writes[node] = record
        self._staged.arrived[node] = now
        log.info("quarantining %s (%s, job %s)", node, record.reason, record.job_id)
        out = [Output.json(self.names.nodes_quarantine, node, record.to_dict())]
        if record.lemon:
            self._count(self.metrics.lemons.inc)
            log.warning(
                "%s is a LEMON: quarantined %d times within %d s; only an operator may release it",
                node,
                len(record.history),
                self.lifecycle.lemon_window_ms // 1000,
            )
            out.append(self._alert(node, alerts.lemon_alert(record, self.lifecycle, now)))
        return out

    # -- the validation gate -------------------------------------------------------------------
    def _on_validate_command(self, rec: InRecord, value: Any) -> list[Output]:
        command = OperatorCommand.from_dict(value)
        # The audit record's coordinates name the request: a redelivered command is the
        # same request, which the state machine takes once.
        step = lifecycle.request_validation(
            self._current(command.target),
            request_id=f"operator-{rec.partition}-{rec.offset}",
            trigger="operator",
            reason=command.reason,
            ts_ms=command.ts_ms,
            lp=self.lifecycle,
        )
        return self._step(command.target, "operator", step)

    def _on_agent_report(self, report: ValidationResult) -> list[Output]:
        current = self._current(report.node)
        if report.kind == KIND_REPAIR:
            step = lifecycle.request_validation(
                current,
                request_id=f"repair-{report.ts_ms}",
                trigger="repair",
                reason="the node's agent restarted",
                ts_ms=report.ts_ms,
                lp=self.lifecycle,
            )
            return self._step(report.node, "repair", step)
        step = lifecycle.take_result(current, report, self.lifecycle)
        return self._step(report.node, "result", step)

    def _step(self, node: str, source: str, step: lifecycle.Step) -> list[Output]:
        self._count(
            lambda: self.metrics.validation_steps.labels(source=source, outcome=step.outcome).inc()
        )
        if step.record is None:
            log.info("validation of %s (%s): %s, %s", node, source, step.outcome, step.detail)
            if source == "operator" and step.outcome != lifecycle.DUPLICATE:
                return [self._alert(node, alerts.validation_alert(node, step, self.clock()))]
            return []
        if self.dry_run:
            log.info("dry run: validation of %s would be %s: %s", node, step.outcome, step.detail)
            return []
        log.info(
            "validation of %s (%s): %s -> %s: %s",
            node,
            source,
            step.outcome,
            step.record.state,
            step.detail,
        )
        self._staged.writes[node] = step.record
        out = [Output.json(self.names.nodes_quarantine, node, step.record.to_dict())]
        if step.request is not None:
            out.append(Output.json(self.names.nodes_validate, node, step.request.to_dict()))
        if step.outcome in (lifecycle.FAILED, lifecycle.LEMON_HELD):
            out.append(self._alert(node, alerts.validation_alert(node, step, self.clock())))
        return out

    def _current(self, node: str) -> QuarantineRecord | None:
        staged = self._staged.writes.get(node)
        return staged if staged is not None else self.table.get(node)

    def _on_operator_command(self, rec: InRecord) -> list[Output]:
        if rec.key_str() != alerts.RESET_KEY:
            try:
                value = rec.json()
            except SchemaError as exc:  # operators.audit has no dead letters: say so, go on
                log.warning("unreadable operator command at %s skipped: %s", rec.where, exc)
                return []
            if isinstance(value, dict) and value.get("kind") == VALIDATE:
                try:
                    return self._on_validate_command(rec, value)
                except SchemaError as exc:
                    log.warning("unreadable validate command at %s skipped: %s", rec.where, exc)
                    return []
            return []  # not addressed to this service (a release: read from the table)
        value = rec.json()
        if not isinstance(value, dict) or value.get("kind") != alerts.KIND_RESET:
            return []  # e.g. a dead letter of a bad reset command: already reported
        command = alerts.ResetCommand.from_dict(value)
        state = self._breaker()
        if not breaker.reset_applies(state, command.ts_ms):
            log.info("breaker reset at %s ignored: breaker not tripped since", rec.where)
            return []
        now = self.clock()
        closed = breaker.reset(state, now)
        self._staged.breaker = closed
        self._count(self.metrics.breaker_resets.inc)
        log.warning("breaker RESET by %s: %s", command.operator or "?", command.reason)
        return [self._breaker_output(closed, now)]

    # -- state, base + staged ------------------------------------------------------------------
    def _is_quarantined(self, node: str) -> bool:
        staged = self._staged.writes.get(node)
        if staged is not None:
            return staged.state != RELEASED
        return self.table.is_quarantined(node) or node in self.dry or node in self._staged.dry

    def _arrivals(self) -> dict[str, int]:
        """Each quarantined node's latest quarantine arrival (wall clock), staged included."""
        merged = {n: t for n, t in self.table.arrived_at.items() if self.table.is_quarantined(n)}
        merged.update(self.dry)
        merged.update(self._staged.dry)
        merged.update(self._staged.arrived)
        return merged

    def _breaker(self) -> BreakerState:
        return self._staged.breaker or self.breaker

    def _count(self, inc: Callable[[], Any]) -> None:
        self._staged.on_commit.append(inc)

    # -- outputs and effects -----------------------------------------------------------------
    def _alert(self, key: str, value: dict[str, Any]) -> Output:
        return Output.json(self.names.failover_alerts, key, value)

    def _breaker_output(self, state: BreakerState, now: int) -> Output:
        value = alerts.breaker_alert(
            state, self.cfg, group=self.group, dry_run=self.dry_run, ts_ms=now
        )
        return self._alert(alerts.BREAKER_KEY, value)

    def _table_changed(self, previous: QuarantineRecord | None, record: QuarantineRecord) -> None:
        if record.state == RELEASED:
            self.dry.pop(record.node, None)

    def _gauges(self) -> None:
        self.metrics.breaker_tripped.set(1 if self.breaker.tripped else 0)
        self.metrics.nodes_quarantined.set(len(self.table.quarantined()))
        self.metrics.lemon_nodes.set(len(self.table.lemons()))
        times = self._arrivals().values()
        in_window = breaker.count_in_window(self.cfg, self.breaker, self.clock(), times)
        self.metrics.window_nodes.set(in_window)
        self.metrics.fleet_nodes.set(breaker.known_fleet(self.cfg))
