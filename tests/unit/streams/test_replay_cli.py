"""`gpufailover replay FILE [--policy FILE]`, run as the installed command would be run."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from importlib import resources
from pathlib import Path
from typing import Any

import orjson
import pytest

from schemas.dead_letter import DeadLetter
from streams.policy import load_policy
from streams.replay import Replayer

T = 1_773_532_800_000  # 2026-03-15T00:00:00Z
S = 1000
N1, N2, N3 = "gpu-node-017", "gpu-node-018", "gpu-node-019"


def line(topic: str, value: Any, key: str | None = None) -> bytes:
    return orjson.dumps({"topic": topic, "key": key, "value": value})


def xid_line(node: str, code: int, ts: int, **kw: Any) -> bytes:
    return line("gpu.xid", {"node": node, "xid": code, "ts_ms": ts, **kw}, node)


def health_line(node: str, condition: str, ts: int) -> bytes:
    return line("gpu.health", {"node": node, "ts_ms": ts, "condition": condition}, node)


def term_line(job: str, nodes: list[str], ts: int, attempt: int = 0, **kw: Any) -> bytes:
    value = {"job_id": job, "attempt": attempt, "type": "terminated", "ts_ms": ts, "nodes": nodes}
    return line("jobs.events", value | kw, job)


def replay(
    *args: str, stdin: bytes | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[bytes]:
    full_env = {k: v for k, v in os.environ.items() if k != "GPUFAILOVER_POLICY"} | (env or {})
    return subprocess.run(
        [sys.executable, "-m", "gpufailover", "replay", *args],
        input=stdin,
        capture_output=True,
        timeout=60,
        check=False,
        env=full_env,
    )


def records(stdout: bytes) -> list[dict[str, Any]]:
    return [orjson.loads(raw) for raw in stdout.splitlines()]


def of_topic(out: list[dict[str, Any]], topic: str) -> list[dict[str, Any]]:
    return [r for r in out if r["topic"] == topic]


def write(path: Path, *lines: bytes) -> Path:
    path.write_bytes(b"".join(raw + b"\n" for raw in lines))
    return path


INCIDENT = [
    health_line(N1, "ok", T - 30 * S),
    xid_line(N2, 79, T - 2 * S, gpu_index=5),
    term_line("job-a", [N1, N2], T, reason="NCCLTimeout"),
    term_line("job-b", [N3], T + S, reason="OOMKilled"),
]


def test_replay_prints_decisions_and_quarantines_as_topic_lines(tmp_path: Path) -> None:
    proc = replay(str(write(tmp_path / "dump.jsonl", *INCIDENT)))
    assert proc.returncode == 0, proc.stderr
    out = records(proc.stdout)
    assert all(set(r) == {"topic", "key", "value"} for r in out)
    (q,) = of_topic(out, "nodes.quarantine")
    assert (q["key"], q["value"]["node"], q["value"]["state"]) == (N2, N2, "quarantined")
    decisions = {r["key"]: r["value"] for r in of_topic(out, "failover.decisions")}
    assert set(decisions) == {"job-a", "job-b"}
    a, b = decisions["job-a"], decisions["job-b"]
    assert (a["verdict"], a["action"], a["suspect_nodes"], a["next_attempt"]) == (
        "hardware",
        "failover",
        [N2],
        1,
    )
    assert (b["verdict"], b["action"], b["status"]) == (
        "software",
        "reject",
        "Pending-internalerror",
    )
    assert len(out) == 3


def test_replay_summary_goes_to_stderr(tmp_path: Path) -> None:
    proc = replay(str(write(tmp_path / "dump.jsonl", *INCIDENT, b"not json")))
    err = proc.stderr.decode()
    assert "5 records read" in err
    assert "verdict hardware: 1" in err
    assert "verdict software: 1" in err
    assert "action failover: 1" in err
    assert "action reject: 1" in err
    assert f"quarantined nodes (1): {N2}" in err
    assert "rejected lines (dead-lettered): 1" in err
    assert b"replay:" not in proc.stdout


def test_replay_reads_stdin_with_dash() -> None:
    proc = replay("-", stdin=b"".join(raw + b"\n" for raw in INCIDENT))
    assert proc.returncode == 0, proc.stderr
    assert len(of_topic(records(proc.stdout), "failover.decisions")) == 2


def test_replay_of_an_empty_input_prints_nothing() -> None:
    proc = replay("-", stdin=b"")
    assert (proc.returncode, proc.stdout) == (0, b"")
    assert "0 records read" in proc.stderr.decode()


JOB = {"job_id": "job-c", "attempt": 0, "type": "submitted", "ts_ms": T}
RELEASE = {"node": N1, "state": "released", "reason": "operator", "job_id": None, "ts_ms": T}
BAD_LINES: list[tuple[bytes, str, str]] = [
    (b"this is not json", "replay.dlq", "not valid JSON"),
    (b'{"topic": "gpu.xid", "value": {"node": "gpu-node-017", "xid": 79', "replay.dlq", "JSON"),
    (b"[1, 2, 3]", "replay.dlq", "line"),
    (b'{"value": {"node": "gpu-node-017"}}', "replay.dlq", "topic"),
    (line("gpu.xids", {"node": N1, "xid": 79, "ts_ms": T}), "replay.dlq", "unknown topic"),
    (line("gpu.xid", {"node": N1, "ts_ms": T}), "gpu.xid.dlq", "xid"),
    (line("gpu.xid", {"node": N1, "xid": "79", "ts_ms": T}), "gpu.xid.dlq", "xid"),
    (
        line("gpu.health", {"node": N1, "ts_ms": T, "condition": "melted"}),
        "gpu.health.dlq",
        "condition",
    ),
    (line("gpu.health", {"node": N1, "ts_ms": 1.5, "condition": "ok"}), "gpu.health.dlq", "ts_ms"),
    (line("jobs.events", JOB | {"type": "terminated"}), "jobs.events.dlq", "nodes"),
    (line("jobs.events", JOB | {"attempt": -1}), "jobs.events.dlq", "attempt"),
    (line("gpu.xid", None), "gpu.xid.dlq", "value"),
    (line("nodes.quarantine", RELEASE | {"state": "drained"}), "nodes.quarantine.dlq", "state"),
]


@pytest.mark.parametrize(
    ("raw", "dlq", "error"), BAD_LINES, ids=[f"{i}-{d}" for i, (_, d, _) in enumerate(BAD_LINES)]
)
def test_bad_line_becomes_one_dead_letter_and_the_run_goes_on(
    tmp_path: Path, raw: bytes, dlq: str, error: str
) -> None:
    path = write(tmp_path / "dump.jsonl", INCIDENT[1], raw, INCIDENT[2])
    proc = replay(str(path))
    assert proc.returncode == 0, proc.stderr
    out = records(proc.stdout)
    (dead,) = [r for r in out if r["topic"].endswith(".dlq")]
    assert dead["topic"] == dlq
    assert error in dead["value"]["error"]
    assert dead["value"]["line"] == 2
    assert dead["value"]["raw"] == raw.decode()
    # the good records around it are still processed
    assert len(of_topic(out, "failover.decisions")) == 1
    assert f"{dlq}: 1" in proc.stderr.decode()


def test_dead_letter_keeps_an_undecodable_line_exactly(tmp_path: Path) -> None:
    bad = b'{"topic": "gpu.xid", "x": "\xff\xfe"}'
    proc = replay(str(write(tmp_path / "dump.jsonl", bad)))
    assert proc.returncode == 0
    (dead,) = records(proc.stdout)
    assert dead["topic"] == "replay.dlq" and dead["key"] == "-@line:1"
    letter = DeadLetter.from_dict(dead["value"])
    assert (letter.raw_encoding, letter.raw_bytes(), letter.line) == ("base64", bad, 1)
    assert (letter.component, letter.error_kind, letter.dead_lettered_ts_ms) == (
        "replay",
        "decode",
        None,  # no wall clock: replay's output is a function of its input
    )


def test_many_bad_lines_never_stop_the_run(tmp_path: Path) -> None:
    bad = [b"{", b"null", b'"text"', b"42", line("nope", {})] * 20
    proc = replay(str(write(tmp_path / "dump.jsonl", *bad, *INCIDENT)))
    assert proc.returncode == 0
    out = records(proc.stdout)
    assert len([r for r in out if r["topic"] == "replay.dlq"]) == 100
    assert len(of_topic(out, "failover.decisions")) == 2


def test_blank_lines_are_skipped_silently(tmp_path: Path) -> None:
    proc = replay(str(write(tmp_path / "dump.jsonl", b"", INCIDENT[1], b"   ", INCIDENT[2])))
    out = records(proc.stdout)
    assert [r["topic"] for r in out] == ["nodes.quarantine", "failover.decisions"]
    assert "2 records read" in proc.stderr.decode()


def test_output_topic_records_in_the_dump_are_skipped_not_replayed(tmp_path: Path) -> None:
    old = line("failover.decisions", {"job_id": "job-a", "verdict": "software"}, "job-a")
    dead = line("gpu.xid.dlq", {"error": "x"})
    proc = replay(str(write(tmp_path / "dump.jsonl", old, dead, *INCIDENT)))
    out = records(proc.stdout)
    assert not any(r["topic"].endswith(".dlq") for r in out)
    assert len(of_topic(out, "failover.decisions")) == 2
    assert "2 output-topic records skipped" in proc.stderr.decode()


def test_released_node_in_the_dump_is_quarantined_again_by_a_new_fault(tmp_path: Path) -> None:
    release = {"node": N2, "state": "released", "reason": "operator", "job_id": None, "ts_ms": T}
    path = write(
        tmp_path / "dump.jsonl",
        xid_line(N2, 79, T - 2 * S),
        xid_line(N2, 79, T - S),  # still quarantined: no second record
        line("nodes.quarantine", release, N2),
        xid_line(N2, 48, T + 3600 * S),
    )
    out = records(replay(str(path)).stdout)
    assert [(r["value"]["node"], r["value"]["evidence"][0]["code"]) for r in out] == [
        (N2, 79),
        (N2, 48),
    ]


def test_policy_option_changes_the_decision(tmp_path: Path) -> None:
    raw = orjson.loads(resources.files("streams").joinpath("data/policy.json").read_bytes())
    custom = copy.deepcopy(raw)
    custom["reasons"]["OOMKilled"] = "transient"
    policy = tmp_path / "policy.json"
    policy.write_bytes(orjson.dumps(custom))
    dump = write(tmp_path / "dump.jsonl", term_line("job-b", [N3], T, reason="OOMKilled"))
    for args, env in (
        (["--policy", str(policy)], None),
        ([], {"GPUFAILOVER_POLICY": str(policy)}),
    ):
        (d,) = records(replay(str(dump), *args, env=env).stdout)
        assert (d["value"]["verdict"], d["value"]["action"]) == ("transient", "retry")


def test_unreadable_file_is_a_message_and_exit_2(tmp_path: Path) -> None:
    for target in (tmp_path / "absent.jsonl", tmp_path):
        proc = replay(str(target))
        assert proc.returncode == 2
        assert proc.stdout == b""
        assert f"cannot read {target}" in proc.stderr.decode()


def test_bad_policy_is_a_message_and_exit_2(tmp_path: Path) -> None:
    raw = orjson.loads(resources.files("streams").joinpath("data/policy.json").read_bytes())
    raw["grace_s"] = "two minutes"
    policy = tmp_path / "policy.json"
    policy.write_bytes(orjson.dumps(raw))
    dump = write(tmp_path / "dump.jsonl", *INCIDENT)
    proc = replay(str(dump), "--policy", str(policy))
    assert proc.returncode == 2
    assert proc.stdout == b""
    err = proc.stderr.decode()
    assert "bad policy" in err
    assert "grace_s" in err


def test_missing_policy_file_is_a_message_and_exit_2(tmp_path: Path) -> None:
    dump = write(tmp_path / "dump.jsonl", *INCIDENT)
    proc = replay(str(dump), "--policy", str(tmp_path / "nope.json"))
    assert proc.returncode == 2
    assert "nope.json" in proc.stderr.decode()


def test_replayer_in_process_matches_the_command(tmp_path: Path) -> None:
    dump = write(tmp_path / "dump.jsonl", *INCIDENT, b"junk")
    replayer = Replayer(load_policy())
    in_process = list(replayer.run(dump.read_bytes().splitlines(keepends=True)))
    assert b"".join(raw + b"\n" for raw in in_process) == replay(str(dump)).stdout
    assert replayer.stats.records == 5
    assert dict(replayer.stats.verdicts) == {"hardware": 1, "software": 1}
