"""The breaker's fleet comes from an inventory the operator gives (issue 12): a size, or a
file of node names; the share rule cannot be asked for without one."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from consumers.quarantine.config import QuarantineSettings, read_inventory
from gpufailover.cli import build_parser


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(list(argv))


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (
        "GPUFAILOVER_FLEET_SIZE",
        "GPUFAILOVER_FLEET_INVENTORY",
        "GPUFAILOVER_QUARANTINE_BREAKER_MAX_SHARE",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GPUFAILOVER_BOOTSTRAP", "h:1")


def test_by_default_the_fleet_is_unknown_and_the_share_rule_off() -> None:
    q = QuarantineSettings.from_env_and_args(parse("quarantine"))
    assert q.breaker.fleet_size == 0 and q.breaker.inventory is None


def test_the_share_rule_asked_for_without_a_fleet_is_an_error() -> None:
    with pytest.raises(SystemExit, match="needs the fleet"):
        QuarantineSettings.from_env_and_args(parse("quarantine", "--breaker-max-share", "0.1"))
    q = QuarantineSettings.from_env_and_args(
        parse("quarantine", "--breaker-max-share", "0.1", "--fleet-size", "64")
    )
    assert (q.breaker.max_share, q.breaker.fleet_size) == (0.1, 64)
    off = QuarantineSettings.from_env_and_args(parse("quarantine", "--breaker-max-share", "1"))
    assert off.breaker.max_share == 1.0  # a share that never trips needs no fleet


def test_an_inventory_file_names_the_fleet(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "fleet.txt"
    path.write_text("# rack 1\ngpu-001\n\n gpu-002 \ngpu-001\n", encoding="utf-8")
    monkeypatch.setenv("GPUFAILOVER_FLEET_INVENTORY", str(path))
    monkeypatch.setenv("GPUFAILOVER_QUARANTINE_BREAKER_MAX_SHARE", "0.5")
    q = QuarantineSettings.from_env_and_args(None)
    assert q.breaker.inventory == frozenset({"gpu-001", "gpu-002"})


def test_a_bad_inventory_names_the_file(tmp_path: Path) -> None:
    assert read_inventory("") is None
    with pytest.raises(ValueError, match="cannot read"):
        read_inventory(str(tmp_path / "missing.txt"))
    empty = tmp_path / "empty.txt"
    empty.write_text("# nothing\n", encoding="utf-8")
    with pytest.raises(ValueError, match="no node names"):
        read_inventory(str(empty))
    with pytest.raises(SystemExit, match="no node names"):
        QuarantineSettings.from_env_and_args(parse("quarantine", "--fleet-inventory", str(empty)))
