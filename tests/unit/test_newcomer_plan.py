""".ci/newcomer.py runs or skips (with a reason) every command of the README, and checks that
.ci/run runs README command 2 word for word; the parts that need no broker or clone."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def newcomer() -> ModuleType:
    spec = importlib.util.spec_from_file_location("newcomer", ROOT / ".ci" / "newcomer.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["newcomer"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_every_readme_command_is_run_or_skipped_with_a_reason(newcomer: ModuleType) -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    steps = newcomer.plan(readme)
    assert newcomer.coverage(readme, steps) == []
    assert all(s.run is not None or s.skip for s in steps)


def test_a_new_readme_command_is_reported(newcomer: ModuleType) -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    grown = readme + "\n```sh\ngpufailover frobnicate --all   # new\n```\n"
    assert newcomer.coverage(grown, newcomer.plan(grown)) == [
        "README command not covered by .ci/newcomer.py: gpufailover frobnicate --all"
    ]


def test_readme_blocks_join_continuations_and_drop_comments(newcomer: ModuleType) -> None:
    text = "```sh\n# a comment\nfoo --a 1 \\\n    --b 2   # why\n\nbar\n```\n```text\nnot me\n```\n"
    assert newcomer.readme_commands(text) == ["foo --a 1 --b 2", "bar"]


def test_ci_runs_readme_command_2_word_for_word(newcomer: ModuleType, tmp_path: Path) -> None:
    nc = newcomer.Newcomer(ROOT, {}, tmp_path)
    assert "exactly its three commands" in newcomer.command_2(nc)


def test_hidden_path_has_no_java_or_mvn(
    newcomer: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = tmp_path / "real"
    real.mkdir()
    for name in ("java", "mvn", "git"):
        (real / name).write_text("#!/bin/sh\n")
        (real / name).chmod(0o755)
    monkeypatch.setenv("PATH", str(real))
    hidden = newcomer.hidden_path(tmp_path)
    assert sorted(os.listdir(hidden)) == ["git"]
