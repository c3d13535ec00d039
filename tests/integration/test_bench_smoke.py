"""The benchmark harness at tiny sizes (`gpufailover bench --quick`): it runs end to end on the
real broker, the classifier decides every job it should, and every number is there. Speed is
not asserted (CI machines vary); BENCHMARKS.md has the real numbers."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

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

    # flood: caught up, probes decided, memory measured
    assert _value(rows, "flood", "probe decisions") == "all"
    for metric in ("lag peak", "catch-up after flood end", "RSS after catch-up"):
        _number(rows, "flood", metric)
    _number(rows, "flood", "unrelated hardware decision p99")

    _number(rows, "memory", "RSS with 1,000 nodes")
    assert _value(rows, "scaleout", "same decisions as 1 worker (2 workers)") == "yes"
    _number(rows, "scaleout", "2 / 1 workers")
    _number(rows, "replay", "replay engine")
    _number(rows, "replay", "replay / orjson")
