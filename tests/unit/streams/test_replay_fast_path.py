"""Replay's fast path for ignored signals, health samples and XIDs (`Replayer.run`: only the
latest such time is kept and given to the pipeline before the next other line) gives the same
output lines, line for line, as feeding every line through the full path (`Replayer._one`)."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from gpufailover.bench.bench_replay import generate
from streams.policy import load_policy
from streams.replay import Replayer

POLICY = load_policy()
NOW = 1_800_000_000_000
EXAMPLES = sorted((Path(__file__).resolve().parents[3] / "examples").glob("*.jsonl"))


def full_path(lines: list[bytes]) -> tuple[list[bytes], list[int], Replayer]:
    """Every line through `_one`, as `run` did before the fast path; with the number of
    output lines written before each input line was read."""
    replayer = Replayer(POLICY, now_ms=NOW)
    out: list[bytes] = []
    marks: list[int] = []
    for lineno, raw in enumerate(lines, start=1):
        marks.append(len(out))
        if raw and not raw.isspace():
            out += replayer._one(raw, lineno)
            replayer.stats.records += 1
    out += replayer._emit(replayer.pipeline.finish())
    replayer.stats.unknown_xids = replayer.pipeline.node_side.unknown_xids
    replayer.stats.duplicate_terminations = replayer.pipeline.job_side.duplicates
    return out, marks, replayer


def fast_path(lines: list[bytes]) -> tuple[list[bytes], list[int], Replayer, int]:
    """`run`, with the same marks, counting the lines that took the full path."""
    replayer = Replayer(POLICY, now_ms=NOW)
    one, full = replayer._one, 0
    out: list[bytes] = []
    marks: list[int] = []

    def counted(raw: bytes, lineno: int) -> list[bytes]:
        nonlocal full
        full += 1
        return one(raw, lineno)

    def read() -> Iterator[bytes]:
        for raw in lines:
            marks.append(len(out))  # `run` asks for the next line once it wrote the last's
            yield raw

    replayer._one = counted  # type: ignore[method-assign]
    for written in replayer.run(read()):
        out.append(written)
    return out, marks, replayer, full


def assert_same(lines: list[bytes]) -> int:
    expected, expected_marks, slow = full_path(lines)
    got, marks, fast, full = fast_path(lines)
    assert got == expected
    assert marks == expected_marks  # each output written right after the line it comes from
    assert fast.stats == slow.stats
    assert fast.pipeline.node_states == slow.pipeline.node_states
    assert fast.pipeline.node_side.clock == slow.pipeline.node_side.clock
    return full


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_benchmark_mix_decides_the_same_and_mostly_takes_the_fast_path(
    tmp_path: Path, seed: int
) -> None:
    path = tmp_path / "mix.jsonl"
    generate(path, 20_000, seed)
    lines = path.read_bytes().splitlines()
    full = assert_same(lines)
    assert full < len(lines) // 10  # the test means something only if the fast path is taken


@pytest.mark.parametrize("example", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_the_examples_replay_the_same(example: Path) -> None:
    assert_same(example.read_bytes().splitlines())


def sample(ts: int, node: str = "n1", condition: str = "ok") -> bytes:
    value = {"node": node, "ts_ms": ts, "condition": condition}
    return orjson.dumps({"topic": "gpu.health", "key": node, "value": value})


def termination(ts: int, job: str, nodes: list[str]) -> bytes:
    value: dict[str, Any] = {
        "job_id": job,
        "attempt": 0,
        "type": "terminated",
        "ts_ms": ts,
        "nodes": nodes,
        "exit_code": 1,
    }
    return orjson.dumps({"topic": "jobs.events", "key": job, "value": value})


def test_samples_at_and_around_every_wake_up_time_decide_the_same() -> None:
    """Ignored samples and XIDs stamped exactly at, just before and just after the times the
    node and job sides wait for (the fast path's edge: `quiet_until`), shuffled within small
    spans; unknown XID codes among them (counted by the full path only)."""
    rng = random.Random(7)
    t0 = 1_773_532_800_000
    grace, lookback = POLICY.grace_ms, POLICY.lookback_ms
    lines: list[bytes] = []
    for i in range(30):
        t = t0 + i * 10 * grace
        nodes = [f"n{i}", f"n{i + 1}"]
        lines.append(termination(t, f"job-{i}", nodes))
        edges = [t - 1, t, t + 1, t + grace - 1, t + grace, t + grace + 1, t + lookback]
        rng.shuffle(edges)
        for ts in edges:
            node = rng.choice(nodes)
            if rng.random() < 0.7:
                lines.append(sample(ts, node, rng.choice(["ok", "throttle"])))
            else:  # an ignored XID, or one the policy does not know (counted, full path)
                xid = {"node": node, "xid": rng.choice([45, 45, 999]), "ts_ms": ts}
                lines.append(orjson.dumps({"topic": "gpu.xid", "key": node, "value": xid}))
        if i % 3 == 0:
            xid = {"node": nodes[0], "xid": 79, "ts_ms": t - 5}
            lines.append(orjson.dumps({"topic": "gpu.xid", "key": nodes[0], "value": xid}))
    full = assert_same(lines)
    assert full < len(lines)


def test_garbage_between_fast_path_samples_is_dead_lettered_in_place() -> None:
    t0 = 1_773_532_800_000
    lines = [sample(t0), b"{not json", sample(t0 + 1), b"[1, 2]", sample(t0 + 2), sample(NOW * 2)]
    expected, _, _ = full_path(lines)
    got, _, _, _ = fast_path(lines)
    assert got == expected
    assert len(got) == 3  # the two bad lines and the sample stamped too far ahead
