"""The node agent's side of the validation gate (docs/node-lifecycle.md).

The agent follows `nodes.validate` (compacted, key node) from its beginning and keeps its own
node's latest request; once caught up it runs that request if it is open and not run yet by
this process, and publishes the outcome on `nodes.validation-results` through the agent's
spool (so a result outlives a broker outage). At start it also publishes a `repair` signal:
the agent (re)started, as it does after a reboot or a driver reload; the quarantine service
acts on it only if the policy's `validate_on_repair` is on.

A request is run at most once per agent process (by `request_id`); the service takes only the
first result of the running request, so a result published twice flips nothing twice. An agent
restarted after running a request but before the service closed it runs it again: its second
result is then stale and ignored (docs/node-lifecycle.md, "Idempotence").
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from consumers.runtime.records import InRecord, now_ms
from consumers.runtime.tail import TopicTail
from gpufailover import settings as declare
from gpufailover.backoff import Backoff
from gpufailover.security import PLAINTEXT, KafkaSecurity
from gpufailover.settings import setting
from producers.spool import Outgoing
from producers.validation import AUTO, Outcome, resolve, validate
from schemas.codec import dumps, loads
from schemas.errors import SchemaError
from schemas.quarantine import KIND_REPAIR, KIND_RESULT, ValidationRequest, ValidationResult
from schemas.topics import Topic, TopicNames

log = logging.getLogger(__name__)

_E = "GPUFAILOVER_AGENT_"
SYNC_TIMEOUT_S = 60.0
GATE_RETRY = Backoff(first_ms=1_000, max_ms=60_000)  # before following nodes.validate again
RESULTS_LOGICAL = Topic.VALIDATION_RESULTS

Publish = Callable[[Outgoing], object]  # the agent publisher's accept: spooled, then sent
Runner = Callable[[ValidationRequest], Awaitable[Outcome]]


@dataclass(frozen=True)
class GateSettings:
    enabled: bool
    command: str = AUTO  # a command line, or `auto`: dcgmi diag -r 2, else the NVML check
    timeout_s: float = 900.0


@dataclass(frozen=True)
class GateOptions:
    """The validation gate's flags and env vars, as declared."""

    validate_command: str = setting(
        "",
        env=f"{_E}VALIDATE_COMMAND",
        flag="--validate-command",
        help="what a validation runs on this node, exit 0 = pass; giving one turns the "
        "validation gate on for any source",
        shown_default="with --source nvml: `auto`, i.e. `dcgmi diag -r 2` when dcgmi is "
        "installed, else a built-in NVML self-check",
    )
    validate_timeout_s: float = setting(
        900.0,
        env=f"{_E}VALIDATE_TIMEOUT_S",
        flag="--validate-timeout-s",
        help="a validation running longer fails",
    )
    no_validation: bool = setting(
        False,
        env=f"{_E}NO_VALIDATION",
        flag="--no-validation",
        help="do not follow nodes.validate nor send repair signals",
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    declare.add_arguments(parser, GateOptions)


def gate_settings(args: argparse.Namespace, source: str) -> GateSettings:
    options = declare.resolve(GateOptions, args)
    command, timeout = options.validate_command, options.validate_timeout_s
    if timeout <= 0:
        raise ValueError(f"--validate-timeout-s must be > 0, got {timeout}")
    enabled = not options.no_validation and (bool(command) or source == "nvml")
    if command:
        resolve(command)  # ValueError now, not when the first request comes
    return GateSettings(enabled, command or AUTO, timeout)


class ValidationGate:
    def __init__(
        self,
        node: str,
        topics: TopicNames,
        publish: Publish,
        run: Runner,
        *,
        clock: Callable[[], int] = now_ms,
    ) -> None:
        self.node, self.topics, self._publish, self._run, self._clock = (
            node,
            topics,
            publish,
            run,
            clock,
        )
        self.latest: ValidationRequest | None = None
        self.handled: set[str] = set()
        self.changed = asyncio.Event()
        self.repair_sent = False  # once per process, not on every reconnect of the gate

    def apply(self, rec: InRecord) -> None:
        """One record of `nodes.validate`: kept if it is this node's."""
        if rec.key_str() != self.node or rec.value is None:
            return
        try:
            request = ValidationRequest.from_dict(loads(rec.value))
        except SchemaError as exc:
            log.warning("validation request at %s unreadable, not run: %s", rec.where, exc)
            return
        self.latest = request
        self.changed.set()

    def due(self) -> ValidationRequest | None:
        """The request to run now: this node's latest, open, not run by this process."""
        r = self.latest
        return r if r is not None and r.open and r.request_id not in self.handled else None

    def repair_signal(self) -> None:
        self.repair_sent = True
        self._send(ValidationResult(self.node, KIND_REPAIR, self._clock()))
        log.info("validation gate: repair signal sent for %s (agent started)", self.node)

    async def run_due(self) -> bool:
        """Run the due request, if any, and publish its result; True if one ran."""
        request = self.due()
        if request is None:
            return False
        self.handled.add(request.request_id)
        log.info("validation %s of %s: running (%s)", request.request_id, self.node, request.reason)
        outcome = await self._run(request)
        self._send(
            ValidationResult(
                self.node,
                KIND_RESULT,
                self._clock(),
                request_id=request.request_id,
                result="pass" if outcome.passed else "fail",
                exit_code=outcome.exit_code,
                output=outcome.output,
                command=outcome.command,
            )
        )
        log.info(
            "validation %s of %s: %s (exit %s)",
            request.request_id,
            self.node,
            "PASSED" if outcome.passed else "FAILED",
            outcome.exit_code,
        )
        return True

    def _send(self, result: ValidationResult) -> None:
        real = self.topics.validation_results
        value = dumps(result.to_dict())
        self._publish(Outgoing(RESULTS_LOGICAL, real, self.node.encode(), value))

    async def follow(
        self, bootstrap: str, stop: asyncio.Event, *, security: KafkaSecurity = PLAINTEXT
    ) -> None:
        """Follow `nodes.validate` and run this node's requests until `stop`."""
        tail = TopicTail(
            bootstrap,
            [self.topics.nodes_validate],
            self.apply,
            name=f"gpufailover-agent-{self.node}-validate",
            security=security,
        )
        async with tail:
            await tail.sync(SYNC_TIMEOUT_S)
            if not self.repair_sent:
                self.repair_signal()
            while not stop.is_set():
                if await self.run_due():
                    continue
                self.changed.clear()
                stopping = asyncio.ensure_future(stop.wait())
                changed = asyncio.ensure_future(self.changed.wait())
                await asyncio.wait({stopping, changed}, return_when=asyncio.FIRST_COMPLETED)
                stopping.cancel()
                changed.cancel()


def make_runner(settings: GateSettings) -> Runner:
    argv = resolve(settings.command)

    async def run(request: ValidationRequest) -> Outcome:
        return await validate(argv, settings.timeout_s)

    return run


async def run_agent_with_gate(
    agent_run: Coroutine[Any, Any, int],
    gate: ValidationGate,
    bootstrap: str,
    security: KafkaSecurity,
    *,
    retry: Backoff = GATE_RETRY,
) -> int:
    """Run the agent and its gate; the agent's status is the result. A gate that cannot
    follow `nodes.validate` (broker down, topic or ACL missing) is retried with backoff while
    the agent keeps reporting: XIDs matter more than validations, and the spool buffers them."""
    stop = asyncio.Event()
    gate_task = asyncio.ensure_future(_follow_until_stopped(gate, bootstrap, stop, security, retry))
    try:
        return await agent_run
    finally:
        stop.set()
        gate_task.cancel()
        await asyncio.gather(gate_task, return_exceptions=True)


async def _follow_until_stopped(
    gate: ValidationGate,
    bootstrap: str,
    stop: asyncio.Event,
    security: KafkaSecurity,
    retry: Backoff,
) -> None:
    failures = 0
    while not stop.is_set():
        try:
            await gate.follow(bootstrap, stop, security=security)
            return
        except Exception as exc:  # noqa: BLE001 - any failure: log, keep the agent, retry
            failures += 1
            delay = retry.delay_ms(failures) / 1000
            log.error(  # noqa: TRY400 - one line per retry, not a traceback each minute
                "validation gate: cannot follow %s (%s: %s); the agent keeps reporting, "
                "validations wait; retrying in %.0f s",
                gate.topics.nodes_validate,
                type(exc).__name__,
                exc,
                delay,
            )
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), delay)
