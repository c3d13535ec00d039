"""The declarative settings layer: one declaration gives the flag, the env reading and the help."""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from gpufailover import settings
from gpufailover.settings import add_arguments, resolve, setting


@dataclass(frozen=True)
class Sample:
    name: str = setting("alpha", env="GPUFAILOVER_T_NAME", flag="--name", help="a name")
    count: int = setting(3, env="GPUFAILOVER_{SERVICE}_COUNT", flag="--count", help="how many")
    ratio: float = setting(0.5, env="GPUFAILOVER_T_RATIO", flag="--ratio", help="a share")
    loud: bool = setting(False, env="GPUFAILOVER_T_LOUD", flag="--loud", help="say more")
    mode: str = setting(
        "a", env="GPUFAILOVER_T_MODE", flag=("--mode", "--m"), help="mode", choices=("a", "b")
    )
    fixed: str = ""


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="t")
    add_arguments(p, Sample, service="job-status")
    return p


def test_defaults_when_neither_flag_nor_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("NAME", "RATIO", "LOUD", "MODE"):
        monkeypatch.delenv(f"GPUFAILOVER_T_{name}", raising=False)
    monkeypatch.delenv("GPUFAILOVER_JOB_STATUS_COUNT", raising=False)
    assert resolve(Sample, parser().parse_args([]), service="job-status", fixed="x") == Sample(
        fixed="x"
    )
    assert resolve(Sample, None, service="job-status") == Sample()


def test_flag_beats_env_beats_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUFAILOVER_T_NAME", "from-env")
    monkeypatch.setenv("GPUFAILOVER_JOB_STATUS_COUNT", "7")
    monkeypatch.setenv("GPUFAILOVER_T_LOUD", "yes")
    monkeypatch.setenv("GPUFAILOVER_T_MODE", "b")
    from_env = resolve(Sample, parser().parse_args([]), service="job-status")
    assert (from_env.name, from_env.count, from_env.loud, from_env.mode) == (
        "from-env",
        7,
        True,
        "b",
    )
    args = parser().parse_args(["--name", "flag", "--count", "9", "--m", "a", "--ratio", "1e-1"])
    flags = resolve(Sample, args, service="job-status")
    assert (flags.name, flags.count, flags.ratio, flags.mode) == ("flag", 9, 0.1, "a")
    assert flags.loud is True  # no flag given: the env's value stays


def test_an_empty_number_is_unset_but_an_empty_string_is_a_value(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GPUFAILOVER_JOB_STATUS_COUNT", "")
    monkeypatch.setenv("GPUFAILOVER_T_NAME", "")
    got = resolve(Sample, None, service="job-status")
    assert (got.count, got.name) == (3, "")


@pytest.mark.parametrize(
    ("variable", "raw", "message"),
    [
        ("GPUFAILOVER_JOB_STATUS_COUNT", "x", "_COUNT='x': expected an integer"),
        ("GPUFAILOVER_T_RATIO", "half", "GPUFAILOVER_T_RATIO='half': expected a number"),
        ("GPUFAILOVER_T_LOUD", "sure", "GPUFAILOVER_T_LOUD='sure': expected one of 1, true"),
        ("GPUFAILOVER_T_MODE", "c", r"mode must be one of .*, got 'c' \(from GPUFAILOVER_T_MODE\)"),
    ],
)  # fmt: skip
def test_a_bad_env_value_stops_with_the_variable_named(
    monkeypatch: pytest.MonkeyPatch, variable: str, raw: str, message: str
) -> None:
    monkeypatch.setenv(variable, raw)
    with pytest.raises(SystemExit, match=message):
        resolve(Sample, None, service="job-status")


def test_help_shows_the_env_var_and_the_default() -> None:
    text = parser().format_help()
    assert "(env GPUFAILOVER_JOB_STATUS_COUNT, default 3)" in text
    assert "(env GPUFAILOVER_T_RATIO, default 0.5)" in text
    assert "say more (env GPUFAILOVER_T_LOUD)" in text  # a switch: no default to show
    with pytest.raises(SystemExit):
        parser().parse_args(["--mode", "c"])  # argparse checks the choices of a flag


def test_the_recorded_local_broker_is_found_without_deploy(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for name in ("GPUFAILOVER_BOOTSTRAP", "KAFKA_BOOTSTRAP"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GPUFAILOVER_STATE_DIR", str(tmp_path))
    assert settings.default_bootstrap() == settings.DEFAULT_BOOTSTRAP  # nothing recorded
    # this test's own process stands in for the broker's JVM: alive, started with that argument
    own_arg = Path(f"/proc/{os.getpid()}/cmdline").read_bytes().split(b"\0")[0].decode()
    record = {"bootstrap": "local:19092", "pid": os.getpid(), "server_properties": own_arg}
    (tmp_path / "broker.json").write_text(json.dumps(record))
    assert settings.default_bootstrap() == "local:19092"
    # a reused pid (running something else) is not the broker
    (tmp_path / "broker.json").write_text(json.dumps({**record, "server_properties": "/x/y"}))
    assert settings.default_bootstrap() == settings.DEFAULT_BOOTSTRAP
    (tmp_path / "broker.json").write_text("{damaged")
    assert settings.default_bootstrap() == settings.DEFAULT_BOOTSTRAP
    (tmp_path / "broker.json").write_text(json.dumps(record))
    monkeypatch.setenv("KAFKA_BOOTSTRAP", "k:1")
    assert settings.default_bootstrap() == "k:1"


def test_the_kernel_imports_no_launcher() -> None:
    import ast
    from pathlib import Path

    tree = ast.parse(Path(settings.__file__).read_text())
    imported = {
        node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
    } | {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    assert not {
        m for m in imported if m.split(".")[0] in ("deploy", "consumers", "streams", "producers")
    }
