"""docs/settings.md is what the settings declarations generate today."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from gpufailover.cli import settings_doc
from gpufailover.settings import add_arguments, setting


def test_the_settings_doc_is_current() -> None:
    assert settings_doc.DOC.read_text(encoding="utf-8") == settings_doc.current(), (
        "run: python -m gpufailover.cli.settings_doc write"
    )


def test_a_declared_option_becomes_a_row_of_its_command() -> None:
    @dataclass(frozen=True)
    class Demo:
        speed: float = setting(1.5, env="GPUFAILOVER_{SERVICE}_SPEED", flag="--speed", help="x|y")

    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers().add_parser("svc")
    add_arguments(sub, Demo, service="svc")
    text = settings_doc.render(parser)
    assert "## `gpufailover svc`" in text
    assert "| `--speed` | `GPUFAILOVER_SVC_SPEED` | `1.5` | x\\|y |" in text
