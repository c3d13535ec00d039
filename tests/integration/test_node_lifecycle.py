"""The node lifecycle on the real broker: the quarantine service, the operator CLI and a real
`gpufailover agent` (its validation command a test double) take a node through
quarantined -> validating -> released, keep it quarantined with the output when validation
fails, and mark a node quarantined three times in the window a lemon that only an operator
releases (docs/node-lifecycle.md). Every wait polls a topic with a deadline."""

from __future__ import annotations

import asyncio
import shlex
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import orjson
import pytest
from prometheus_client import CollectorRegistry

from consumers.quarantine.actuator import LogActuator
from consumers.quarantine.app import run_quarantine
from consumers.quarantine.breaker import BreakerConfig
from consumers.quarantine.config import QuarantineSettings
from consumers.quarantine.lifecycle import LifecyclePolicy
from consumers.runtime.config import CommonSettings
from consumers.runtime.oneshot import read_to_end
from gpufailover.cli import main as cli_main
from schemas.quarantine import QuarantineRecord
from schemas.topics import TopicNames
from tests.integration.kafka_io import Service, produce

DEADLINE_S = 60.0
NODE = "gpu-node-7"
Got = list[tuple[str | None, Any]]


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@asynccontextmanager
async def quarantine_service(
    bootstrap: str, names: TopicNames, lp: LifecyclePolicy
) -> AsyncIterator[None]:
    settings = QuarantineSettings(
        CommonSettings(
            bootstrap=bootstrap,
            prefix=names.prefix,
            group_id=f"{names.prefix}quarantine",
            instance_id="test",
            metrics_port=0,
        ),
        BreakerConfig(),
        lifecycle=lp,
    )
    stop = asyncio.Event()
    task = asyncio.create_task(
        run_quarantine(settings, stop, registry=CollectorRegistry(), actuator=LogActuator())
    )
    try:
        yield
        assert not task.done(), f"service died: {task.exception()!r}"
    finally:
        stop.set()
        await asyncio.wait_for(task, DEADLINE_S)


def agent(bootstrap: str, names: TopicNames, tmp: Path, command: str) -> Service:
    """The real node agent, reading an empty kernel log, with `command` as its validation."""
    log = tmp / "kern.log"
    log.touch()
    args = ["agent", "--source", f"file:{log}", "--node", NODE, "--bootstrap", bootstrap,
            "--topic-prefix", names.prefix, "--spool-dir", "none",
            "--validate-command", command]  # fmt: skip
    return Service(args, tmp / "agent.log", {})


def python_command(code: str) -> str:
    return shlex.join([sys.executable, "-c", code])


PASSES = python_command("print('diag: all 4 GPUs passed')")
FAILS = python_command(
    "import sys; print('GPU 3: memory test FAILED (uncorrectable ECC)'); sys.exit(3)"
)


async def read(bootstrap: str, topic: str) -> Got:
    return [
        (r.key_str(), None if r.value is None else orjson.loads(r.value))
        for r in await read_to_end(bootstrap, topic)
    ]


async def wait_for(bootstrap: str, topic: str, done: Callable[[Got], bool]) -> Got:
    deadline = time.monotonic() + DEADLINE_S
    while True:
        got = await read(bootstrap, topic)
        if done(got):
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting on {topic}; saw {got}")
        await asyncio.sleep(0.2)  # poll interval, not a wait for an event


def states(got: Got) -> list[QuarantineRecord]:
    return [QuarantineRecord.from_dict(v) for k, v in got if k == NODE and v is not None]


async def wait_state(
    bootstrap: str, names: TopicNames, done: Callable[[list[QuarantineRecord]], bool]
) -> list[QuarantineRecord]:
    got = await wait_for(bootstrap, names.nodes_quarantine, lambda g: done(states(g)))
    return states(got)


async def cli(*argv: str) -> int:
    return await asyncio.to_thread(cli_main, list(argv))


async def request_quarantine(bootstrap: str, names: TopicNames) -> None:
    value = {"schema_version": 1, "node": NODE, "state": "quarantined", "reason": "hardware",
             "evidence": [], "job_id": "llm-7b", "ts_ms": now_ms()}  # fmt: skip
    await produce(bootstrap, [(names.quarantine_requests, NODE, value)])


def target(bootstrap: str, names: TopicNames) -> tuple[str, ...]:
    return ("--bootstrap", bootstrap, "--topic-prefix", names.prefix)


Check = Callable[[list[QuarantineRecord]], bool]


def latest_is(
    state: str, count: int, extra: Callable[[QuarantineRecord], bool] | None = None
) -> Check:
    def check(records: list[QuarantineRecord]) -> bool:
        return (
            len(records) >= count
            and records[-1].state == state
            and (extra is None or extra(records[-1]))
        )

    return check


