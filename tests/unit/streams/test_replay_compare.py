"""`replay --compare`: the jobs a changed XID class flips, and nothing else; exit 3 or 0."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from streams.policy import Policy, load_policy, policy_from_dict
from streams.replay_compare import compare

ROOT = Path(__file__).resolve().parents[3]
SHIPPED = orjson.loads((ROOT / "streams" / "data" / "policy.json").read_bytes())
NOW_MS = 1_800_000_000_000


def first_ts(dump: Path) -> int:
    for raw in dump.read_bytes().splitlines():
        value = orjson.loads(raw).get("value", {})
        if isinstance(value.get("ts_ms"), int):
            return int(value["ts_ms"])
    raise AssertionError(dump)


# A day of history: the bundled incidents, one after another in time.
HISTORY = [
    raw
    for dump in sorted((ROOT / "examples").glob("*.jsonl"), key=first_ts)
    for raw in dump.read_bytes().splitlines()
    if raw.strip()
]


def moved(code: int, cls: str) -> dict[str, Any]:
    data = orjson.loads(orjson.dumps(SHIPPED))
    data["xid"][str(code)] = cls
    return dict(data)


def policy(data: dict[str, Any]) -> Policy:
    return policy_from_dict(data, "new policy")


@pytest.mark.parametrize(("code", "cls"), [(31, "hardware"), (94, "software"), (79, "ignore")])
def test_compare_reports_exactly_the_decisions_whose_evidence_holds_the_moved_xid(
    code: int, cls: str
) -> None:
    result = compare(HISTORY, load_policy(), policy(moved(code, cls)), NOW_MS)
    # The oracle: a decision can move only if the XID is in its evidence, and must when the
    # XID is its only item of the XID's old class (that class decided it: hardware outranks,
    # and the moved classes here are the deciding ones).
    old_cls = load_policy().classify_xid(code)
    holding = {
        key
        for key, d in result.before.decisions.items()
        if any(e.kind == "xid" and e.code == code for e in d.evidence)
        and not any(e.cls == old_cls and e.code != code for e in d.evidence)
    }
    assert holding, f"no example decision holds XID {code}"
    assert {(c.job_id, c.attempt) for c in result.changes} == holding
    for change in result.changes:
        assert change.before is not None and change.after is not None
        assert any(f"xid {code} on " in why for why in change.flipped), change.flipped
    assert result.changed


def test_flipped_evidence_names_the_class_change() -> None:
    result = compare(HISTORY, load_policy(), policy(moved(31, "hardware")), NOW_MS)
    change = next(c for c in result.changes if c.job_id == "diffusion-eval-0315")
    assert change.flipped == (
        "xid 31 on gpu-node-033 GPU 0 at 2026-03-15T09:18:18.720Z: software -> hardware",
    )
    assert change.after is not None and change.after.suspect_nodes == ("gpu-node-033",)
    text = result.render()
    assert "verdict software: 3 -> 1  *" in text
    assert "quarantined nodes: 5 -> 7 (+gpu-node-033, +gpu-node-212)" in text


def test_a_moved_xid_no_job_holds_changes_only_quarantines() -> None:
    # XID 13 shows up on gpu-node-240, which runs none of the examples' jobs.
    result = compare(HISTORY, load_policy(), policy(moved(13, "hardware")), NOW_MS)
    assert result.changes == ()
    assert result.quarantines_changed and result.changed
    assert "gpu-node-240" in result.after.quarantined


def test_a_policy_change_nothing_in_the_history_touches_changes_nothing() -> None:
    result = compare(HISTORY, load_policy(), policy(moved(13, "software")), NOW_MS)
    assert not result.changed
    assert result.before.decisions == result.after.decisions


def test_a_budget_change_is_explained_by_the_setting() -> None:
    data = dict(SHIPPED, max_failovers=5)
    result = compare(HISTORY, load_policy(), policy(data), NOW_MS)
    (change,) = result.changes  # retry-budget's last attempt no longer gives up
    assert change.flipped == ("no evidence changed class: max_failovers 3 -> 5",)


def run_cli(tmp_path: Path, data: dict[str, Any], *extra: str) -> subprocess.CompletedProcess[str]:
    history = tmp_path / "history.jsonl"
    history.write_bytes(b"\n".join(HISTORY) + b"\n")
    new = tmp_path / "new-policy.json"
    new.write_bytes(orjson.dumps(data))
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "gpufailover",
            "replay",
            str(history),
            "--compare",
            str(new),
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_cli_exits_3_when_decisions_change_and_0_when_not(tmp_path: Path) -> None:
    changed = run_cli(tmp_path, moved(31, "hardware"), "--json")
    assert changed.returncode == 3, changed.stderr
    report = orjson.loads(changed.stdout)
    assert {c["job_id"] for c in report["changes"]} == {"diffusion-eval-0315", "rl-agent-train-9"}
    assert (
        report["counts"]["verdict"]["after"]["hardware"]
        == report["counts"]["verdict"]["before"]["hardware"] + 2
    )
    same = run_cli(tmp_path, SHIPPED)
    assert same.returncode == 0, same.stderr
    assert "changed decisions: 0" in same.stdout


def test_cli_bad_compare_policy_is_usage(tmp_path: Path) -> None:
    bad = run_cli(tmp_path, {"xid": {}})
    assert bad.returncode == 2
    assert bad.stderr.startswith("gpufailover replay: bad --compare policy: ")


def test_cli_json_without_compare_is_usage(tmp_path: Path) -> None:
    history = tmp_path / "history.jsonl"
    history.write_bytes(b"\n".join(HISTORY) + b"\n")
    proc = subprocess.run(
        [sys.executable, "-m", "gpufailover", "replay", str(history), "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stderr == "gpufailover replay: --json goes with --compare NEW_POLICY\n"
