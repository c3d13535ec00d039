"""docs/architecture.md's path of one XID names files that exist, each once, ten at most."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"
SECTION = "## The path of one XID, file by file"


def xid_path_files() -> list[str]:
    """The file each numbered step of the section starts with (`N. `path` — ...`)."""
    text = DOC.read_text()
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\d+\. `([^`]+\.py)`", section, flags=re.MULTILINE)


def test_the_xid_path_is_read_from_the_doc() -> None:
    files = xid_path_files()
    assert files[0].startswith("producers/")
    assert files[-1].startswith("consumers/")


def test_every_file_on_the_xid_path_exists() -> None:
    missing = [f for f in xid_path_files() if not (ROOT / f).is_file()]
    assert missing == []


def test_the_xid_path_names_each_file_once_and_ten_at_most() -> None:
    files = xid_path_files()
    assert len(files) == len(set(files)) <= 10


def test_every_path_in_backquotes_exists() -> None:
    # the rest of the map (layers, where to add things) must not point at moved files either
    named = re.findall(
        r"`((?:schemas|streams|producers|consumers|gpufailover|deploy)/[\w/.-]+)`", DOC.read_text()
    )
    missing = [p for p in named if "<" not in p and not (ROOT / p.rstrip("/")).exists()]
    assert missing == []
