"""The README's and docs/demo.md's "from a real run" excerpts: real demo output, never typed.

    python -m tests.readme_excerpts run      # run the demo in a pseudo-terminal, save its output
                                             # to docs/demo-run/, rewrite the blocks
    python -m tests.readme_excerpts update   # rewrite the blocks from docs/demo-run/
    python -m tests.readme_excerpts check    # exit 1 if a block differs from docs/demo-run/

`run` runs `gpufailover demo` (default arguments, as README command 1 does, but no HTML) in a
pseudo-terminal, so the live view redraws as a person sees it, and saves three files, colours
stripped: what it prints before the live view (`preamble.txt`), the first frame of the running
phase at or past 2/3 of the simulated time (`frame.txt`), and the end-of-run report
(`report.txt`). Between `<!-- readme-excerpt:NAME -->` markers, verbatim: the README shows
that frame and the report from its `decisions` line to the end; docs/demo.md shows the
preamble with the frame, and the whole report. tests/unit/test_readme_excerpts.py checks both
files against docs/demo-run/; `same_shape` compares a fresh run's report with the saved one
(.ci/newcomer.py does, after running README command 1), so a change of the report's wording
shows up as a stale excerpt.
"""

from __future__ import annotations

import argparse
import os
import re
import select
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
SAVED = ROOT / "docs" / "demo-run"
HOME_CLEAR = "\x1b[H\x1b[J"  # what the live view writes before every frame
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_NUMBER = re.compile(r"\d+(?:\.\d+)?")
_HEX = re.compile(r"\b[0-9a-f]{8}\b")  # the random part of a topic prefix
_PLURAL = re.compile(r"(\w)s\b")
# Report lines printed only when there is something to say (no alert, no restart in a run).
OPTIONAL = ("alerts ", "time to resume ")
REPORT_HEAD = "gpufailover demo report"
REPORT_EXCERPT_FROM = "decisions  "  # the README shows the report from this line on
FRAME_AT_PERCENT = 67
DEMO_MD = ROOT / "docs" / "demo.md"
SAVED_FILES = ("preamble", "frame", "report")


class ExcerptError(RuntimeError):
    """The demo's output does not have the expected parts, or a README block is missing."""


def strip_ansi(text: str) -> str:
    return _ANSI.sub("", text.replace("\r\n", "\n")).replace("\r", "")


def split_transcript(raw: str) -> tuple[str, str, str]:
    """(preamble, live-view frame, report) from a demo's terminal output."""
    parts = raw.split(HOME_CLEAR)
    preamble = strip_ansi(parts[0]).strip() + "\n"
    frames = [strip_ansi(part) for part in parts[1:]]
    running = [f for f in frames if f.splitlines() and "phase running" in f.splitlines()[0]]
    if not running:
        raise ExcerptError("no live-view frame of the running phase in the demo's output")
    frame = next((f for f in running if _progress(f) >= FRAME_AT_PERCENT), running[-1])
    start = frame.find(REPORT_HEAD)  # the report follows the last frame
    frame = (frame[:start] if start >= 0 else frame).rstrip() + "\n"
    text = strip_ansi(raw)
    head = text.rfind(REPORT_HEAD)
    if head < 0:
        raise ExcerptError("no report in the demo's output")
    lines = text[head:].splitlines()
    last = max((i for i, ln in enumerate(lines) if ln.startswith(("[PASS]", "[FAIL]"))), default=-1)
    if last < 0:
        raise ExcerptError("the demo's report has no [PASS]/[FAIL] lines")
    return preamble, frame, "\n".join(lines[: last + 1]) + "\n"


def _progress(frame: str) -> int:
    """The percentage on a frame's progress line (`sim 02:39:53 / 04:00:00 [...]  67%`)."""
    lines = frame.splitlines()
    match = re.search(r"\]\s+(\d+)%", lines[1]) if len(lines) > 1 else None
    return int(match.group(1)) if match else 0


def report_excerpt(report: str) -> str:
    lines = report.splitlines()
    first = next((i for i, ln in enumerate(lines) if ln.startswith(REPORT_EXCERPT_FROM)), None)
    if first is None:
        raise ExcerptError(f"the report has no line starting {REPORT_EXCERPT_FROM!r}")
    return "\n".join(lines[first:]) + "\n"


def blocks(saved: Path = SAVED) -> dict[Path, dict[str, str]]:
    """File -> block name -> its text, from the saved run."""
    read = {name: (saved / f"{name}.txt").read_text(encoding="utf-8") for name in SAVED_FILES}
    return {
        README: {"frame": read["frame"], "report": report_excerpt(read["report"])},
        DEMO_MD: {"frame": read["preamble"] + "\n" + read["frame"], "report": read["report"]},
    }


