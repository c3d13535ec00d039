"""The README's and docs/demo.md's demo excerpts are the saved real run, verbatim; the parts of
tests/readme_excerpts.py that cut a demo's terminal output into them and compare two runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.readme_excerpts import (
    DEMO_MD,
    HOME_CLEAR,
    README,
    ExcerptError,
    blocks,
    readme_block,
    render_readme,
    same_shape,
    split_transcript,
)


def test_readme_and_demo_md_show_the_saved_run_verbatim() -> None:
    for path, texts in blocks().items():
        current = path.read_text(encoding="utf-8")
        assert render_readme(current, texts) == current, (
            f"{path.name} differs from docs/demo-run/: run `python -m tests.readme_excerpts update`"
        )


def test_the_readme_shows_the_report_from_its_decisions_line() -> None:
    report = readme_block(README.read_text(encoding="utf-8"), "report")
    assert report.startswith("decisions  ") and "[PASS]" in report
    full = readme_block(DEMO_MD.read_text(encoding="utf-8"), "report")
    assert full.startswith("gpufailover demo report\n") and full.endswith(report)


def frame(percent: int, decision: str) -> str:
    return (
        f"\x1b[1mgpufailover demo\x1b[0m  4 nodes x 8 GPUs, time x120, phase running\r\n"
        f"sim 00:10:00 / 00:20:00 [\u2588\u2591] {percent:3d}%  wall  5.0 s\r\n\r\n"
        f"latest decisions\r\n  {decision}\r\n"
    )


REPORT = (
    "gpufailover demo report\n=======================\nfleet      4 nodes x 8 GPUs = 32 GPUs\n\n"
    "incidents  3 injected (1 follow-up of earlier outcomes)\n  ecc_xid 3\n\n"
    "decisions  3 for 3 job failures (missing 0, duplicated 0, stray 0)\n"
    "  hardware/failover      3\n\nalerts     hang 1\n\n"
    "[PASS] every job failure got exactly one decision\n"
)


def transcript() -> str:
    return (
        "starting a local Kafka broker ...\r\nbroker 127.0.0.1:1, topics demo-1-0123abcd.*\r\n"
        + HOME_CLEAR + frame(50, "early")
        + HOME_CLEAR + frame(70, "two thirds")
        + HOME_CLEAR + frame(100, "late")
        + HOME_CLEAR + frame(100, "last").replace("phase running", "phase draining")
        + "\r\n" + REPORT.replace("\n", "\r\n") + "\r\nHTML report: /tmp/x.html\r\n"
    )  # fmt: skip


def test_transcript_gives_preamble_the_two_thirds_frame_and_the_report() -> None:
    preamble, shown, report = split_transcript(transcript())
    assert (
        preamble
        == "starting a local Kafka broker ...\nbroker 127.0.0.1:1, topics demo-1-0123abcd.*\n"
    )
    assert "two thirds" in shown and "\x1b" not in shown and "\r" not in shown
    assert shown.startswith("gpufailover demo  4 nodes") and shown.endswith("  two thirds\n")
    assert report == REPORT  # up to the last [PASS]/[FAIL] line, without the HTML path


def test_transcript_without_a_report_is_an_error() -> None:
    with pytest.raises(ExcerptError, match="no report"):
        split_transcript(transcript().split("\r\ngpufailover demo report")[0])


def test_fresh_run_with_other_numbers_has_the_same_shape() -> None:
    fresh = (
        REPORT.replace("3 injected (1 follow-up", "5 injected (2 follow-ups")
        .replace("3 for 3 job", "5 for 5 job")
        .replace("  ecc_xid 3\n", "  gpu_xid 4\n  oom 1\n")
        .replace("alerts     hang 1\n\n", "")  # printed only when there are alerts
    )
    assert same_shape(REPORT, fresh) == []


def test_a_reworded_report_line_is_reported() -> None:
    fresh = REPORT.replace("job failures (missing", "failed jobs (missing")
    assert same_shape(REPORT, fresh) == [
        "decisions  3 for 3 job failures (missing 0, duplicated 0, stray 0)"
    ]
    assert same_shape(REPORT, REPORT.replace("[PASS] every", "[FAIL] every")) == [
        "[PASS] every job failure got exactly one decision"
    ]


def test_a_missing_block_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ExcerptError, match="readme-excerpt:frame"):
        readme_block("# no markers here\n", "frame")
