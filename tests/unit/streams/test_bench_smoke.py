"""The benchmark scripts still run (tiny sizes) and the replay generator is deterministic."""

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
    assert bench_replay.main(["--records", "3000", "--repeat", "2"]) == 0
    out = capsys.readouterr().out
    assert "orjson parse only:" in out
    assert "full replay:" in out
    assert "ratio replay/orjson:" in out and "(median of 2 passes: " in out
    assert "decisions: 3 " in out


def test_the_comparison_keeps_each_side_best_pass(tmp_path: Path) -> None:
    path = tmp_path / "mix.jsonl"
    bench_replay.generate(path, 2000)
    result = bench_replay.compare(path, 3)
    assert result.records == 2000 and len(result.ratios) == 3
    assert sorted(result.ratios)[1] == result.ratio  # the median pass's own ratio
    assert result.replayer.stats.records == 2000  # the last pass's replay, all of it read


def test_filter_bench_compares_against_another_filter_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from gpufailover.bench import bench_filter

    same = tmp_path / "same.py"
    same.write_text(Path(bench_filter.current.__file__).read_text())
    argv = ["--mix", "flood", "--records", "1200", "--repeat", "1", "--against", str(same)]
    assert bench_filter.main(argv) == 0
    out = capsys.readouterr().out
    assert "flood this tree:" in out and f"this tree / {same}:" in out
    with pytest.raises(SystemExit):
        bench_filter.main(["--against", str(tmp_path / "missing.py")])
