"""`gpufailover status JOB`: a job's timeline from `jobs.status`."""

from __future__ import annotations

from datetime import UTC, datetime

from consumers.runtime.oneshot import read_key
from gpufailover.security import PLAINTEXT, KafkaSecurity
from schemas.codec import loads
from schemas.errors import SchemaError
from schemas.status import JobStatus


async def fetch_status(
    bootstrap: str, topic: str, job_id: str, *, security: KafkaSecurity = PLAINTEXT
) -> JobStatus | None:
    """The job's latest readable status record, or None."""
    for rec in reversed(await read_key(bootstrap, topic, job_id, security=security)):
        if rec.value is None:
            return None
        try:
            return JobStatus.from_dict(loads(rec.value))
        except SchemaError:
            continue
    return None


def iso(ts_ms: int) -> str:
    return datetime.fromtimestamp(ts_ms / 1000, tz=UTC).isoformat(timespec="milliseconds")


def render(status: JobStatus) -> str:
    now = status.current
    overdue = [a for a in status.awaiting if a.overdue_ms is not None]
    flag = "  DECISION OVERDUE" if overdue else ""
    lines = [f"job {status.job_id}: {now.status} (attempt {now.attempt}){flag}"]
    for step in status.history:
        rule = f"  [{step.rule}]" if step.rule else ""
        lines.append(
            f"  {iso(step.ts_ms)}  attempt {step.attempt}  {step.status:<28} {step.event}{rule}"
        )
    for wait in status.awaiting:
        if wait.overdue_ms is not None:
            waited = (wait.overdue_ms - wait.read_ms) / 1000
            lines.append(
                f"  attempt {wait.attempt}: decision OVERDUE: terminated "
                f"{iso(wait.terminated_ts_ms)}, no decision {waited:.0f} s after it was read "
                f"(alert {iso(wait.overdue_ms)})"
            )
        else:
            lines.append(f"  attempt {wait.attempt}: awaiting decision since {iso(wait.read_ms)}")
    return "\n".join(lines)
