"""Running Slurm's client commands: argv lists (no shell), time-limited, failures raise.

Shared by the Slurm quarantine actuator and the Slurm requeue stage. `scontrol` finds the
cluster the usual way (`SLURM_CONF` or /etc/slurm/slurm.conf); `GPUFAILOVER_SCONTROL` names
another binary (a wrapper that runs it on the slurmctld host, for example).
"""

from __future__ import annotations

import asyncio
import logging

from gpufailover import settings as env
from gpufailover.slurm_text import parse_fields

log = logging.getLogger(__name__)

COMMAND_TIMEOUT_S = 30.0
OURS = "gpufailover:"  # every Reason= and Comment= we write starts with this


class SlurmCommandError(RuntimeError):
    """A Slurm command exited non-zero or timed out; `stderr` says why."""

    def __init__(self, argv: list[str], returncode: int | None, stderr: str) -> None:
        self.argv, self.returncode, self.stderr = argv, returncode, stderr
        what = "timed out" if returncode is None else f"exited {returncode}"
        super().__init__(f"{' '.join(argv)} {what}: {stderr.strip() or '(no output)'}")


def scontrol_binary() -> str:
    return env.env_str("GPUFAILOVER_SCONTROL", "scontrol")


async def run_slurm(argv: list[str], timeout_s: float = COMMAND_TIMEOUT_S) -> str:
    """Run `argv`; its stdout. SlurmCommandError on a non-zero exit or after `timeout_s`."""
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        async with asyncio.timeout(timeout_s):
            out, err = await proc.communicate()
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise SlurmCommandError(argv, None, f"no answer in {timeout_s:.0f} s") from None
    if proc.returncode != 0:
        raise SlurmCommandError(argv, proc.returncode, err.decode(errors="replace"))
    log.debug("ran %s", argv)
    return out.decode(errors="replace")


async def scontrol(*args: str) -> str:
    return await run_slurm([scontrol_binary(), *args])


async def show_node(node: str) -> dict[str, str]:
    return parse_fields(await scontrol("-o", "show", "node", node))


async def show_nodes() -> list[dict[str, str]]:
    out = await scontrol("-o", "show", "node")
    return [parse_fields(line) for line in out.splitlines() if line.strip()]


async def show_job(job_id: str) -> dict[str, str]:
    return parse_fields(await scontrol("-o", "show", "job", job_id))


def state_flags(state: str) -> set[str]:
    """`MIXED+DRAIN`, `DOWN*+DRAIN` -> {"MIXED", "DRAIN"}, {"DOWN", "DRAIN"}."""
    return {s.rstrip("*~#!%$@^-") for s in state.split("+") if s}
