"""`gpufailover status JOB`: a job's timeline from `jobs.status`."""

from __future__ import annotations

from datetime import UTC, datetime

from consumers.jobstatus.records import JobStatus
from consumers.runtime.oneshot import read_key
from schemas.codec import loads
from schemas.errors import SchemaError


async def fetch_status(bootstrap: str, topic: str, job_id: str) -> JobStatus | None:
    """The job's latest readable status record, or None."""
    for rec in reversed(await read_key(bootstrap, topic, job_id)):
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
    lines = [f"job {status.job_id}: {now.status} (attempt {now.attempt})"]
    for step in status.history:
        rule = f"  [{step.rule}]" if step.rule else ""
        lines.append(
            f"  {iso(step.ts_ms)}  attempt {step.attempt}  {step.status:<28} {step.event}{rule}"
        )
    return "\n".join(lines)
