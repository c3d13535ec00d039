"""`gpufailover status JOB` (a job's timeline) and `gpufailover job-status` (the service)."""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from consumers.jobstatus.config import add_arguments
from gpufailover.cli.target import add_target_arguments, target, target_security
from gpufailover.errors import NotFound


def register(subparsers: Any) -> None:
    status = subparsers.add_parser(
        "status", help="print a job's status timeline (from jobs.status)"
    )
    status.add_argument("job_id", help="the job")
    status.add_argument("--json", action="store_true", help="print the jobs.status record")
    add_target_arguments(status)
    status.set_defaults(func=cmd_status)
    service = subparsers.add_parser(
        "job-status",
        help="run the job status service (jobs.events + decisions -> jobs.status)",
        description="Run the job status service until SIGINT/SIGTERM.",
    )
    add_arguments(service)
    service.set_defaults(func=cmd_run)


def cmd_status(args: argparse.Namespace) -> int:
    from consumers.jobstatus.timeline import fetch_status, render
    from schemas.codec import dumps

    bootstrap, names = target(args)
    status = asyncio.run(
        fetch_status(bootstrap, names.jobs_status, args.job_id, security=target_security(args))
    )
    if status is None:
        raise NotFound(
            f"unknown job {args.job_id!r}: no record on {names.jobs_status} at {bootstrap}; "
            "check the id, the --prefix, and that the job-status service is running"
        )
    print(dumps(status.to_dict()).decode() if args.json else render(status))
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from consumers.jobstatus.app import serve
    from consumers.jobstatus.config import JobStatusSettings

    return serve(JobStatusSettings.from_env_and_args(args))
