"""The benchmark harness at tiny sizes (`gpufailover bench --quick`): it runs end to end on the
real broker, the classifier decides every job it should, and every number is there. Speed is
not asserted (CI machines vary); BENCHMARKS.md has the real numbers."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from deploy.broker import running_broker
from gpufailover.bench.harness import Row
from gpufailover.bench.pipeline import RUNNERS, run
from gpufailover.cli.bench import SCENARIOS


def _value(rows: list[Row], scenario: str, metric: str) -> float | int | str | None:
    found = [r for r in rows if r.scenario == scenario and r.metric == metric]
    assert found, f"no row {scenario}/{metric}: {[r.metric for r in rows]}"
    return found[0].value


def _number(rows: list[Row], scenario: str, metric: str) -> float:
    value = _value(rows, scenario, metric)
    assert isinstance(value, int | float) and math.isfinite(value) and value > 0, (
        f"{scenario}/{metric} = {value!r}"
    )
    return float(value)


def test_the_cli_and_the_harness_know_the_same_scenarios() -> None:
    assert tuple(RUNNERS) == SCENARIOS


@pytest.mark.timeout(300)
async def test_quick_benchmark_runs_every_scenario_and_reports_every_number(
    kafka_bootstrap: str, topic_partitions: int, tmp_path: Path
) -> None:
    ctx = await run(
        list(SCENARIOS),
        quick=True,
        bootstrap=kafka_bootstrap,
        tmp=tmp_path,
        partitions=topic_partitions,
        records=None,
        profile_dir=None,
    )
    rows = ctx.rows
    errors = [f"{r.scenario}: {r.note}" for r in rows if r.metric == "ERROR"]
    assert not errors, errors

    # throughput: every pre-loaded termination decided, as replay decides it
    expected = len(ctx.data.decisions) if ctx.data else 0
    assert expected > 0
    assert _value(rows, "throughput", "decisions") == f"{expected}/{expected}"
    assert _value(rows, "throughput", "same verdict+action as replay") == f"{expected}/{expected}"
    for metric in (
        "bare aiokafka read",
        "faust no-op agent, stream.events()",
        "classifier drain",
        "classifier / bare aiokafka",
        "classifier RSS after drain",
    ):
        _number(rows, "throughput", metric)

    # latency: every probe decided, hardware ones as hardware
    assert _value(rows, "latency", "probe decisions") == "all"
    for metric in ("hardware decision p50", "hardware decision p99", "background load"):
        _number(rows, "latency", metric)
    assert _value(rows, "latency", "non-hardware minus grace p99") is not None
    _number(rows, "latency", "hop: total: termination -> decision")
    _number(rows, "latency", "hop: event time passes T on every node's partition")

    # flood: caught up, probes decided, memory measured
    assert _value(rows, "flood", "probe decisions") == "all"
    for metric in ("lag peak", "catch-up after flood end", "RSS after catch-up"):
        _number(rows, "flood", metric)
    _number(rows, "flood", "unrelated hardware decision p99")

    _number(rows, "memory", "RSS with 1,000 nodes")
    assert _value(rows, "scaleout", "same decisions as 1 worker (2 workers)") == "yes"
    _number(rows, "scaleout", "2 / 1 workers")
    for metric in ("CPU per record (1 worker)", "CPU per record (2 workers)"):
        _number(rows, "scaleout", metric)
    _number(rows, "scaleout", "RSS per worker with 1,000 nodes (2 workers)")
    for metric in ("CPU per record: classifier", "CPU per record: bare aiokafka read"):
        _number(rows, "throughput", metric)
    _number(rows, "throughput", "CPU per record: faust no-op, stream.events()")

    # realistic: the fleet's rate sent, the classifier's CPU share taken, probes decided
    assert _value(rows, "realistic", "probe decisions") == "all"
    for metric in (
        "fleet input rate",
        "load sent",
        "classifier CPU share",
        "classifier CPU share, idle",
    ):
        _number(rows, "realistic", metric)
    _number(rows, "realistic", "hardware decision p99")
    _number(rows, "replay", "replay engine")
    _number(rows, "replay", "replay / orjson")


@pytest.mark.timeout(180)
async def test_a_scenario_alone_on_a_fresh_broker_waits_for_the_group_coordinator(
    tmp_path: Path,
) -> None:
    """On a new cluster the group coordinator (and __consumer_offsets) does not exist until
    the first group asks: `gpufailover bench latency` alone used to fail within a second with
    GroupCoordinatorNotAvailableError. The harness now waits such retriable errors out."""
    with running_broker() as broker:
        ctx = await run(
            ["latency"],
            quick=True,
            bootstrap=broker.bootstrap,
            tmp=tmp_path,
            partitions=2,
            records=None,
            profile_dir=None,
        )
    errors = [f"{r.scenario}: {r.note}" for r in ctx.rows if r.metric == "ERROR"]
    assert not errors, errors
    assert _value(ctx.rows, "latency", "probe decisions") == "all"
    _number(ctx.rows, "latency", "hardware decision p99")
