"""`gpufailover export`'s pure parts: time flags, and lines that replay like the topics."""

from __future__ import annotations

import io
import random
import zlib
from pathlib import Path

import orjson
import pytest

from consumers.runtime.records import InRecord
from streams.export import EXPORTED_TOPICS, export_lines, parse_time
from streams.export_scan import Progress
from streams.policy import load_policy
from streams.replay import Replayer

EXAMPLES = sorted((Path(__file__).resolve().parents[3] / "examples").glob("*.jsonl"))
NOW_MS = 1_800_000_000_000
PREFIX = "p."
LOGICAL = {PREFIX + t: t for t in EXPORTED_TOPICS}


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("24h", NOW_MS - 86_400_000),
        ("90m", NOW_MS - 5_400_000),
        ("7d", NOW_MS - 604_800_000),
        ("30s", NOW_MS - 30_000),
        ("1773580000000", 1_773_580_000_000),
        ("2026-03-15T13:06:40Z", 1_773_580_000_000),
        ("2026-03-15T14:06:40+01:00", 1_773_580_000_000),
    ],
)
def test_parse_time_forms(raw: str, expected: int) -> None:
    assert parse_time(raw, NOW_MS, "--since") == expected


@pytest.mark.parametrize(
    ("raw", "message"),
    [("2026-03-15T13:06:40", "give a time zone"), ("yesterday", "expected a duration")],
)
def test_parse_time_refuses_with_the_flag_named(raw: str, message: str) -> None:
    with pytest.raises(ValueError, match=f"--until {raw!r}: {message}"):
        parse_time(raw, NOW_MS, "--until")


def as_topic_records(dump: Path, rng: random.Random) -> list[InRecord]:
    """The dump's input records as Kafka would hold them: spread over 3 partitions per topic
    by key, as the producers do, then shuffled: the export sees them in any order."""
    out: list[InRecord] = []
    offsets: dict[tuple[str, int], int] = {}
    for raw in dump.read_bytes().splitlines():
        try:
            env = orjson.loads(raw)
        except orjson.JSONDecodeError:
            continue
        if not isinstance(env, dict) or env.get("topic") not in EXPORTED_TOPICS:
            continue
        key = env.get("key")
        partition = zlib.crc32((key or "").encode()) % 3
        where = (PREFIX + env["topic"], partition)
        offsets[where] = offsets.get(where, -1) + 1
        value = orjson.dumps(env["value"])
        out.append(
            InRecord(where[0], partition, offsets[where], key and key.encode(), value, NOW_MS)
        )
    rng.shuffle(out)
    return out


def decisions(lines: list[bytes]) -> list[object]:
    out = Replayer(load_policy(), NOW_MS).run(lines)
    return [orjson.loads(x) for x in out if not orjson.loads(x)["topic"].endswith(".dlq")]


@pytest.mark.parametrize("dump", EXAMPLES, ids=[d.stem for d in EXAMPLES])
def test_exported_lines_replay_like_the_dump_whatever_the_read_order(dump: Path) -> None:
    original = [ln for ln in dump.read_bytes().splitlines() if ln.strip()]
    for seed in range(3):
        lines, stats = export_lines(as_topic_records(dump, random.Random(seed)), LOGICAL)
        assert stats.tombstones == 0
        assert decisions(lines) == decisions(original)


def test_lines_are_replay_format_in_event_time_order() -> None:
    recs = [
        InRecord("p.gpu.xid", 0, 7, b"n1", b'{"ts_ms": 30, "node": "n1"}', 5),
        InRecord("p.jobs.events", 1, 2, b"j", b'{"ts_ms": 10}', 9),
        InRecord("p.gpu.health", 0, 1, b"n2", b'{"ts_ms": 30}', 4),
    ]
    lines, _ = export_lines(recs, LOGICAL)
    got = [orjson.loads(x) for x in lines]
    assert [(g["topic"], g["value"]["ts_ms"]) for g in got] == [
        ("jobs.events", 10),
        ("gpu.health", 30),  # same event time: the earlier Kafka timestamp first
        ("gpu.xid", 30),
    ]
    assert got[2] == {"topic": "gpu.xid", "key": "n1", "value": {"ts_ms": 30, "node": "n1"}}


def test_tombstones_are_skipped_and_values_not_json_reach_replay_as_dead_letters() -> None:
    recs = [
        InRecord("p.nodes.quarantine", 0, 0, b"n1", None, 1),
        InRecord("p.gpu.xid", 0, 1, b"n1", b"NVRM: Xid 79", 2),
    ]
    lines, stats = export_lines(recs, LOGICAL)
    assert (stats.lines, stats.tombstones, stats.not_json) == (1, 1, 1)
    replayer = Replayer(load_policy(), NOW_MS)
    (out,) = [orjson.loads(x) for x in replayer.run(lines)]
    assert out["topic"] == "gpu.xid.dlq"
    assert out["value"]["error"].startswith("value")


def test_a_quick_scan_says_nothing() -> None:
    out = io.StringIO()
    progress = Progress("export", out, clock=lambda: 0.5)
    progress.update(3, 3)
    progress.update(3, 3, final=True)
    assert out.getvalue() == ""


def test_progress_is_throttled_and_ends_with_a_final_line() -> None:
    now = [0.0]
    out = io.StringIO()
    progress = Progress("export", out, clock=lambda: now[0])
    progress.update(10, 100)  # less than a second since it started: quiet
    now[0] = 1.5
    progress.update(50, 100)
    progress.update(60, 100)  # quiet again
    progress.update(100, 100, final=True)
    assert out.getvalue().splitlines() == [
        "export: 50/100 records (50%)",
        "export: 100/100 records (100%), done",
    ]


def test_a_value_spread_over_lines_becomes_one_line() -> None:
    recs = [InRecord("p.jobs.events", 0, 0, b"j", b'{\n  "ts_ms": 5,\r\n  "job_id": "j"\n}', 1)]
    (line,), _ = export_lines(recs, LOGICAL)
    assert b"\n" not in line and b"\r" not in line
    assert orjson.loads(line) == {
        "topic": "jobs.events",
        "key": "j",
        "value": {"ts_ms": 5, "job_id": "j"},
    }
