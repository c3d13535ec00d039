"""The validation a node agent runs before its node may return to service.

`validate(...)` runs the configured command (default on NVIDIA nodes: `dcgmi diag -r 2` when
dcgmi is installed, else `nvml_self_check`) and returns an `Outcome`: passed when the command
exits 0, with its output cut to the last `OUTPUT_MAX_CHARS` characters (where dcgmi prints
its verdict). A command that cannot start or runs past its timeout fails, and says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shlex
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from producers.nvml_source import Nvml, NvmlError
from schemas.quarantine import OUTPUT_MAX_CHARS

log = logging.getLogger(__name__)

DCGM_DIAG = ("dcgmi", "diag", "-r", "2")
NVML_SELF_CHECK = "nvml-self-check"  # the built-in check, when no command is given
AUTO = "auto"  # dcgmi when installed, else the NVML self-check


@dataclass(frozen=True)
class Outcome:
    passed: bool
    exit_code: int | None
    output: str
    command: str


def bounded(text: str, limit: int = OUTPUT_MAX_CHARS) -> str:
    """The last `limit` characters of `text`, saying how much was cut."""
    if len(text) <= limit:
        return text
    note = f"[{len(text) - limit + 64} characters cut]\n"
    return note + text[-(limit - len(note)) :]


def resolve(setting: str, which: Callable[[str], str | None] = shutil.which) -> Sequence[str]:
    """The command line to run for a `--validate-command` setting (`auto` picks)."""
    if setting == AUTO:
        return DCGM_DIAG if which(DCGM_DIAG[0]) else (NVML_SELF_CHECK,)
    argv = shlex.split(setting)
    if not argv:
        raise ValueError("--validate-command: empty")
    return argv


async def run_command(argv: Sequence[str], timeout_s: float) -> Outcome:
    command = shlex.join(argv)
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
        )
    except OSError as exc:
        return Outcome(False, None, f"cannot run {command}: {exc}", command)
    try:
        async with asyncio.timeout(timeout_s):
            raw, _ = await proc.communicate()
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()
        return Outcome(False, None, f"{command}: timed out after {timeout_s:g} s", command)
    code = proc.returncode
    return Outcome(code == 0, code, bounded(raw.decode("utf-8", "replace")), command)


def nvml_self_check(nvml: Nvml) -> Outcome:
    """Every GPU answers NVML, has no uncorrectable ECC error since the driver loaded, no row
    remapping pending or failed, and is below its shutdown temperature."""
    lines: list[str] = []
    ok = True
    try:
        nvml.init()
    except NvmlError as exc:
        return Outcome(False, None, f"NVML init failed: {exc}", NVML_SELF_CHECK)
    try:
        count = nvml.device_count()
        if count == 0:
            ok = False
            lines.append("no GPU visible to NVML")
        for index in range(count):
            try:
                problem = _gpu_problem(nvml, index)
            except NvmlError as exc:
                problem = f"NVML error: {exc}"
            ok = ok and problem is None
            lines.append(f"GPU {index}: {problem or 'ok'}")
    except NvmlError as exc:
        ok = False
        lines.append(f"NVML error: {exc}")
    finally:
        with contextlib.suppress(NvmlError):
            nvml.shutdown()
    return Outcome(ok, 0 if ok else 1, bounded("\n".join(lines)), NVML_SELF_CHECK)


def _gpu_problem(nvml: Nvml, index: int) -> str | None:
    handle = nvml.handle(index)
    nvml.uuid(handle)
    if nvml.ecc_errors(handle, corrected=False) > 0:
        return "uncorrectable ECC errors since the driver loaded"
    _, _, pending, failure = nvml.remapped_rows(handle)
    if failure:
        return "row remapping failed"
    if pending:
        return "row remapping pending (needs a GPU reset)"
    temp, limit = nvml.temperature(handle), nvml.temperature_shutdown(handle)
    if temp >= limit:
        return f"temperature {temp} C at or above shutdown {limit} C"
    return None


async def validate(
    argv: Sequence[str], timeout_s: float, nvml: Callable[[], Nvml] | None = None
) -> Outcome:
    """Run the validation `argv` (from `resolve`) on this node."""
    if tuple(argv) == (NVML_SELF_CHECK,):
        if nvml is None:
            from producers.nvml_source import PynvmlBackend

            nvml = PynvmlBackend
        backend = nvml()
        return await asyncio.to_thread(nvml_self_check, backend)
    log.info("validation: running %s (timeout %g s)", shlex.join(argv), timeout_s)
    return await run_command(argv, timeout_s)
