"""The requeue service: a `jobs.requeue` command for every failover/retry decision.

Public API: `run_requeue(settings, stop)` (in `consumers.requeue.app`) and `RequeueSettings`
(in `consumers.requeue.config`); the command in `consumers.requeue_cli`.
"""
