"""The replay benchmark script still runs (tiny size) and its generator is deterministic."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufailover.bench import bench_replay


def test_bench_generator_is_deterministic_and_mixed(tmp_path: Path) -> None:
    bench = bench_replay
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    bench.generate(a, 5000)
    bench.generate(b, 5000)
    assert a.read_bytes() == b.read_bytes()
    text = a.read_text()
    assert text.count('"topic":"jobs.events"') == 5  # one termination per thousand records
    assert text.count('"topic":"gpu.health"') > text.count('"topic":"gpu.xid"') > 0


def test_bench_runs_and_reports_rates(capsys: pytest.CaptureFixture[str]) -> None:
    assert bench_replay.main(["--records", "3000"]) == 0
    out = capsys.readouterr().out
    assert "orjson parse only:" in out
    assert "full replay:" in out
    assert "ratio replay/orjson:" in out
    assert "decisions: 3 " in out