async def quarantine_and_validate(
    bootstrap: str, names: TopicNames, seen: int
) -> list[QuarantineRecord]:
    """Quarantine the node, wait for it, ask for its validation; the records so far."""
    await request_quarantine(bootstrap, names)
    await wait_state(bootstrap, names, latest_is("quarantined", seen + 1))
    code = await cli("quarantine", "validate", NODE, "--reason", "GPU 3 swapped",
                     *target(bootstrap, names))  # fmt: skip
    assert code == 0
    return await wait_state(bootstrap, names, lambda r: len(r) >= seen + 3)


pytestmark = pytest.mark.integration


async def test_a_validation_that_passes_releases_the_node(
    kafka_bootstrap: str, topic_names: TopicNames, tmp_path: Path
) -> None:
    b, n = kafka_bootstrap, topic_names
    with agent(b, n, tmp_path, PASSES) as node_agent:
        async with quarantine_service(b, n, LifecyclePolicy(auto_release=True)):
            records = await quarantine_and_validate(b, n, 0)
    assert node_agent.proc is not None and node_agent.proc.returncode in (None, 0)
    assert [r.state for r in records] == ["quarantined", "validating", "released"]
    released = records[-1]
    assert released.reason == "validation"
    assert released.validation is not None
    assert (released.validation.result, released.validation.exit_code) == ("pass", 0)
    assert "diag: all 4 GPUs passed" in released.validation.output
    # the request the agent ran, opened then closed; the operator's command is audited
    requests = [v for k, v in await read(b, n.nodes_validate) if k == NODE]
    assert [r["open"] for r in requests] == [True, False]
    audit = [v for _, v in await read(b, n.operators_audit)]
    assert [(a["kind"], a["target"], a["reason"]) for a in audit] == [
        ("validate", NODE, "GPU 3 swapped")
    ]


async def test_a_validation_that_fails_keeps_the_node_quarantined_with_its_output(
    kafka_bootstrap: str, topic_names: TopicNames, tmp_path: Path
) -> None:
    b, n = kafka_bootstrap, topic_names
    with agent(b, n, tmp_path, FAILS):
        async with quarantine_service(b, n, LifecyclePolicy(auto_release=True)):
            records = await quarantine_and_validate(b, n, 0)
            alerts = await wait_for(
                b, n.failover_alerts, lambda g: any(v.get("kind") == "validation" for _, v in g)
            )
    assert [r.state for r in records] == ["quarantined", "validating", "quarantined"]
    failed = records[-1].validation
    assert failed is not None
    assert (failed.result, failed.exit_code) == ("fail", 3)
    assert "GPU 3: memory test FAILED (uncorrectable ECC)" in failed.output
    [alert] = [v for _, v in alerts if v.get("kind") == "validation"]
    assert (alert["node"], alert["outcome"]) == (NODE, "failed")


async def test_a_node_quarantined_three_times_is_a_lemon_only_an_operator_releases(
    kafka_bootstrap: str, topic_names: TopicNames, tmp_path: Path
) -> None:
    b, n = kafka_bootstrap, topic_names
    lp = LifecyclePolicy(auto_release=True, lemon_count=3)
    with agent(b, n, tmp_path, PASSES):
        async with quarantine_service(b, n, lp):
            for episode in range(2):  # quarantined, validated, auto-released: twice
                records = await quarantine_and_validate(b, n, 3 * episode)
                assert records[-1].state == "released"
                assert not records[-1].lemon
            # the third time in the window: a lemon, validated but never auto-released
            records = await quarantine_and_validate(b, n, 6)
            third = records[6]
            assert third.state == "quarantined" and third.lemon
            assert len(third.history) == 3
            assert records[-1].state == "quarantined" and records[-1].validated
            alerts = await wait_for(
                b, n.failover_alerts, lambda g: sum(v.get("kind") == "lemon" for _, v in g) >= 1
            )
            code = await cli("quarantine", "release", NODE, "--reason", "board replaced",
                             *target(b, n))  # fmt: skip
            assert code == 0
            final = await wait_state(b, n, latest_is("released", 10))
    assert [r.state for r in final] == [
        "quarantined", "validating", "released",
        "quarantined", "validating", "released",
        "quarantined", "validating", "quarantined",
        "released",
    ]  # fmt: skip
    assert final[-1].reason == "operator"
    assert final[-1].history == third.history  # the next quarantine still counts
    [lemon] = [v for _, v in alerts if v.get("kind") == "lemon"]
    assert (lemon["node"], lemon["quarantines_in_window"]) == (NODE, 3)
    audit = [(v["kind"], v["target"]) for _, v in await read(b, n.operators_audit)]
    assert audit == [("validate", NODE)] * 3 + [("release", NODE)]
