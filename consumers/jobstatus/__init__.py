"""The job status service: `jobs.status` (compacted, key job_id) follows each job's flow.

Public API: `run_job_status(settings, stop)` (in `consumers.jobstatus.app`) and
`JobStatusSettings` (in `consumers.jobstatus.config`); commands in `gpufailover.cli.status`.
"""
