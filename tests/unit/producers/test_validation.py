"""The agent's validation: the command run on the node, the NVML self-check, the bounded
output, and the gate that runs its own node's requests once."""

from __future__ import annotations

import argparse
import asyncio
import shlex
import sys
from typing import Any

import pytest
from nvml_fake import FakeGpu, FakeNvml, lost

from consumers.runtime.records import InRecord
from deploy.topics import TopicNames
from gpufailover.backoff import Backoff
from gpufailover.security import PLAINTEXT
from producers import validation as v
from producers.spool import Outgoing
from producers.validation_gate import (
    GateSettings,
    ValidationGate,
    gate_settings,
    run_agent_with_gate,
)
from schemas.codec import dumps, loads
from schemas.quarantine import OUTPUT_MAX_CHARS, ValidationRequest, ValidationResult

NAMES = TopicNames("t.")


def gpus(*changes: dict[str, object]) -> list[FakeGpu]:
    out = []
    for i, change in enumerate(changes):
        gpu = FakeGpu(f"GPU-{i}", f"0000:{i:02x}:00.0")
        for k, val in change.items():
            setattr(gpu, k, val)
        out.append(gpu)
    return out


# -- the command --------------------------------------------------------------------------------
def test_output_is_kept_whole_when_short_and_its_tail_when_long() -> None:
    assert v.bounded("all good") == "all good"
    long = "x" * 10_000 + "VERDICT: FAIL"
    cut = v.bounded(long)
    assert len(cut) <= OUTPUT_MAX_CHARS
    assert cut.endswith("VERDICT: FAIL")
    assert cut.startswith("[")


def test_auto_picks_dcgmi_when_installed_else_the_nvml_check() -> None:
    assert v.resolve(v.AUTO, which=lambda name: f"/usr/bin/{name}") == v.DCGM_DIAG
    assert v.resolve(v.AUTO, which=lambda name: None) == (v.NVML_SELF_CHECK,)
    assert v.resolve("sh -c 'exit 3'") == ["sh", "-c", "exit 3"]
    with pytest.raises(ValueError, match="empty"):
        v.resolve("  ")


async def test_a_command_that_exits_0_passes_with_its_output() -> None:
    argv = [sys.executable, "-c", "print('diag: pass')"]
    out = await v.run_command(argv, 30)
    assert (out.passed, out.exit_code, out.output.strip()) == (True, 0, "diag: pass")
    assert out.command == shlex.join(argv)


async def test_a_command_that_exits_non_zero_fails_with_stderr_too() -> None:
    code = "import sys; sys.stderr.write('GPU 3 memory test FAILED'); sys.exit(4)"
    out = await v.run_command([sys.executable, "-c", code], 30)
    assert (out.passed, out.exit_code) == (False, 4)
    assert "GPU 3 memory test FAILED" in out.output


async def test_a_command_that_cannot_start_fails_saying_so() -> None:
    out = await v.run_command(["/nonexistent/dcgmi", "diag"], 30)
    assert (out.passed, out.exit_code) == (False, None)
    assert out.output.startswith("cannot run /nonexistent/dcgmi diag")


async def test_a_command_past_its_timeout_is_killed_and_fails() -> None:
    out = await v.run_command([sys.executable, "-c", "import time; time.sleep(60)"], 0.5)
    assert (out.passed, out.exit_code) == (False, None)
    assert "timed out after 0.5 s" in out.output


# -- the NVML self-check ---------------------------------------------------------------------
def test_healthy_gpus_pass_the_nvml_check() -> None:
    nvml = FakeNvml(gpus({}, {}))
    out = v.nvml_self_check(nvml)
    assert (out.passed, out.exit_code, out.output) == (True, 0, "GPU 0: ok\nGPU 1: ok")
    assert not nvml.initialized  # shut down again


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"ecc_uncorrected": 2}, "uncorrectable ECC errors"),
        ({"remapped_rows": (0, 1, False, True)}, "row remapping failed"),
        ({"remapped_rows": (0, 1, True, False)}, "row remapping pending"),
        ({"temperature": 92}, "temperature 92 C at or above shutdown 92 C"),
        ({"lost": True}, "NVML error"),
    ],
)
def test_a_sick_gpu_fails_the_nvml_check_naming_it(change: dict[str, object], problem: str) -> None:
    out = v.nvml_self_check(FakeNvml(gpus({}, change)))
    assert (out.passed, out.exit_code) == (False, 1)
    first, second = out.output.splitlines()
    assert first == "GPU 0: ok"
    assert second.startswith("GPU 1: ") and problem in second


def test_no_gpu_fails_the_nvml_check() -> None:
    out = v.nvml_self_check(FakeNvml([]))
    assert (out.passed, out.output) == (False, "no GPU visible to NVML")


def test_nvml_that_does_not_start_fails_the_check() -> None:
    class Broken(FakeNvml):
        def init(self) -> None:
            raise lost()

    out = v.nvml_self_check(Broken([]))
    assert not out.passed and out.output.startswith("NVML init failed")


async def test_validate_runs_the_nvml_check_for_the_built_in_command() -> None:
    out = await v.validate((v.NVML_SELF_CHECK,), 5, nvml=lambda: FakeNvml(gpus({})))
    assert (out.passed, out.command) == (True, v.NVML_SELF_CHECK)


# -- settings ----------------------------------------------------------------------------------
def args(**kw: object) -> argparse.Namespace:
    base = {"validate_command": None, "no_validation": None, "validate_timeout_s": None}
    return argparse.Namespace(**(base | kw))