def _marker(name: str) -> tuple[str, str]:
    return f"<!-- readme-excerpt:{name} -->\n```text\n", f"```\n<!-- /readme-excerpt:{name} -->"


def readme_block(readme: str, name: str) -> str:
    begin, end = _marker(name)
    i, j = readme.find(begin), readme.find(end)
    if i < 0 or j < i:
        raise ExcerptError(f"README has no block {begin.splitlines()[0]} ... {end}")
    return readme[i + len(begin) : j]


def render_readme(readme: str, texts: dict[str, str]) -> str:
    for name, text in texts.items():
        begin, end = _marker(name)
        old = readme_block(readme, name)
        readme = readme.replace(begin + old + end, begin + text + end, 1)
    return readme


def masked(line: str) -> str:
    """A line with every number as `#` and no plural `s` (`1 job` and `26 jobs` agree); the
    topic prefix's random part is a number too."""
    return _PLURAL.sub(r"\1", _NUMBER.sub("#", _HEX.sub("#", line)))


def same_shape(saved: str, fresh: str) -> list[str]:
    """The lines of `saved` that `fresh` lacks; [] when it has them all, in the same order.

    Compared: every line that does not start with a space (the report's headings and summary
    lines, the [PASS]/[FAIL] lines), numbers masked and plurals folded (`masked`), except
    OPTIONAL ones. Not compared: the indented rows (per-scenario, per-verdict and latency rows,
    wrong or false-evidence cases), whose number and names follow what the run drew."""
    have = [masked(ln) for ln in fresh.splitlines() if ln and not ln.startswith(" ")]
    missing: list[str] = []
    pos = 0
    for line in saved.splitlines():
        if not line or line.startswith(" ") or line.startswith(OPTIONAL):
            continue
        key = masked(line)
        found = next((k for k in range(pos, len(have)) if have[k] == key), None)
        if found is None:
            missing.append(line)
        else:
            pos = found + 1
    return missing


def run_demo(args: list[str], timeout_s: float = 600.0) -> str:
    """`gpufailover demo ARGS` in a pseudo-terminal; its whole output. Raises on failure."""
    import pty

    leader, follower = pty.openpty()
    cmd = [sys.executable, "-m", "gpufailover", "demo", "--html", "", *args]
    proc = subprocess.Popen(
        cmd, stdin=subprocess.DEVNULL, stdout=follower, stderr=follower, close_fds=True
    )
    os.close(follower)
    chunks: list[bytes] = []
    try:
        while True:
            ready, _, _ = select.select([leader], [], [], timeout_s)
            if not ready:
                raise ExcerptError(f"the demo wrote nothing for {timeout_s:.0f} s")
            try:
                data = os.read(leader, 65536)
            except OSError:  # EIO: the demo closed the terminal
                break
            if not data:
                break
            chunks.append(data)
    finally:
        os.close(leader)
        if proc.poll() is None:
            proc.kill()
        rc = proc.wait()
    raw = b"".join(chunks).decode("utf-8", errors="replace")
    if rc != 0:
        raise ExcerptError(f"the demo exited {rc}:\n{strip_ansi(raw)[-3000:]}")
    return raw


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.readme_excerpts")
    parser.add_argument("action", choices=("run", "update", "check"))
    parser.add_argument("--saved", type=Path, default=SAVED, help="saved run (docs/demo-run)")
    parser.add_argument("--demo-arg", action="append", default=[], help="extra demo argument")
    args = parser.parse_args(argv)
    if args.action == "run":
        parts = split_transcript(run_demo(args.demo_arg))
        args.saved.mkdir(parents=True, exist_ok=True)
        for name, text in zip(SAVED_FILES, parts, strict=True):
            (args.saved / f"{name}.txt").write_text(text, encoding="utf-8")
        print(f"saved the run in {args.saved}")
    stale = []
    for path, texts in blocks(args.saved).items():
        current = path.read_text(encoding="utf-8")
        expected = render_readme(current, texts)
        if expected == current:
            continue
        stale.append(path)
        if args.action != "check":
            path.write_text(expected, encoding="utf-8")
            print(f"rewrote the excerpts in {path}")
    if args.action == "check" and stale:
        names = ", ".join(str(p.relative_to(ROOT)) for p in stale)
        print(f"{names}: excerpts differ from {args.saved}; run "
              "`python -m tests.readme_excerpts update`", file=sys.stderr)  # fmt: skip
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