def test_the_gate_is_on_for_nvml_agents_and_where_a_command_is_given() -> None:
    assert gate_settings(args(), "nvml") == GateSettings(True, v.AUTO, 900.0)
    assert not gate_settings(args(), "kmsg").enabled
    on = gate_settings(args(validate_command="true", validate_timeout_s=5.0), "file:/x")
    assert on == GateSettings(True, "true", 5.0)
    assert not gate_settings(args(no_validation=True), "nvml").enabled


def test_bad_gate_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="timeout"):
        gate_settings(args(validate_timeout_s=-1.0), "nvml")
    with pytest.raises(ValueError, match="empty"):
        gate_settings(args(validate_command="   "), "nvml")


# -- the gate ----------------------------------------------------------------------------------
class Recorder:
    def __init__(self, passed: bool = True) -> None:
        self.ran: list[str] = []
        self.sent: list[Outgoing] = []
        self.passed = passed

    async def run(self, request: ValidationRequest) -> v.Outcome:
        self.ran.append(request.request_id)
        return v.Outcome(self.passed, 0 if self.passed else 1, "out", "cmd")

    def results(self) -> list[ValidationResult]:
        return [ValidationResult.from_dict(loads(o.value)) for o in self.sent]


def gate(recorder: Recorder) -> ValidationGate:
    return ValidationGate("n1", NAMES, recorder.sent.append, recorder.run, clock=lambda: 1_234)


def request_rec(node: str, request_id: str, open_: bool = True, offset: int = 0) -> InRecord:
    r = ValidationRequest(node, request_id, "operator", "why", open_, 1_000)
    return InRecord(NAMES.nodes_validate, 0, offset, node.encode(), dumps(r.to_dict()))


async def test_the_gate_runs_its_own_nodes_latest_open_request_once() -> None:
    rec = Recorder(passed=False)
    g = gate(rec)
    g.apply(request_rec("n2", "operator-0-1"))  # another node's: not ours
    assert g.due() is None
    g.apply(request_rec("n1", "operator-0-2", offset=1))
    g.apply(request_rec("n1", "operator-0-2", open_=False, offset=2))  # closed since
    assert g.due() is None
    g.apply(request_rec("n1", "operator-0-3", offset=3))
    assert await g.run_due()
    g.apply(request_rec("n1", "operator-0-3", offset=3))  # redelivered
    assert not await g.run_due()
    assert rec.ran == ["operator-0-3"]
    [result] = rec.results()
    assert (result.node, result.kind, result.request_id, result.result, result.ts_ms) == (
        "n1",
        "result",
        "operator-0-3",
        "fail",
        1_234,
    )
    assert rec.sent[0].topic == NAMES.validation_results and rec.sent[0].key == b"n1"


def test_the_gate_skips_unreadable_requests_and_tombstones() -> None:
    g = gate(Recorder())
    g.apply(InRecord(NAMES.nodes_validate, 0, 0, b"n1", b"{}"))
    g.apply(InRecord(NAMES.nodes_validate, 0, 1, b"n1", None))
    assert g.latest is None


def test_the_repair_signal_says_the_agent_started() -> None:
    rec = Recorder()
    gate(rec).repair_signal()
    [signal] = rec.results()
    assert (signal.kind, signal.node, signal.ts_ms, signal.request_id) == (
        "repair",
        "n1",
        1_234,
        None,
    )


class FailingGate(ValidationGate):
    """A gate whose broker is unreachable for its first `failures` attempts to follow."""

    def __init__(self, recorder: Recorder, failures: int) -> None:
        super().__init__("n1", NAMES, recorder.sent.append, recorder.run, clock=lambda: 1_234)
        self.failures, self.attempts = failures, 0
        self.followed = asyncio.Event()
        self.retried = asyncio.Event()  # set once a failed attempt has been tried again

    async def follow(self, bootstrap: str, stop: asyncio.Event, *, security: Any = None) -> None:
        self.attempts += 1
        if self.attempts <= self.failures:
            if self.attempts > 1:
                self.retried.set()
            raise ConnectionError("no broker")
        if not self.repair_sent:
            self.repair_signal()
        self.followed.set()
        await stop.wait()


async def test_a_gate_that_cannot_follow_is_retried_and_never_stops_the_agent(
    caplog: pytest.LogCaptureFixture,
) -> None:
    rec = Recorder()
    g = FailingGate(rec, failures=2)

    async def agent() -> int:  # the agent runs until the gate has recovered, then stops
        await g.followed.wait()
        return 0

    status = await asyncio.wait_for(
        run_agent_with_gate(agent(), g, "b:9092", PLAINTEXT, retry=Backoff(first_ms=10, max_ms=20)),
        10,
    )
    assert status == 0 and g.attempts == 3
    assert [r.kind for r in rec.results()] == ["repair"]  # once, not per reconnect
    assert caplog.text.count("the agent keeps reporting") == 2


async def test_the_agents_status_is_the_result_while_the_gate_still_retries() -> None:
    g = FailingGate(Recorder(), failures=10**6)

    async def agent() -> int:
        await g.retried.wait()  # the agent outlives two failed attempts of the gate
        return 3

    status = await asyncio.wait_for(
        run_agent_with_gate(agent(), g, "b:9092", PLAINTEXT, retry=Backoff(first_ms=1, max_ms=1)),
        10,
    )
    assert status == 3
